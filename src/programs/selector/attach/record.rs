//! Attachment records: what ADD chose for one (container, interface), kept under `dataDir` so that
//! DEL, CHECK and GC never need the API server, nor the network's configuration file still being
//! there or unchanged.
//!
//! A pod with several networks has one record per network, keyed by its own interface
//! (`<containerID>:<ifname>`), each saying which of the runtime's attachments it belongs to (the
//! runtime's `CNI_IFNAME`, whose DEL removes them all) and its position in the ADD.
//!
//! A record is written (atomically, durably) before any plugin of its network runs; once every
//! network of the pod has succeeded, the results of them all go into a file of their own in the
//! node's volatile directory (`/run/yh-genie/results<dataDir>/<containerID>:<ifname>`, of the
//! runtime's interface; tmpfs on a node), written atomically and never fsync'd: the record is what
//! a DEL after a power loss or a reboot needs, and the pod's sandbox did not survive either, so
//! keeping the results on disk would only slow every ADD. A record read back carries its results.
//! DEL removes the results, then the records. A record that cannot be read or parsed is logged and
//! treated as absent: DEL then falls back to asking the API server; results that are absent or
//! cannot be read are logged and the record is taken as an ADD that did not complete. Results the
//! 0.1.0 kept on disk (`<dataDir>/results/`) are still read, and removed with their pod.
//!
//! The format is 1: a record without the fields `runtimeIfname`, `position`, `source` or `extras`
//! reads as their defaults describe it: the only attachment of its own interface. `confPath` is absent for a NetworkAttachmentDefinition's
//! inline configuration.

use crate::node::paths::NodePaths;
use crate::platform::cni::{CniError, CniResult, ConfList, Invocation};
use crate::platform::durable;
use crate::programs::selector::choose::chosen::{self, Attachment, PodIdentity, Source};
use crate::programs::selector::requests::annotation::Extras;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// Bumped when the format changes incompatibly; records of another format are treated as unreadable.
const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub format: u32,
    pub container_id: String,
    /// This attachment's interface.
    pub ifname: String,
    /// The runtime's `CNI_IFNAME` of the ADD that made it; absent (a record without it):
    /// `ifname`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_ifname: Option<String>,
    /// Its place in that ADD, 0 for the runtime's own interface.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub position: usize,
    /// The runtime's CNI_NETNS, and the CNI_ARGS this attachment's plugins got, for GC and DEL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<PathBuf>,
    pub cni_args: String,
    pub network: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conf_path: Option<PathBuf>,
    /// The configuration exactly as its plugins got it.
    pub conf: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    #[serde(default, skip_serializing_if = "Extras::is_empty")]
    pub extras: Extras,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodIdentity>,
    /// A device network's device, as ADD gave it (its device-info file is removed with the
    /// attachment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<crate::programs::selector::devices::Device>,
    /// The chain's final result (1.1.0 JSON), once ADD has completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// On the record of the runtime's interface: the results of the pod's further networks, by
    /// interface, written with its own in one durable write once every network is attached.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub further_results: BTreeMap<String, Value>,
    /// Attached to the running pod by the node agent (`programs::selector::dynamic`), not by the runtime's
    /// ADD: its result is in this record, and the sandbox's DEL removes it with the rest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hotplugged: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Record {
    /// The record of `attachment`, at `position` of the runtime's call `runtime` (whose interface
    /// is the runtime's); `delegate` is the call as the attachment's plugins get it, `conf` the
    /// configuration they get.
    pub fn new(
        runtime: &Invocation,
        delegate: &Invocation,
        position: usize,
        attachment: &Attachment,
        conf: String,
        pod: Option<PodIdentity>,
    ) -> Self {
        Record {
            format: FORMAT,
            container_id: runtime.container_id.clone(),
            ifname: attachment.ifname.clone(),
            runtime_ifname: Some(runtime.ifname.clone()),
            position,
            netns: runtime.netns.clone(),
            cni_args: delegate.args.to_env_string(),
            network: attachment.network.clone(),
            conf_path: attachment.path.clone(),
            conf,
            source: Some(attachment.source.clone()),
            extras: attachment.extras.clone(),
            device: attachment.device.as_ref().and_then(|d| d.given.clone()),
            pod,
            result: None,
            further_results: BTreeMap::new(),
            hotplugged: false,
        }
    }

    /// The runtime's interface this attachment belongs to.
    pub fn owner(&self) -> &str {
        self.runtime_ifname.as_deref().unwrap_or(&self.ifname)
    }

    /// The recorded configuration, parsed as it was at ADD.
    pub fn conf_list(&self) -> Result<ConfList, CniError> {
        chosen::parse_config(&self.network, self.conf_path.as_deref(), &self.conf)
    }

    pub fn result(&self) -> Result<Option<CniResult>, CniError> {
        self.result.as_ref().map(|r| CniResult::from_json(r, crate::platform::cni::CniVersion::LATEST)).transpose()
    }

    pub fn set_result(&mut self, result: &CniResult) {
        self.result = Some(result.to_latest_json());
    }

    /// Keep `result` as the result of the pod's further network on `ifname`.
    pub fn set_further_result(&mut self, ifname: &str, result: &CniResult) {
        self.further_results.insert(ifname.to_string(), result.to_latest_json());
    }
}

/// What `RecordStore::of_container` finds under one container's name.
#[derive(Debug)]
pub enum Found {
    Record(Box<Record>),
    /// A file that cannot be read or parsed (logged), by the interface in its name.
    Unreadable(String),
    /// No record, but a temp file of a write that was interrupted (its process killed), by
    /// interface: `remove` clears it.
    Interrupted(String),
}

/// A record as its file holds it. JSON has no way to say a path that is not UTF-8 (a network file's
/// or the runtime's netns): such an attachment cannot be recorded, so it is refused before anything
/// is made rather than made without a record.
fn serialized(record: &Record) -> Result<Vec<u8>, CniError> {
    serde_json::to_vec_pretty(record).map_err(|e| {
        CniError::invalid_config(format!(
            "cannot record the attachment of container {} interface {}: {e}",
            record.container_id, record.ifname
        ))
    })
}

/// The records of one `dataDir`.
pub struct RecordStore {
    dir: PathBuf,
    /// The results, on tmpfs: one directory per `dataDir`, so that a GC of one never takes another's.
    results_dir: PathBuf,
    /// `<dataDir>/results`, where 0.1.0 kept them on disk: read, and swept, only.
    earlier_results_dir: PathBuf,
}

/// A completed ADD's results, as their file holds them: what `complete` adds to a record.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Results {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    further_results: BTreeMap<String, Value>,
}

impl RecordStore {
    /// The records of `data_dir`, their results where `node` keeps them (`node::paths`).
    pub fn new(data_dir: &Path, node: &NodePaths) -> Self {
        RecordStore {
            dir: data_dir.join("attachments"),
            results_dir: node.results(data_dir),
            earlier_results_dir: data_dir.join("results"),
        }
    }

    /// The records of `data_dir` as this node keeps them: their results in the node's volatile
    /// state (`/run/yh-genie`, or where `YH_GENIE_LOCK_DIR` moves it).
    pub fn of_node(data_dir: &Path) -> Self {
        Self::new(data_dir, &NodePaths::from_env())
    }

    /// `<dataDir>/attachments/<containerID>:<ifname>`. Neither part may contain `:` (the runtime's
    /// values are validated, and so are the interface names of further networks), so no two
    /// attachments share a file.
    fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(format!("{container_id}:{ifname}"))
    }

    /// `<volatile dir>/results<dataDir>/<containerID>:<ifname>`.
    fn results_path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.results_dir.join(format!("{container_id}:{ifname}"))
    }

    /// `<dataDir>/results/<containerID>:<ifname>`, as 0.1.0 kept them.
    fn earlier_results_path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.earlier_results_dir.join(format!("{container_id}:{ifname}"))
    }

    /// Keep what ADD learned since `write_all` made the record durable (the chains' results), in
    /// the record's results file (`platform::durable::write_volatile`: no wait on the disk). After a power
    /// loss the results may be gone while the record stays: DEL undoes that as an ADD that did not
    /// complete (DEL without `prevResult`), as after a crash just before this write.
    pub fn complete(&self, record: &Record) -> Result<(), CniError> {
        let path = self.results_path(&record.container_id, &record.ifname);
        let results = Results { result: record.result.clone(), further_results: record.further_results.clone() };
        let bytes = serde_json::to_vec(&results).map_err(|e| {
            CniError::invalid_config(format!(
                "cannot record the results of container {} interface {}: {e}",
                record.container_id, record.ifname
            ))
        })?;
        durable::write_volatile(&path, &bytes, 0o600)
            .map_err(|e| CniError::io(format!("cannot write attachment results {}: {e}", path.display())))
    }

    /// The record of (container, interface) with its results; `None` if there is none or it is
    /// unreadable (logged).
    pub fn read(&self, container_id: &str, ifname: &str) -> Option<Record> {
        let mut record = self.read_record(container_id, ifname)?;
        // A record written by 0.1.0 holds its results itself, or they are in its
        // results directory on disk; results written since (`complete`) are newer.
        let results = read_results(&self.results_path(container_id, ifname))
            .or_else(|| read_results(&self.earlier_results_path(container_id, ifname)));
        if let Some(results) = results {
            record.result = results.result;
            record.further_results = results.further_results;
        }
        Some(record)
    }

    /// The record file of (container, interface) alone.
    fn read_record(&self, container_id: &str, ifname: &str) -> Option<Record> {
        let path = self.path(container_id, ifname);
        match std::fs::read(&path) {
            Ok(bytes) => parse(&path, &bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!("cannot read attachment record {}: {e}; treating it as absent", path.display());
                None
            }
        }
    }

    /// Write `records` (of one container) together: each whole or absent after a crash, one fsync
    /// each and one for the directory. Results of an earlier ADD of the same interfaces (one never
    /// DELeted) go first: a record is written without results, and must not be read back with
    /// another ADD's. A power loss cannot bring them back beside the new records: those on tmpfs
    /// are gone with it, and the removal of one 0.1.0 kept on disk is made durable
    /// before the records are written.
    pub fn write_all(&self, records: &[&Record]) -> Result<(), CniError> {
        // One unlink each, no listing for killed writers' temp files: this is every ADD's path,
        // and the results directory holds a file per pod of the node (DEL and GC sweep them).
        for r in records {
            let path = self.results_path(&r.container_id, &r.ifname);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(CniError::io(format!("cannot remove attachment results {}: {e}", path.display())));
                }
                _ => {}
            }
        }
        // Usually no such directory (one look); after an upgrade, the directory is fsync'd only
        // when a file was there.
        let earlier: Vec<PathBuf> =
            records.iter().map(|r| self.earlier_results_path(&r.container_id, &r.ifname)).collect();
        durable::remove_all_durably(&earlier).map_err(|e| {
            CniError::io(format!("cannot remove attachment results in {}: {e}", self.earlier_results_dir.display()))
        })?;
        let files = records
            .iter()
            .map(|r| Ok((self.path(&r.container_id, &r.ifname), serialized(r)?)))
            .collect::<Result<Vec<(PathBuf, Vec<u8>)>, CniError>>()?;
        durable::write_atomic_all(&files, 0o600)
            .map_err(|e| CniError::io(format!("cannot write attachment records in {}: {e}", self.dir.display())))
    }

    /// Remove the records of these interfaces of a container (and temp files of their interrupted
    /// writes) together: one fsync of the directory.
    pub fn remove_all(&self, container_id: &str, ifnames: &[String]) -> Result<(), CniError> {
        // The results first: killed between the two, the records stay and the runtime's next DEL
        // takes them (each network's DEL again, without `prevResult`); the other way round would
        // leave results that no DEL finds.
        self.remove_results(container_id, ifnames)?;
        let paths: Vec<PathBuf> = ifnames.iter().map(|ifname| self.path(container_id, ifname)).collect();
        durable::remove_all_durably(&paths)
            .map_err(|e| CniError::io(format!("cannot remove attachment records in {}: {e}", self.dir.display())))
    }

    /// Remove the results of these interfaces of a container, and the temp files of their killed
    /// writers, in both places; none is success. Not made durable: results on tmpfs cannot outlive
    /// a power loss, and results 0.1.0 left on disk that come back after one are
    /// results whose record is gone, which GC sweeps.
    fn remove_results(&self, container_id: &str, ifnames: &[String]) -> Result<(), CniError> {
        for dir in [&self.results_dir, &self.earlier_results_dir] {
            let paths: Vec<PathBuf> =
                ifnames.iter().map(|ifname| dir.join(format!("{container_id}:{ifname}"))).collect();
            durable::remove_all_volatile(&paths)
                .map_err(|e| CniError::io(format!("cannot remove attachment results in {}: {e}", dir.display())))?;
        }
        Ok(())
    }

    /// Every record file of `container_id`, and every interface of it that has only the temp file
    /// of an interrupted write, in no order. A missing directory is none.
    pub fn of_container(&self, container_id: &str) -> Result<Vec<Found>, CniError> {
        let prefix = format!("{container_id}:");
        let temp_prefix = format!(".{prefix}");
        let names = self.names()?;
        let mut found = Vec::new();
        for name in &names {
            if let Some(ifname) = name.strip_prefix(&prefix) {
                found.push(match self.read(container_id, ifname) {
                    Some(record) => Found::Record(Box::new(record)),
                    None => Found::Unreadable(ifname.to_string()),
                });
            } else if let Some((ifname, _)) = name.strip_prefix(&temp_prefix).and_then(|rest| rest.rsplit_once(".tmp-"))
                && !names.contains(&format!("{prefix}{ifname}"))
                && !found.iter().any(|f| matches!(f, Found::Interrupted(i) if i == ifname))
            {
                found.push(Found::Interrupted(ifname.to_string()));
            }
        }
        Ok(found)
    }

    /// Remove the temp files of every record and results write whose process died before its
    /// rename (GC: a killed ADD's temp file for a container the runtime has forgotten has no DEL to
    /// take it), and results whose record is gone (a power loss may bring back results removed
    /// after their record). How many files went.
    pub fn remove_abandoned(&self) -> Result<usize, CniError> {
        let mut removed = durable::remove_abandoned_temps(&self.dir)
            .map(|removed| removed.len())
            .map_err(|e| CniError::io(format!("cannot clear abandoned temp files in {}: {e}", self.dir.display())))?;
        for dir in [&self.results_dir, &self.earlier_results_dir] {
            removed += durable::remove_abandoned_temps(dir)
                .map(|removed| removed.len())
                .map_err(|e| CniError::io(format!("cannot clear abandoned temp files in {}: {e}", dir.display())))?;
            let orphans = names_in(dir)?
                .into_iter()
                .filter(|name| !name.starts_with('.'))
                .filter(|name| name.split_once(':').is_some_and(|(c, i)| !self.path(c, i).exists()));
            for name in orphans.collect::<Vec<_>>() {
                let (c, i) = name.split_once(':').expect("filtered on ':'");
                self.remove_results(c, &[i.to_string()])?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Every readable record (for GC).
    pub fn list(&self) -> Result<Vec<Record>, CniError> {
        let names = self.names()?;
        let records_only = names.iter().filter(|name| !name.starts_with('.'));
        let mut records: Vec<Record> =
            records_only.filter_map(|name| name.split_once(':')).filter_map(|(c, i)| self.read(c, i)).collect();
        records.sort_by(|a, b| (&a.container_id, &a.ifname).cmp(&(&b.container_id, &b.ifname)));
        Ok(records)
    }

    /// The names in the directory: record files, and the temp files of `write_atomic` (which start
    /// with a dot).
    fn names(&self) -> Result<Vec<String>, CniError> {
        names_in(&self.dir)
    }
}

/// The names in `dir`; a missing directory has none.
fn names_in(dir: &Path) -> Result<Vec<String>, CniError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CniError::io(format!("cannot list {}: {e}", dir.display()))),
    };
    Ok(entries.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
}

/// The results in `path`; none if absent, or unreadable (logged: a power loss may leave the file
/// empty or torn, and the record then reads as an ADD that did not complete).
fn read_results(path: &Path) -> Option<Results> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("cannot read attachment results {}: {e}; taking the ADD as not completed", path.display());
            return None;
        }
    };
    serde_json::from_slice(&bytes)
        .inspect_err(|e| {
            tracing::warn!("attachment results {} do not parse ({e}); taking the ADD as not completed", path.display())
        })
        .ok()
}

fn parse(path: &Path, bytes: &[u8]) -> Option<Record> {
    match serde_json::from_slice::<Record>(bytes) {
        Ok(r) if r.format == FORMAT => Some(r),
        Ok(r) => {
            tracing::warn!("attachment record {} has format {}, not {FORMAT}; ignoring it", path.display(), r.format);
            None
        }
        Err(e) => {
            tracing::warn!("attachment record {} does not parse ({e}); treating it as absent", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::CniArgs;

    fn inv(cid: &str, ifname: &str) -> Invocation {
        let mut inv =
            crate::platform::cni::testing::invocation(crate::platform::cni::Command::Add, Path::new("/nonexistent"));
        inv.container_id = cid.into();
        inv.ifname = ifname.into();
        inv.args = CniArgs::parse("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p").unwrap();
        inv
    }

    /// The store of a node whose data dir is `d` and whose volatile directory is `d/run`.
    fn store_in(d: &Path) -> RecordStore {
        RecordStore::new(d, &NodePaths::with_lock_dir(Some(d.join("run/attachments"))))
    }

    /// Where `store_in(d)` keeps results: `<volatile dir>/results<dataDir>`.
    fn results_dir(d: &Path) -> PathBuf {
        d.join("run/results").join(d.strip_prefix("/").unwrap())
    }

    const CONF: &str = r#"{"cniVersion":"1.0.0","name":"blue","plugins":[{"type":"bridge"}]}"#;

    fn attachment(ifname: &str) -> Attachment {
        Attachment {
            ifname: ifname.into(),
            network: "blue".into(),
            path: Some("/n/blue/b.conflist".into()),
            config: CONF.into(),
            source: Source::Value { element: "blue".into(), form: "network name".into() },
            extras: Extras::default(),
            device: None,
        }
    }

    fn record(cid: &str, runtime_ifname: &str, position: usize, ifname: &str) -> Record {
        let runtime = inv(cid, runtime_ifname);
        Record::new(&runtime, &runtime, position, &attachment(ifname), CONF.into(), None)
    }

    #[test]
    fn an_attachment_whose_path_json_cannot_hold_is_refused_unwritten() {
        use std::os::unix::ffi::OsStrExt;
        let d = tempfile::tempdir().unwrap();
        let store = store_in(d.path());
        let mut r = record("c1", "eth0", 0, "eth0");
        r.conf_path = Some(PathBuf::from(std::ffi::OsStr::from_bytes(b"/etc/cni/net.d/a/\xff.conf")));
        let e = store.write_all(&[&r]).unwrap_err();
        assert!(e.code == 7 && e.msg.contains("container c1 interface eth0"), "{e}");
        assert!(store.read("c1", "eth0").is_none());
    }

    fn result(address: &str) -> CniResult {
        CniResult::from_json(
            &serde_json::json!({"ips": [{"address": address}]}),
            crate::platform::cni::CniVersion::LATEST,
        )
        .unwrap()
    }

    /// The records of container c1's eth0 after an ADD that completed, with address 10.0.0.2.
    fn completed_add() -> (tempfile::TempDir, RecordStore) {
        let d = tempfile::tempdir().unwrap();
        let store = store_in(d.path());
        let mut r = record("c1", "eth0", 0, "eth0");
        store.write_all(&[&r]).unwrap();
        r.set_result(&result("10.0.0.2/24"));
        store.complete(&r).unwrap();
        (d, store)
    }

    /// A store holding container c1's eth0 and net1, their results written once the plugins ran.
    fn two_records_completed(d: &Path) -> RecordStore {
        let store = store_in(d);
        let mut first = record("c1", "eth0", 0, "eth0");
        let further = record("c1", "eth0", 1, "net1");
        store.write_all(&[&first, &further]).unwrap();
        first.set_result(&result("10.0.0.2/24"));
        first.set_further_result("net1", &result("10.1.0.2/24"));
        store.complete(&first).unwrap();
        store
    }

    #[test]
    fn results_are_read_back_with_their_record() {
        let d = tempfile::tempdir().unwrap();
        let store = two_records_completed(d.path());
        let record_file = std::fs::read_to_string(d.path().join("attachments/c1:eth0")).unwrap();
        assert!(!record_file.contains("10.0.0.2"), "the durable record stays as written before the plugins");
        let mut records: Vec<Record> = store
            .of_container("c1")
            .unwrap()
            .into_iter()
            .map(|f| match f {
                Found::Record(r) => *r,
                other => panic!("{other:?}"),
            })
            .collect();
        super::super::networks::in_order(&mut records, "eth0");
        assert_eq!(records[0].result().unwrap(), Some(result("10.0.0.2/24")));
        assert_eq!(records[1].result().unwrap(), Some(result("10.1.0.2/24")));
        assert_eq!(store.list().unwrap().len(), 2, "the results are no record of their own");
    }

    #[test]
    fn results_are_removed_with_their_record() {
        let d = tempfile::tempdir().unwrap();
        let store = two_records_completed(d.path());
        store.remove_all("c1", &["eth0".into(), "net1".into()]).unwrap();
        assert!(store.of_container("c1").unwrap().is_empty());
        assert_eq!(std::fs::read_dir(results_dir(d.path())).unwrap().count(), 0);
    }

    /// The results are kept on the node's volatile directory (tmpfs), one directory per data dir:
    /// nothing of them is on the data dir's disk.
    #[test]
    fn results_are_kept_in_the_volatile_directory_of_their_data_dir() {
        let (d, store) = completed_add();
        let kept: Value =
            serde_json::from_slice(&std::fs::read(results_dir(d.path()).join("c1:eth0")).unwrap()).unwrap();
        assert_eq!(kept["result"]["ips"][0]["address"], "10.0.0.2/24");
        assert!(!d.path().join("results").exists(), "nothing under the data dir but the records");
        let other_data_dir = d.path().join("other");
        let other =
            RecordStore::new(&other_data_dir, &NodePaths::with_lock_dir(Some(d.path().join("run/attachments"))));
        other.write_all(&[&record("c9", "eth0", 0, "eth0")]).unwrap();
        assert_eq!(other.remove_abandoned().unwrap(), 0, "another data dir's GC leaves these results alone");
        assert!(store.read("c1", "eth0").unwrap().result.is_some());
    }

    /// A pod ADDed by 0.1.0 has its results on disk, `<dataDir>/results/`: read
    /// with its record, gone with it, never read beside a new ADD's record, swept once orphaned.
    #[test]
    fn results_the_earlier_release_kept_on_disk_live_as_long_as_their_record() {
        let d = tempfile::tempdir().unwrap();
        let store = store_in(d.path());
        let earlier = d.path().join("results");
        std::fs::create_dir_all(&earlier).unwrap();
        let on_disk =
            |address: &str| format!(r#"{{"result": {{"cniVersion": "1.1.0", "ips": [{{"address": "{address}"}}]}}}}"#);
        for cid in ["c1", "c2", "c3"] {
            store.write_all(&[&record(cid, "eth0", 0, "eth0")]).unwrap();
            std::fs::write(earlier.join(format!("{cid}:eth0")), on_disk("10.0.0.7/24")).unwrap();
        }
        std::fs::write(earlier.join("gone:eth0"), on_disk("10.0.0.9/24")).unwrap();

        assert_eq!(store.read("c1", "eth0").unwrap().result().unwrap(), Some(result("10.0.0.7/24")));
        store.remove_all("c1", &["eth0".into()]).unwrap();
        assert!(!earlier.join("c1:eth0").exists());
        store.write_all(&[&record("c2", "eth0", 0, "eth0")]).unwrap();
        assert_eq!(store.read("c2", "eth0").unwrap().result().unwrap(), None, "a new ADD's record");
        assert!(!earlier.join("c2:eth0").exists());
        assert_eq!(store.remove_abandoned().unwrap(), 1);
        let left: Vec<_> =
            std::fs::read_dir(&earlier).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(left, ["c3:eth0"]);
    }

    /// After a power loss the results file may be empty or torn: the record reads as an ADD that
    /// did not complete, which DEL undoes without `prevResult`.
    #[test]
    fn torn_results_read_as_an_add_that_did_not_complete() {
        let (d, store) = completed_add();
        for torn in [&b""[..], b"{\"result\": {\"ips\""] {
            std::fs::write(results_dir(d.path()).join("c1:eth0"), torn).unwrap();
            let back = store.read("c1", "eth0").expect("the record itself is intact");
            assert_eq!(back.result().unwrap(), None);
        }
    }

    /// A runtime that ADDs an interface again without DELeting it: the new record must not be read
    /// back with the earlier ADD's results, even if that ADD is killed before its own.
    #[test]
    fn a_new_record_does_not_take_the_results_of_an_earlier_add() {
        let (_dir, store) = completed_add();
        store.write_all(&[&record("c1", "eth0", 0, "eth0")]).unwrap();
        assert_eq!(store.read("c1", "eth0").unwrap().result().unwrap(), None);
    }

    /// Results whose record is gone (removed, and the removal of the results lost to a power
    /// loss) and temp files of killed results writers are swept by GC; live ones stay.
    #[test]
    fn gc_sweeps_results_without_a_record() {
        let (d, store) = completed_add();
        std::fs::write(results_dir(d.path()).join("gone:eth0"), b"{}").unwrap();
        std::fs::write(results_dir(d.path()).join(".gone:eth1.tmp-999999999-000000000001"), b"{").unwrap();
        assert_eq!(store.remove_abandoned().unwrap(), 2);
        let left: Vec<_> = std::fs::read_dir(results_dir(d.path()))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["c1:eth0"]);
        assert!(store.read("c1", "eth0").unwrap().result.is_some());
    }

    #[test]
    fn a_record_round_trips_with_its_result_keeping_the_exact_conf_bytes() {
        let d = tempfile::tempdir().unwrap();
        let store = store_in(d.path());
        let pod = PodIdentity { namespace: "ns".into(), name: "p".into(), uid: Some("u".into()) };
        let runtime = inv("c1", "eth0");
        let mut r = Record::new(&runtime, &runtime, 0, &attachment("eth0"), CONF.into(), Some(pod));
        store.write_all(&[&r]).unwrap();
        assert_eq!(store.read("c1", "eth0").unwrap(), r);
        let result = CniResult::from_json(
            &serde_json::json!({"ips": [{"address": "10.0.0.2/24"}]}),
            crate::platform::cni::CniVersion::LATEST,
        )
        .unwrap();
        r.set_result(&result);
        store.write_all(&[&r]).unwrap();
        let back = store.read("c1", "eth0").unwrap();
        assert_eq!(back.conf, CONF);
        assert_eq!(back.result().unwrap(), Some(result));
        assert_eq!(back.conf_list().unwrap().name, "blue");
        assert_eq!(back.cni_args, "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p");
        assert_eq!((back.owner(), back.position), ("eth0", 0));
    }

    #[test]
    fn a_record_file_is_readable_by_its_owner_only() {
        let d = tempfile::tempdir().unwrap();
        let store = store_in(d.path());
        let pod = PodIdentity { namespace: "ns".into(), name: "p".into(), uid: Some("u".into()) };
        let runtime = inv("c1", "eth0");
        let r = Record::new(&runtime, &runtime, 0, &attachment("eth0"), CONF.into(), Some(pod));
        store.write_all(&[&r]).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(d.path().join("attachments/c1:eth0")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    /// A record exactly as the release before several networks wrote it.
    #[test]
    fn a_record_of_the_earlier_release_reads_as_the_only_attachment_of_its_interface() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("attachments")).unwrap();
        std::fs::write(
            d.path().join("attachments/c1:eth0"),
            r#"{
  "format": 1,
  "containerId": "c1",
  "ifname": "eth0",
  "netns": "/run/netns/p",
  "cniArgs": "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p",
  "network": "blue",
  "confPath": "/n/blue/b.conflist",
  "conf": "{\"cniVersion\":\"1.0.0\",\"name\":\"blue\",\"plugins\":[{\"type\":\"bridge\"}]}",
  "pod": {"namespace": "ns", "name": "p", "uid": "u"},
  "result": {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.2/24"}]}
}"#,
        )
        .unwrap();
        let store = store_in(d.path());
        let r = store.read("c1", "eth0").unwrap();
        assert_eq!((r.owner(), r.position, r.source.as_ref()), ("eth0", 0, None));
        assert_eq!(r.conf_list().unwrap().plugin_type(0), "bridge");
        assert!(r.result().unwrap().is_some());
        assert!(matches!(&store.of_container("c1").unwrap()[..], [Found::Record(_)]));
    }

    /// A store with records of containers `a_b` (interface c) and `a` (b_c, eth1 and eth1's net1):
    /// names that would meet if joined by an underscore.
    fn records_with_underscores(d: &Path) -> RecordStore {
        let store = store_in(d);
        for (cid, ifname) in [("a_b", "c"), ("a", "b_c"), ("a", "eth1")] {
            store.write_all(&[&record(cid, ifname, 0, ifname)]).unwrap();
        }
        store.write_all(&[&record("a", "eth1", 1, "net1")]).unwrap();
        store
    }

    #[test]
    fn records_are_keyed_unambiguously_by_container_with_interface() {
        let d = tempfile::tempdir().unwrap();
        let store = records_with_underscores(d.path());
        let all: Vec<_> = store.list().unwrap().into_iter().map(|r| (r.container_id, r.ifname)).collect();
        assert_eq!(all.len(), 4);
        assert_eq!(store.of_container("a_b").unwrap().len(), 1, "a_b is not a");
        store.remove_all("a", &["b_c".into()]).unwrap();
        store.remove_all("a", &["b_c".into()]).unwrap();
        assert!(store.read("a", "b_c").is_none());
        assert!(store.read("a_b", "c").is_some());
    }

    #[test]
    fn a_containers_records_are_found_by_its_id() {
        let d = tempfile::tempdir().unwrap();
        let store = records_with_underscores(d.path());
        let mut of_a: Vec<_> = store
            .of_container("a")
            .unwrap()
            .into_iter()
            .map(|f| match f {
                Found::Record(r) => (r.ifname.clone(), r.owner().to_string(), r.position),
                other => panic!("{other:?}"),
            })
            .collect();
        of_a.sort();
        assert_eq!(
            of_a,
            [("b_c".into(), "b_c".into(), 0), ("eth1".into(), "eth1".into(), 0), ("net1".into(), "eth1".into(), 1)]
        );
    }

    #[test]
    fn gc_sweeps_the_temp_files_of_killed_writers_of_any_record() {
        let d = tempfile::tempdir().unwrap();
        let store = store_in(d.path());
        store.write_all(&[&record("c1", "eth0", 0, "eth0")]).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        let killed = d.path().join(format!("attachments/.gone:eth0.tmp-{}-0123456789ab", child.id()));
        let live = d.path().join(format!("attachments/.c2:eth0.tmp-{}-0123456789ab", std::process::id()));
        std::fs::write(&killed, "{").unwrap();
        std::fs::write(&live, "{").unwrap();
        assert_eq!(store.remove_abandoned().unwrap(), 1);
        assert!(!killed.exists() && live.exists());
        assert!(store.read("c1", "eth0").is_some());
    }

    #[test]
    fn unparsable_records_count_as_absent() {
        let d = tempfile::tempdir().unwrap();
        let store = store_in(d.path());
        std::fs::create_dir_all(d.path().join("attachments")).unwrap();
        std::fs::write(d.path().join("attachments/c1:eth0"), "{torn").unwrap();
        std::fs::write(d.path().join("attachments/c2:eth0"), r#"{"format": 99}"#).unwrap();
        assert!(store.read("c1", "eth0").is_none());
        assert!(store.read("c2", "eth0").is_none());
        assert!(store.list().unwrap().is_empty());
        assert!(matches!(&store.of_container("c1").unwrap()[..], [Found::Unreadable(i)] if i == "eth0"));
        std::fs::write(d.path().join("attachments/.c3:net1.tmp-1-abc"), "{").unwrap();
        std::fs::write(d.path().join("attachments/.c1:eth0.tmp-1-abc"), "{").unwrap();
        assert!(matches!(&store.of_container("c3").unwrap()[..], [Found::Interrupted(i)] if i == "net1"));
        assert!(matches!(&store.of_container("c1").unwrap()[..], [Found::Unreadable(_)]), "a record is there");
        assert!(store_in(&d.path().join("nothing")).list().unwrap().is_empty());
    }
}
