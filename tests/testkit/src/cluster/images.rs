//! The images the test cluster's nodes run, built here without Docker or a registry and imported
//! into every node's containerd under the names pods use:
//! - yh-genie as the Dockerfile makes it: one static binary at /usr/local/bin/yh-genie, entrypoint
//!   `yh-genie install`, named as manifests/yh-genie.yaml names it;
//! - the pod sandbox (pause) image the nodes' runtime is configured with, under the name the
//!   cluster's kubeadm pairs with its Kubernetes (the e2e framework's name for it too);
//! - busybox (Debian's busybox-static) under the name the e2e manifests use, for workloads;
//! - for Kubernetes' own e2e suite, the images of `e2e_images`.

use crate::oci_image;
use crate::process::must;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const BUSYBOX: &str = "docker.io/library/busybox:1.36";
const BUSYBOX_BINARY: &str = "/bin/busybox";

/// The image the DaemonSet in manifests/yh-genie.yaml runs, as the runtime names it.
pub fn yh_genie_name() -> String {
    let manifest = std::fs::read_to_string(crate::repository().join("manifests/yh-genie.yaml")).unwrap();
    let image = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("image:"))
        .expect("manifests/yh-genie.yaml names an image")
        .trim();
    normalized(image)
}

/// `name:tag` as containerd stores an image pulled by that reference.
pub fn normalized(image: &str) -> String {
    match image.split('/').count() {
        1 => format!("docker.io/library/{image}"),
        _ => image.to_string(),
    }
}

/// yh-genie built as one static executable (the C library linked in: no loader on the host it is
/// copied to), as the Dockerfile's musl build makes it: `scripts/cluster/static-binary.sh` builds
/// it, cached outside the checkout (scripts/test.sh runs the same script in the background ahead of
/// the cluster tier). `YH_GENIE_IMAGE_BINARY` names a binary to use instead.
pub fn static_yh_genie() -> PathBuf {
    if let Some(binary) = std::env::var_os("YH_GENIE_IMAGE_BINARY") {
        return check_static(PathBuf::from(binary));
    }
    let output = Command::new(crate::repository().join("scripts/cluster/static-binary.sh"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("scripts/cluster/static-binary.sh runs");
    assert!(output.status.success(), "building the static yh-genie failed (scripts/cluster/static-binary.sh)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let binary = stdout.lines().last().expect("scripts/cluster/static-binary.sh prints the binary's path");
    check_static(PathBuf::from(binary))
}

fn check_static(binary: PathBuf) -> PathBuf {
    let headers = must(&format!("readelf -l {}", binary.display()));
    assert!(!headers.contains("INTERP"), "{} needs a dynamic loader:\n{headers}", binary.display());
    binary
}

/// The yh-genie image named `name` holding `binary`; returns the archive for `ctr images import`.
pub fn yh_genie(dir: &Path, name: &str, binary: &Path) -> PathBuf {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr/local/bin")).unwrap();
    std::fs::copy(binary, rootfs.join("usr/local/bin/yh-genie")).unwrap();
    oci_image::pack(dir, name, &rootfs, json!({"Entrypoint": ["/usr/local/bin/yh-genie", "install"]}))
}

/// Debian's static busybox with a link for each of its applets in /bin, and an empty /tmp.
pub fn busybox(dir: &Path) -> PathBuf {
    busybox_named(dir, BUSYBOX)
}

pub(super) fn busybox_named(dir: &Path, name: &str) -> PathBuf {
    let rootfs = dir.join("rootfs");
    busybox_rootfs(&rootfs, &[]);
    oci_image::pack(dir, name, &rootfs, json!({"Cmd": ["sh"], "Env": ["PATH=/bin"]}))
}

/// A root filesystem of Debian's static busybox with a link for each of its applets in /bin, an
/// empty /tmp, root and `users` (name, id: a group of its own) in /etc/passwd and /etc/group.
pub(super) fn busybox_rootfs(rootfs: &Path, users: &[(&str, u32)]) {
    assert!(Path::new(BUSYBOX_BINARY).exists(), "apt-get install busybox-static (scripts/prereqs.sh)");
    let headers = must(&format!("readelf -l {BUSYBOX_BINARY}"));
    assert!(!headers.contains("INTERP"), "{BUSYBOX_BINARY} is not the static busybox (busybox-static)");
    for sub in ["bin", "tmp", "etc"] {
        std::fs::create_dir_all(rootfs.join(sub)).unwrap();
    }
    std::fs::copy(BUSYBOX_BINARY, rootfs.join("bin/busybox")).unwrap();
    for applet in must(&format!("{BUSYBOX_BINARY} --list")).lines().filter(|a| *a != "busybox") {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
    }
    let mut passwd = String::from("root:x:0:0:root:/root:/bin/sh\n");
    let mut group = String::from("root:x:0:\n");
    for (user, id) in users {
        passwd.push_str(&format!("{user}:x:{id}:{id}::/tmp:/bin/sh\n"));
        group.push_str(&format!("{user}:x:{id}:\n"));
    }
    std::fs::write(rootfs.join("etc/passwd"), passwd).unwrap();
    std::fs::write(rootfs.join("etc/group"), group).unwrap();
}

/// The pause image's name for the Kubernetes of `bin` (scripts/cluster/build.sh's output, whose
/// `images` file lists what its kubeadm deploys): `registry.k8s.io/pause:3.10.2` for 1.37.
pub fn pause_name(bin: &Path) -> String {
    let file = bin.join("images");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/cluster/build.sh writes it)", file.display()));
    let tag = text.lines().find_map(|l| l.strip_prefix("pause ")).map(str::trim);
    let tag = tag.unwrap_or_else(|| panic!("{} names no pause image:\n{text}", file.display()));
    format!("registry.k8s.io/pause:{tag}")
}

/// The pause image named `name`, which the nodes' runtime uses for every sandbox.
pub fn pause(dir: &Path, name: &str) -> PathBuf {
    oci_image::pause(dir, name)
}
