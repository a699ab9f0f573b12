//! Undoing an ADD that failed, in one place. What an ADD makes is logged as it is made
//! (`UndoLog`): the records of its attachments, written before any plugin runs, then each network
//! once its chain is attached. When the ADD fails, the log is undone in reverse:
//!
//! 1. the plugins of the chain that failed, if one did (`chain::AddFailed` says which were tried:
//!    the failing one too, since a plugin that fails half-way may leave things behind and DEL is
//!    idempotent), DELeted in reverse with the last result one of them gave; its device-info goes
//!    once they have let the device go;
//! 2. each network attached before it, in reverse: its chain's DEL with its result (as the default
//!    route left it), then its device-info;
//! 3. the records, only when all of that was undone: what could not be undone stays recorded, for
//!    the runtime's DEL (or the next reconcile, for a hot-plug) to finish the job.
//!
//! A pod's ADD logs into it (`networks::add_all`, then `commands::add` for what fails once every
//! network is attached), and so does a hot-plug (`dynamic`). A plugin whose ADD result its
//! configuration's version cannot hold is undone by its own DEL in `platform::cni::skel`: that is
//! the CNI protocol's rule for any plugin, below the selector.

use super::attached::Attached;
use super::chain::{self, AddFailed};
use super::devices;
use super::record::{Record, RecordStore};
use crate::platform::cni::{CniError, ConfList, Invocation};

/// What an ADD has made so far, in order: undone in reverse by `undo` or `undo_after`, or kept by
/// `keep` once the ADD has succeeded.
pub struct UndoLog<'s> {
    store: &'s RecordStore,
    container_id: String,
    /// The interfaces whose records are written.
    recorded: Vec<String>,
    /// The networks attached, in order.
    attached: Vec<Attached>,
}

/// The chain whose ADD failed: its configuration, its call, its record, and what it tried.
pub struct FailedChain<'a> {
    pub list: &'a ConfList,
    pub call: &'a Invocation,
    pub record: &'a Record,
    pub failed: &'a AddFailed,
}

impl<'s> UndoLog<'s> {
    /// Nothing made yet for the runtime's attachment of `container_id`, whose records are in `store`.
    pub fn new(store: &'s RecordStore, container_id: &str) -> Self {
        UndoLog { store, container_id: container_id.to_string(), recorded: Vec::new(), attached: Vec::new() }
    }

    /// The records of these interfaces are written.
    pub fn recorded(&mut self, ifnames: impl IntoIterator<Item = String>) {
        self.recorded.extend(ifnames);
    }

    /// A network's chain is attached.
    pub fn attached(&mut self, network: Attached) {
        self.attached.push(network);
    }

    /// The networks attached, in order: what ADD finishes them with (the default route, the
    /// results) is what their undoing hands their plugins.
    pub fn networks(&mut self) -> &mut [Attached] {
        &mut self.attached
    }

    /// The ADD has succeeded: nothing is undone. The networks it attached, in order.
    pub fn keep(self) -> Vec<Attached> {
        self.attached
    }

    /// Undo everything, after `chain` failed: its plugins first, then the rest (module doc). `Err`:
    /// everything else was undone, but the records could not be removed.
    pub fn undo_after(self, chain: FailedChain<'_>) -> Result<(), CniError> {
        let FailedChain { list, call, record, failed } = chain;
        let chain_undone = match chain::del_first(list, call, failed.tried, failed.prev.as_deref()) {
            Ok(()) => {
                devices::forget_info(record);
                true
            }
            Err(undo) => {
                tracing::warn!("undoing the failed ADD: {undo}");
                false
            }
        };
        self.undo_networks(chain_undone)
    }

    /// Undo everything, once every network was attached (module doc). `Err`: everything else was
    /// undone, but the records could not be removed.
    pub fn undo(self) -> Result<(), CniError> {
        self.undo_networks(true)
    }

    /// DEL what was attached, in reverse, then remove the records if that and what came before
    /// (`all_so_far`) all succeeded.
    fn undo_networks(mut self, all_so_far: bool) -> Result<(), CniError> {
        let mut all = all_so_far;
        while let Some(a) = self.attached.pop() {
            match chain::del(&a.list, &a.call, Some(&a.result)) {
                Ok(()) => devices::forget_info(&a.record),
                Err(e) => {
                    tracing::warn!("undoing interface {} of the failed ADD: {e}", a.record.ifname);
                    all = false;
                }
            }
        }
        if !all {
            return Ok(());
        }
        self.store.remove_all(&self.container_id, &self.recorded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::testing::{invocation, script};
    use crate::platform::cni::{CniResult, Command};
    use crate::programs::selector::choose::chosen::{Attachment, Source};
    use crate::programs::selector::requests::annotation::Extras;
    use std::path::Path;

    /// A bin dir of plugins that log `COMMAND name` and answer ADD with an address; `fail` fails
    /// ADD, `stuck` fails DEL.
    fn plugins(dir: &Path) {
        let log = dir.join("log");
        for name in ["a", "b", "fail", "stuck"] {
            let add = match name {
                "fail" => r#"echo '{"code":7,"msg":"boom"}'; exit 1"#,
                _ => r#"echo '{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/24"}]}'"#,
            };
            let del = if name == "stuck" { r#"echo '{"code":7,"msg":"stuck"}'; exit 1"# } else { "exit 0" };
            let body = format!(
                "cat >/dev/null\necho \"$CNI_COMMAND {name}\" >> {log}\n\
                 if [ \"$CNI_COMMAND\" = ADD ]; then {add}; fi\nif [ \"$CNI_COMMAND\" = DEL ]; then {del}; fi",
                log = log.display()
            );
            script(dir, name, &body);
        }
    }

    fn log(dir: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        let _ = std::fs::remove_file(dir.join("log"));
        text.lines().map(String::from).collect()
    }

    fn chain(name: &str, types: &[&str]) -> ConfList {
        let plugins: Vec<_> = types.iter().map(|t| serde_json::json!({ "type": t })).collect();
        let json = serde_json::json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins});
        ConfList::parse(json.to_string().as_bytes(), true, "net.conflist").unwrap()
    }

    /// The record of network `network` on `ifname`, written to `store`.
    fn recorded(store: &RecordStore, call: &Invocation, ifname: &str, network: &str) -> Record {
        let attachment = Attachment {
            ifname: ifname.into(),
            network: network.into(),
            path: None,
            config: "{}".into(),
            source: Source::DefaultNetwork { element: network.into() },
            extras: Extras::default(),
            device: None,
        };
        let record = Record::new(call, call, 0, &attachment, "{}".into(), None);
        store.write_all(&[&record]).unwrap();
        record
    }

    /// The records of a node whose data and volatile directories are under `dir`.
    fn store_in(dir: &std::path::Path) -> RecordStore {
        RecordStore::new(
            &dir.join("data"),
            &crate::node::paths::NodePaths::with_lock_dir(Some(dir.join("run/attachments"))),
        )
    }

    /// Network `one` attached on eth0 (its plugin `first`), then network `two` on net1 failing in
    /// its second plugin: what undoing DELs, in order, and whether the records are left.
    fn undo_after_a_failed_second_network(first: &str) -> (Vec<String>, bool) {
        let dir = tempfile::tempdir().unwrap();
        plugins(dir.path());
        let store = store_in(dir.path());
        let call = invocation(Command::Add, dir.path());
        let mut undo = UndoLog::new(&store, &call.container_id);
        let (one, two) = (recorded(&store, &call, "eth0", "one"), recorded(&store, &call, "net1", "two"));
        undo.recorded(["eth0".to_string(), "net1".to_string()]);
        let list = chain("one", &[first]);
        let result = chain::add(&list, &call).unwrap();
        undo.attached(Attached { record: one, list, call: call.clone(), result });
        let list = chain("two", &["b", "fail", "a"]);
        let failed = chain::add(&list, &call).unwrap_err();
        log(dir.path());
        undo.undo_after(FailedChain { list: &list, call: &call, record: &two, failed: &failed }).unwrap();
        let left = store.read("c1", "eth0").is_some() && store.read("c1", "net1").is_some();
        (log(dir.path()), left)
    }

    #[test]
    fn the_failed_chain_is_undone_first_including_the_failing_plugin_then_the_networks_then_the_records() {
        let (dels, left) = undo_after_a_failed_second_network("a");
        assert_eq!(dels, ["DEL fail", "DEL b", "DEL a"]);
        assert!(!left, "everything was undone: the records go");
    }

    #[test]
    fn what_cannot_be_undone_stays_recorded_for_the_runtimes_del() {
        let (dels, left) = undo_after_a_failed_second_network("stuck");
        assert_eq!(dels, ["DEL fail", "DEL b", "DEL stuck"]);
        assert!(left, "a DEL failed: the records stay");
    }

    #[test]
    fn kept_networks_are_not_undone() {
        let dir = tempfile::tempdir().unwrap();
        plugins(dir.path());
        let store = store_in(dir.path());
        let call = invocation(Command::Add, dir.path());
        let mut undo = UndoLog::new(&store, &call.container_id);
        let record = recorded(&store, &call, "eth0", "one");
        undo.recorded(["eth0".to_string()]);
        undo.attached(Attached {
            record,
            list: chain("one", &["a"]),
            call: call.clone(),
            result: CniResult::default(),
        });
        assert_eq!(undo.keep().len(), 1);
        assert!(log(dir.path()).is_empty());
        assert!(store.read("c1", "eth0").is_some());
    }
}
