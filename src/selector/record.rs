//! Attachment records: what ADD chose for one (container, interface), kept under `dataDir` so that
//! DEL, CHECK and GC never need the API server, nor the network's configuration file still being
//! there or unchanged.
//!
//! A record is written (atomically, durably) before any plugin runs, and again with the result once
//! the chain has succeeded; DEL removes it after the chain's DEL. A record that cannot be read or
//! parsed is logged and treated as absent: DEL then falls back to asking the API server.

use super::network;
use crate::cni::{CniError, CniResult, ConfList, Invocation};
use crate::fsutil;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io;
use std::path::{Path, PathBuf};

/// Bumped when the format changes incompatibly; records of another format are treated as unreadable.
const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub format: u32,
    pub container_id: String,
    pub ifname: String,
    /// The runtime's CNI_NETNS and CNI_ARGS, for GC, which has no runtime call to take them from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<PathBuf>,
    pub cni_args: String,
    pub network: String,
    pub conf_path: PathBuf,
    /// The configuration exactly as loaded at ADD.
    pub conf: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodIdentity>,
    /// The chain's final result (1.1.0 JSON), once ADD has completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodIdentity {
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl Record {
    pub fn new(inv: &Invocation, network: &str, conf_path: &Path, conf: String, pod: Option<PodIdentity>) -> Self {
        Record {
            format: FORMAT,
            container_id: inv.container_id.clone(),
            ifname: inv.ifname.clone(),
            netns: inv.netns.clone(),
            cni_args: inv.args.to_env_string(),
            network: network.to_string(),
            conf_path: conf_path.to_path_buf(),
            conf,
            pod,
            result: None,
        }
    }

    /// The recorded configuration, parsed as it was at ADD.
    pub fn conf_list(&self) -> Result<ConfList, CniError> {
        network::parse_conf(self.conf.as_bytes(), &self.conf_path)
    }

    pub fn result(&self) -> Result<Option<CniResult>, CniError> {
        self.result.as_ref().map(|r| CniResult::from_json(r, crate::cni::CniVersion::LATEST)).transpose()
    }

    pub fn set_result(&mut self, result: &CniResult) {
        self.result = Some(result.to_latest_json());
    }
}

/// The records of one `dataDir`.
pub struct RecordStore {
    dir: PathBuf,
}

impl RecordStore {
    pub fn new(data_dir: &Path) -> Self {
        RecordStore { dir: data_dir.join("attachments") }
    }

    /// `<dataDir>/attachments/<containerID>:<ifname>`. Neither part may contain `:` (the runtime's
    /// values are validated), so no two attachments share a file.
    fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(format!("{container_id}:{ifname}"))
    }

    pub fn write(&self, record: &Record) -> Result<(), CniError> {
        let path = self.path(&record.container_id, &record.ifname);
        let bytes = serde_json::to_vec_pretty(record).expect("a record always serializes");
        fsutil::write_atomic(&path, &bytes, 0o600)
            .map_err(|e| CniError::io(format!("cannot write attachment record {}: {e}", path.display())))
    }

    /// The record of (container, interface); `None` if there is none or it is unreadable (logged).
    pub fn read(&self, container_id: &str, ifname: &str) -> Option<Record> {
        let path = self.path(container_id, ifname);
        match std::fs::read(&path) {
            Ok(bytes) => parse(&path, &bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                super::warn(format!("cannot read attachment record {}: {e}; treating it as absent", path.display()));
                None
            }
        }
    }

    pub fn remove(&self, container_id: &str, ifname: &str) -> Result<(), CniError> {
        let path = self.path(container_id, ifname);
        fsutil::remove_durably(&path)
            .map_err(|e| CniError::io(format!("cannot remove attachment record {}: {e}", path.display())))
    }

    /// Every readable record (for GC). A missing directory is no records.
    pub fn list(&self) -> Result<Vec<Record>, CniError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(CniError::io(format!("cannot list {}: {e}", self.dir.display()))),
        };
        let mut records = Vec::new();
        for entry in entries.filter_map(Result::ok) {
            // Temp files of write_atomic start with a dot.
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            if let Some(record) = std::fs::read(&path).ok().and_then(|bytes| parse(&path, &bytes)) {
                records.push(record);
            }
        }
        records.sort_by(|a, b| (&a.container_id, &a.ifname).cmp(&(&b.container_id, &b.ifname)));
        Ok(records)
    }
}

fn parse(path: &Path, bytes: &[u8]) -> Option<Record> {
    match serde_json::from_slice::<Record>(bytes) {
        Ok(r) if r.format == FORMAT => Some(r),
        Ok(r) => {
            super::warn(format!(
                "attachment record {} has format {}, not {FORMAT}; ignoring it",
                path.display(),
                r.format
            ));
            None
        }
        Err(e) => {
            super::warn(format!("attachment record {} does not parse ({e}); treating it as absent", path.display()));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::CniArgs;

    fn inv(cid: &str, ifname: &str) -> Invocation {
        let mut inv = crate::cni::testing::invocation(crate::cni::Command::Add, Path::new("/nonexistent"));
        inv.container_id = cid.into();
        inv.ifname = ifname.into();
        inv.args = CniArgs::parse("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p").unwrap();
        inv
    }

    const CONF: &str = r#"{"cniVersion":"1.0.0","name":"blue","plugins":[{"type":"bridge"}]}"#;

    #[test]
    fn round_trip_with_result_and_exact_conf_bytes() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        let pod = PodIdentity { namespace: "ns".into(), name: "p".into(), uid: Some("u".into()) };
        let mut r = Record::new(&inv("c1", "eth0"), "blue", Path::new("/n/blue/b.conflist"), CONF.into(), Some(pod));
        store.write(&r).unwrap();
        assert_eq!(store.read("c1", "eth0").unwrap(), r);
        let result = CniResult::from_json(
            &serde_json::json!({"ips": [{"address": "10.0.0.2/24"}]}),
            crate::cni::CniVersion::LATEST,
        )
        .unwrap();
        r.set_result(&result);
        store.write(&r).unwrap();
        let back = store.read("c1", "eth0").unwrap();
        assert_eq!(back.conf, CONF);
        assert_eq!(back.result().unwrap(), Some(result));
        assert_eq!(back.conf_list().unwrap().name, "blue");
        assert_eq!(back.cni_args, "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(d.path().join("attachments/c1:eth0")).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn keyed_by_container_and_interface() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        for (cid, ifname) in [("a_b", "c"), ("a", "b_c"), ("a", "eth1")] {
            store.write(&Record::new(&inv(cid, ifname), "n", Path::new("/x.conf"), CONF.into(), None)).unwrap();
        }
        let all: Vec<_> = store.list().unwrap().into_iter().map(|r| (r.container_id, r.ifname)).collect();
        assert_eq!(all.len(), 3);
        store.remove("a", "b_c").unwrap();
        store.remove("a", "b_c").unwrap();
        assert!(store.read("a", "b_c").is_none());
        assert!(store.read("a_b", "c").is_some());
    }

    #[test]
    fn unparsable_records_count_as_absent() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::new(d.path());
        std::fs::create_dir_all(d.path().join("attachments")).unwrap();
        std::fs::write(d.path().join("attachments/c1:eth0"), "{torn").unwrap();
        std::fs::write(d.path().join("attachments/c2:eth0"), r#"{"format": 99}"#).unwrap();
        assert!(store.read("c1", "eth0").is_none());
        assert!(store.read("c2", "eth0").is_none());
        assert!(store.list().unwrap().is_empty());
        assert!(RecordStore::new(&d.path().join("nothing")).list().unwrap().is_empty());
    }
}
