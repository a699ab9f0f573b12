//! Shared support for the root integration tests: throwaway network namespaces, a CNI bin dir with
//! this binary under every plugin name beside Debian's reference plugins, and a small CNI driver that
//! calls plugins exactly as a runtime does (env, stdin, exec, exit status, stdout JSON); for
//! tests/cri.rs, a private containerd node, a CRI v1 client and the pause image.
#![allow(dead_code)]

pub mod agent;
pub mod apiserver;
pub mod cluster;
pub mod containerd;
pub mod cri;
pub mod cri_node;
pub mod lan;
pub mod node;
pub mod pause_image;
pub mod rng;

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Where Debian's containernetworking-plugins puts the reference plugins.
pub const REFERENCE_PLUGINS: &str = "/usr/lib/cni";

pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Root integration tests need root and the reference plugins; the README's test command runs as root.
/// Outside root they fail loudly instead of passing silently.
pub fn require_root() {
    assert!(is_root(), "this integration test needs root (network namespaces); run the README's test command");
    assert!(Path::new(REFERENCE_PLUGINS).join("host-local").exists(), "apt-get install containernetworking-plugins");
}

/// A unique short name for namespaces, bridges, container ids in this test process.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}{}x{}", std::process::id() % 100000, N.fetch_add(1, Ordering::Relaxed))
}

/// Print a line of a test's report where the test harness does not capture it, so that it shows in
/// the test command's output whether the test passes or fails.
pub fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Writes an executable file (a fake plugin, an old binary) without this process ever holding it
/// open for writing: a test thread forking a plugin at that moment would hand the descriptor to its
/// child until the child execs, and an exec of the file in that window fails with ETXTBSY ("Text
/// file busy"). A short-lived `sh` writes it instead and has exited before anything runs it.
pub fn write_executable(path: &Path, contents: impl AsRef<[u8]>) {
    let mut writer = Command::new("/bin/sh")
        .args(["-c", r#"cat >"$1" && chmod 755 "$1""#, "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    writer.stdin.take().unwrap().write_all(contents.as_ref()).unwrap();
    assert!(writer.wait().unwrap().success(), "writing {}", path.display());
}

pub fn sh(cmd: &str) -> (bool, String) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().expect("sh runs");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), s)
}

/// `sh` that must succeed.
pub fn must(cmd: &str) -> String {
    let (ok, out) = sh(cmd);
    assert!(ok, "command failed: {cmd}\n{out}");
    out
}

/// A named network namespace (`ip netns add`), deleted on drop, even when the test panics.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> Self {
        let name = unique(prefix);
        must(&format!("ip netns add {name}"));
        must(&format!("ip netns exec {name} ip link set lo up"));
        Netns { name }
    }
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }
    /// Run a shell command inside the namespace.
    pub fn exec(&self, cmd: &str) -> (bool, String) {
        sh(&format!("ip netns exec {} sh -c '{}'", self.name, cmd.replace('\'', r"'\''")))
    }
    pub fn must(&self, cmd: &str) -> String {
        let (ok, out) = self.exec(cmd);
        assert!(ok, "in netns {}: {cmd}\n{out}", self.name);
        out
    }

    /// Delete it now, as a runtime does when it tears a sandbox down (then dropping does nothing).
    pub fn delete(&self) {
        must(&format!("ip netns delete {}", self.name));
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = sh(&format!("ip netns delete {}", self.name));
    }
}

/// A temp dir holding a CNI bin dir (this binary under each plugin name + links to the reference
/// plugins), a conf dir and data dirs. Everything lives under it, so parallel tests never share state.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    /// The netns that plays the node: plugins and cnidrive run inside it (`ip netns exec`), so bridges,
    /// host veths, routes and NAT rules are made there, never on the machine's own interfaces.
    pub node: Option<String>,
}

impl Sandbox {
    /// A sandbox whose plugins run inside the `node` netns.
    pub fn on_node(node: &Netns) -> Self {
        Sandbox { node: Some(node.name.clone()), ..Self::new() }
    }

    /// A command that runs `program` in the node netns if there is one, taking attachment locks in
    /// `locks()`.
    pub fn command(&self, program: &Path) -> Command {
        let mut c = match &self.node {
            Some(node) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", node]).arg(program);
                c
            }
            None => Command::new(program),
        };
        c.env(yh_genie::cni::attachment_lock::DIR_VAR, self.locks());
        c
    }

    /// The attachment lock files' directory of plugins run by `command`.
    pub fn locks(&self) -> PathBuf {
        self.path().join("locks")
    }

    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_yh-genie"));
        // Laid out as the installer lays them out: the binary under its own name and every plugin's.
        for name in std::iter::once(yh_genie::selector::NAME).chain(yh_genie::plugins::NAMES) {
            std::os::unix::fs::symlink(&exe, bin.join(name)).unwrap();
        }
        if let Ok(entries) = std::fs::read_dir(REFERENCE_PLUGINS) {
            for e in entries.flatten() {
                let _ = std::os::unix::fs::symlink(e.path(), bin.join(e.file_name()));
            }
        }
        Sandbox { dir, node: None }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn bin(&self) -> PathBuf {
        self.path().join("bin")
    }
    /// Write a file under the sandbox, creating directories; returns its path.
    pub fn write(&self, rel: &str, contents: &str) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, contents).unwrap();
        p
    }
}

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
