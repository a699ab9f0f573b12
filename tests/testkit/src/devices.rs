//! The test device plugin and device CNI (tests/devices/, built as examples), for the suites that
//! run device networks.

use std::path::PathBuf;
use std::process::Command;

/// `(test-device-plugin, test-device-cni)`, built as a developer's `cargo build` builds them (the
/// test's environment cleared, as the image build does, so that nothing already built is rebuilt).
pub fn support_binaries() -> (PathBuf, PathBuf) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(crate::repository())
        .args(["build", "--example", "test-device-plugin", "--example", "test-device-cni"])
        .env_clear()
        .envs(std::env::vars().filter(|(k, _)| {
            ["PATH", "HOME", "RUSTUP_HOME", "CARGO_HOME", "RUSTUP_TOOLCHAIN", "CARGO_TARGET_DIR"].contains(&k.as_str())
        }))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building the test device plugin and CNI failed");
    // Beside the test's own executable: <target>/<profile>/deps/<test> -> <target>/<profile>/examples.
    let examples = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().join("examples");
    (examples.join("test-device-plugin"), examples.join("test-device-cni"))
}
