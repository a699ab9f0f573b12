//! The selector, `yh-genie`: the one plugin the kubelet's runtime calls. For each pod it learns which
//! networks the pod chose and runs each network's chain on its own interface. Its folders, from the
//! ground up:
//!
//! - `netconf`: a network's configuration, found by name under `confDir` or inline in a
//!   NetworkAttachmentDefinition, and the capabilities its plugins declare;
//! - `requests`: how networks are asked for (a value list in `CNI_NETWORK_CONFIG` or
//!   `defaultNetwork`, the networks annotation and its `cni-args`);
//! - `config`: the selector's own configuration, with the admin's policy and default networks;
//! - `choose`: which networks a pod gets, and why, from the objects of the node agent's answer or
//!   the API server's, in one pass to a `Selection`;
//! - `attach`: every choice recorded durably, then each network's chain run on its interface; DEL,
//!   CHECK and GC work from the records alone, and a completed DEL leaves a tombstone;
//! - `report`: the network-status annotation and the `AddedInterface` events, after ADD, and how
//!   each ADD, DEL and CHECK went, for the node agent's metrics;
//! - `lookup`: where each verb learns about the pod (the node agent or the API server), and who
//!   hears what ADD reports;
//! - `dynamic`: networks attached to and detached from running pods, as the node agent asks;
//! - `commands`: the CNI verbs, one file each; `explain`: `yh-genie explain`; `cleanup`:
//!   `yh-genie cleanup`, what pods left on a node yh-genie was uninstalled from;
//! - `agent_face`: all the node agent must know of the selector, and all it may use of it.
//!
//! The rules for users: docs/selector.md; the layout: docs/layout.md.

pub mod agent_face;
mod attach;
pub mod choose;
pub mod cleanup;
mod commands;
pub mod config;
pub mod devices;
pub mod dynamic;
pub mod explain;
mod lookup;
mod name;
pub mod netconf;
mod report;
pub mod requests;

pub use name::NAME;
pub use report::network_status::NETWORK_STATUS;

use crate::platform::cni::{CniError, CniResult, Invocation, Operation, Plugin, PluginConf};

/// The selector as a CNI plugin: each verb in its own file of `commands`.
pub struct Selector;

impl Plugin for Selector {
    fn name(&self) -> &'static str {
        NAME
    }
    fn add(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<CniResult, CniError> {
        commands::add(inv, conf, op)
    }
    fn del(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<(), CniError> {
        commands::del(inv, conf, op)
    }
    fn check(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<(), CniError> {
        commands::check(inv, conf, op)
    }
    fn gc(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<(), CniError> {
        commands::gc(inv, conf)
    }
    fn status(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<(), CniError> {
        commands::status(inv, conf)
    }

    /// ADD, DEL and CHECK tell the node agent's metrics how they went (`report::operation`).
    fn done(
        &self,
        inv: &Invocation,
        conf: &PluginConf,
        op: &Operation,
        outcome: Result<(), &CniError>,
        took: std::time::Duration,
    ) {
        report::operation(inv, conf, op, outcome, took)
    }
}
