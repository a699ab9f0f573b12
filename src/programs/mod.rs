//! What runs. One binary holds every program; the name it is called by picks one (`commands`).
//!
//! - `selector`: `yh-genie`, the node's one CNI plugin: which networks a pod gets, and attaching them;
//! - `agent`: the node agent, a node-local cache of what pods chose;
//! - `install`: the installer the DaemonSet runs;
//! - `plugins`: the built-in CNI plugins (`yonghui`, `yh-bridge`, `veth`, `router`) and what only they
//!   use (`via_node`, `ipam`, `firewall`);
//! - `commands`: the binary's face: the plugin for a name, the operator commands otherwise.

pub mod agent;
pub mod commands;
pub mod install;
pub mod plugins;
pub mod selector;
