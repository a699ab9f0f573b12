//! Logs an operator can use: one line per operation (pod, container id, network, result or error,
//! duration) plus whatever a plugin logs at the configured level, to stderr or to a size-rotated file.
//! Never to stdout: stdout carries the CNI result.
//!
//! Keys, in any plugin's config: `logLevel` (error|warn|info|debug|trace, default info), `logFile`
//! (default: stderr), `logMaxSizeMB` (10), `logMaxFiles` (3). The veth/router plugins also read seed
//! 004's `log_options` {`log_level`, `log_file`, `log_max_size`, `log_max_count`}.

use serde_json::{Map, Value};
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tracing::Level;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    pub level: Level,
    pub file: Option<PathBuf>,
    pub max_size_bytes: u64,
    pub max_files: u32,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { level: Level::INFO, file: None, max_size_bytes: 10 << 20, max_files: 3 }
    }
}

impl LogConfig {
    /// Read the logging keys of a plugin config. Bad values fall back to defaults: a typo in a log
    /// setting must never cost a pod its network.
    pub fn from_conf(raw: &Map<String, Value>) -> Self {
        let mut cfg = LogConfig::default();
        let (level, file, size, count) = match raw.get("log_options").and_then(Value::as_object) {
            Some(o) => (o.get("log_level"), o.get("log_file"), o.get("log_max_size"), o.get("log_max_count")),
            None => (raw.get("logLevel"), raw.get("logFile"), raw.get("logMaxSizeMB"), raw.get("logMaxFiles")),
        };
        if let Some(l) = level.and_then(Value::as_str).and_then(parse_level) {
            cfg.level = l;
        }
        cfg.file = file.and_then(Value::as_str).filter(|f| !f.is_empty()).map(PathBuf::from);
        if let Some(mb) = size.and_then(Value::as_u64).filter(|n| *n > 0) {
            cfg.max_size_bytes = mb.saturating_mul(1 << 20);
        }
        if let Some(n) = count.and_then(Value::as_u64).filter(|n| *n > 0) {
            cfg.max_files = u32::try_from(n).unwrap_or(u32::MAX).min(100);
        }
        cfg
    }
}

fn parse_level(s: &str) -> Option<Level> {
    match s.to_ascii_lowercase().as_str() {
        "error" | "panic" | "fatal" => Some(Level::ERROR),
        "warn" | "warning" => Some(Level::WARN),
        "info" => Some(Level::INFO),
        "debug" | "verbose" => Some(Level::DEBUG),
        "trace" => Some(Level::TRACE),
        _ => None,
    }
}

/// Install the process-wide logger. The first call wins; later calls are no-ops.
/// If the log file cannot be opened, logs go to stderr and that is said once there.
pub fn init(cfg: &LogConfig) {
    let builder = tracing_subscriber::fmt().with_max_level(cfg.level).with_ansi(false).with_target(false);
    let file = cfg.file.as_deref().map(|p| (p, open_rotated(p, cfg.max_size_bytes, cfg.max_files)));
    match file {
        Some((_, Ok(f))) => {
            let _ = builder.with_writer(Mutex::new(f)).try_init();
        }
        Some((p, Err(e))) => {
            let _ = builder.with_writer(std::io::stderr).try_init();
            tracing::warn!("cannot open log file {}: {e}; logging to stderr", p.display());
        }
        None => {
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
    }
}

/// Open `path` for appending, first rotating it (`path` -> `path.1` -> ... -> `path.N`) when it has
/// grown past `max_size`. Many plugin processes log at once: rotation happens under an exclusive
/// flock on the file, and a process that finds it already rotated just appends.
fn open_rotated(path: &Path, max_size: u64, max_files: u32) -> std::io::Result<fs::File> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let open = || OpenOptions::new().create(true).append(true).open(path);
    let file = open()?;
    if file.metadata()?.len() < max_size {
        return Ok(file);
    }
    let lock =
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| std::io::Error::from(e))?;
    // Another process may have rotated while we waited: only rotate if the path is still the big file.
    if fs::metadata(path)?.len() >= max_size {
        for i in (1..max_files).rev() {
            let _ = fs::rename(numbered(path, i), numbered(path, i + 1));
        }
        fs::rename(path, numbered(path, 1))?;
    }
    drop(lock);
    open()
}

fn numbered(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn reads_camel_case_and_seed_keys_and_ignores_bad_values() {
        let c = LogConfig::from_conf(&conf(json!({"logLevel": "debug", "logFile": "/tmp/x.log", "logMaxSizeMB": 2})));
        assert_eq!(
            (c.level, c.file.as_deref(), c.max_size_bytes),
            (Level::DEBUG, Some(Path::new("/tmp/x.log")), 2 << 20)
        );
        let c = LogConfig::from_conf(&conf(json!({"log_options": {"log_level": "Warning", "log_max_count": 7}})));
        assert_eq!((c.level, c.max_files), (Level::WARN, 7));
        let c = LogConfig::from_conf(&conf(json!({"logLevel": 5, "logMaxSizeMB": -1, "logFile": ""})));
        assert_eq!(c, LogConfig::default());
    }

    #[test]
    fn rotates_when_too_big_and_keeps_at_most_n() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("logs/op.log");
        for round in 0..5u8 {
            let mut f = open_rotated(&p, 10, 2).unwrap();
            std::io::Write::write_all(&mut f, &[b'a' + round; 20]).unwrap();
        }
        assert_eq!(fs::read(&p).unwrap(), vec![b'e'; 20]);
        assert_eq!(fs::read(numbered(&p, 1)).unwrap(), vec![b'd'; 20]);
        assert_eq!(fs::read(numbered(&p, 2)).unwrap(), vec![b'c'; 20]);
        assert!(!numbered(&p, 3).exists());
    }
}
