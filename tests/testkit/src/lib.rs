//! What the test suites share (docs/testing.md describes the suites): throwaway network namespaces
//! and the shell commands run in them, a CNI bin dir holding yh-genie under every plugin name beside
//! Debian's reference plugins, fake plugins that do what a test asks, a fake Kubernetes API server,
//! the node agent as the DaemonSet runs it, and what a node holds of pods as an operator would list
//! it. For the suites that run
//! containerd, CRI-O and Kubernetes: a run directory that owns every process, namespace and cgroup
//! it starts (and sweeps the runs of killed test processes), the mount namespace a node runs in, the
//! containerd and CRI-O configurations, the images built here without a registry, and the real
//! cluster.
//!
//! Each suite's own support lives beside it (`tests/<suite>/support`).

pub mod agent;
pub mod apiserver;
pub mod cluster;
pub mod containerd;
pub mod crio;
pub mod devices;
pub mod fake_plugin;
pub mod grpc;
pub mod inspect;
pub mod netns;
pub mod node_namespaces;
pub mod oci_image;
pub mod process;
pub mod run_dir;
pub mod sandbox;

use std::path::{Path, PathBuf};

/// Where Debian's containernetworking-plugins puts the reference plugins.
pub const REFERENCE_PLUGINS: &str = "/usr/lib/cni";

/// The root integration tests need root and the reference plugins; the README's test command runs
/// them as root. Outside root they fail loudly instead of passing silently.
pub fn require_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this integration test needs root (network namespaces): run it as root (docs/testing.md)"
    );
    assert!(Path::new(REFERENCE_PLUGINS).join("host-local").exists(), "apt-get install containernetworking-plugins");
}

/// The repository's root directory (this crate is its tests/testkit).
pub fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("tests/testkit is two levels down")
}

/// The yh-genie binary cargo built for the running test or benchmark: `<target>/<profile>/yh-genie`,
/// beside the `deps/` directory that holds the test's own executable.
pub fn yh_genie_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own executable");
    let profile_dir = exe.parent().and_then(Path::parent).expect("the test executable is in <target>/<profile>/deps");
    let binary = profile_dir.join("yh-genie");
    assert!(binary.exists(), "{} is missing: cargo builds it for the tests and benchmarks", binary.display());
    binary
}
