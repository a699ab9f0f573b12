//! The network-status annotations the agent has taken from the plugin (`annotate`) and not written
//! yet, kept as files beside the agent's socket (`node::paths::kept_statuses`, under `/run`), so
//! that an agent killed before it wrote one writes it when it starts again: the plugin, answered
//! `accepted`, will not write it. One file per status, named by when it was taken (the oldest is
//! written first), removed once the status is written or given up. Written without fsync: a status
//! matters only while its sandbox runs, which a reboot ends anyway, and `/run` does not outlive one.

use crate::platform::durable::write_volatile;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::warn;

/// A status to write: the pod (its uid guards the write) and its annotations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeptStatus {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub annotations: BTreeMap<String, String>,
}

pub struct KeptStatuses {
    dir: PathBuf,
    /// Tells apart two statuses taken in the same nanosecond.
    taken: AtomicU64,
}

impl KeptStatuses {
    pub fn new(dir: &Path) -> Self {
        KeptStatuses { dir: dir.to_path_buf(), taken: AtomicU64::new(0) }
    }

    /// Keep `status` until `done` is called with the file returned.
    pub fn keep(&self, status: &KeptStatus) -> io::Result<PathBuf> {
        let at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
        let taken = self.taken.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{at:020}-{taken:06}.json"));
        let bytes = serde_json::to_vec(status).map_err(io::Error::other)?;
        write_volatile(&path, &bytes, 0o600)?;
        Ok(path)
    }

    /// The status of `file` is written, or given up.
    pub fn done(&self, file: &Path) {
        if let Err(e) = std::fs::remove_file(file)
            && e.kind() != io::ErrorKind::NotFound
        {
            warn!("removing {}, a network-status annotation written already: {e}", file.display());
        }
    }

    /// The statuses an earlier life of the agent took and did not write, oldest first. A file that
    /// cannot be read (a write the kill cut short is never renamed into place) is removed, logged.
    pub fn left(&self) -> Vec<(PathBuf, KeptStatus)> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut files: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        let mut left = Vec::new();
        for file in files {
            let read = std::fs::read(&file).map_err(|e| e.to_string());
            match read.and_then(|b| serde_json::from_slice::<KeptStatus>(&b).map_err(|e| e.to_string())) {
                Ok(status) => left.push((file, status)),
                Err(e) => {
                    warn!("a kept network-status annotation that cannot be read, dropped: {}: {e}", file.display());
                    self.done(&file);
                }
            }
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(uid: &str) -> KeptStatus {
        KeptStatus {
            namespace: "default".into(),
            name: "web".into(),
            uid: uid.into(),
            annotations: BTreeMap::from([("k8s.v1.cni.cncf.io/network-status".into(), format!("[{uid}]"))]),
        }
    }

    #[test]
    fn statuses_not_done_are_left_for_the_next_life_oldest_first() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("agent.sock.statuses");
        let kept = KeptStatuses::new(&dir);
        assert!(kept.left().is_empty(), "no directory yet");
        let first = kept.keep(&status("u1")).unwrap();
        let second = kept.keep(&status("u2")).unwrap();
        let third = kept.keep(&status("u3")).unwrap();
        kept.done(&second);
        kept.done(&second);
        std::fs::write(dir.join("00000000000000000000-000000.json"), b"{\"namespace\"").unwrap();
        // What an agent started again finds: the others, in the order they were taken.
        let next = KeptStatuses::new(&dir);
        assert_eq!(next.left(), [(first, status("u1")), (third.clone(), status("u3"))]);
        assert!(!dir.join("00000000000000000000-000000.json").exists(), "the torn file is dropped");
        next.done(&third);
        assert_eq!(next.left().len(), 1);
    }
}
