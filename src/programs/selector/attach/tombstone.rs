//! Tombstones: "this runtime attachment's DEL has completed". A runtime calls DEL several times per
//! sandbox (containerd: once when it stops the sandbox, again, with an empty `CNI_NETNS`, each time
//! it stops or removes it later); the first removes the records, and every later one finds none.
//! Without a record the selector cannot tell "already deleted" from "records lost", so the DEL that
//! completes leaves an empty file `<dataDir>/deleted/<bucket>/<containerID>:<ifname>`, and a DEL
//! that finds it has nothing to do: no plugin, no agent, no API server.
//!
//! A tombstone is a hint, never the truth about what exists: a DEL looks at the records first, and
//! any record found is DELeted whether or not a tombstone is there. So a tombstone need not be
//! durable (after a power loss without it, a DEL takes the no-record path, which is correct anyway),
//! and a failure to write one is logged, never a DEL error.
//!
//! Bounded: tombstones live in buckets of `BUCKET` by the time they were written; only the current
//! and the previous bucket count, and writing one removes every older bucket (one directory listing
//! of a few names, whatever the number of tombstones). So a tombstone lasts between one and two
//! `BUCKET`s. GC removes those of attachments the runtime no longer lists; an ADD of the same
//! (container, interface) removes its tombstone.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// How long one bucket collects tombstones: containerd's later DELs of a sandbox come when the
/// kubelet stops it again or removes it, within minutes of the first.
pub const BUCKET_SECONDS: u64 = 30 * 60;

/// The tombstones of one `dataDir`.
pub struct Tombstones {
    dir: PathBuf,
}

impl Tombstones {
    pub fn new(data_dir: &Path) -> Self {
        Tombstones { dir: data_dir.join("deleted") }
    }

    /// Whether the DEL of (container, runtime interface) has completed within the last buckets.
    pub fn contains(&self, container_id: &str, ifname: &str) -> bool {
        self.contains_at(now_bucket(), container_id, ifname)
    }

    /// Leave the tombstone of (container, runtime interface), and remove the expired buckets.
    pub fn write(&self, container_id: &str, ifname: &str) -> io::Result<()> {
        self.write_at(now_bucket(), container_id, ifname)
    }

    /// Remove the tombstone of (container, runtime interface), if any (an ADD of it).
    pub fn remove(&self, container_id: &str, ifname: &str) {
        let bucket = now_bucket();
        for b in [bucket, bucket.saturating_sub(1)] {
            let _ = fs::remove_file(self.path(b, container_id, ifname));
        }
    }

    /// Remove every tombstone whose (container, interface) `keep` refuses (GC), in every bucket.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) -> io::Result<()> {
        for bucket in names(&self.dir)? {
            let dir = self.dir.join(&bucket);
            for name in names(&dir)? {
                let kept = name.split_once(':').is_some_and(|(cid, ifname)| keep(cid, ifname));
                if !kept {
                    remove_missing_ok(&dir.join(name))?;
                }
            }
        }
        Ok(())
    }

    fn path(&self, bucket: u64, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(bucket.to_string()).join(format!("{container_id}:{ifname}"))
    }

    fn contains_at(&self, bucket: u64, container_id: &str, ifname: &str) -> bool {
        [bucket, bucket.saturating_sub(1)].iter().any(|b| self.path(*b, container_id, ifname).exists())
    }

    fn write_at(&self, bucket: u64, container_id: &str, ifname: &str) -> io::Result<()> {
        let path = self.path(bucket, container_id, ifname);
        fs::DirBuilder::new().recursive(true).mode(0o700).create(path.parent().expect("a bucket"))?;
        // An empty file: it is there whole or not at all.
        OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&path)?;
        for name in names(&self.dir)? {
            let current = name.parse::<u64>().is_ok_and(|b| b == bucket || b + 1 == bucket);
            if !current {
                match fs::remove_dir_all(self.dir.join(&name)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

fn now_bucket() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() / BUCKET_SECONDS)
}

/// The names in `dir`; none if it does not exist.
fn names(dir: &Path) -> io::Result<Vec<String>> {
    match fs::read_dir(dir) {
        Ok(entries) => {
            Ok(entries.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

fn remove_missing_ok(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tombstone_lasts_from_its_bucket_through_the_next() {
        let d = tempfile::tempdir().unwrap();
        let t = Tombstones::new(d.path());
        assert!(!t.contains_at(100, "c1", "eth0"));
        t.write_at(100, "c1", "eth0").unwrap();
        assert!(t.contains_at(100, "c1", "eth0") && t.contains_at(101, "c1", "eth0"));
        assert!(!t.contains_at(100, "c1", "eth1") && !t.contains_at(100, "c2", "eth0"));
        assert!(!t.contains_at(102, "c1", "eth0"), "expired");
    }

    #[test]
    fn writing_a_tombstone_removes_the_buckets_that_expired() {
        let d = tempfile::tempdir().unwrap();
        let t = Tombstones::new(d.path());
        t.write_at(100, "c1", "eth0").unwrap();
        t.write_at(101, "c2", "eth0").unwrap();
        assert_eq!(names(&t.dir).unwrap().len(), 2, "the previous bucket stays");
        t.write_at(102, "c3", "eth0").unwrap();
        let mut buckets = names(&t.dir).unwrap();
        buckets.sort();
        assert_eq!(buckets, ["101", "102"], "bucket 100 went with its tombstone");
        // A clock set back: buckets from its future are not current either.
        t.write_at(50, "c4", "eth0").unwrap();
        assert_eq!(names(&t.dir).unwrap(), ["50"]);
    }

    #[test]
    fn gc_keeps_only_the_tombstones_of_attachments_it_keeps() {
        let d = tempfile::tempdir().unwrap();
        let t = Tombstones::new(d.path());
        for cid in ["keep", "gone", "other"] {
            t.write(cid, "eth0").unwrap();
        }
        assert!(t.contains("keep", "eth0") && t.contains("gone", "eth0"));
        t.retain(|cid, ifname| cid == "keep" && ifname == "eth0").unwrap();
        assert!(t.contains("keep", "eth0") && !t.contains("gone", "eth0") && !t.contains("other", "eth0"));
        Tombstones::new(&d.path().join("none")).retain(|_, _| false).unwrap();
    }

    #[test]
    fn an_add_removes_its_attachments_tombstone() {
        let d = tempfile::tempdir().unwrap();
        let t = Tombstones::new(d.path());
        t.write("keep", "eth0").unwrap();
        assert!(t.contains("keep", "eth0"));
        t.remove("keep", "eth0");
        assert!(!t.contains("keep", "eth0"));
        t.remove("keep", "eth0");
    }
}
