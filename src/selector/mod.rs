//! The selector, `yh-genie`: the one plugin the kubelet's runtime calls. For each pod it asks the
//! Kubernetes API which networks the pod chose (`select`: a value list in `CNI_NETWORK_CONFIG`, the
//! networks annotation through NetworkAttachmentDefinitions, within the admin's `policy`), loads
//! their configurations from the node (`network`), records each choice durably (`record`) and runs
//! each network's chain on its interface (`attach`, `chain`). DEL, CHECK and GC work from the
//! records alone, never from the API server; a completed DEL leaves a `tombstone` so that the
//! runtime's repeated DELs of the same sandbox cost nothing. With a node agent (`crate::agent`) ADD asks it first
//! and makes no API request at all (`from_agent`).

mod attach;
pub mod choose;
mod commands;
pub mod config;
pub mod explain;
mod name;
pub mod netconf;
mod report;
pub mod requests;

pub use name::NAME;
pub use report::network_status::NETWORK_STATUS;

use crate::cni::{CniError, CniResult, Invocation, Plugin, PluginConf};

/// The selector as a CNI plugin: each verb in its own file of `commands`.
pub struct Selector;

impl Plugin for Selector {
    fn name(&self) -> &'static str {
        NAME
    }
    fn add(&self, inv: &Invocation, conf: &PluginConf) -> Result<CniResult, CniError> {
        commands::add(inv, conf)
    }
    fn del(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        commands::del(inv, conf)
    }
    fn check(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        commands::check(inv, conf)
    }
    fn gc(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        commands::gc(inv, conf)
    }
    fn status(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        commands::status(inv, conf)
    }
}
