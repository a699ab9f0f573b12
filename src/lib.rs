//! yh-genie: a Kubernetes-aware multi-network selector for container networking, and the CNI plugins
//! it carries. One binary; what it is depends on the name it is called by (`programs::commands`).
//!
//! Three floors, each importing only the floors below it:
//! - `programs`: what runs: the selector (the CNI plugin `yh-genie`), the node agent, the installer,
//!   the built-in plugins, and the operator commands that start them;
//! - `node`: the node-local wires between those programs: the agent's socket and the reports sent
//!   to it, the attach worker's protocol;
//! - `platform`: what any of them stands on: the CNI protocol, the Kubernetes API server, netlink,
//!   network namespaces, durable files, logging.

pub mod node;
pub mod platform;
pub mod programs;
