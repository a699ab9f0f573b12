//! The images Kubernetes' own e2e suite (tests/conformance.rs) runs, built here and imported into
//! every node under the names the framework gives them when its `KUBE_TEST_REPO_LIST` file points
//! its `promoterE2eRegistry` at `E2E_REGISTRY`: agnhost (built from the cluster's Kubernetes
//! source) with the tools its specs run inside it, the DNS specs' second querier (jessie-dnsutils
//! up to Kubernetes 1.35, glibc-dns-testing from 1.36) and busybox; and CoreDNS, the cluster's DNS.
//! Their tags are the ones the version's e2e framework names, which scripts/cluster/build.sh reads
//! from its source into `e2e-images` beside the binaries.

use super::images::{busybox_named, busybox_rootfs};
use crate::oci_image;
use crate::process::must;
use serde_json::json;
use std::path::{Path, PathBuf};

/// Where the e2e framework finds its test images here: its `promoterE2eRegistry`, named in the
/// `KUBE_TEST_REPO_LIST` file, so that no spec's image names a registry that would be pulled from.
pub const E2E_REGISTRY: &str = "yh-genie.test/e2e-test-images";
/// The DNS specs' second querier, by the name each version's framework gives it (the same probe
/// commands either way): `jessie-dnsutils` up to 1.35, `glibc-dns-testing` from 1.36.
const DNS_QUERIERS: [&str; 2] = ["jessie-dnsutils", "glibc-dns-testing"];
/// What agnhost's Dockerfile installs on its Alpine base (bind-tools, curl, netcat-openbsd,
/// iproute2, bash) and the DNS querier's on its Debian, from this machine's Debian packages, each at the path the image's PATH finds
/// before busybox's applet of the same name. The specs run them inside agnhost pods: curl and
/// `nc -u -w` for the Granular Checks and HostPort, dig and getent for the DNS specs. The shell is dash:
/// Debian's busybox shell runs its own applets before anything on PATH (its nc has no `-u`).
const TOOLS: &[(&str, &str)] = &[
    ("/usr/bin/dash", "bin/sh"),
    ("/usr/bin/curl", "usr/bin/curl"),
    ("/usr/bin/nc.openbsd", "usr/bin/nc"),
    ("/usr/bin/dig", "usr/bin/dig"),
    ("/usr/bin/nslookup", "usr/bin/nslookup"),
    ("/usr/sbin/ip", "usr/sbin/ip"),
    ("/usr/bin/bash", "bin/bash"),
    ("/usr/bin/getent", "usr/bin/getent"),
];

/// CoreDNS, as coredns.yaml names it: the static binary scripts/cluster/build.sh builds, at /coredns.
pub const COREDNS: &str = "yh-genie.test/coredns:local";

/// The e2e images, for `ctr images import`: agnhost, the DNS querier and busybox under the
/// framework's names, and CoreDNS; `bin` is scripts/cluster/build.sh's output (agnhost, coredns,
/// e2e-images).
pub fn all(dir: &Path, bin: &Path) -> Vec<PathBuf> {
    let sub = |name: &str| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let tags = Tags::of(bin);
    let busybox = format!("{E2E_REGISTRY}/busybox:{}", tags.tag("busybox"));
    let querier = DNS_QUERIERS
        .into_iter()
        .find(|name| tags.has(name))
        .unwrap_or_else(|| panic!("{}: no DNS querier ({DNS_QUERIERS:?})", tags.file.display()));
    vec![
        agnhost(&sub("agnhost"), bin, tags.tag("agnhost")),
        dns_querier(&sub(querier), &format!("{E2E_REGISTRY}/{querier}:{}", tags.tag(querier))),
        busybox_named(&sub("e2e-busybox"), &busybox),
        coredns(&sub("coredns"), &bin.join("coredns")),
    ]
}

/// The `<name> <tag>` lines of build.sh's `e2e-images`.
struct Tags {
    file: PathBuf,
    lines: Vec<(String, String)>,
}

impl Tags {
    fn of(bin: &Path) -> Self {
        let file = bin.join("e2e-images");
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e} (scripts/cluster/build.sh writes it)", file.display()));
        let lines = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(name, tag)| (name.to_string(), tag.trim().to_string()))
            .collect();
        Tags { file, lines }
    }

    fn has(&self, name: &str) -> bool {
        self.lines.iter().any(|(n, _)| n == name)
    }

    fn tag(&self, name: &str) -> &str {
        let found = self.lines.iter().find(|(n, _)| n == name);
        found.map(|(_, tag)| tag.as_str()).unwrap_or_else(|| panic!("{} names no {name}", self.file.display()))
    }
}

fn coredns(dir: &Path, binary: &Path) -> PathBuf {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    std::fs::copy(binary, rootfs.join("coredns")).unwrap();
    oci_image::pack(dir, COREDNS, &rootfs, json!({"Entrypoint": ["/coredns"]}))
}

/// agnhost as test/images/agnhost/Dockerfile lays it out: the binary at /agnhost (the entrypoint,
/// `pause` unless a pod says otherwise) over `tools_rootfs`, with `/uploads` and the user and
/// group the Dockerfile adds, and porter's TLS pair at / (`bin` is scripts/cluster/build.sh's).
fn agnhost(dir: &Path, bin: &Path, tag: &str) -> PathBuf {
    let rootfs = dir.join("rootfs");
    tools_rootfs(&rootfs, &[("user-defined-in-image", 1000)]);
    std::fs::create_dir_all(rootfs.join("uploads")).unwrap();
    let mut group = std::fs::read_to_string(rootfs.join("etc/group")).unwrap();
    group.push_str("group-defined-in-image:x:50000:user-defined-in-image\n");
    std::fs::write(rootfs.join("etc/group"), group).unwrap();
    std::fs::copy(bin.join("agnhost"), rootfs.join("agnhost")).unwrap();
    for file in ["localhost.crt", "localhost.key"] {
        std::fs::copy(bin.join(format!("agnhost-{file}")), rootfs.join(file)).unwrap();
    }
    std::os::unix::fs::symlink("agnhost", rootfs.join("agnhost-2")).unwrap();
    let config = json!({"Entrypoint": ["/agnhost"], "Cmd": ["pause"], "Env": [TOOLS_PATH]});
    oci_image::pack(dir, &format!("{E2E_REGISTRY}/agnhost:{tag}"), &rootfs, config)
}

/// The DNS specs' second querier (upstream, a Debian with dnsutils), named `name`: `tools_rootfs`
/// alone.
fn dns_querier(dir: &Path, name: &str) -> PathBuf {
    let rootfs = dir.join("rootfs");
    tools_rootfs(&rootfs, &[]);
    let config = json!({"Cmd": ["sh"], "Env": [TOOLS_PATH]});
    oci_image::pack(dir, name, &rootfs, config)
}

const TOOLS_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Busybox for the coreutils, and `TOOLS` with the shared libraries each loads.
fn tools_rootfs(rootfs: &Path, users: &[(&str, u32)]) {
    busybox_rootfs(rootfs, users);
    for sub in ["usr/bin", "usr/sbin"] {
        std::fs::create_dir_all(rootfs.join(sub)).unwrap();
    }
    // glibc's getent reads the hosts database as this says (Alpine's musl needs no such file).
    std::fs::write(rootfs.join("etc/nsswitch.conf"), "hosts: files dns\n").unwrap();
    for (tool, at) in TOOLS {
        assert!(Path::new(tool).exists(), "{tool} is missing: scripts/prereqs.sh installs it");
        copy_with_libraries(rootfs, Path::new(tool), at);
    }
}

/// `tool` copied to `at` in `rootfs`, with every shared library `ldd` says it loads (the dynamic
/// loader included) at the path `ldd` names, which the loader searches without a cache.
fn copy_with_libraries(rootfs: &Path, tool: &Path, at: &str) {
    // Busybox may have an applet of that name: a link to replace, not to write through.
    let _ = std::fs::remove_file(rootfs.join(at));
    std::fs::copy(tool, rootfs.join(at)).unwrap();
    for line in must(&format!("ldd {}", tool.display())).lines() {
        let library = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next().filter(|p| p.starts_with('/')),
        };
        if let Some(library) = library.filter(|l| l.starts_with('/')) {
            let target = rootfs.join(library.trim_start_matches('/'));
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::copy(library, target).unwrap();
        }
    }
}
