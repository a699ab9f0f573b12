//! Logs an operator can use: one line per operation (pod, container id, network, result or error,
//! duration) plus whatever a plugin logs at its configured level, to stderr or to a size-rotated
//! file. Never to stdout: stdout carries the CNI result.
//!
//! Keys, in any plugin's config: `logLevel` (error|warn|info|debug|trace, default info), `logFile`
//! (default: stderr), `logMaxSizeMB` (10), `logMaxFiles` (3). A plugin whose logging has keys of its
//! own says so (`Plugin::log_config`): `veth` and `router` read the original plugins' `log_options`
//! {`log_level`, `log_file`, `log_max_size`, `log_max_age`, `log_max_count`} with their defaults
//! (debug, `/var/log/meta-plugins/<plugin>.log`, 100 MB, 5 days, 5 files).

use serde_json::{Map, Value};
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use tracing::Level;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

/// The log of a long-running program (the installer, the node agent): one line per event on stderr,
/// in colour on a terminal.
pub fn init_stderr_log() {
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    pub level: Level,
    /// None: stderr.
    pub file: Option<PathBuf>,
    pub max_size_bytes: u64,
    /// Rotated files kept (`file.1` .. `file.N`).
    pub max_files: u32,
    /// Rotated files older than this are removed.
    pub max_age: Option<Duration>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { level: Level::INFO, file: None, max_size_bytes: 10 << 20, max_files: 3, max_age: None }
    }
}

impl LogConfig {
    /// The defaults of a plugin that reads `log_options` (`from_log_options`).
    pub fn log_options_defaults(plugin: &str) -> Self {
        LogConfig {
            level: Level::DEBUG,
            file: Some(PathBuf::from(format!("/var/log/meta-plugins/{plugin}.log"))),
            max_size_bytes: 100 << 20,
            max_files: 5,
            max_age: Some(Duration::from_secs(5 * 86_400)),
        }
    }

    /// The logging a plugin's config sets in the keys every plugin reads. Lenient: a bad value means
    /// the default, because a typo in a log setting must never cost a pod its network.
    pub fn from_keys(raw: &Map<String, Value>) -> Self {
        let mut cfg = LogConfig::default();
        if let Some(l) = raw.get("logLevel").and_then(Value::as_str).and_then(parse_level) {
            cfg.level = l;
        }
        cfg.file = raw.get("logFile").and_then(Value::as_str).filter(|f| !f.is_empty()).map(PathBuf::from);
        if let Some(mb) = raw.get("logMaxSizeMB").and_then(Value::as_u64).filter(|n| *n > 0) {
            cfg.max_size_bytes = mb.saturating_mul(1 << 20);
        }
        if let Some(n) = raw.get("logMaxFiles").and_then(Value::as_u64).filter(|n| *n > 0) {
            cfg.max_files = u32::try_from(n).unwrap_or(u32::MAX).min(100);
        }
        cfg
    }

    /// The logging of a plugin that reads `log_options`, leniently as `from_keys` (plugins that
    /// refuse bad log settings on ADD validate with [`LogConfig::from_log_options`]).
    pub fn from_log_options_or_defaults(plugin: &str, raw: &Map<String, Value>) -> Self {
        Self::from_log_options(plugin, raw.get("log_options")).unwrap_or_else(|_| Self::log_options_defaults(plugin))
    }

    /// A `log_options` object, strictly: every key optional, every value checked.
    pub fn from_log_options(plugin: &str, v: Option<&Value>) -> Result<Self, String> {
        let mut o = Self::log_options_defaults(plugin);
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
                    o.level = v
                        .as_str()
                        .and_then(parse_level)
                        .ok_or_else(|| format!("log_level: {v} is not one of trace, debug, info, warn, error"))?
                }
                "log_file" => match v.as_str() {
                    Some(f) if f.starts_with('/') => o.file = Some(PathBuf::from(f)),
                    _ => return Err(format!("log_file: {v} is not an absolute path")),
                },
                "log_max_size" => o.max_size_bytes = positive()?.saturating_mul(1 << 20),
                "log_max_age" => o.max_age = Some(Duration::from_secs(positive()?.saturating_mul(86_400))),
                "log_max_count" => {
                    o.max_files = u32::try_from(positive()?).map_err(|_| format!("{k}: {v} is too large"))?.min(100)
                }
                _ => return Err(format!("unknown key {k:?}")),
            }
        }
        Ok(o)
    }

    /// Install as the process-wide logger. The first call wins; later calls are no-ops.
    pub fn init(&self) {
        let (subscriber, trouble) = self.subscriber();
        let _ = subscriber.try_init();
        if let Some(trouble) = trouble {
            tracing::warn!("{trouble}");
        }
    }

    /// Run `f` with its events going where this config says (a built-in plugin run in process by
    /// another keeps its own log).
    pub fn scope<T>(&self, f: impl FnOnce() -> T) -> T {
        let (subscriber, trouble) = self.subscriber();
        tracing::subscriber::with_default(subscriber, || {
            if let Some(trouble) = trouble {
                tracing::warn!("{trouble}");
            }
            f()
        })
    }

    /// A subscriber writing where this config says, and why it writes to stderr instead when the
    /// file cannot be opened: a plugin must never fail because it cannot log.
    fn subscriber(&self) -> (impl tracing::Subscriber + Send + Sync + 'static, Option<String>) {
        let (writer, trouble) = match &self.file {
            None => (BoxMakeWriter::new(std::io::stderr), None),
            Some(path) => match open_rotated(path, self.max_size_bytes, self.max_files, self.max_age) {
                Ok(file) => (BoxMakeWriter::new(Mutex::new(file)), None),
                Err(e) => (
                    BoxMakeWriter::new(std::io::stderr),
                    Some(format!("cannot open log file {}: {e}; logging to stderr", path.display())),
                ),
            },
        };
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(self.level)
            .with_ansi(false)
            .with_target(false)
            .with_writer(writer)
            .finish();
        (subscriber, trouble)
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

/// Open `path` for appending, first rotating it (`path` -> `path.1` -> ... -> `path.N`, dropping files
/// past N or older than `max_age`) when it has grown past `max_size`. Many plugin processes log at
/// once: rotation happens under an exclusive flock, and a process that finds the file already
/// rotated just appends.
fn open_rotated(path: &Path, max_size: u64, max_files: u32, max_age: Option<Duration>) -> std::io::Result<File> {
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
    if fs::metadata(path)?.len() >= max_size {
        let _ = fs::remove_file(numbered(path, max_files));
        for i in (1..max_files).rev() {
            let _ = fs::rename(numbered(path, i), numbered(path, i + 1));
        }
        fs::rename(path, numbered(path, 1))?;
        if let Some(age) = max_age {
            for i in 1..=max_files {
                let p = numbered(path, i);
                let old = fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| SystemTime::now().duration_since(t).is_ok_and(|d| d > age));
                if old {
                    let _ = fs::remove_file(p);
                }
            }
        }
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
    fn camel_case_log_keys_are_read() {
        let c = LogConfig::from_keys(&conf(json!({"logLevel": "debug", "logFile": "/tmp/x.log", "logMaxSizeMB": 2})));
        assert_eq!(
            (c.level, c.file.as_deref(), c.max_size_bytes),
            (Level::DEBUG, Some(Path::new("/tmp/x.log")), 2 << 20)
        );
    }

    #[test]
    fn bad_camel_case_log_values_fall_back_to_the_defaults() {
        let c = LogConfig::from_keys(&conf(json!({"logLevel": 5, "logMaxSizeMB": -1, "logFile": ""})));
        assert_eq!(c, LogConfig::default());
    }

    #[test]
    fn without_log_options_a_plugin_logs_debug_to_the_meta_plugins_dir() {
        let d = LogConfig::from_log_options_or_defaults("router", &Map::new());
        assert_eq!(d.file.as_deref(), Some(Path::new("/var/log/meta-plugins/router.log")));
        assert_eq!(d.level, Level::DEBUG);
    }

    #[test]
    fn log_options_override_the_defaults() {
        let o = LogConfig::from_log_options(
            "veth",
            Some(&json!({"log_level": "Info", "log_file": "/tmp/v.log", "log_max_size": 1, "log_max_age": 2, "log_max_count": 3})),
        )
        .unwrap();
        assert_eq!(
            (o.level, o.max_size_bytes, o.max_age, o.max_files),
            (Level::INFO, 1 << 20, Some(Duration::from_secs(2 * 86_400)), 3)
        );
    }

    #[test]
    fn bad_log_options_are_refused() {
        for bad in [
            json!({"log_level": "loud"}),
            json!({"log_file": "rel.log"}),
            json!({"log_max_size": 0}),
            json!({"x": 1}),
            json!(3),
        ] {
            assert!(LogConfig::from_log_options("veth", Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_operation_log_takes_the_defaults_for_bad_log_options() {
        // Lenient for the operation log: a bad value is the default, not an error.
        assert_eq!(
            LogConfig::from_log_options_or_defaults("veth", &conf(json!({"log_options": {"log_level": "loud"}}))),
            LogConfig::log_options_defaults("veth")
        );
    }

    #[test]
    fn a_full_log_rotates_into_at_most_n_numbered_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("logs/op.log");
        for round in 0..5u8 {
            let mut f = open_rotated(&p, 10, 2, None).unwrap();
            std::io::Write::write_all(&mut f, &[b'a' + round; 20]).unwrap();
        }
        assert_eq!(fs::read(&p).unwrap(), vec![b'e'; 20]);
        assert_eq!(fs::read(numbered(&p, 1)).unwrap(), vec![b'd'; 20]);
        assert_eq!(fs::read(numbered(&p, 2)).unwrap(), vec![b'c'; 20]);
        assert!(!numbered(&p, 3).exists());
    }

    #[test]
    fn scope_writes_to_the_file() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("veth.log");
        let o = LogConfig { file: Some(file.clone()), ..LogConfig::log_options_defaults("veth") };
        o.scope(|| tracing::debug!("first line"));
        assert!(fs::read_to_string(&file).unwrap().contains("first line"));
    }

    #[test]
    fn a_log_file_that_cannot_be_opened_does_not_stop_the_plugin() {
        let d = tempfile::tempdir().unwrap();
        let not_a_dir = d.path().join("file");
        fs::write(&not_a_dir, b"").unwrap();
        let o = LogConfig { file: Some(not_a_dir.join("veth.log")), ..LogConfig::log_options_defaults("veth") };
        assert_eq!(o.scope(|| 42), 42);
    }
}
