//! A pod's networks as one: ADD attaches them in order, each recorded before its chain runs, and
//! undoes the ones already made if one fails; DEL, CHECK and GC work from the records of every
//! attachment that belongs to the runtime's interface.
//!
//! Every attachment runs inside the runtime's call, under its lock (`attachment_lock` on the
//! runtime's `<containerID>:<CNI_IFNAME>`): helpers of all of them hold it, so the runtime's next
//! call waits for all of them.

use super::annotation::Extras;
use super::config::SelectorConfig;
use super::record::{Found, Record, RecordStore};
use super::selection::{self, Attachment, PodIdentity};
use super::{chain, default_route, extras};
use crate::cni::{CniArgs, CniError, CniResult, ConfList, Invocation, code};

/// One network attached: its record (with the result), chain and call.
pub struct Attached {
    pub record: Record,
    pub list: ConfList,
    pub call: Invocation,
    pub result: CniResult,
}

/// The call as an attachment's plugins get it: its interface, the runtime's args plus what the pod
/// asked for, external plugins looked up in `binDir` first, then in the runtime's `CNI_PATH`.
pub fn delegate_call(runtime: &Invocation, config: &SelectorConfig, ifname: &str, args: CniArgs) -> Invocation {
    let mut path = vec![config.bin_dir.clone()];
    path.extend(runtime.path.iter().filter(|dir| **dir != config.bin_dir).cloned());
    Invocation { path, ifname: ifname.to_string(), args, ..runtime.clone() }
}

fn call_of(runtime: &Invocation, config: &SelectorConfig, ifname: &str, extras: &Extras) -> Invocation {
    delegate_call(runtime, config, ifname, extras::apply_to_args(&runtime.args, extras))
}

/// The call a record's plugins got (their args as recorded), for `runtime`'s command.
pub fn recorded_call(runtime: &Invocation, config: &SelectorConfig, record: &Record) -> Invocation {
    let args = CniArgs::parse(&record.cni_args).unwrap_or_else(|_| runtime.args.clone());
    delegate_call(runtime, config, &record.ifname, args)
}

/// ADD every attachment in order. On a failure, the ones attached are DELeted in reverse (their
/// records removed), and the error names the network and interface that failed.
pub fn add_all(
    runtime: &Invocation,
    config: &SelectorConfig,
    store: &RecordStore,
    attachments: &[Attachment],
    pod: Option<PodIdentity>,
) -> Result<Vec<Attached>, CniError> {
    let mut done: Vec<Attached> = Vec::with_capacity(attachments.len());
    for (position, attachment) in attachments.iter().enumerate() {
        match add_one(runtime, config, store, position, attachment, pod.clone()) {
            Ok(attached) => done.push(attached),
            Err(e) => {
                undo(store, &mut done);
                return Err(in_context(e, position, attachments));
            }
        }
    }
    Ok(done)
}

/// A pod with one network keeps the messages it always had; with several, the message says which.
fn in_context(e: CniError, position: usize, attachments: &[Attachment]) -> CniError {
    if attachments.len() == 1 {
        return e;
    }
    let a = &attachments[position];
    e.context(format!("network {} on interface {} ({} of {})", a.network, a.ifname, position + 1, attachments.len()))
}

fn add_one(
    runtime: &Invocation,
    config: &SelectorConfig,
    store: &RecordStore,
    position: usize,
    attachment: &Attachment,
    pod: Option<PodIdentity>,
) -> Result<Attached, CniError> {
    let conf = extras::apply_to_config(&attachment.config, &attachment.extras);
    let list = selection::parse_config(&attachment.network, attachment.path.as_deref(), &conf)?;
    let call = call_of(runtime, config, &attachment.ifname, &attachment.extras);
    let mut record = Record::new(runtime, &call, position, attachment, conf, pod);
    if let Some(existing) = store.read(&runtime.container_id, &attachment.ifname) {
        if existing.owner() != runtime.ifname {
            return Err(CniError::new(
                code::ALREADY_EXISTS,
                format!(
                    "interface {} of container {} is already attached, for the runtime's interface {}",
                    attachment.ifname,
                    runtime.container_id,
                    existing.owner()
                ),
            ));
        }
        super::warn(format!(
            "ADD of container {} interface {} replaces an attachment record that was never DELeted",
            runtime.container_id, attachment.ifname
        ));
    }
    store.write(&record)?;
    let result = match chain::add(&list, &call) {
        Ok(result) => result,
        Err(failed) => {
            // When undoing failed, the record stays so that the runtime's DEL can finish the job.
            if failed.undone {
                remove_logged(store, &record);
            }
            return Err(failed.error);
        }
    };
    crate::crash_point::reached("selector.add.chain-done");
    record.set_result(&result);
    if let Err(e) = store.write(&record) {
        // Without its result on disk the attachment could not be CHECKed or DELeted properly.
        if chain::del(&list, &call, Some(&result)).is_ok() {
            remove_logged(store, &record);
        }
        return Err(e);
    }
    Ok(Attached { record, list, call, result })
}

/// DEL what was attached, in reverse; a record whose DEL fails stays for the runtime's DEL.
pub fn undo(store: &RecordStore, done: &mut Vec<Attached>) {
    while let Some(a) = done.pop() {
        match chain::del(&a.list, &a.call, Some(&a.result)) {
            Ok(()) => remove_logged(store, &a.record),
            Err(e) => super::warn(format!("undoing interface {} of the failed ADD: {e}", a.record.ifname)),
        }
    }
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
    mine.sort_by_key(|r| r.position);
    Ok((mine, others))
}

/// DEL every attachment of `records`, in reverse, each with its recorded configuration and result,
/// removing each record once its DEL succeeded. Every attachment is tried; the first error is
/// returned. Records that cannot be used (no parsable configuration or result) are returned, by
/// interface, for the caller to DEL another way.
pub fn del_records(
    runtime: &Invocation,
    config: &SelectorConfig,
    store: &RecordStore,
    records: &[Record],
) -> (Result<(), CniError>, Vec<String>) {
    let mut first_error = None;
    let mut unusable = Vec::new();
    for record in records.iter().rev() {
        let Some((list, result)) = usable(record) else {
            unusable.push(record.ifname.clone());
            continue;
        };
        let call = recorded_call(runtime, config, record);
        let outcome = chain::del(&list, &call, result.as_ref()).and_then(|()| {
            crate::crash_point::reached("selector.del.chain-done");
            store.remove(&record.container_id, &record.ifname)
        });
        if let Err(e) = outcome {
            let e = if records.len() > 1 { e.context(format!("interface {}", record.ifname)) } else { e };
            first_error.get_or_insert(e);
        }
    }
    (first_error.map_or(Ok(()), Err), unusable)
}

/// CHECK every attachment of `records` in order, with its recorded result (as `default-route` left
/// the routes).
pub fn check_records(runtime: &Invocation, config: &SelectorConfig, records: &[Record]) -> Result<(), CniError> {
    let unknown = |ifname: &str, why: &str| {
        CniError::new(code::UNKNOWN_CONTAINER, format!("container {} interface {ifname}: {why}", runtime.container_id))
    };
    let mut results = Vec::with_capacity(records.len());
    for record in records {
        results.push(record.result()?.ok_or_else(|| unknown(&record.ifname, "its ADD did not complete"))?);
    }
    let requests =
        default_route::requested(records.iter().map(|r| (r.ifname.as_str(), r.extras.default_route.as_slice())));
    let mut pairs: Vec<(&str, &mut CniResult)> =
        records.iter().map(|r| r.ifname.as_str()).zip(results.iter_mut()).collect();
    default_route::adjust(&mut pairs, &requests);
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
            super::warn(format!(
                "attachment record of container {} interface {} is unusable ({e}); treating it as absent",
                record.container_id, record.ifname
            ));
            None
        }
    }
}

fn remove_logged(store: &RecordStore, record: &Record) {
    if let Err(e) = store.remove(&record.container_id, &record.ifname) {
        super::warn(e);
    }
}
