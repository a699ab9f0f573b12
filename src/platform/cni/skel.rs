//! What every plugin shares: the `Plugin` trait, and `run`, which turns one process invocation
//! (env + stdin) into a call on a plugin and prints the result or the error JSON.

use super::attachment_lock;
use super::config::PluginConf;
use super::delegate::Delegates;
use super::env::{Command, Invocation};
use super::error::CniError;
use super::operation::Operation;
use super::result::CniResult;
use super::version::{self, CniVersion};
use crate::platform::logging::LogConfig;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// A CNI plugin. Methods are synchronous and are never called from inside an async runtime, so a
/// plugin may build its own (current-thread) runtime and a built-in plugin can call another in process.
/// Each verb gets the operation's context (`op`), to note into what the operation's log line and
/// report read.
pub trait Plugin: Sync {
    /// The name it is installed and chosen under (`type` in a config, argv[0] of the binary).
    fn name(&self) -> &'static str;
    fn add(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<CniResult, CniError>;
    /// Idempotent and best effort: what is already gone is success.
    fn del(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<(), CniError>;
    fn check(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<(), CniError>;
    /// CNI 1.1.0 GC: stdin carries `cni.dev/valid-attachments`.
    fn gc(&self, _inv: &Invocation, _conf: &PluginConf, _op: &Operation) -> Result<(), CniError> {
        Ok(())
    }
    /// CNI 1.1.0 STATUS: Ok means ready for ADDs.
    fn status(&self, _inv: &Invocation, _conf: &PluginConf, _op: &Operation) -> Result<(), CniError> {
        Ok(())
    }
    /// Where and how much it logs, as its configuration says: the keys every plugin reads, unless
    /// its logging has keys of its own.
    fn log_config(&self, conf: &PluginConf) -> LogConfig {
        LogConfig::from_keys(&conf.raw)
    }
    /// Called once a command has run, with what it noted, how it ended and how long the process took
    /// to get there (the selector reports it to its node agent's metrics). Must not wait on anything.
    fn done(
        &self,
        _inv: &Invocation,
        _conf: &PluginConf,
        _op: &Operation,
        _outcome: Result<(), &CniError>,
        _took: Duration,
    ) {
    }
}

/// Run one command on a plugin whose config is already parsed, with the spec's version gates, as
/// the operation `op`. Returns the ADD result; other commands return `None`.
pub fn dispatch(
    plugin: &dyn Plugin,
    inv: &Invocation,
    conf: &PluginConf,
    op: &Operation,
) -> Result<Option<CniResult>, CniError> {
    let v = conf.cni_version;
    match inv.command {
        Command::Add => add_in_version(plugin, inv, conf, op).map(Some),
        Command::Del => plugin.del(inv, conf, op).map(|()| None),
        Command::Check if !v.has_check() => Err(incompatible(v, "CHECK")),
        Command::Check => plugin.check(inv, conf, op).map(|()| None),
        Command::Gc | Command::Status if !v.has_gc_and_status() => Err(incompatible(v, inv.command.as_str())),
        Command::Gc => plugin.gc(inv, conf, op).map(|()| None),
        Command::Status => plugin.status(inv, conf, op).map(|()| None),
        Command::Version => Ok(None),
    }
}

/// ADD, failing (with what it made undone) when the result cannot be written in the config's
/// version: a 0.1.0/0.2.0 result needs an address. Checked here rather than when printing, so a
/// built-in plugin called in process fails exactly as an exec'd one would. The undoing is the
/// plugin's own DEL and stays here, beside the protocol's version rules, for every plugin alike:
/// the selector's undoing of what its ADD made (its records, its networks' chains) is its own.
fn add_in_version(
    plugin: &dyn Plugin,
    inv: &Invocation,
    conf: &PluginConf,
    op: &Operation,
) -> Result<CniResult, CniError> {
    let result = plugin.add(inv, conf, op)?;
    // Only the 0.1.0/0.2.0 shape can refuse a result; later versions write every result.
    if !conf.cni_version.has_ip4_ip6_result() {
        return Ok(result);
    }
    if let Err(e) = result.to_json(conf.cni_version) {
        if let Err(undo) = plugin.del(&inv.with_command(Command::Del), conf, op) {
            tracing::warn!("undoing the ADD whose result could not be written: {undo}");
        }
        return Err(e);
    }
    Ok(result)
}

/// libcni's skel words: the command is named, the version goes in the details.
fn incompatible(v: CniVersion, what: &str) -> CniError {
    CniError::new(super::error::code::INCOMPATIBLE_VERSION, format!("config version does not allow {what}"))
        .with_details(format!("config is {:?}", v.as_str()))
}

/// Outcome of one process invocation, before it is printed.
pub struct Outcome {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    /// For the operation log line.
    pub error: Option<CniError>,
}

/// The whole plugin protocol for one process: env, stdin -> stdout bytes and exit code. ADD, DEL
/// and CHECK hold the attachment's lock in `locks` (see `attachment_lock`).
pub fn run_with(
    plugin: &dyn Plugin,
    locks: &Path,
    delegates: &'static dyn Delegates,
    get_env: impl Fn(&str) -> Option<String>,
    stdin: &mut dyn Read,
) -> Outcome {
    let started = Instant::now();
    let mut version_for_errors = String::new();
    let mut line = OpLine::default();
    let op = Operation::with_delegates(delegates);
    let result = (|| -> Result<Vec<u8>, CniError> {
        let inv = Invocation::from_env(&get_env)?;
        line.invocation(&inv);
        let mut input = Vec::new();
        stdin.read_to_end(&mut input).map_err(|e| CniError::io(format!("cannot read stdin: {e}")))?;
        if inv.command == Command::Version {
            // VERSION may come with an empty stdin or a bare `{"cniVersion": ...}`.
            let asked = serde_json::from_slice::<serde_json::Value>(&input)
                .ok()
                .and_then(|v| v.get("cniVersion").and_then(|s| s.as_str()).map(String::from))
                .unwrap_or_default();
            return Ok(version::version_reply(&asked).to_string().into_bytes());
        }
        let conf = PluginConf::parse(&input).inspect_err(|_| {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&input)
                && let Some(s) = v.get("cniVersion").and_then(|s| s.as_str())
            {
                version_for_errors = s.to_string();
            }
        })?;
        version_for_errors = conf.cni_version.as_str().to_string();
        plugin.log_config(&conf).init();
        line.network = conf.name.clone();
        // Held until this call returns; its helpers hold it until they end (see attachment_lock).
        let lock = match inv.command {
            Command::Add | Command::Del | Command::Check => {
                attachment_lock::acquire(locks, &inv.container_id, &inv.ifname, attachment_lock::WAIT)
            }
            _ => None,
        };
        let out = dispatch(plugin, &inv, &conf, &op);
        plugin.done(&inv, &conf, &op, out.as_ref().map(drop), started.elapsed());
        let out = out?;
        if inv.command == Command::Del
            && let Some(lock) = lock
        {
            lock.remove();
        }
        if let Some(r) = &out {
            line.ips = r.ips.iter().map(|ip| ip.address.to_string()).collect::<Vec<_>>().join(",");
        }
        match out {
            Some(r) => Ok(r.to_string(conf.cni_version)?.into_bytes()),
            None => Ok(Vec::new()),
        }
    })();
    let outcome = match result {
        Ok(stdout) => Outcome { exit_code: 0, stdout, error: None },
        Err(e) => {
            Outcome { exit_code: 1, stdout: e.to_json(&version_for_errors).to_string().into_bytes(), error: Some(e) }
        }
    };
    line.log(plugin.name(), &op, &outcome, started.elapsed());
    outcome
}

/// The one line each operation leaves in the log, whatever happened.
#[derive(Default)]
struct OpLine {
    command: &'static str,
    container: String,
    ifname: String,
    pod: String,
    network: String,
    ips: String,
}

impl OpLine {
    fn invocation(&mut self, inv: &Invocation) {
        self.command = inv.command.as_str();
        self.container = inv.container_id.clone();
        self.ifname = inv.ifname.clone();
        self.pod = inv.args.pod().map(|(ns, name)| format!("{ns}/{name}")).unwrap_or_default();
    }

    /// The line, with what the operation `op` noted.
    fn log(&self, plugin: &str, op: &Operation, outcome: &Outcome, took: std::time::Duration) {
        if self.command == "VERSION" {
            return;
        }
        // Errors before the config was read (bad env, bad JSON) still get their line, on stderr.
        LogConfig::default().init();
        let ms = format!("{:.1}", took.as_secs_f64() * 1000.0);
        let network = op.noted_networks().unwrap_or_else(|| self.network.clone());
        let (command, container, ifname, pod) = (self.command, &self.container, &self.ifname, &self.pod);
        // Only the selector's ADD says where its selection came from; a field that is None is left out.
        let selection = op.noted_selection();
        let selection = selection.as_deref();
        match &outcome.error {
            None => {
                tracing::info!(plugin, command, container, ifname, pod, network, selection, ips = %self.ips, duration_ms = %ms, "ok")
            }
            Some(e) => {
                tracing::error!(plugin, command, container, ifname, pod, network, selection, code = e.code, error = %e, duration_ms = %ms, "failed")
            }
        }
    }
}

/// `run_with` on the real process: env, stdin, stdout. Returns the exit code.
pub fn run(plugin: &dyn Plugin, locks: &Path, delegates: &'static dyn Delegates) -> i32 {
    let outcome = run_with(plugin, locks, delegates, |k| std::env::var(k).ok(), &mut std::io::stdin().lock());
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&outcome.stdout);
    let _ = out.flush();
    outcome.exit_code
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Answers ADD with its prevResult (or an empty result); counts its DELs on the calling thread.
    struct Echo;
    thread_local! {
        static ECHO_DELS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }
    impl Plugin for Echo {
        fn name(&self) -> &'static str {
            "echo"
        }
        fn add(&self, _: &Invocation, conf: &PluginConf, _: &Operation) -> Result<CniResult, CniError> {
            Ok(conf.prev_result()?.unwrap_or_default())
        }
        fn del(&self, _: &Invocation, _: &PluginConf, _: &Operation) -> Result<(), CniError> {
            ECHO_DELS.set(ECHO_DELS.get() + 1);
            Ok(())
        }
        fn check(&self, _: &Invocation, _: &PluginConf, _: &Operation) -> Result<(), CniError> {
            Err(CniError::new(3, "unknown container"))
        }
    }

    fn go(cmd: &str, stdin: &str) -> (i32, serde_json::Value) {
        let locks = tempfile::tempdir().unwrap();
        go_locking_in(locks.path(), cmd, stdin)
    }

    fn go_locking_in(locks: &std::path::Path, cmd: &str, stdin: &str) -> (i32, serde_json::Value) {
        let env: HashMap<&str, &str> = [
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ]
        .into_iter()
        .collect();
        let _serial = attachment_lock::tests::serial();
        let o = run_with(
            &Echo,
            locks,
            &crate::platform::cni::delegate::ExecDelegates,
            |k| env.get(k).map(|v| v.to_string()),
            &mut stdin.as_bytes(),
        );
        (o.exit_code, serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null))
    }

    #[test]
    fn add_keeps_the_attachments_lock_file_for_the_del_which_removes_it() {
        let locks = tempfile::tempdir().unwrap();
        let conf = r#"{"cniVersion":"1.0.0","name":"n","type":"echo"}"#;
        assert_eq!(go_locking_in(locks.path(), "ADD", conf).0, 0);
        assert!(attachment_lock::path(locks.path(), "c1", "eth0").exists());
        assert_eq!(go_locking_in(locks.path(), "CHECK", conf).0, 1);
        assert!(attachment_lock::path(locks.path(), "c1", "eth0").exists(), "a failed CHECK keeps it");
        assert_eq!(go_locking_in(locks.path(), "DEL", conf).0, 0);
        assert!(!attachment_lock::path(locks.path(), "c1", "eth0").exists());
        assert_eq!(go_locking_in(locks.path(), "DEL", conf).0, 0, "DEL is idempotent, lock file or not");
    }

    #[test]
    fn add_prints_result_in_config_version() {
        let (rc, out) = go(
            "ADD",
            r#"{"cniVersion":"0.3.1","name":"n","type":"echo","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}}"#,
        );
        assert_eq!(rc, 0);
        assert_eq!(out["cniVersion"], "0.3.1");
        assert_eq!(out["ips"][0]["version"], "4");
    }

    /// How a conf declares a legacy version (explicitly, not at all, empty), and the version printed.
    const LEGACY_VERSION_KEYS: [(&str, &str); 3] =
        [(r#""cniVersion":"0.2.0","#, "0.2.0"), ("", "0.1.0"), (r#""cniVersion":"","#, "0.1.0")];

    #[test]
    fn legacy_versions_print_the_0_2_0_shape() {
        let prev = r#""prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1"}],"routes":[{"dst":"10.0.0.0/8"}]}"#;
        for (version_key, printed) in LEGACY_VERSION_KEYS {
            let (rc, out) = go("ADD", &format!(r#"{{{version_key}"name":"n","type":"echo",{prev}}}"#));
            assert_eq!(rc, 0, "{out}");
            assert_eq!(
                out,
                serde_json::json!({"cniVersion": printed, "dns": {},
                    "ip4": {"ip": "10.0.0.2/24", "gateway": "10.0.0.1", "routes": [{"dst": "10.0.0.0/8"}]}})
            );
        }
    }

    #[test]
    fn legacy_versions_refuse_check_as_libcni_does() {
        for (version_key, printed) in LEGACY_VERSION_KEYS {
            // As libcni's skel answers: code 1, whatever the plugin would have said.
            let (rc, out) = go("CHECK", &format!(r#"{{{version_key}"name":"n","type":"echo"}}"#));
            assert_eq!(
                (rc, out["code"].as_u64(), out["msg"].as_str()),
                (1, Some(1), Some("config version does not allow CHECK"))
            );
            assert!(out["details"].as_str().unwrap().contains(printed), "{out}");
        }
    }

    #[test]
    fn legacy_versions_still_delete() {
        for (version_key, _) in LEGACY_VERSION_KEYS {
            assert_eq!(go("DEL", &format!(r#"{{{version_key}"name":"n","type":"echo"}}"#)).0, 0);
        }
    }

    #[test]
    fn an_add_whose_result_a_legacy_version_cannot_hold_is_rolled_back() {
        let dels = ECHO_DELS.get();
        let (rc, out) = go("ADD", r#"{"cniVersion":"0.2.0","name":"n","type":"echo"}"#);
        assert_eq!((rc, out["code"].as_u64()), (1, Some(1)), "{out}");
        assert!(out["msg"].as_str().unwrap().contains("no IP address"), "{out}");
        assert_eq!(ECHO_DELS.get(), dels + 1, "the ADD was undone by a DEL");
    }

    #[test]
    fn errors_are_json_on_stdout_with_version() {
        let (rc, out) = go("CHECK", r#"{"cniVersion":"1.0.0","name":"n","type":"echo"}"#);
        assert_eq!((rc, out["code"].as_u64(), out["cniVersion"].as_str()), (1, Some(3), Some("1.0.0")));
        let (rc, out) = go("CHECK", r#"{"cniVersion":"0.3.1","name":"n","type":"echo"}"#);
        assert_eq!((rc, out["code"].as_u64()), (1, Some(1)));
        let (rc, out) = go("GC", r#"{"cniVersion":"1.0.0","name":"n","type":"echo"}"#);
        assert_eq!((rc, out["code"].as_u64()), (1, Some(1)));
        let (rc, out) = go("ADD", "{garbage");
        assert_eq!((rc, out["code"].as_u64()), (1, Some(6)));
        let (rc, out) = go("ADD", r#"{"cniVersion":"7.0.0","name":"n","type":"echo"}"#);
        assert_eq!((rc, out["code"].as_u64(), out["cniVersion"].as_str()), (1, Some(1), Some("7.0.0")));
    }

    #[test]
    fn version_command() {
        let (rc, out) = go("VERSION", "");
        assert_eq!(rc, 0);
        assert_eq!(out["supportedVersions"].as_array().unwrap().len(), 7);
        assert_eq!(out["supportedVersions"][0], "0.1.0");
        let (_, out) = go("VERSION", r#"{"cniVersion":"0.4.0"}"#);
        assert_eq!(out["cniVersion"], "0.4.0");
    }
}
