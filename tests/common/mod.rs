//! Support for tests/cri.rs (a private containerd node, a CRI v1 client and the pause image) and
//! the real cluster of tests/cluster.rs and tests/conformance.rs. What several suites share is the
//! testkit (tests/testkit).
#![allow(dead_code, unused_imports)]

pub mod cluster;
pub mod containerd;
pub mod cri;
pub mod cri_node;
pub mod pause_image;

pub use testkit::netns::Netns;
pub use testkit::process::{must, report, sh};
pub use testkit::{REFERENCE_PLUGINS, apiserver, require_root};
