//! The images Kubernetes' own e2e suite (tests/conformance.rs) runs, built here and imported into
//! every node under the names the framework gives them when its `KUBE_TEST_REPO_LIST` file points
//! its `promoterE2eRegistry` at `E2E_REGISTRY`: agnhost (built from the cluster's Kubernetes
//! source) with the tools its specs run inside it, jessie-dnsutils and busybox; and CoreDNS, the
//! cluster's DNS.

use super::images::{busybox_named, busybox_rootfs};
use crate::oci_image;
use crate::process::must;
use serde_json::json;
use std::path::{Path, PathBuf};

/// Where the e2e framework finds its test images here: its `promoterE2eRegistry`, named in the
/// `KUBE_TEST_REPO_LIST` file, so that no spec's image names a registry that would be pulled from.
pub const E2E_REGISTRY: &str = "yh-genie.test/e2e-test-images";
/// The tags Kubernetes v1.34's test/utils/image/manifest.go gives these images.
const AGNHOST_TAG: &str = "2.56";
const E2E_BUSYBOX_TAG: &str = "1.37.0-1";
const JESSIE_DNSUTILS_TAG: &str = "1.7";
/// What agnhost's Dockerfile installs on its Alpine base (bind-tools, curl, netcat-openbsd,
/// iproute2, bash) and jessie-dnsutils' on its Debian, from this machine's Debian packages, each at the path the image's PATH finds
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

/// The e2e images, for `ctr images import`: agnhost, jessie-dnsutils and busybox under the
/// framework's names, and CoreDNS; `bin` is scripts/cluster/build.sh's output (agnhost, coredns).
pub fn all(dir: &Path, bin: &Path) -> Vec<PathBuf> {
    let sub = |name: &str| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let busybox = format!("{E2E_REGISTRY}/busybox:{E2E_BUSYBOX_TAG}");
    vec![
        agnhost(&sub("agnhost"), bin),
        jessie_dnsutils(&sub("jessie-dnsutils")),
        busybox_named(&sub("e2e-busybox"), &busybox),
        coredns(&sub("coredns"), &bin.join("coredns")),
    ]
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
fn agnhost(dir: &Path, bin: &Path) -> PathBuf {
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
    oci_image::pack(dir, &format!("{E2E_REGISTRY}/agnhost:{AGNHOST_TAG}"), &rootfs, config)
}

/// jessie-dnsutils, the DNS specs' second querier (a Debian with dnsutils): `tools_rootfs` alone.
fn jessie_dnsutils(dir: &Path) -> PathBuf {
    let rootfs = dir.join("rootfs");
    tools_rootfs(&rootfs, &[]);
    let config = json!({"Cmd": ["sh"], "Env": [TOOLS_PATH]});
    oci_image::pack(dir, &format!("{E2E_REGISTRY}/jessie-dnsutils:{JESSIE_DNSUTILS_TAG}"), &rootfs, config)
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
