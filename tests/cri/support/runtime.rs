//! A private container runtime, as a Kubernetes node runs it, that touches nothing of the machine's
//! own: containerd (`containerd`: Debian's 1.6, or a 2.x build in `YH_GENIE_CONTAINERD_BIN`) or
//! CRI-O (`crio`: scripts/crio.sh's build in `YH_GENIE_CRIO_BIN`), whichever `Engine::chosen` says.
//!
//! Everything lives under one run directory (`/tmp/yh-genie-cri.<test pid>.<random>`,
//! testkit::run_dir): config, storage, state, the gRPC socket, the log. It runs inside a "node" made
//! of two namespaces (testkit::node_namespaces):
//! - the test's node netns, so the plugins it execs make their bridges, host veths and NAT rules
//!   there and never on the machine's interfaces;
//! - a mount namespace of its own, held open by a `holder` process so that a restarted runtime
//!   finds the mounts of the first one (the pod netns bind mounts and the sandboxes' rootfs), as it
//!   does on a real node. In it `/run` is a fresh tmpfs, because containerd 1.6 puts shim sockets
//!   and runc state under `/run/containerd` whatever its configuration says; `/var/lib` is a
//!   copy-on-write view whose writes land in the run dir (`var-lib/upper`), because libcni, in
//!   containerd as in CRI-O, caches results in `/var/lib/cni` whatever their configuration says;
//!   and `/sys` is the node netns's, as `ip netns exec` makes it (with the machine's cgroup
//!   hierarchies moved onto it, for runc).
//!
//! The test process sees none of those mounts; it reads the node's files through
//! `/proc/<holder>/root` and enters a sandbox's netns through its pause process's
//! `/proc/<pid>/ns/net`.
//!
//! Sandboxes go into cgroups under `/<run directory name>/`. Shutting down (or dropping, when a
//! test fails) ends the run: every process whose command line or working directory is in the run
//! directory (holder, runtime, shims or conmon, installer) or that is in its cgroups (pause), then
//! the cgroups. The mounts go with the mount namespace.

use super::{containerd, crio};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::netns::Netns;
use testkit::node_namespaces::NodeNamespaces;
use testkit::process::terminate;
use testkit::run_dir::RunDir;

/// How long the runtime has to start, stop, or become ready.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Which runtime the suite runs under.
#[derive(Clone, Debug)]
pub enum Engine {
    /// containerd's CRI plugin: `bin` is the dir of a build (containerd, its runc shim, ctr), or
    /// none for Debian's 1.6 on `PATH`.
    Containerd { bin: Option<PathBuf> },
    /// CRI-O: `bin` holds crio and pinns (scripts/crio.sh).
    Crio { bin: PathBuf },
}

impl Engine {
    /// `YH_GENIE_CRIO_BIN` when set (`scripts/test.sh --matrix` runs the suite under CRI-O);
    /// else containerd, from `YH_GENIE_CONTAINERD_BIN` when set (`scripts/test.sh --cri` runs the
    /// suite again with containerd 2.x), else Debian's.
    pub fn chosen() -> Self {
        let dir = |var: &str| std::env::var_os(var).filter(|d| !d.is_empty()).map(PathBuf::from);
        match dir("YH_GENIE_CRIO_BIN") {
            Some(bin) => Engine::Crio { bin },
            None => Engine::Containerd { bin: dir("YH_GENIE_CONTAINERD_BIN") },
        }
    }

    /// The runtime's name in messages and log file names.
    pub fn name(&self) -> &'static str {
        match self {
            Engine::Containerd { .. } => "containerd",
            Engine::Crio { .. } => "crio",
        }
    }

    /// Fail loudly when a program the runtime needs is missing.
    pub fn require(&self) {
        match self {
            Engine::Containerd { bin } => containerd::require(bin.as_deref()),
            Engine::Crio { bin } => crio::require(bin),
        }
    }
}

/// The private runtime, the namespaces it runs in, and the run they belong to.
pub struct Runtime {
    pub engine: Engine,
    run: RunDir,
    namespaces: NodeNamespaces,
    daemon: Option<Child>,
}

impl Runtime {
    /// Set up the node's mount namespace in `node` and start the runtime there, in `run`, with
    /// CNI bin and conf dirs `cni_bin` and `cni_conf` and the pod sandbox image `sandbox_image`
    /// (which must then be imported).
    pub fn start(
        engine: Engine,
        run: RunDir,
        node: &Netns,
        cni_bin: &Path,
        cni_conf: &Path,
        sandbox_image: &str,
    ) -> Self {
        let dir = run.path();
        for sub in ["cgroup", "var-lib/upper", "var-lib/work"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        match &engine {
            Engine::Containerd { .. } => containerd::configure(dir, cni_bin, cni_conf, sandbox_image),
            Engine::Crio { bin } => crio::configure(dir, bin, cni_bin, cni_conf, sandbox_image),
        }
        let namespaces = start_holder(dir, node);
        let mut runtime = Runtime { engine, run, namespaces, daemon: None };
        runtime.start_daemon();
        runtime
    }

    /// The run directory: everything of the node is under it.
    pub fn run_dir(&self) -> &Path {
        self.run.path()
    }

    /// The CRI socket.
    pub fn socket(&self) -> PathBuf {
        self.run_dir().join(format!("{}.sock", self.engine.name()))
    }

    pub fn log(&self) -> PathBuf {
        self.run.log(self.engine.name())
    }

    /// The last lines of the runtime's log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.run.log_tail(self.engine.name(), 30)
    }

    /// The node's namespaces.
    pub fn namespaces(&self) -> &NodeNamespaces {
        &self.namespaces
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

    /// The mounts the runtime made for sandboxes that are still in the node's mount namespace
    /// (pod netns bind mounts, sandboxes' root filesystems and shm).
    pub fn sandbox_mounts(&self) -> Vec<String> {
        let dirs: Vec<PathBuf> = match self.engine {
            Engine::Containerd { .. } => containerd::sandbox_dirs(self.run_dir()),
            Engine::Crio { .. } => crio::sandbox_dirs(self.run_dir()),
        };
        // CRI-O's overlay storage mounts its own home (`root/overlay`, bound onto itself, private)
        // for as long as CRI-O runs: the store's, never a sandbox's.
        let store = match self.engine {
            Engine::Containerd { .. } => None,
            Engine::Crio { .. } => Some(crio::storage_home(self.run_dir())),
        };
        let sandbox_mount = |m: &String| {
            // (Not every mount under /run/netns: the machine's named netns show through, hidden by
            // the node's /run.)
            let path = Path::new(m);
            (m.starts_with("/run/netns/cni-") || dirs.iter().any(|d| path.starts_with(d)))
                && store.as_deref() != Some(path)
        };
        self.namespaces.mounts().into_iter().filter(sandbox_mount).collect()
    }

    /// The pod network namespaces the runtime still holds (their names).
    pub fn pod_netns(&self) -> Vec<String> {
        match self.engine {
            Engine::Containerd { .. } => testkit::inspect::list_dir(&self.node_path("/run/netns")),
            Engine::Crio { .. } => testkit::inspect::list_dir(&crio::netns_dir(self.run_dir())),
        }
    }

    /// Import an image (an archive of `testkit::oci_image`) for the CRI, under its name.
    pub fn import(&self, archive: &Path) {
        match &self.engine {
            Engine::Containerd { bin } => containerd::import(self, bin.as_deref(), archive),
            Engine::Crio { .. } => crio::import(self, archive),
        }
    }

    /// Start the runtime (again); returns once its socket is there.
    pub fn start_daemon(&mut self) {
        assert!(self.daemon.is_none(), "{} is already running", self.engine.name());
        let _ = std::fs::remove_file(self.socket());
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log()).unwrap();
        let mut command = match &self.engine {
            Engine::Containerd { bin } => containerd::daemon(self, bin.as_deref()),
            Engine::Crio { bin } => crio::daemon(self, bin),
        };
        let daemon = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", self.engine.name()));
        self.daemon = Some(daemon);
        let started = Instant::now();
        while !self.socket().exists() {
            if let Some(status) = self.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!("{} exited ({status}) before it listened:\n{}", self.engine.name(), self.log_tail());
            }
            assert!(
                started.elapsed() < PATIENCE,
                "{} did not listen within {PATIENCE:?}:\n{}",
                self.engine.name(),
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the runtime as a service manager does (SIGTERM); its shims or conmons, and so the
    /// sandboxes, stay.
    pub fn stop_daemon(&mut self) {
        let mut daemon = self.daemon.take().expect("the runtime is running");
        if terminate(&mut daemon).is_none() {
            panic!("{} did not stop within {PATIENCE:?} of SIGTERM:\n{}", self.engine.name(), self.log_tail());
        }
    }

    /// Processes of this run other than the holder and the runtime itself, e.g. shims, conmons and
    /// pause processes, as "pid command line".
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

    /// Stop the runtime, then end everything else of the run. Returns what was still running once
    /// the runtime had stopped, apart from the holder: shims, conmons or sandboxes left behind.
    pub fn shutdown(&mut self) -> Vec<String> {
        if self.daemon.is_some() {
            self.stop_daemon();
        }
        let left = self.other_processes();
        self.run.end();
        left
    }
}

impl Drop for Runtime {
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

/// The `PATH` of a service's environment on the node, which its plugins inherit: `first`'s dir
/// before the system's.
pub fn service_path(first: Option<&Path>) -> String {
    let system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    first.map_or_else(|| system.to_string(), |dir| format!("{}:{system}", dir.display()))
}

/// Fail loudly when one of `programs` is not on `PATH`, naming what installs it.
pub fn require_programs(programs: &[String], installed_by: &str) {
    for program in programs {
        let found = testkit::process::must(&format!("command -v {program} || true"));
        assert!(!found.trim().is_empty(), "{program} is missing: {installed_by}");
    }
}
