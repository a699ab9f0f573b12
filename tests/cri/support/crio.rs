//! CRI-O as the CRI node's runtime (`runtime::Engine::Crio`), built by scripts/crio.sh and set up
//! as testkit::crio sets a node's up: everything of its own under `<run dir>/crio`, its socket
//! beside the other runtimes'.

use super::runtime::{Runtime, require_programs};
use std::path::{Path, PathBuf};
use std::process::Command;
use testkit::crio::CrioSetup;

/// CRI-O's own directory in the run dir `dir`.
fn own(dir: &Path) -> PathBuf {
    dir.join("crio")
}

/// Write CRI-O's configuration, signature policy and runc wrapper into the run dir `dir`; `bin` is
/// scripts/crio.sh's (crio, pinns).
pub fn configure(dir: &Path, bin: &Path, cni_bin: &Path, cni_conf: &Path, sandbox_image: &str) {
    let setup = CrioSetup { bin, dir: &own(dir), socket: &dir.join("crio.sock"), cni_bin, cni_conf, sandbox_image };
    setup.write();
}

/// Where CRI-O mounts sandboxes' root filesystems, shm and pinned namespaces.
pub fn sandbox_dirs(dir: &Path) -> Vec<PathBuf> {
    testkit::crio::sandbox_dirs(&own(dir))
}

/// The home of CRI-O's overlay storage, mounted onto itself while CRI-O runs.
pub fn storage_home(dir: &Path) -> PathBuf {
    testkit::crio::storage_home(&own(dir))
}

/// Where pinns pins the pods' network namespaces.
pub fn netns_dir(dir: &Path) -> PathBuf {
    testkit::crio::netns_dir(&own(dir))
}

/// crio in the node.
pub fn daemon(runtime: &Runtime, bin: &Path) -> Command {
    testkit::crio::daemon(runtime.namespaces(), bin, &own(runtime.run_dir()))
}

/// Copy an image archive into CRI-O's storage, with skopeo, while crio runs.
pub fn import(runtime: &Runtime, archive: &Path) {
    testkit::crio::import(runtime.namespaces(), &own(runtime.run_dir()), archive);
}

/// Fail loudly when CRI-O or what it runs is missing: scripts/crio.sh builds the one and installs
/// the others.
pub fn require(bin: &Path) {
    let mut programs = testkit::crio::required_programs(bin);
    programs.push("gcc".into());
    require_programs(&programs, "run scripts/crio.sh (it builds CRI-O and installs conmon, runc and skopeo)");
}
