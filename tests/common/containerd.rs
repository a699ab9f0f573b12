//! A private containerd, as a Kubernetes node runs it, that touches nothing of the machine's own.
//!
//! Everything lives under one run directory (`/tmp/yh-genie-cri.<test pid>.<random>`): config,
//! root, state, the gRPC socket. It runs inside a "node" made of two namespaces:
//! - the test's node netns, so the plugins it execs make their bridges, host veths and NAT rules
//!   there and never on the machine's interfaces;
//! - a mount namespace of its own (a slave of the machine's, so nothing propagates back), held open
//!   by a `holder` process so that a restarted containerd finds the mounts of the first one (the pod
//!   netns bind mounts and the sandboxes' rootfs), as it does on a real node. In it `/run` is a fresh
//!   tmpfs, because containerd 1.6 puts shim sockets and runc state under `/run/containerd` whatever
//!   its configuration says; `/var/lib` is a copy-on-write view whose writes land in the run dir
//!   (`var-lib/upper`), because libcni in containerd caches results in `/var/lib/cni` whatever its
//!   configuration says; and `/sys` is the node netns's, as `ip netns exec` makes it (with the
//!   machine's cgroup hierarchies moved onto it, for runc).
//!
//! The test process sees none of those mounts; it reads the node's files through
//! `/proc/<holder>/root` and enters a sandbox's netns through its pause process's
//! `/proc/<pid>/ns/net`.
//!
//! Sandboxes go into cgroups under `/<run directory name>/`. Shutting down (or dropping, when a
//! test fails) kills every process of the run: those whose command line or working directory is in
//! the run directory (holder, containerd, shims, installer) and those in its cgroups (pause), then
//! removes the cgroups. The mounts go with the mount namespace. `RunDir::new` does the same for the
//! run directories of earlier test processes that were killed before they could clean up.

use super::{Netns, must};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const RUN_PREFIX: &str = "yh-genie-cri.";
/// How long containerd has to start, stop, or become ready.
const PATIENCE: Duration = Duration::from_secs(30);

/// The run directory of one private containerd, removed on drop.
pub struct RunDir {
    dir: tempfile::TempDir,
}

impl RunDir {
    /// A new run directory, after cleaning up what killed test processes left.
    pub fn new() -> Self {
        sweep_dead_runs();
        let prefix = format!("{RUN_PREFIX}{}.", std::process::id());
        let dir = tempfile::Builder::new().prefix(&prefix).tempdir().expect("run dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        RunDir { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// The private containerd and the namespaces it runs in.
pub struct Containerd {
    dir: PathBuf,
    holder: Child,
    daemon: Option<Child>,
}

impl Containerd {
    /// Set up the node's mount namespace in `node` and start containerd there with a CRI plugin
    /// whose CNI bin and conf dirs are `cni_bin` and `cni_conf` and whose sandbox image is
    /// `sandbox_image` (which must then be imported).
    pub fn start(run: &RunDir, node: &Netns, cni_bin: &Path, cni_conf: &Path, sandbox_image: &str) -> Self {
        let dir = run.path().to_path_buf();
        // What an earlier test process killed mid-run left is found by the run dir's name: its
        // processes and cgroups, and this netns.
        std::fs::write(dir.join("netns"), &node.name).unwrap();
        for sub in ["root", "state", "opt", "cgroup", "var-lib/upper", "var-lib/work"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::write(dir.join("containerd.toml"), config(&dir, cni_bin, cni_conf, sandbox_image)).unwrap();
        let holder = start_holder(&dir, node);
        let mut containerd = Containerd { dir, holder, daemon: None };
        containerd.start_daemon();
        containerd
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }

    /// The last lines of containerd's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// `program` to be run inside the node: its netns and mount namespace.
    pub fn node_command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["--target", &self.holder.id().to_string(), "--mount", "--net", "--"]).arg(program);
        c
    }

    /// A path of the node's mount namespace, as the test process reaches it.
    pub fn node_path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.holder.id())).join(path.trim_start_matches('/'))
    }

    /// Files the node's processes wrote under `/var/lib`.
    pub fn var_lib_files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        testkit::inspect::walk(&self.dir.join("var-lib/upper"), &mut |p| files.push(p.to_path_buf()));
        files
    }

    /// Mount points in the node's mount namespace.
    pub fn node_mounts(&self) -> Vec<String> {
        let info = std::fs::read_to_string(format!("/proc/{}/mountinfo", self.holder.id())).unwrap();
        info.lines().filter_map(|l| l.split(' ').nth(4)).map(String::from).collect()
    }

    /// Import an image archive into the CRI plugin's namespace, unpacked for its snapshotter.
    pub fn import(&self, archive: &Path) {
        let out = self
            .node_command("timeout")
            .args([&PATIENCE.as_secs().to_string(), &program("ctr")])
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", "k8s.io", "images", "import"])
            .arg(archive)
            .output()
            .unwrap();
        assert!(out.status.success(), "ctr images import: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Start containerd (again); returns once its socket is there.
    pub fn start_daemon(&mut self) {
        assert!(self.daemon.is_none(), "containerd is already running");
        let _ = std::fs::remove_file(self.socket());
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log()).unwrap();
        // A service's environment, not the test's: plugins inherit containerd's.
        let daemon = self
            .node_command(&program("containerd"))
            .env_clear()
            .env("PATH", service_path())
            .arg("--config")
            .arg(self.dir.join("containerd.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("containerd starts (apt-get install containerd runc)");
        self.daemon = Some(daemon);
        let started = Instant::now();
        while !self.socket().exists() {
            if let Some(status) = self.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!("containerd exited ({status}) before it listened:\n{}", self.log_tail());
            }
            assert!(
                started.elapsed() < PATIENCE,
                "containerd did not listen within {PATIENCE:?}:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop containerd as a service manager does (SIGTERM); its shims, and so the sandboxes, stay.
    pub fn stop_daemon(&mut self) {
        let mut daemon = self.daemon.take().expect("containerd is running");
        if terminate(&mut daemon).is_none() {
            panic!("containerd did not stop within {PATIENCE:?} of SIGTERM:\n{}", self.log_tail());
        }
    }

    /// Processes of this run other than the holder and containerd itself, e.g. shims and pause
    /// processes, as "pid command line".
    pub fn other_processes(&self) -> Vec<String> {
        let mut own = vec![self.holder.id()];
        own.extend(self.daemon.as_ref().map(Child::id));
        run_processes(&self.dir)
            .into_iter()
            .filter(|(pid, _)| !own.contains(pid))
            .map(|(pid, cmd)| format!("{pid} {cmd}"))
            .collect()
    }

    /// The cgroup parent for a sandbox of the pod `pod_uid`, like the kubelet's `/kubepods/.../pod<uid>`.
    pub fn cgroup_parent(&self, pod_uid: &str) -> String {
        format!("/{}/pod{pod_uid}", run_name(&self.dir))
    }

    /// Stop containerd, then end everything else of the run. Returns what was still running once
    /// containerd had stopped, apart from the holder: shims or sandboxes left behind.
    pub fn shutdown(&mut self) -> Vec<String> {
        if self.daemon.is_some() {
            self.stop_daemon();
        }
        let left = self.other_processes();
        end_run(&self.dir);
        let _ = self.holder.wait();
        left
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        end_run(&self.dir);
        let _ = self.holder.wait();
        if let Some(mut daemon) = self.daemon.take() {
            let _ = daemon.wait();
        }
    }
}

/// The configuration: everything under `dir`; the CRI plugin set up as a kubelet's node has it.
fn config(dir: &Path, cni_bin: &Path, cni_conf: &Path, sandbox_image: &str) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
# Snapshotters that cannot work here, so that their failures do not clutter the log.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # Without it runc fails writing the sandbox's oom_score_adj below the test process's own.
  restrict_oom_score_adj = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin}"
    conf_dir = "{conf}"
"#,
        bin = cni_bin.display(),
        conf = cni_conf.display(),
    )
}

/// The process that holds the node's mount namespace. It sets the namespace up, says `ready`, and
/// sleeps with its working directory in the run dir (so that it is found as part of the run).
fn start_holder(dir: &Path, node: &Netns) -> Child {
    const SCRIPT: &str = r#"set -e
mount --rbind /sys/fs/cgroup "$1/cgroup"
mount -t sysfs sysfs /sys
mount --move "$1/cgroup" /sys/fs/cgroup
mount -t tmpfs -o mode=0755 yh-genie-cri-run /run
mount -t overlay -o "lowerdir=/var/lib,upperdir=$1/var-lib/upper,workdir=$1/var-lib/work" yh-genie-cri-var-lib /var/lib
cd "$1"
echo ready
exec sleep infinity"#;
    hold_namespaces(node, SCRIPT, "yh-genie-cri-node", &[dir.as_os_str()])
}

/// A process in `netns` and a new mount namespace of its own (mounts propagate in from the host,
/// never out) running `script` (`sh -c`, as `name`, with `args`), which sets the namespace up,
/// prints `ready` and then holds it by sleeping. Panics with the script's stderr if it fails.
pub fn hold_namespaces(netns: &Netns, script: &str, name: &str, args: &[&std::ffi::OsStr]) -> Child {
    let mut holder = Command::new("unshare")
        .args(["--mount", "--propagation", "slave", "--", "nsenter"])
        .arg(format!("--net={}", netns.path().display()))
        .args(["--", "sh", "-c", script, name])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare runs");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line).unwrap();
    if line.trim() != "ready" {
        let _ = holder.kill();
        let out = holder.wait_with_output().unwrap();
        panic!("setting up the node's mount namespace failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    holder
}

fn run_name(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

/// SIGTERM `child` and wait for it to exit; None (and SIGKILL) if it takes longer than PATIENCE.
pub fn terminate(child: &mut Child) -> Option<ExitStatus> {
    signal(child.id(), nix::sys::signal::Signal::SIGTERM);
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
}

/// Processes of the run in `dir` (pid, command line): command line or working directory in it, or
/// in one of its cgroups. Never this process.
pub fn run_processes(dir: &Path) -> Vec<(u32, String)> {
    let dir_text = dir.display().to_string();
    let cgroup = format!("/{}/", run_name(dir));
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == me {
            continue;
        }
        let proc_dir = entry.path();
        let cmdline = std::fs::read(proc_dir.join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_string();
        let in_dir = std::fs::read_link(proc_dir.join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir));
        let in_cgroup = std::fs::read_to_string(proc_dir.join("cgroup")).is_ok_and(|c| c.contains(&cgroup));
        if cmdline.contains(&dir_text) || in_dir || in_cgroup {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Kill every process of the run in `dir` and wait for them to go, then remove its cgroups.
pub fn end_run(dir: &Path) {
    let started = Instant::now();
    loop {
        let left = run_processes(dir);
        if left.is_empty() {
            break;
        }
        if started.elapsed() > PATIENCE {
            super::report(&format!("processes of {} survive SIGKILL: {left:?}", dir.display()));
            break;
        }
        for (pid, _) in left {
            signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    remove_cgroups(&run_name(dir));
}

/// Remove the cgroup `/<name>` and everything below it, in every mounted hierarchy.
fn remove_cgroups(name: &str) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() > 2 && (fields[2] == "cgroup" || fields[2] == "cgroup2") {
            remove_tree(&Path::new(fields[1]).join(name));
        }
    }
}

/// rmdir a cgroup directory's children, then itself (cgroup files cannot and need not be removed).
fn remove_tree(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// End the runs of test processes that are gone: their processes, cgroups, node netns and dir.
/// Runs of live test processes (another developer's, in parallel) are left alone.
fn sweep_dead_runs() {
    let tmp = std::env::temp_dir();
    for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(RUN_PREFIX).and_then(|rest| rest.split('.').next()) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let alive = std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.starts_with("cri-"));
        if alive {
            continue;
        }
        let dir = entry.path();
        super::report(&format!("cleaning up {} left by a killed test run", dir.display()));
        end_run(&dir);
        if let Ok(netns) = std::fs::read_to_string(dir.join("netns")) {
            let _ = super::sh(&format!("ip netns delete {}", netns.trim()));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The directory of the `containerd`, `containerd-shim-runc-v2` and `ctr` to run:
/// `YH_GENIE_CONTAINERD_BIN` when set (scripts/test.sh runs tests/cri.rs a second time with the
/// containerd 2.x that scripts/containerd2.sh builds), else none: Debian's 1.6, on `PATH`.
pub fn bin_dir() -> Option<PathBuf> {
    std::env::var_os("YH_GENIE_CONTAINERD_BIN").filter(|d| !d.is_empty()).map(PathBuf::from)
}

/// `program` (`containerd`, `ctr`) as the node runs it: from `bin_dir` when there is one.
pub fn program(program: &str) -> String {
    bin_dir().map_or_else(|| program.to_string(), |dir| dir.join(program).display().to_string())
}

/// The `PATH` of containerd's service environment, which its plugins and shims inherit and in which
/// it finds its shim: `bin_dir` first.
pub fn service_path() -> String {
    let system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    bin_dir().map_or_else(|| system.to_string(), |dir| format!("{}:{system}", dir.display()))
}

/// The major version of the containerd the tests run (`containerd --version`: `... v2.4.2 ...`,
/// `... 1.6.20~ds1 ...`).
pub fn major_version() -> u32 {
    let out = must(&format!("{} --version", program("containerd")));
    let version = out.split_whitespace().nth(2).unwrap_or_else(|| panic!("containerd --version: {out}"));
    let major = version.trim_start_matches('v').split('.').next().and_then(|m| m.parse().ok());
    major.unwrap_or_else(|| panic!("containerd --version: {out}"))
}

/// Fail loudly when containerd or runc is missing: the README's test command installs them.
pub fn require_containerd() {
    let containerd = ["containerd", "containerd-shim-runc-v2", "ctr"].map(program);
    let tools = ["runc", "gcc", "unshare", "nsenter"].map(String::from);
    for program in containerd.iter().chain(&tools) {
        let found = must(&format!("command -v {program} || true"));
        assert!(
            !found.trim().is_empty(),
            "{program} is missing: run scripts/prereqs.sh (apt-get install containerd runc)"
        );
    }
}
