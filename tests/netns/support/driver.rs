//! A small CNI driver that calls plugins exactly as a runtime does (env, stdin, exec, exit status,
//! stdout JSON), from a sandbox's bin dir and in its node netns; and libcni through the project's
//! drivers (tools/cnidrive), as containerd and CRI-O call plugins.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use testkit::sandbox::{Plugins, Sandbox};

/// yh-genie as the sandboxes install it.
pub const PLUGINS: Plugins = Plugins {
    selector: yh_genie::programs::selector::NAME,
    plugins: &yh_genie::programs::plugins::NAMES,
    lock_dir_var: yh_genie::node::paths::LOCK_DIR_VAR,
};

/// What a plugin invocation gave back.
#[derive(Debug)]
pub struct Reply {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
    /// Assert success and return the JSON result (or Null for empty stdout).
    pub fn ok(&self) -> Value {
        assert_eq!(self.code, 0, "plugin failed: {self:?}");
        if self.stdout.trim().is_empty() { Value::Null } else { self.json() }
    }
    /// Assert a CNI error and return it.
    pub fn err(&self) -> Value {
        assert_ne!(self.code, 0, "plugin unexpectedly succeeded: {self:?}");
        let v = self.json();
        assert!(v["code"].is_u64() && v["msg"].is_string(), "not a CNI error object: {v}");
        v
    }
}

/// One CNI call as a runtime makes it.
pub struct Call<'a> {
    pub plugin: &'a str,
    pub command: &'a str,
    pub container_id: &'a str,
    pub netns: &'a str,
    pub ifname: &'a str,
    pub args: &'a str,
    pub config: &'a str,
}

/// Exec `plugin` from the sandbox's bin dir with the CNI env and `config` on stdin.
pub fn cni(sb: &Sandbox, call: &Call) -> Reply {
    cni_env(sb, call, &[])
}

/// `cni` with extra environment (e.g. an API server address).
pub fn cni_env(sb: &Sandbox, call: &Call, extra: &[(&str, &str)]) -> Reply {
    let mut child = cni_command(sb, call, extra).spawn().expect("plugin starts");
    child.stdin.take().unwrap().write_all(call.config.as_bytes()).unwrap();
    Reply::from(child.wait_with_output().unwrap())
}

/// The command `cni_env` runs, not yet started, with stdin, stdout and stderr piped; the caller
/// writes `call.config` to its stdin.
pub fn cni_command(sb: &Sandbox, call: &Call, extra: &[(&str, &str)]) -> Command {
    let mut command = sb.command(&sb.bin().join(call.plugin));
    command
        .env("CNI_COMMAND", call.command)
        .env("CNI_CONTAINERID", call.container_id)
        .env("CNI_NETNS", call.netns)
        .env("CNI_IFNAME", call.ifname)
        .env("CNI_ARGS", call.args)
        .env("CNI_PATH", sb.bin())
        .envs(extra.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

impl From<std::process::Output> for Reply {
    fn from(out: std::process::Output) -> Self {
        Reply {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The project's libcni driver (tools/cnidrive), where scripts/prereqs.sh builds it; `CNIDRIVE`
/// overrides. Tests that need it fail, naming the command that builds it, when it is absent.
pub fn cnidrive() -> PathBuf {
    let p = std::env::var_os("CNIDRIVE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools/cnidrive"));
    assert!(p.exists(), "{} is missing: scripts/prereqs.sh builds it (the README's commands run it)", p.display());
    p
}

/// The libcni driver built in module mode against the current libcni (CNI 1.1.0: version lists,
/// GC, STATUS), where scripts/prereqs.sh builds it; `CNIDRIVE11` overrides.
pub fn cnidrive11() -> PathBuf {
    let p = std::env::var_os("CNIDRIVE11")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools/cnidrive11"));
    assert!(p.exists(), "{} is missing: scripts/prereqs.sh builds it", p.display());
    p
}

/// Run a libcni driver (`cnidrive()` or `cnidrive11()`) with `args`, plugins from the sandbox's bin
/// dir, libcni's cache under the sandbox, and the runtime's capability arguments `cap_args` (JSON).
pub fn libcni_run(sb: &Sandbox, driver: &Path, args: &[&str], cap_args: Option<&Value>) -> Reply {
    let mut command = sb.command(driver);
    command.args(args).env("CNI_PATH", sb.bin()).env("CNI_CACHE_DIR", sb.path().join("libcni-cache"));
    if let Some(cap_args) = cap_args {
        command.env("CNI_CAP_ARGS", cap_args.to_string());
    }
    Reply::from(command.output().unwrap())
}

/// Run cnidrive `cmd` (add|check|del) on a conflist file; libcni's cache goes under the sandbox.
/// On failure cnidrive prints the CNI error on stdout: exit 1 for a plugin's, 2 for libcni's own.
pub fn cnidrive_run(
    sb: &Sandbox,
    cmd: &str,
    conflist: &Path,
    netns: &str,
    cid: &str,
    ifname: &str,
    args: &str,
) -> Reply {
    let out = sb
        .command(&cnidrive())
        .args([cmd, &conflist.display().to_string(), netns, cid, ifname, args])
        .env("CNI_PATH", sb.bin())
        .env("CNI_CACHE_DIR", sb.path().join("libcni-cache"))
        .output()
        .unwrap();
    Reply::from(out)
}
