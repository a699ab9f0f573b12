//! CNI DEL for the selector: every network of the runtime's attachment is DELeted in reverse, from
//! its record (its configuration and result as ADD made them), and the records go once all have
//! succeeded. A record that cannot be used, or none at all, takes the way of `del_without_record`;
//! a completed DEL leaves a tombstone, so that the runtime's repeated DELs of the same sandbox cost
//! nothing. A pod Multus attached before the node moved to yh-genie has no record but Multus's
//! own cache, from which its delegates are DELeted (`attach::multus`). A pod the cluster's network
//! attached before yh-genie was installed beside it, on a node whose `defaultNetwork` names that
//! network in place, is DELeted from that network alone, as the runtime would have
//! (`attach::before_install`).

use crate::node::reports as to_agent;
use crate::platform::cni::{CniError, Invocation, Operation, PluginConf};
use crate::programs::selector::attach::{self, Found, RecordStore, Tombstones, before_install, chain, multus, settle};
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::lookup;

pub fn del(inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<(), CniError> {
    let config = SelectorConfig::from_plugin_conf(conf)?;
    let store = RecordStore::of_node(&config.data_dir);
    let tombstones = Tombstones::new(&config.data_dir);
    let (records, others) = attach::records_of(&store, inv)?;
    op.note_networks(records.iter().map(|r| r.network.as_str()));
    to_agent::note_stage(op, to_agent::Stage::Attaching);
    let unreadable: Vec<String> = others
        .iter()
        .filter_map(|f| match f {
            Found::Unreadable(ifname) => Some(ifname.clone()),
            _ => None,
        })
        .collect();
    let interrupted: Vec<String> = others
        .iter()
        .filter_map(|f| match f {
            Found::Interrupted(ifname) => Some(ifname.clone()),
            _ => None,
        })
        .collect();
    if records.is_empty() && unreadable.is_empty() {
        let completed = tombstones.contains(&inv.container_id, &inv.ifname);
        if completed && interrupted.is_empty() {
            // The runtime's DEL again, after one that completed: nothing to do or ask.
            return Ok(());
        }
        if !completed {
            match multus::attachments(inv, &config) {
                Ok(Some(attached)) => {
                    op.note_networks(attached.iter().map(|a| a.list.name.as_str()));
                    multus::del(inv, &config, &attached)?;
                }
                Ok(None) => del_unrecorded(&config, inv, op)?,
                Err(e) => {
                    // Kept for the admin to look at; a teardown never waits on a file it cannot read.
                    tracing::warn!("{e}; the pod's networks are looked up as for a pod without a record");
                    del_unrecorded(&config, inv, op)?;
                }
            }
            crate::platform::crash_point::reached("selector.del.chain-done");
        }
        leave_tombstone(&tombstones, inv);
        let ifnames: Vec<String> = std::iter::once(inv.ifname.clone()).chain(interrupted).collect();
        return store.remove_all(&inv.container_id, &ifnames);
    }
    let (failed, mut unusable) = attach::del_records(inv, &config, &records);
    let outcome = settle::settle(&records, inv.netns.as_deref(), failed);
    unusable.extend(unreadable);
    if !unusable.is_empty() {
        del_without_record(&config, inv, op, Some(&unusable))?;
    }
    outcome?;
    // Before the records go: a crash between the two leaves records, which the next DEL takes
    // as ever (records count before a tombstone).
    leave_tombstone(&tombstones, inv);
    crate::platform::crash_point::reached("selector.del.tombstoned");
    let ifnames: Vec<String> = records.iter().map(|r| r.ifname.clone()).chain(unusable).chain(interrupted).collect();
    store.remove_all(&inv.container_id, &ifnames)
}

/// DEL of a sandbox yh-genie has no record of at all: with the cluster's network in place, made by
/// that network before yh-genie was installed (`before_install`); otherwise as `del_without_record`.
fn del_unrecorded(config: &SelectorConfig, inv: &Invocation, op: &Operation) -> Result<(), CniError> {
    match before_install::del(inv, config) {
        Some(outcome) => outcome,
        None => del_without_record(config, inv, op, None),
    }
}

/// DEL with no (usable) record and no tombstone: the networks of the pod, as the agent (or, for a
/// record that exists but cannot be used, `only`'s interfaces, the API server) says it has them
/// (`lookup::for_del_without_record`), are DELeted (those on `only`'s interfaces, if given) in
/// reverse, without `prevResult`. If the networks cannot be known, there is nothing this plugin can
/// undo, and DEL succeeds. A network whose DEL fails and of which nothing is in the pod's netns is
/// let go (`settle`): without a record, its ADD never got as far as one.
fn del_without_record(
    config: &SelectorConfig,
    inv: &Invocation,
    op: &Operation,
    only: Option<&[String]>,
) -> Result<(), CniError> {
    let chosen = lookup::for_del_without_record(config, inv, op, only.is_some());
    let selection = match chosen {
        Ok(selection) => selection,
        Err(why) => {
            tracing::info!(
                "no usable attachment record for container {} interface {}, and its networks cannot be determined ({why}); nothing to delete",
                inv.container_id,
                inv.ifname
            );
            return Ok(());
        }
    };
    let mut first_error = None;
    for (position, attachment) in selection.attachments.iter().enumerate().rev() {
        if only.is_some_and(|only| !only.contains(&attachment.ifname)) {
            continue;
        }
        let outcome = attach::plugins_call(inv, config, position, attachment)
            .and_then(|(_, list, call)| chain::del(&list, &call, None));
        if let Err(e) = outcome
            && !settle::forgettable_without_record(inv.netns.as_deref(), &attachment.ifname, &attachment.network, &e)
        {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The tombstone of a completed DEL; one that cannot be written costs the next DEL a look, no more.
fn leave_tombstone(tombstones: &Tombstones, inv: &Invocation) {
    if let Err(e) = tombstones.write(&inv.container_id, &inv.ifname) {
        tracing::warn!("cannot leave the tombstone of container {} interface {}: {e}", inv.container_id, inv.ifname);
    }
}
