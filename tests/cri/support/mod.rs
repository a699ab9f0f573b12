//! The CRI suite's own support (what it shares with other suites is in tests/testkit): the private
//! container runtime (`runtime`, with what is containerd's in `containerd` and CRI-O's in `crio`),
//! the CRI v1 client the kubelet's part is played with (`client`), and the CRI node that puts them
//! together with yh-genie installed as the DaemonSet installs it (`node`).

pub mod client;
pub mod containerd;
pub mod crio;
pub mod node;
pub mod runtime;
