//! The node's allocations on disk: one file per owner and pool, written durably (fsync'd, then
//! renamed, then the directory fsync'd) before the plugin hears its addresses, removed durably on
//! release. At start the agent reads them all back (`read_all`) before it answers: what they hold is
//! what the node's pods hold, and the blocks they name are the node's.
//!
//! `<dir>/<pool>/<hex of uid, container id and ifname>.json`, holding the pool, the owner (with
//! the pod's namespace and name, for whoever reads it) and its addresses with their blocks.

use crate::node::agent_socket::addresses::{AddressOwner, Allocated};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub pool: String,
    pub owner: AddressOwner,
    pub addresses: Vec<Allocated>,
}

pub struct Records {
    dir: PathBuf,
}

impl Records {
    pub fn new(dir: &Path) -> Self {
        Records { dir: dir.to_path_buf() }
    }

    fn path(&self, pool: &str, owner: &AddressOwner) -> PathBuf {
        let key = format!("{}\n{}\n{}", owner.uid, owner.container_id, owner.ifname);
        let name: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        self.dir.join(pool).join(format!("{name}.json"))
    }

    pub fn write(&self, record: &Record) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        crate::platform::durable::write_atomic(&self.path(&record.pool, &record.owner), &bytes, 0o600)
    }

    pub fn remove(&self, pool: &str, owner: &AddressOwner) -> io::Result<()> {
        match crate::platform::durable::remove_durably(&self.path(pool, owner)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Remove what writes cut short left: a killed agent's temp files, written and never renamed.
    /// At start only, before the agent answers: it is the records' one writer and writes nothing
    /// then. None took effect, and `read_all` never reads them: a new record's addresses were never
    /// heard by the plugin (it hears them after the rename), a record written again is still as it
    /// was. Left, they would outlive their pods. The files removed.
    pub fn remove_unfinished_writes(&self) -> io::Result<Vec<PathBuf>> {
        let pools = match std::fs::read_dir(&self.dir) {
            Ok(pools) => pools,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut removed = Vec::new();
        for pool in pools {
            let pool = pool?;
            if pool.file_type()?.is_dir() {
                let dir = pool.path();
                removed
                    .extend(crate::platform::durable::remove_every_temp(&dir)?.into_iter().map(|name| dir.join(name)));
            }
        }
        Ok(removed)
    }

    /// Every record, and what could not be read (a file that does not parse is reported, never
    /// taken as free addresses' proof: its addresses stay unknown to this life of the agent).
    pub fn read_all(&self) -> io::Result<(Vec<Record>, Vec<String>)> {
        let (mut records, mut problems) = (Vec::new(), Vec::new());
        let pools = match std::fs::read_dir(&self.dir) {
            Ok(pools) => pools,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((records, problems)),
            Err(e) => return Err(e),
        };
        for pool in pools {
            let pool = pool?;
            if !pool.file_type()?.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(pool.path())? {
                let path = file?.path();
                if path.extension().is_none_or(|e| e != "json") {
                    continue;
                }
                match std::fs::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|b| serde_json::from_slice::<Record>(&b).map_err(|e| e.to_string()))
                {
                    Ok(record) => records.push(record),
                    Err(e) => problems.push(format!("{}: {e}", path.display())),
                }
            }
        }
        Ok((records, problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_back_and_removed() {
        let d = tempfile::tempdir().unwrap();
        let records = Records::new(d.path());
        let owner = AddressOwner {
            uid: "u1".into(),
            container_id: "c1".into(),
            ifname: "net1".into(),
            pod: "default/p".into(),
        };
        let record = Record {
            pool: "lan".into(),
            owner: owner.clone(),
            addresses: vec![Allocated {
                address: "10.80.0.2".parse().unwrap(),
                block: "10.80.0.0/28".parse().unwrap(),
                fixed: false,
                shared: false,
            }],
        };
        records.write(&record).unwrap();
        std::fs::write(d.path().join("lan").join("torn.json"), b"{\"pool\"").unwrap();
        let (read, problems) = records.read_all().unwrap();
        assert_eq!(read, [record]);
        assert!(problems[0].contains("torn.json"), "{problems:?}");
        records.remove("lan", &owner).unwrap();
        records.remove("lan", &owner).unwrap();
        assert!(records.read_all().unwrap().0.is_empty());
    }

    #[test]
    fn a_killed_agents_unfinished_write_is_removed_at_start_and_never_read() {
        let d = tempfile::tempdir().unwrap();
        let records = Records::new(d.path());
        let owner = |n: u32| AddressOwner {
            uid: format!("u{n}"),
            container_id: format!("c{n}"),
            ifname: "net1".into(),
            pod: format!("default/p{n}"),
        };
        let record = |n: u32| Record {
            pool: "lan".into(),
            owner: owner(n),
            addresses: vec![Allocated {
                address: format!("10.80.0.{n}").parse().unwrap(),
                block: "10.80.0.0/28".parse().unwrap(),
                fixed: false,
                shared: false,
            }],
        };
        records.write(&record(2)).unwrap();
        // What write_atomic leaves when its process is killed between the fsync and the rename: the
        // whole record under a temp name whose pid may be the restarted agent's own.
        let record_path = records.path("lan", &owner(3));
        let name = record_path.file_name().unwrap().to_string_lossy().into_owned();
        let unfinished = d.path().join("lan").join(format!(".{name}.tmp-{}-0123456789ab", std::process::id()));
        std::fs::write(&unfinished, serde_json::to_vec(&record(3)).unwrap()).unwrap();
        assert_eq!(records.read_all().unwrap(), (vec![record(2)], vec![]), "a temp file is never read as a record");
        assert_eq!(records.remove_unfinished_writes().unwrap(), std::slice::from_ref(&unfinished));
        assert!(!unfinished.exists());
        assert_eq!(records.read_all().unwrap(), (vec![record(2)], vec![]));
        assert!(Records::new(&d.path().join("none")).remove_unfinished_writes().unwrap().is_empty());
    }
}
