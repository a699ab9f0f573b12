//! CNI CHECK for the selector: every network of the runtime's attachment is checked with its
//! recorded configuration and result, from the records alone (no API server). A sandbox with no
//! record at all, with the cluster's network in place, is one that network made before yh-genie was
//! installed: its CHECK is that network's (`attach::before_install`).

use crate::node::reports as to_agent;
use crate::platform::cni::{CniError, Invocation, Operation, PluginConf, code};
use crate::programs::selector::attach::{self, RecordStore, before_install};
use crate::programs::selector::config::SelectorConfig;

pub fn check(inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<(), CniError> {
    let config = SelectorConfig::from_plugin_conf(conf)?;
    let store = RecordStore::of_node(&config.data_dir);
    let (records, others) = attach::records_of(&store, inv)?;
    if records.is_empty()
        && others.is_empty()
        && let Some(outcome) = before_install::check(inv, &config)
    {
        return outcome;
    }
    if !records.iter().any(|r| r.ifname == inv.ifname) {
        return Err(CniError::new(
            code::UNKNOWN_CONTAINER,
            format!("container {} interface {}: no attachment record", inv.container_id, inv.ifname),
        ));
    }
    op.note_networks(records.iter().map(|r| r.network.as_str()));
    to_agent::note_stage(op, to_agent::Stage::Attaching);
    attach::check_records(inv, &config, &records)
}
