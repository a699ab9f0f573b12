//! Support for the real cluster of tests/cluster.rs and tests/conformance.rs. What several suites
//! share is the testkit (tests/testkit).
#![allow(dead_code, unused_imports)]

pub mod cluster;

pub use testkit::netns::Netns;
pub use testkit::process::{must, report, sh};
pub use testkit::{REFERENCE_PLUGINS, apiserver, require_root};
