//! yh-genie: a Kubernetes-aware multi-network selector for container networking, and the CNI plugins
//! it carries. One binary; what it is depends on the name it is called by (see `cli`).

pub mod agent;
pub mod async_runtime;
pub mod cli;
pub mod cni;
pub mod crash_point;
pub mod devices;
pub mod durable;
pub mod firewall;
pub mod install;
pub mod ipam;
pub mod kube;
pub mod logging;
pub mod netlink;
pub mod netns;
pub mod plugins;
pub mod selector;
pub mod via_node;
