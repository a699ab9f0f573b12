//! The record of what one ADD changed, `<data_dir>/<container id>-<ifname>.json`. ADD writes the plan
//! before it touches anything and rewrites it with what it really changed afterwards, so whatever
//! ADD made is always named in a record: DEL undoes exactly that, and needs neither the configuration
//! (which may have become invalid) nor the pod (whose netns may be gone).

use super::model::Change;
use crate::platform::cni::CniError;
use crate::platform::durable;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub plugin: String,
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    /// In the order they were made; undone in reverse.
    pub changes: Vec<Change>,
}

/// Where the record of (container, interface) lives. The runtime's container id and interface name
/// are validated (`platform::cni::env`) to characters that are safe in a file name.
pub fn path(data_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    data_dir.join(format!("{container_id}-{ifname}.json"))
}

impl Record {
    pub fn save(&self, data_dir: &Path) -> Result<(), CniError> {
        let p = path(data_dir, &self.container_id, &self.ifname);
        let bytes = serde_json::to_vec_pretty(self).expect("a record always serializes");
        durable::write_atomic(&p, &bytes, 0o600).map_err(|e| CniError::io(format!("cannot write {}: {e}", p.display())))
    }

    /// The record, if there is one. A record that cannot be read as one is an I/O error (code 5)
    /// naming the file, so that an operator can look at it.
    pub fn load(data_dir: &Path, container_id: &str, ifname: &str) -> Result<Option<Self>, CniError> {
        let p = path(data_dir, container_id, ifname);
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CniError::io(format!("cannot read {}: {e}", p.display()))),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| CniError::io(format!("{} is not a record of this plugin: {e}", p.display())))
    }

    pub fn remove(data_dir: &Path, container_id: &str, ifname: &str) -> Result<(), CniError> {
        let p = path(data_dir, container_id, ifname);
        durable::remove_durably(&p).map_err(|e| CniError::io(format!("cannot remove {}: {e}", p.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs::plugins::via_node::model::{Op, RouteSpec};

    #[test]
    fn save_load_remove() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("veth");
        assert_eq!(Record::load(&dir, "c1", "eth0").unwrap(), None);
        let r = Record {
            plugin: "veth".into(),
            container_id: "c1".into(),
            ifname: "eth0".into(),
            netns: "/run/netns/p".into(),
            changes: vec![Change::pod(Op::AddRoute(RouteSpec::on_link("10.0.0.1/32".parse().unwrap(), "veth0", 254)))],
        };
        r.save(&dir).unwrap();
        assert_eq!(Record::load(&dir, "c1", "eth0").unwrap(), Some(r));
        Record::remove(&dir, "c1", "eth0").unwrap();
        Record::remove(&dir, "c1", "eth0").unwrap();
        assert_eq!(Record::load(&dir, "c1", "eth0").unwrap(), None);
        std::fs::write(path(&dir, "c2", "eth0"), b"{not json").unwrap();
        let e = Record::load(&dir, "c2", "eth0").unwrap_err();
        assert!(e.code == 5 && e.msg.contains("c2-eth0.json"), "{e}");
    }
}
