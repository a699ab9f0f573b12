//! containerd as the CRI node's runtime (`runtime::Engine::Containerd`): its configuration (root,
//! state, opt and the sockets in the run dir, the CRI plugin's CNI dirs and sandbox image:
//! testkit::containerd), its command, and `ctr images import`.

use super::runtime::{PATIENCE, Runtime, require_programs, service_path};
use std::path::{Path, PathBuf};
use std::process::Command;
use testkit::process::must;

/// Write containerd's configuration into the run dir `dir`.
pub fn configure(dir: &Path, cni_bin: &Path, cni_conf: &Path, sandbox_image: &str) {
    for sub in ["root", "state", "opt"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let config = testkit::containerd::config(dir, &dir.join("containerd.sock"), cni_bin, cni_conf, sandbox_image);
    std::fs::write(dir.join("containerd.toml"), config).unwrap();
}

/// Where containerd mounts sandboxes' root filesystems and shm: its root and state.
pub fn sandbox_dirs(dir: &Path) -> Vec<PathBuf> {
    vec![dir.join("root"), dir.join("state")]
}

/// containerd in the node, with a service's environment, not the test's: plugins inherit it.
pub fn daemon(runtime: &Runtime, bin: Option<&Path>) -> Command {
    let mut command = runtime.node_command(&program(bin, "containerd"));
    command.env_clear().env("PATH", service_path(bin)).arg("--config").arg(runtime.run_dir().join("containerd.toml"));
    command
}

/// Import an image archive into the CRI plugin's namespace, unpacked for its snapshotter.
pub fn import(runtime: &Runtime, bin: Option<&Path>, archive: &Path) {
    let out = runtime
        .node_command("timeout")
        .args([&PATIENCE.as_secs().to_string(), &program(bin, "ctr")])
        .arg("--address")
        .arg(runtime.socket())
        .args(["--namespace", "k8s.io", "images", "import"])
        .arg(archive)
        .output()
        .unwrap();
    assert!(out.status.success(), "ctr images import: {}", String::from_utf8_lossy(&out.stderr));
}

/// `program` (`containerd`, `ctr`) of the build in `bin`, or of Debian's on `PATH`.
fn program(bin: Option<&Path>, program: &str) -> String {
    bin.map_or_else(|| program.to_string(), |dir| dir.join(program).display().to_string())
}

/// The major version of the containerd in `bin` (`containerd --version`: `... v2.4.2 ...`,
/// `... 1.6.20~ds1 ...`).
pub fn major_version(bin: Option<&Path>) -> u32 {
    let out = must(&format!("{} --version", program(bin, "containerd")));
    let version = out.split_whitespace().nth(2).unwrap_or_else(|| panic!("containerd --version: {out}"));
    let major = version.trim_start_matches('v').split('.').next().and_then(|m| m.parse().ok());
    major.unwrap_or_else(|| panic!("containerd --version: {out}"))
}

/// Fail loudly when containerd or runc is missing: scripts/prereqs.sh installs them.
pub fn require(bin: Option<&Path>) {
    let mut programs: Vec<String> =
        ["containerd", "containerd-shim-runc-v2", "ctr"].iter().map(|p| program(bin, p)).collect();
    programs.extend(["runc", "gcc", "unshare", "nsenter"].map(String::from));
    require_programs(&programs, "run scripts/prereqs.sh (apt-get install containerd runc)");
}
