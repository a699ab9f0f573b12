//! A private containerd, as a Kubernetes node runs it, that touches nothing of the machine's own.
//!
//! Everything lives under one run directory (`/tmp/yh-genie-cri.<test pid>.<random>`,
//! testkit::run_dir): config, root, state, the gRPC socket, the log. It runs inside a "node" made of
//! two namespaces (testkit::node_namespaces):
//! - the test's node netns, so the plugins it execs make their bridges, host veths and NAT rules
//!   there and never on the machine's interfaces;
//! - a mount namespace of its own, held open by a `holder` process so that a restarted containerd
//!   finds the mounts of the first one (the pod netns bind mounts and the sandboxes' rootfs), as it
//!   does on a real node. In it `/run` is a fresh tmpfs, because containerd 1.6 puts shim sockets
//!   and runc state under `/run/containerd` whatever its configuration says; `/var/lib` is a
//!   copy-on-write view whose writes land in the run dir (`var-lib/upper`), because libcni in
//!   containerd caches results in `/var/lib/cni` whatever its configuration says; and `/sys` is the
//!   node netns's, as `ip netns exec` makes it (with the machine's cgroup hierarchies moved onto it,
//!   for runc).
//!
//! The test process sees none of those mounts; it reads the node's files through
//! `/proc/<holder>/root` and enters a sandbox's netns through its pause process's
//! `/proc/<pid>/ns/net`.
//!
//! Sandboxes go into cgroups under `/<run directory name>/`. Shutting down (or dropping, when a
//! test fails) ends the run: every process whose command line or working directory is in the run
//! directory (holder, containerd, shims, installer) or that is in its cgroups (pause), then the
//! cgroups. The mounts go with the mount namespace.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::netns::Netns;
use testkit::node_namespaces::NodeNamespaces;
use testkit::process::{must, terminate};
use testkit::run_dir::RunDir;

/// How long containerd has to start, stop, or become ready.
const PATIENCE: Duration = Duration::from_secs(30);

/// The private containerd, the namespaces it runs in, and the run they belong to.
pub struct Containerd {
    run: RunDir,
    namespaces: NodeNamespaces,
    daemon: Option<Child>,
}

impl Containerd {
    /// Set up the node's mount namespace in `node` and start containerd there, in `run`, with a CRI
    /// plugin whose CNI bin and conf dirs are `cni_bin` and `cni_conf` and whose sandbox image is
    /// `sandbox_image` (which must then be imported).
    pub fn start(run: RunDir, node: &Netns, cni_bin: &Path, cni_conf: &Path, sandbox_image: &str) -> Self {
        let dir = run.path();
        for sub in ["root", "state", "opt", "cgroup", "var-lib/upper", "var-lib/work"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let config = testkit::containerd::config(dir, &dir.join("containerd.sock"), cni_bin, cni_conf, sandbox_image);
        std::fs::write(dir.join("containerd.toml"), config).unwrap();
        let namespaces = start_holder(dir, node);
        let mut containerd = Containerd { run, namespaces, daemon: None };
        containerd.start_daemon();
        containerd
    }

    /// The run directory: everything of the node is under it.
    pub fn run_dir(&self) -> &Path {
        self.run.path()
    }

    pub fn socket(&self) -> PathBuf {
        self.run_dir().join("containerd.sock")
    }

    pub fn log(&self) -> PathBuf {
        self.run.log("containerd")
    }

    /// The last lines of containerd's log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.run.log_tail("containerd", 30)
    }

    /// `program` to be run inside the node: its netns and mount namespace.
    pub fn node_command(&self, program: &str) -> Command {
        self.namespaces.command(program)
    }

    /// A path of the node's mount namespace, as the test process reaches it.
    pub fn node_path(&self, path: &str) -> PathBuf {
        self.namespaces.path(path)
    }

    /// Files the node's processes wrote under `/var/lib`.
    pub fn var_lib_files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        testkit::inspect::walk(&self.run_dir().join("var-lib/upper"), &mut |p| files.push(p.to_path_buf()));
        files
    }

    /// Mount points in the node's mount namespace.
    pub fn node_mounts(&self) -> Vec<String> {
        self.namespaces.mounts()
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
            .arg(self.run_dir().join("containerd.toml"))
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
        let mut own = vec![self.namespaces.holder_pid()];
        own.extend(self.daemon.as_ref().map(Child::id));
        self.run
            .processes()
            .into_iter()
            .filter(|(pid, _)| !own.contains(pid))
            .map(|(pid, cmd)| format!("{pid} {cmd}"))
            .collect()
    }

    /// The cgroup parent for a sandbox of the pod `pod_uid`, like the kubelet's `/kubepods/.../pod<uid>`.
    pub fn cgroup_parent(&self, pod_uid: &str) -> String {
        format!("/{}/pod{pod_uid}", self.run.name())
    }

    /// Stop containerd, then end everything else of the run. Returns what was still running once
    /// containerd had stopped, apart from the holder: shims or sandboxes left behind.
    pub fn shutdown(&mut self) -> Vec<String> {
        if self.daemon.is_some() {
            self.stop_daemon();
        }
        let left = self.other_processes();
        self.run.end();
        left
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.run.end();
        if let Some(mut daemon) = self.daemon.take() {
            let _ = daemon.wait();
        }
    }
}

/// The holder of the node's mount namespace: a fresh `/run`, a copy-on-write `/var/lib` and the
/// node netns's `/sys` (see the module's doc); its working directory is the run dir.
fn start_holder(dir: &Path, node: &Netns) -> NodeNamespaces {
    const SCRIPT: &str = r#"set -e
mount --rbind /sys/fs/cgroup "$1/cgroup"
mount -t sysfs sysfs /sys
mount --move "$1/cgroup" /sys/fs/cgroup
mount -t tmpfs -o mode=0755 yh-genie-cri-run /run
mount -t overlay -o "lowerdir=/var/lib,upperdir=$1/var-lib/upper,workdir=$1/var-lib/work" yh-genie-cri-var-lib /var/lib
cd "$1"
echo ready
exec sleep infinity"#;
    NodeNamespaces::hold(node, SCRIPT, "yh-genie-cri-node", &[dir.as_os_str()])
}

/// The directory of the `containerd`, `containerd-shim-runc-v2` and `ctr` to run:
/// `YH_GENIE_CONTAINERD_BIN` when set (`scripts/test.sh --cri` runs the suite a second time with
/// the containerd 2.x that scripts/containerd2.sh builds), else none: Debian's 1.6, on `PATH`.
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

/// Fail loudly when containerd or runc is missing: scripts/prereqs.sh installs them.
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
