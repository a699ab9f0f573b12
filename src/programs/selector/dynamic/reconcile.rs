//! Attaching and detaching a running pod's networks, as the runtime's own calls do it: under the
//! lock of the runtime's attachment (`<containerID>:<CNI_IFNAME>`, so the runtime's DEL of the
//! sandbox waits for a hot-plug in progress, and a hot-plug for it), with the same records.
//!
//! - Attach: the network's record (marked `hotplugged`, at the next position of the runtime's
//!   attachment) is written durably before its chain runs; its result is written into it once the
//!   chain succeeded. A chain that fails is undone and its record removed (`attach::UndoLog`).
//! - Detach: the chain's DEL from its record, then the record goes.
//!
//! Killed at any point, nothing is left half made: a record without a result is a hot-plug that did
//! not complete, and the next reconcile (the agent asks again for every running pod when it
//! starts) DELs it first; the sandbox's DEL takes every record of its attachment, hot-plugged ones
//! included, with or without a result; a detach killed before its record went is done again.

use super::plan::{self, Plan};
use crate::node::paths::NodePaths;
use crate::node::worker_protocol::{ADDED_INTERFACE, Answer, Notice, REMOVED_INTERFACE, Request};
use crate::platform::cni::{CniArgs, CniError, CniResult, Command, Invocation, attachment_lock};
use crate::programs::selector::attach::{self, FailedChain, Found, Record, RecordStore, Tombstones, UndoLog, chain};
use crate::programs::selector::choose::Attachment;
use crate::programs::selector::config::{NetworkStatus, SelectorConfig};
use crate::programs::selector::lookup;
use crate::programs::selector::report::{events, network_status};
use std::collections::BTreeMap;

/// Make the attachments of the pod `request` names match its networks annotation.
pub fn reconcile(config: &SelectorConfig, request: &Request) -> Answer {
    if !config.dynamic_networks {
        return Answer::Refused {
            why: "dynamicNetworks is not true in the selector's configuration (docs/dynamic-networks.md)".into(),
        };
    }
    let store = RecordStore::of_node(&config.data_dir);
    let Some(owner) = owner_record(&store, &request.uid) else {
        return Answer::NotAttached { why: format!("no completed attachment of pod uid {} on this node", request.uid) };
    };
    let pod = format!("pod {}/{}", request.namespace, request.name);
    let node = NodePaths::from_env();
    let _lock =
        attachment_lock::acquire(node.attachment_locks(), &owner.container_id, &owner.ifname, attachment_lock::WAIT);
    if Tombstones::new(&config.data_dir).contains(&owner.container_id, &owner.ifname) {
        return Answer::NotAttached { why: format!("the sandbox of {pod} has been deleted") };
    }
    let mut records = match current(&store, &owner) {
        Ok(records) if records.iter().any(|r| r.ifname == owner.ifname && r.result.is_some()) => records,
        Ok(_) => return Answer::NotAttached { why: format!("the sandbox of {pod} has been deleted") },
        Err(e) => return Answer::NotAttached { why: e.msg },
    };
    let mut events = Vec::new();
    finish_interrupted(config, &store, &owner, &mut records, &mut events);
    match lookup::for_hotplug(config, request, &owner.ifname) {
        Ok(selection) => {
            let plan = plan::plan(&records, &owner.ifname, &selection.attachments);
            apply(config, &store, &owner, &records, plan, &mut events);
        }
        Err(why) => events.push(Notice::failed(format!("the networks annotation was not applied: {why}"))),
    }
    // The whole status every time, changed or not (unless the admin wants none): the agent writes
    // it where the pod's differs, so a write lost to a crash or an API outage after the attach is
    // made good by the next ask.
    let annotations = match config.network_status {
        NetworkStatus::Never => BTreeMap::new(),
        NetworkStatus::Auto | NetworkStatus::Always => {
            network_status::annotations(&status(&current(&store, &owner).unwrap_or_default()))
        }
    };
    Answer::Reconciled { annotations, events }
}

/// The record of the runtime's own interface of the pod whose sandbox is `uid`, once its ADD has
/// completed (a record with a result).
fn owner_record(store: &RecordStore, uid: &str) -> Option<Record> {
    let records = store.list().ok()?;
    records.into_iter().find(|r| {
        r.ifname == r.owner() && r.result.is_some() && r.pod.as_ref().and_then(|p| p.uid.as_deref()) == Some(uid)
    })
}

/// Every record of the runtime attachment `owner` belongs to, in order, with their results.
fn current(store: &RecordStore, owner: &Record) -> Result<Vec<Record>, CniError> {
    let mut records: Vec<Record> = store
        .of_container(&owner.container_id)?
        .into_iter()
        .filter_map(|found| match found {
            Found::Record(r) if r.owner() == owner.ifname => Some(*r),
            _ => None,
        })
        .collect();
    attach::in_order(&mut records, &owner.ifname);
    Ok(records)
}

/// The call of the runtime attachment `owner` for `command`, as the runtime made it.
fn runtime_call(config: &SelectorConfig, owner: &Record, command: Command) -> Invocation {
    Invocation {
        command,
        container_id: owner.container_id.clone(),
        netns: owner.netns.clone(),
        ifname: owner.ifname.clone(),
        args: CniArgs::parse(&owner.cni_args).unwrap_or_default(),
        path: vec![config.bin_dir.clone()],
    }
}

/// DEL the hot-plugs a killed worker left without a result, and forget their records.
fn finish_interrupted(
    config: &SelectorConfig,
    store: &RecordStore,
    owner: &Record,
    records: &mut Vec<Record>,
    events: &mut Vec<Notice>,
) {
    let runtime = runtime_call(config, owner, Command::Del);
    records.retain(|r| {
        if !(r.hotplugged && r.result.is_none()) {
            return true;
        }
        let undone =
            r.conf_list().and_then(|list| chain::del(&list, &attach::recorded_call(&runtime, config, r), None));
        match undone.and_then(|()| store.remove_all(&r.container_id, std::slice::from_ref(&r.ifname))) {
            Ok(()) => {
                tracing::info!(
                    "interface {} of container {}: a hot-plug that did not complete is undone",
                    r.ifname,
                    r.container_id
                );
                false
            }
            Err(e) => {
                events.push(Notice::failed(format!("interface {} could not be undone: {e}", r.ifname)));
                true
            }
        }
    });
}

/// Detach, then attach, each on its own: one that fails is an event and the others go on.
fn apply(
    config: &SelectorConfig,
    store: &RecordStore,
    owner: &Record,
    records: &[Record],
    plan: Plan,
    events: &mut Vec<Notice>,
) {
    for (element, why) in plan.refused {
        events.push(Notice::failed(format!("{element:?} was not attached: {why}")));
    }
    for ifname in plan.detach {
        let record = records.iter().find(|r| r.ifname == ifname).expect("the plan detaches recorded interfaces");
        match detach(config, store, owner, record) {
            Ok(message) => events.push(Notice::normal(REMOVED_INTERFACE, message)),
            Err(e) => events
                .push(Notice::failed(format!("interface {ifname} (network {}) was not detached: {e}", record.network))),
        }
    }
    let first = records.iter().map(|r| r.position).max().unwrap_or(0) + 1;
    for (position, attachment) in (first..).zip(plan.attach) {
        match attach_one(config, store, owner, position, &attachment) {
            Ok(message) => events.push(Notice::normal(ADDED_INTERFACE, message)),
            Err(e) => events.push(Notice::failed(format!(
                "network {} was not attached on interface {}: {e}",
                attachment.network, attachment.ifname
            ))),
        }
    }
}

/// Attach one network to the running pod; the `AddedInterface` message.
fn attach_one(
    config: &SelectorConfig,
    store: &RecordStore,
    owner: &Record,
    position: usize,
    attachment: &Attachment,
) -> Result<String, CniError> {
    let runtime = runtime_call(config, owner, Command::Add);
    let (conf, list, call) = attach::plugins_call(&runtime, config, position, attachment)?;
    attach::plugins_exist(&list, &call, &attachment.network)?;
    let mut record = Record::new(&runtime, &call, position, attachment, conf, owner.pod.clone());
    record.hotplugged = true;
    store.write_all(&[&record])?;
    crate::platform::crash_point::reached("dynamic.attach.recorded");
    let mut made = UndoLog::new(store, &record.container_id);
    made.recorded([record.ifname.clone()]);
    match chain::add(&list, &call) {
        Ok(result) => {
            crate::platform::crash_point::reached("dynamic.attach.chain-done");
            record.set_result(&result);
            store.complete(&record)?;
            Ok(message("Add", &record, &result))
        }
        Err(failed) => {
            // What cannot be undone stays recorded, for the next reconcile or the sandbox's DEL.
            made.undo_after(FailedChain { list: &list, call: &call, record: &record, failed: &failed })?;
            Err(failed.error)
        }
    }
}

/// Detach one network from the running pod; the `RemovedInterface` message.
fn detach(config: &SelectorConfig, store: &RecordStore, owner: &Record, record: &Record) -> Result<String, CniError> {
    let runtime = runtime_call(config, owner, Command::Del);
    let (list, result) = attach::usable(record)
        .ok_or_else(|| CniError::io(format!("the record of interface {} cannot be used", record.ifname)))?;
    chain::del(&list, &attach::recorded_call(&runtime, config, record), result.as_ref())?;
    crate::platform::crash_point::reached("dynamic.detach.deleted");
    forget_further_result(store, owner, &record.ifname)?;
    store.remove_all(&record.container_id, std::slice::from_ref(&record.ifname))?;
    Ok(match &result {
        Some(result) => message("Remove", record, result),
        None => format!("Remove {} from {}", record.ifname, status_name(record)),
    })
}

/// Drop the result the runtime's ADD kept for `ifname` in the record of its own interface: the
/// interface is detached, and a later attachment on the same name has a result of its own.
fn forget_further_result(store: &RecordStore, owner: &Record, ifname: &str) -> Result<(), CniError> {
    let Some(mut record) = store.read(&owner.container_id, &owner.ifname) else { return Ok(()) };
    if record.further_results.remove(ifname).is_none() {
        return Ok(());
    }
    store.complete(&record)
}

/// `Add net1 [10.1.2.3/24] from web/lan`, as Multus words its `AddedInterface` events.
fn message(verb: &str, record: &Record, result: &CniResult) -> String {
    events::message(verb, &record.ifname, result, &status_name(record))
}

/// The network as network-status names it: a NAD's `namespace/name`, else the network's name.
fn status_name(record: &Record) -> String {
    record.source.as_ref().and_then(|s| s.nad()).unwrap_or(&record.network).to_string()
}

/// The pod's whole network-status, from its records: every attachment that completed, in order.
fn status(records: &[Record]) -> Vec<network_status::Entry> {
    records
        .iter()
        .filter_map(|r| Some((r, r.result().ok()??)))
        .flat_map(|(r, result)| network_status::of_record(r, &result, r.position == 0))
        .collect()
}
