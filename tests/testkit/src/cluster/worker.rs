//! The cluster's worker node: its own network namespace (an address on the underlay, `ul0`) and a private
//! mount namespace held by a `holder` process, in which the container runtime, the kubelet and
//! kube-proxy run and see what a node's root filesystem would give them (the runtime is Debian's
//! containerd 1.6, a containerd 2.x build, or CRI-O: `NodeRuntime`):
//! - `/run` and `/var/log` fresh tmpfs (pod netns mounts, shim sockets, the agent's socket, the
//!   fabric's `/run/flannel/subnet.env`, `/var/log/pods`);
//! - `/var/lib` and `/etc` copy-on-write over the machine's, writes landing in the run dir
//!   (`/var/lib/kubelet`, `/var/lib/cni`, `/etc/cni/net.d`, the static pod dir);
//! - `/opt` a tmpfs whose `/opt/cni/bin` holds Debian's reference plugins, as a node image has them
//!   (the runtime runs `loopback` from there for every sandbox);
//! - read-only files with the values the kubelet wants over the `/proc/sys` knobs it would
//!   otherwise set on the machine (`vm/overcommit_memory`, `kernel/panic`, ...);
//! - `/sys` of the node's netns, with the machine's cgroup hierarchies.
//!
//! The DaemonSet's hostPaths (`/opt/cni/bin`, `/etc/cni/net.d`, `/run/flannel`, `/run/yh-genie`)
//! are these. Containers go into cgroups under `/<run name>/<node>/`, the kubelet's cgroup root.

use super::pki::Pki;
use super::{CLUSTER_CIDR, DNS_IP, PATIENCE, control_plane::api_url};
use crate::REFERENCE_PLUGINS;
use crate::netns::Netns;
use crate::node_namespaces::NodeNamespaces;
use crate::run_dir::RunDir;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// What the kubelet wants of the machine's kernel knobs; it writes a knob that differs.
const KERNEL_KNOBS: &[(&str, &str)] = &[
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
];
pub const CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";
pub const CRIO_SOCKET: &str = "/run/crio/crio.sock";
/// The `PATH` of the node's services.
const SERVICE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The container runtime a node runs.
#[derive(Clone, Debug)]
pub enum NodeRuntime {
    /// containerd: Debian's (1.6, on `PATH`) when `bin` is none, else the build in `bin`
    /// (containerd, its runc shim and ctr: scripts/containerd2.sh's output).
    Containerd { bin: Option<PathBuf> },
    /// CRI-O: scripts/crio.sh's build in `bin` (crio, pinns), set up as testkit::crio says.
    Crio { bin: PathBuf },
}

impl NodeRuntime {
    /// Its name, in the logs' names (`node-b-crio`) and messages.
    pub fn name(&self) -> &'static str {
        match self {
            NodeRuntime::Containerd { .. } => "containerd",
            NodeRuntime::Crio { .. } => "crio",
        }
    }

    /// Its CRI socket in the node.
    pub fn socket(&self) -> &'static str {
        match self {
            NodeRuntime::Containerd { .. } => CONTAINERD_SOCKET,
            NodeRuntime::Crio { .. } => CRIO_SOCKET,
        }
    }

    /// `program` (`containerd`, `ctr`) of a containerd node, as the node runs it.
    fn containerd_program(bin: &Option<PathBuf>, program: &str) -> String {
        bin.as_ref().map_or_else(|| program.to_string(), |dir| dir.join(program).display().to_string())
    }

    /// What it says it is (`containerd --version`, the first line of `crio --version`), for reports.
    pub fn describe(&self) -> String {
        let command = match self {
            NodeRuntime::Containerd { bin } => format!("{} --version", Self::containerd_program(bin, "containerd")),
            NodeRuntime::Crio { bin } => format!("{} --version | head -1", bin.join("crio").display()),
        };
        crate::process::must(&command).trim().to_string()
    }
}

pub struct WorkerNode {
    pub name: String,
    pub ip: String,
    pub netns: Netns,
    dir: PathBuf,
    namespaces: NodeNamespaces,
    pub runtime: NodeRuntime,
    /// The runtime, the kubelet and kube-proxy: ended with the run, like every process of it.
    daemons: Vec<Child>,
}

impl WorkerNode {
    /// Set the node up and start `runtime` (with `images` imported, `sandbox_image` its pod
    /// sandbox image), the kubelet (labelled `labels`) and kube-proxy.
    pub fn start(
        run: &RunDir,
        pki: &Pki,
        bin: &Path,
        (name, ip, netns): (&str, &str, Netns),
        labels: &str,
        (runtime, sandbox_image, images): (&NodeRuntime, &str, &[PathBuf]),
    ) -> Self {
        let dir = run.path().join(name);
        for sub in ["cgroup", "var-lib/upper", "var-lib/work", "etc/upper", "etc/work", "sysctl", "containerd/root"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let mut knobs = String::new();
        for (n, (knob, value)) in KERNEL_KNOBS.iter().enumerate() {
            std::fs::write(dir.join("sysctl").join(n.to_string()), format!("{value}\n")).unwrap();
            knobs.push_str(&format!("{n} {knob}\n"));
        }
        std::fs::write(dir.join("sysctl.list"), knobs).unwrap();
        netns.must("sysctl -qw net.ipv4.ip_forward=1");
        let namespaces = start_holder(&dir, &netns);
        let mut worker = WorkerNode {
            name: name.to_string(),
            ip: ip.to_string(),
            netns,
            dir,
            namespaces,
            runtime: runtime.clone(),
            daemons: Vec::new(),
        };
        let cgroup_root = format!("/{}/{}", run.name(), name);
        make_cgroup(&cgroup_root);

        let mut daemon = match runtime {
            NodeRuntime::Containerd { bin } => {
                let config = crate::containerd::config(
                    &worker.dir.join("containerd"),
                    Path::new(CONTAINERD_SOCKET),
                    Path::new("/opt/cni/bin"),
                    Path::new("/etc/cni/net.d"),
                    sandbox_image,
                );
                std::fs::write(worker.dir.join("containerd.toml"), config).unwrap();
                let mut containerd = worker.node_command(&NodeRuntime::containerd_program(bin, "containerd"));
                let path = bin
                    .as_ref()
                    .map_or_else(|| SERVICE_PATH.to_string(), |d| format!("{}:{SERVICE_PATH}", d.display()));
                containerd.env_clear().env("PATH", path);
                containerd.arg("--config").arg(worker.dir.join("containerd.toml"));
                containerd
            }
            NodeRuntime::Crio { bin } => {
                let own = worker.dir.join("crio");
                let setup = crate::crio::CrioSetup {
                    bin,
                    dir: &own,
                    socket: Path::new(CRIO_SOCKET),
                    cni_bin: Path::new("/opt/cni/bin"),
                    cni_conf: Path::new("/etc/cni/net.d"),
                    sandbox_image,
                };
                setup.write();
                std::fs::create_dir_all(worker.node_path("/run/crio")).unwrap();
                crate::crio::daemon(&worker.namespaces, bin, &own)
            }
        };
        let log = format!("{name}-{}", runtime.name());
        let mut daemon = run.spawn(&log, &mut daemon);
        let started = Instant::now();
        while !worker.node_path(runtime.socket()).exists() {
            if let Some(status) = daemon.try_wait().unwrap() {
                panic!("{} of {name} exited ({status}):\n{}", runtime.name(), run.log_tail(&log, 20));
            }
            assert!(started.elapsed() < PATIENCE, "{} of {name} does not listen", runtime.name());
            std::thread::sleep(Duration::from_millis(50));
        }
        worker.daemons.push(daemon);
        for image in images {
            worker.import(image);
        }

        let kubeconfig = pki.kubeconfig(name, &format!("system:node:{name}"), &["system:nodes"], &api_url());
        let config = worker.dir.join("kubelet.yaml");
        std::fs::write(&config, kubelet_config(ip, &pki.path("ca.crt"), &cgroup_root, runtime.socket())).unwrap();
        let mut kubelet = worker.node_command(&bin.join("kubelet").display().to_string());
        kubelet.args([
            &format!("--config={}", config.display()),
            &format!("--kubeconfig={}", kubeconfig.display()),
            &format!("--hostname-override={name}"),
            &format!("--node-ip={ip}"),
            &format!("--node-labels={labels}"),
            "--v=1",
        ]);
        worker.daemons.push(run.spawn(&format!("{name}-kubelet"), &mut kubelet));

        let proxy_kubeconfig = pki.kubeconfig(&format!("{name}-proxy"), "system:kube-proxy", &[], &api_url());
        let proxy_config = worker.dir.join("kube-proxy.yaml");
        std::fs::write(&proxy_config, proxy_config_text(name, ip, &proxy_kubeconfig)).unwrap();
        let mut proxy = worker.node_command(&bin.join("kube-proxy").display().to_string());
        proxy.args([&format!("--config={}", proxy_config.display()), "--v=1"]);
        worker.daemons.push(run.spawn(&format!("{name}-kube-proxy"), &mut proxy));
        worker
    }

    /// `program` run inside the node: its netns and mount namespace.
    pub fn node_command(&self, program: &str) -> Command {
        self.namespaces.command(program)
    }

    /// A path of the node's filesystem, as the test process reaches it.
    pub fn node_path(&self, path: &str) -> PathBuf {
        self.namespaces.path(path)
    }

    /// A shell command run inside the node; its output, or a panic if it fails.
    pub fn must(&self, cmd: &str) -> String {
        let out = self.node_command("sh").args(["-c", cmd]).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "on {}: {cmd}\n{text}", self.name);
        text
    }

    /// Import an image archive (`oci_image`'s) for the node's CRI, under its name: into
    /// containerd's CRI namespace, or CRI-O's storage.
    pub fn import(&self, archive: &Path) {
        if let NodeRuntime::Crio { .. } = self.runtime {
            return crate::crio::import(&self.namespaces, &self.dir.join("crio"), archive);
        }
        let out = self.ctr_command().args(["images", "import"]).arg(archive).output().unwrap();
        assert!(out.status.success(), "ctr images import on {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
    }

    /// The image `from` under the name `to` too, as a registry would serve the same image under
    /// a second tag.
    pub fn tag_image(&self, from: &str, to: &str) {
        match self.runtime {
            NodeRuntime::Crio { .. } => crate::crio::tag(&self.namespaces, &self.dir.join("crio"), from, to),
            NodeRuntime::Containerd { .. } => drop(self.ctr(&["images", "tag", from, to])),
        }
    }

    /// `ctr` against the node's containerd, in the CRI's namespace (not for a CRI-O node).
    fn ctr_command(&self) -> Command {
        let NodeRuntime::Containerd { bin } = &self.runtime else {
            panic!("{} runs {}, not containerd: no ctr", self.name, self.runtime.name());
        };
        let mut ctr = self.node_command(&NodeRuntime::containerd_program(bin, "ctr"));
        ctr.args(["--address", CONTAINERD_SOCKET, "--namespace", "k8s.io"]);
        ctr
    }

    /// The fabric's part: the node's subnet (its podCIDR, the gateway .1) where flannel writes it.
    pub fn write_subnet(&self, pod_cidr: &str) {
        let (network, bits) = pod_cidr.split_once('/').expect("a CIDR");
        let gateway = network.rsplit_once('.').map(|(head, _)| format!("{head}.1")).unwrap();
        let file = self.node_path("/run/flannel/subnet.env");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let text = format!(
            "FLANNEL_NETWORK={CLUSTER_CIDR}\nFLANNEL_SUBNET={gateway}/{bits}\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n"
        );
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, file).unwrap();
    }

    /// `ctr` against the node's containerd, in the CRI's namespace; its stdout (not for a CRI-O
    /// node).
    pub fn ctr(&self, args: &[&str]) -> String {
        let out = self.ctr_command().args(args).output().unwrap();
        assert!(out.status.success(), "ctr {args:?} on {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The running tasks: container id and pid.
    fn running_tasks(&self) -> Vec<(String, u32)> {
        self.ctr(&["tasks", "ls"])
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3 && f[2] == "RUNNING").then(|| (f[0].to_string(), f[1].parse().unwrap_or(0)))
            })
            .collect()
    }

    /// `crictl` against the node's CRI-O; its JSON output (not for a containerd node, whose tests
    /// read containerd's own view through `ctr`).
    fn crictl_json(&self, args: &[&str]) -> serde_json::Value {
        let NodeRuntime::Crio { bin } = &self.runtime else {
            panic!("{} runs {}, not CRI-O: no crictl", self.name, self.runtime.name());
        };
        let endpoint = format!("unix://{CRIO_SOCKET}");
        let out = self
            .node_command(&bin.join("crictl").display().to_string())
            .args(["--runtime-endpoint", &endpoint])
            .args(args)
            .args(["-o", "json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "crictl {args:?} on {}: {}", self.name, String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("crictl {args:?} on {}: {e}", self.name))
    }

    /// The ids of the pod `pod`'s sandboxes whose pause process runs (the runtime starts it only
    /// once the CNI ADD has succeeded; CRI-O calls such a sandbox ready).
    pub fn running_sandboxes(&self, pod: &str) -> Vec<String> {
        if let NodeRuntime::Crio { .. } = self.runtime {
            let pods = self.crictl_json(&["pods", "--state", "ready"]);
            let items = pods["items"].as_array().cloned().unwrap_or_default();
            return items
                .iter()
                .filter(|p| p["metadata"]["name"] == pod)
                .filter_map(|p| p["id"].as_str().map(String::from))
                .collect();
        }
        let filter = format!("labels.\"io.kubernetes.pod.name\"=={pod},labels.\"io.cri-containerd.kind\"==sandbox");
        let ids: Vec<String> = self.ctr(&["containers", "ls", "-q", &filter]).lines().map(String::from).collect();
        self.running_tasks().into_iter().filter(|(id, _)| ids.contains(id)).map(|(id, _)| id).collect()
    }

    /// The ids of everything running on the node, sandboxes and containers: what the owner of a
    /// CNI lease (a sandbox id) must be among while its pod lives.
    pub fn running_ids(&self) -> std::collections::BTreeSet<String> {
        if let NodeRuntime::Crio { .. } = self.runtime {
            let pods = self.crictl_json(&["pods", "--state", "ready"]);
            let containers = self.crictl_json(&["ps", "--state", "running"]);
            let ids = |list: &serde_json::Value| -> Vec<String> {
                list.as_array().into_iter().flatten().filter_map(|i| i["id"].as_str().map(String::from)).collect()
            };
            return ids(&pods["items"]).into_iter().chain(ids(&containers["containers"])).collect();
        }
        self.running_tasks().into_iter().map(|(id, _)| id).collect()
    }

    /// SIGKILL a sandbox's pause process, as when it crashes; the kubelet then makes a new one.
    pub fn kill_sandbox(&self, id: &str) {
        self.ctr(&["tasks", "kill", "--signal", "SIGKILL", id]);
    }

    /// The IPv4 address on eth0 in a running sandbox's netns.
    pub fn sandbox_address(&self, id: &str) -> String {
        let (_, pid) = self.running_tasks().into_iter().find(|(task, _)| task == id).expect("the sandbox runs");
        let out = crate::process::must(&format!("nsenter --net=/proc/{pid}/ns/net ip -4 -o addr show dev eth0"));
        out.split_whitespace().nth(3).and_then(|a| a.split('/').next()).unwrap_or_default().to_string()
    }
}

/// The process that holds the node's mount namespace: it sets the namespace up, says `ready`, and
/// sleeps with its working directory in the run dir.
fn start_holder(dir: &Path, netns: &Netns) -> NodeNamespaces {
    const SCRIPT: &str = r#"set -e
d=$1
plugins=$2
mount --rbind /sys/fs/cgroup "$d/cgroup"
mount -t sysfs sysfs /sys
mount --move "$d/cgroup" /sys/fs/cgroup
mount -t tmpfs -o mode=0755 yh-genie-cluster-run /run
mount -t tmpfs -o mode=0755 yh-genie-cluster-log /var/log
mount -t overlay -o "lowerdir=/var/lib,upperdir=$d/var-lib/upper,workdir=$d/var-lib/work" yh-genie-cluster-var-lib /var/lib
mount -t overlay -o "lowerdir=/etc,upperdir=$d/etc/upper,workdir=$d/etc/work" yh-genie-cluster-etc /etc
mount -t tmpfs -o mode=0755 yh-genie-cluster-opt /opt
mkdir -p /opt/cni/bin /etc/cni/net.d /etc/kubernetes/manifests
cp "$plugins"/* /opt/cni/bin/
while read -r n knob; do
  mount --bind "$d/sysctl/$n" "/proc/sys/$knob"
  mount -o remount,bind,ro "/proc/sys/$knob"
done < "$d/sysctl.list"
# Shared inside the node once it is laid out (a mount cannot be moved under a shared one), as
# systemd makes a node's mounts, never back to the machine (the namespace is its slave): a
# container mounting the node's / with HostToContainer propagation then sees the pods' netns
# mounts made after it started.
mount --make-rshared /
cd "$d"
echo ready
exec sleep infinity"#;
    NodeNamespaces::hold(
        netns,
        SCRIPT,
        "yh-genie-cluster-node",
        &[dir.as_os_str(), std::ffi::OsStr::new(REFERENCE_PLUGINS)],
    )
}

/// The kubelet's cgroup root, in every v1 hierarchy (cpuset's needs its CPUs and memory nodes).
fn make_cgroup(path: &str) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() < 3 || fields[2] != "cgroup" {
            continue;
        }
        let root = Path::new(fields[1]);
        let mut dir = root.to_path_buf();
        for part in path.trim_start_matches('/').split('/') {
            let parent = dir.clone();
            dir.push(part);
            std::fs::create_dir_all(&dir).unwrap();
            for file in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(value) = std::fs::read_to_string(parent.join(file)) {
                    std::fs::write(dir.join(file), value.trim()).unwrap();
                }
            }
        }
    }
}

fn kubelet_config(ip: &str, ca: &Path, cgroup_root: &str, runtime_socket: &str) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {ip}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: AlwaysAllow}}
# containerd 1.6 does not tell the kubelet its cgroup driver (CRI RuntimeConfig): this one is used
# (the kubelets of 1.36 and 1.37 still fall back to it, and say that 1.38 will not); containerd 2.x
# and CRI-O tell the same, cgroupfs (containerd's runc default, CRI-O's cgroup_manager here).
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
# The machines run cgroup v1, which kubelets before 1.35 accept with a warning; from 1.35 on
# they refuse it unless told not to. Said here rather than left to the default.
failCgroupV1: false
containerRuntimeEndpoint: unix://{runtime_socket}
failSwapOn: false
# The nodes' images are imported, never pulled: collecting them would lose them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: 1Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}}
staticPodPath: /etc/kubernetes/manifests
clusterDomain: cluster.local
# The kube-dns Service's address: CoreDNS answers there once a test deploys it (tests/conformance.rs).
clusterDNS: [{DNS_IP}]
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
serializeImagePulls: false
# ConfigMap volume edits (the installer's networks) reach pods at their next sync: every 10 s here
# instead of every minute, so that the tests need not wait a minute after applying networks.
syncFrequency: 10s
"#,
        ca = ca.display()
    )
}

fn proxy_config_text(name: &str, ip: &str, kubeconfig: &Path) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {kubeconfig}}}
hostnameOverride: {name}
bindAddress: {ip}
mode: iptables
clusterCIDR: {CLUSTER_CIDR}
# The conntrack table is the machine's: leave its limits and timeouts alone.
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
"#,
        kubeconfig = kubeconfig.display()
    )
}
