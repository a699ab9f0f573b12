//! `log_options`: where `veth` and `router` write what they do. A CNI plugin's stdout belongs to the
//! protocol, and its stderr is often thrown away by the runtime, so the seed gives each plugin a log
//! file, rotated by size so that a busy node cannot fill its disk.

use serde_json::Value;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use tracing::Level;

#[derive(Debug, Clone, PartialEq)]
pub struct LogOptions {
    pub level: Level,
    pub file: PathBuf,
    /// Rotate when the file reaches this many megabytes.
    pub max_size_mb: u64,
    /// Rotated files older than this many days are removed.
    pub max_age_days: u64,
    /// How many rotated files are kept.
    pub max_count: u32,
}

impl LogOptions {
    /// Level `debug`, file `/var/log/meta-plugins/<plugin>.log`, 100 MB, 5 days, 5 files (seed 004
    /// and the original plugins).
    pub fn defaults(plugin: &str) -> Self {
        LogOptions {
            level: Level::DEBUG,
            file: PathBuf::from(format!("/var/log/meta-plugins/{plugin}.log")),
            max_size_mb: 100,
            max_age_days: 5,
            max_count: 5,
        }
    }

    /// `{"log_level", "log_file", "log_max_size", "log_max_age", "log_max_count"}`, each optional.
    pub fn parse(plugin: &str, v: Option<&Value>) -> Result<Self, String> {
        let mut o = Self::defaults(plugin);
        let m = match v {
            None | Some(Value::Null) => return Ok(o),
            Some(Value::Object(m)) => m,
            Some(other) => return Err(format!("{other} is not an object")),
        };
        for (k, v) in m {
            let positive =
                || v.as_u64().filter(|n| *n > 0).ok_or_else(|| format!("{k}: {v} is not a positive integer"));
            match k.as_str() {
                "log_level" => {
                    o.level = match v.as_str().map(str::to_ascii_lowercase).as_deref() {
                        Some("trace") => Level::TRACE,
                        Some("debug") => Level::DEBUG,
                        Some("info") => Level::INFO,
                        Some("warn" | "warning") => Level::WARN,
                        Some("error") => Level::ERROR,
                        _ => return Err(format!("log_level: {v} is not one of trace, debug, info, warn, error")),
                    }
                }
                "log_file" => match v.as_str() {
                    Some(f) if f.starts_with('/') => o.file = PathBuf::from(f),
                    _ => return Err(format!("log_file: {v} is not an absolute path")),
                },
                "log_max_size" => o.max_size_mb = positive()?,
                "log_max_age" => o.max_age_days = positive()?,
                "log_max_count" => {
                    o.max_count = u32::try_from(positive()?).map_err(|_| format!("{k}: {v} is too large"))?
                }
                _ => return Err(format!("unknown key {k:?}")),
            }
        }
        Ok(o)
    }

    /// Run `f` with its `tracing` events going to the log file. If the file cannot be opened the
    /// events go to stderr instead: a plugin must never fail because it cannot log.
    pub fn scope<T>(&self, f: impl FnOnce() -> T) -> T {
        let builder = tracing_subscriber::fmt().with_ansi(false).with_max_level(self.level).with_target(false);
        match self.open() {
            Ok(file) => tracing::subscriber::with_default(builder.with_writer(Mutex::new(file)).finish(), f),
            Err(e) => {
                let subscriber = builder.with_writer(std::io::stderr).finish();
                tracing::subscriber::with_default(subscriber, || {
                    tracing::warn!("cannot open log file {}: {e}; logging to stderr", self.file.display());
                    f()
                })
            }
        }
    }

    fn open(&self) -> std::io::Result<File> {
        if let Some(dir) = self.file.parent() {
            fs::create_dir_all(dir)?;
        }
        if fs::metadata(&self.file).is_ok_and(|m| m.len() >= self.max_size_mb.saturating_mul(1 << 20)) {
            self.rotate();
        }
        OpenOptions::new().create(true).append(true).open(&self.file)
    }

    /// `f.log` becomes `f.log.1`, `.1` becomes `.2`, ... up to `max_count`; files past the count or
    /// the age are removed. Best effort: two plugins rotating at once lose at most a few lines.
    fn rotate(&self) {
        let rotated = |i: u32| PathBuf::from(format!("{}.{i}", self.file.display()));
        let _ = fs::remove_file(rotated(self.max_count));
        for i in (1..self.max_count).rev() {
            let _ = fs::rename(rotated(i), rotated(i + 1));
        }
        let _ = fs::rename(&self.file, rotated(1));
        let max_age = Duration::from_secs(self.max_age_days.saturating_mul(86_400));
        for i in 1..=self.max_count {
            if older_than(&rotated(i), max_age) {
                let _ = fs::remove_file(rotated(i));
            }
        }
    }
}

fn older_than(path: &Path, age: Duration) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| SystemTime::now().duration_since(t).is_ok_and(|d| d > age))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(LogOptions::parse("router", None).unwrap().file, PathBuf::from("/var/log/meta-plugins/router.log"));
        let o = LogOptions::parse(
            "veth",
            Some(&json!({"log_level": "Info", "log_file": "/tmp/v.log", "log_max_size": 1, "log_max_age": 2, "log_max_count": 3})),
        )
        .unwrap();
        assert_eq!((o.level, o.max_size_mb, o.max_age_days, o.max_count), (Level::INFO, 1, 2, 3));
        for bad in [
            json!({"log_level": "loud"}),
            json!({"log_file": "rel.log"}),
            json!({"log_max_size": 0}),
            json!({"x": 1}),
            json!(3),
        ] {
            assert!(LogOptions::parse("veth", Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn writes_to_the_file_and_rotates_by_size() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("logs/veth.log");
        let o = LogOptions { file: file.clone(), max_size_mb: 1, max_count: 2, ..LogOptions::defaults("veth") };
        o.scope(|| tracing::info!("first line"));
        assert!(fs::read_to_string(&file).unwrap().contains("first line"));
        fs::write(&file, vec![b'x'; 1 << 20]).unwrap();
        o.scope(|| tracing::debug!("after rotation"));
        assert!(fs::read_to_string(&file).unwrap().contains("after rotation"));
        assert_eq!(fs::metadata(d.path().join("logs/veth.log.1")).unwrap().len(), 1 << 20);
    }
}
