//! A pod's networks as one: ADD records them all, then attaches them in order, logging what it makes
//! for `undo` to take back if one fails; DEL, CHECK and GC work from the records of every attachment
//! that belongs to the runtime's interface.
//!
//! What is durable, and when: every network's record is on disk before the first chain runs
//! (written together: a file fsync each, one of the directory); the results are written once every
//! network is attached, all in the record of the runtime's interface (one durable write). A pod with
//! one network costs two durable writes, as it always did; each further network one fsync. A crash
//! before the results leaves records without them, which DEL handles as an ADD that did not
//! complete (DEL without `prevResult`). DEL removes the records together, once every network's DEL
//! has succeeded, so a DEL killed half-way starts again from all of them.
//!
//! Every attachment runs inside the runtime's call, under its lock (`attachment_lock` on the
//! runtime's `<containerID>:<CNI_IFNAME>`): helpers of all of them hold it, so the runtime's next
//! call waits for all of them.

use super::attached::Attached;
use super::call::{plugins_call, recorded_call};
use super::chain;
use super::devices;
use super::record::{Found, Record, RecordStore};
use super::undo::{FailedChain, UndoLog};
use crate::platform::cni::{CniError, CniResult, ConfList, Invocation, code};
use crate::programs::selector::choose::{Attachment, PodIdentity};
use crate::programs::selector::config::SelectorConfig;

/// Record every attachment, then ADD each in order. On a failure, what was made is undone
/// (`undo`), and the error names the network and interface that failed. On success, the networks
/// attached, as an `UndoLog` to undo them by if what ADD does next fails; the results are not
/// recorded yet: `record_results` does it once the pod is complete.
pub fn add_all<'s>(
    runtime: &Invocation,
    config: &SelectorConfig,
    store: &'s RecordStore,
    attachments: &[Attachment],
    pod: Option<PodIdentity>,
) -> Result<UndoLog<'s>, CniError> {
    let mut prepared = Vec::with_capacity(attachments.len());
    for (position, attachment) in attachments.iter().enumerate() {
        prepared.push(
            prepare(runtime, config, store, position, attachment, pod.clone())
                .map_err(|e| in_context(e, position, attachments))?,
        );
    }
    store.write_all(&prepared.iter().map(|(record, _, _)| record).collect::<Vec<_>>())?;
    let mut made = UndoLog::new(store, &runtime.container_id);
    made.recorded(attachments.iter().map(|a| a.ifname.clone()));
    for (position, (record, list, call)) in prepared.into_iter().enumerate() {
        devices::hand_over_info(config, &record);
        match chain::add(&list, &call) {
            Ok(result) => {
                crate::platform::crash_point::reached("selector.add.chain-done");
                made.attached(Attached { record, list, call, result });
            }
            Err(failed) => {
                let chain = FailedChain { list: &list, call: &call, record: &record, failed: &failed };
                if let Err(e) = made.undo_after(chain) {
                    tracing::warn!("{e}");
                }
                return Err(in_context(failed.error, position, attachments));
            }
        }
    }
    Ok(made)
}

/// Write the results of `done` (in the record of the runtime's interface).
pub fn record_results(store: &RecordStore, done: &mut [Attached]) -> Result<(), CniError> {
    let (first, further) = done.split_first_mut().expect("a pod has at least one network");
    first.record.set_result(&first.result);
    for a in further.iter() {
        first.record.set_further_result(&a.record.ifname, &a.result);
    }
    store.complete(&first.record)
}

/// A pod with one network keeps the messages it always had; with several, the message says which.
fn in_context(e: CniError, position: usize, attachments: &[Attachment]) -> CniError {
    if attachments.len() == 1 {
        return e;
    }
    let a = &attachments[position];
    e.context(format!("network {} on interface {} ({} of {})", a.network, a.ifname, position + 1, attachments.len()))
}

/// An attachment's record, chain and call, before anything is written.
fn prepare(
    runtime: &Invocation,
    config: &SelectorConfig,
    store: &RecordStore,
    position: usize,
    attachment: &Attachment,
    pod: Option<PodIdentity>,
) -> Result<(Record, ConfList, Invocation), CniError> {
    let (conf, list, call) = plugins_call(runtime, config, position, attachment)?;
    plugins_exist(&list, &call, &attachment.network)?;
    let record = Record::new(runtime, &call, position, attachment, conf, pod);
    if let Some(existing) = store.read(&runtime.container_id, &attachment.ifname) {
        if existing.owner() != runtime.ifname {
            return Err(CniError::new(
                code::ALREADY_EXISTS,
                format!(
                    "interface {ifname} of container {container} is already attached, for the runtime's interface \
                     {owner}: the runtime attaches this container through yh-genie a second time (now as {this}), and \
                     network {network} would take {ifname} again; give the pod's further networks interfaces of their \
                     own (NAME@IFNAME in CNI_NETWORK_CONFIG, \"interface\" in the networks annotation), or DEL \
                     the container's {owner} first",
                    ifname = attachment.ifname,
                    container = runtime.container_id,
                    owner = existing.owner(),
                    this = runtime.ifname,
                    network = attachment.network,
                ),
            ));
        }
        tracing::warn!(
            "ADD of container {} interface {} replaces an attachment record that was never DELeted",
            runtime.container_id,
            attachment.ifname
        );
    }
    Ok((record, list, call))
}

/// Every plugin of the chain, and every plugin they run in turn (IPAM, a meta plugin's delegate,
/// its defaults), is built in or found on the call's path, before anything is recorded: a network
/// naming a plugin the node does not have is refused, not recorded and then stuck.
pub fn plugins_exist(list: &ConfList, call: &Invocation, network: &str) -> Result<(), CniError> {
    let count = list.plugins.len();
    let own = (0..count).map(|i| (format!("plugin {} of {count}", i + 1), list.plugin_type(i).to_string()));
    for (at, t) in own.chain(crate::programs::selector::netconf::inline::delegated_types(list)) {
        if crate::programs::plugins::builtin(&t).is_none() {
            crate::platform::cni::exec::find_plugin(&t, &call.path)
                .map_err(|e| e.context(format!("network {network}: {at} ({t})")))?;
        }
    }
    Ok(())
}

/// The records of the runtime's attachment, in ADD order, and what else the container has under
/// its name: record files that cannot be read, and temp files of interrupted record writes. Those
/// cannot say whose they are, so whoever DELs the container takes them (a runtime makes one
/// attachment per pod).
pub fn records_of(store: &RecordStore, runtime: &Invocation) -> Result<(Vec<Record>, Vec<Found>), CniError> {
    let mut mine = Vec::new();
    let mut others = Vec::new();
    for found in store.of_container(&runtime.container_id)? {
        match found {
            Found::Record(r) if r.owner() == runtime.ifname => mine.push(*r),
            Found::Record(_) => {}
            other => others.push(other),
        }
    }
    in_order(&mut mine, &runtime.ifname);
    Ok((mine, others))
}

/// The records of the runtime attachment on `owner`, in ADD order, each with its result: the
/// further networks' results are in the record of the runtime's interface. A hot-plugged record
/// holds its own: without one it did not complete, whatever the runtime's record says of its name.
pub fn in_order(records: &mut [Record], owner: &str) {
    records.sort_by_key(|r| r.position);
    let further = records.iter().find(|r| r.ifname == owner).map(|r| r.further_results.clone());
    for record in records.iter_mut().filter(|r| r.result.is_none() && !r.hotplugged) {
        record.result = further.as_ref().and_then(|f| f.get(&record.ifname).cloned());
    }
}

/// DEL every attachment of `records`, in reverse, each with its recorded configuration and result.
/// Every attachment is tried; the errors are returned by interface, in the order they happened.
/// Records that cannot be used (no parsable configuration or result) are returned, by interface,
/// for the caller to DEL another way. Nothing is removed: the caller removes the records once
/// everything is DELeted (or settled: `settle`).
pub fn del_records(
    runtime: &Invocation,
    config: &SelectorConfig,
    records: &[Record],
) -> (Vec<(String, CniError)>, Vec<String>) {
    let mut failed = Vec::new();
    let mut unusable = Vec::new();
    for record in records.iter().rev() {
        let Some((list, result)) = usable(record) else {
            unusable.push(record.ifname.clone());
            continue;
        };
        let call = recorded_call(runtime, config, record);
        match chain::del(&list, &call, result.as_ref()) {
            Ok(()) => {
                devices::forget_info(record);
                crate::platform::crash_point::reached("selector.del.chain-done")
            }
            Err(e) => {
                let e = if records.len() > 1 { e.context(format!("interface {}", record.ifname)) } else { e };
                failed.push((record.ifname.clone(), e));
            }
        }
    }
    (failed, unusable)
}

/// CHECK every attachment of `records` in order, with its recorded result (recorded as
/// `default-route` left the routes).
pub fn check_records(runtime: &Invocation, config: &SelectorConfig, records: &[Record]) -> Result<(), CniError> {
    let unknown = |ifname: &str, why: &str| {
        CniError::new(code::UNKNOWN_CONTAINER, format!("container {} interface {ifname}: {why}", runtime.container_id))
    };
    let mut results = Vec::with_capacity(records.len());
    for record in records {
        results.push(record.result()?.ok_or_else(|| unknown(&record.ifname, "its ADD did not complete"))?);
    }
    for (record, result) in records.iter().zip(&results) {
        let list = record.conf_list()?;
        chain::check(&list, &recorded_call(runtime, config, record), result)
            .map_err(|e| if records.len() > 1 { e.context(format!("interface {}", record.ifname)) } else { e })?;
    }
    Ok(())
}

/// A record's chain and result, or `None` (logged) if the record cannot be used.
pub fn usable(record: &Record) -> Option<(ConfList, Option<CniResult>)> {
    match record.conf_list().and_then(|list| Ok((list, record.result()?))) {
        Ok(parts) => Some(parts),
        Err(e) => {
            tracing::warn!(
                "attachment record of container {} interface {} is unusable ({e}); treating it as absent",
                record.container_id,
                record.ifname
            );
            None
        }
    }
}
