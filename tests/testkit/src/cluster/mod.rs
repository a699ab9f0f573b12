//! A real Kubernetes cluster for the tests, started once for several of them: etcd, the API
//! server, the controller-manager and the scheduler in one network namespace, and two worker
//! nodes, each its own network and mount namespace with a container runtime, the kubelet and
//! kube-proxy, all on an underlay (a bridge in a namespace of its own, a veth to each). The harness plays the
//! yonghui fabric: each node's `/run/flannel/subnet.env` from the podCIDR the controller-manager
//! gave it, and routes to the other nodes' podCIDRs over the underlay.
//!
//! The Kubernetes binaries come from scripts/cluster/build.sh (built once per version, cached
//! outside the checkout; `KUBERNETES_VERSION` picks another supported release); the images from
//! `images`. The nodes run containerd 2.x (scripts/containerd2.sh) from Kubernetes 1.36 on, the
//! first minor that no longer supports containerd 1.x, and Debian's containerd 1.6 before; with
//! `YH_GENIE_CLUSTER_CRIO_BIN`, node-b runs CRI-O instead (`node_runtimes`). Nothing is installed on the nodes: tests
//! install yh-genie with kubectl, as users do. Everything the cluster makes is found again from its
//! run dir (`run_dir`), so a failed or killed run leaves nothing behind once the next one
//! has swept.

pub mod cni;
pub mod control_plane;
pub mod e2e;
pub mod e2e_images;
pub mod images;
pub mod pki;
pub mod pods;
pub mod worker;

use crate::netns::Netns;
use crate::process::report;
use crate::run_dir::RunDir;
use control_plane::{ControlPlane, Settings};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use worker::{NodeRuntime, WorkerNode};

pub const CONTROL_PLANE_IP: &str = "10.99.0.1";
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The `kubernetes` Service's ClusterIP, what pods get as KUBERNETES_SERVICE_HOST.
pub const SERVICE_IP: &str = "10.96.0.1";
/// The kube-dns Service's ClusterIP (coredns.yaml), every pod's nameserver.
pub const DNS_IP: &str = "10.96.0.10";
/// The yonghui fabric's network; each node gets a /24 of it.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
pub const NODE_CIDR_BITS: u8 = 24;
/// The nodes: name, underlay address, labels (the e2e manifests' slots).
pub const NODES: [(&str, &str, &str); 2] =
    [("node-a", "10.99.0.11", "yh-genie-e2e/slot=a"), ("node-b", "10.99.0.12", "yh-genie-e2e/slot=b")];
/// How long any one step may take.
pub const PATIENCE: Duration = Duration::from_secs(90);

pub struct Cluster {
    pub workers: Vec<WorkerNode>,
    pub control: ControlPlane,
    underlay: Netns,
    pub bin: PathBuf,
    /// Dropped last; `Drop` ends its processes first.
    pub run: RunDir,
}

impl Cluster {
    /// Build what is missing (Kubernetes binaries, images), start the control plane and the
    /// nodes, and return once both nodes are registered with a podCIDR and their fabric is set up.
    /// The nodes are NotReady until a CNI is installed.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// The cluster with the images Kubernetes' e2e suite runs (`images::e2e`) on every node too.
    pub fn start_for_e2e() -> Self {
        Self::start_with(true)
    }

    fn start_with(e2e_images: bool) -> Self {
        crate::require_root();
        let started = Instant::now();
        let bin = if e2e_images { kubernetes_bin_with_e2e() } else { kubernetes_bin() };
        let runtimes = node_runtimes(&bin);
        let run = RunDir::new("cluster");
        let sandbox_image = images::pause_name(&bin);
        let mut images = build_images(&run, &sandbox_image);
        if e2e_images {
            images.extend(e2e_images::all(&run.path().join("images"), &bin));
        }
        let built = started.elapsed();

        let underlay = run.netns("yclu");
        underlay.must("ip link add br0 type bridge && ip link set br0 up");
        let control_netns = run.netns("yclc");
        connect(&underlay, &control_netns, "cp", CONTROL_PLANE_IP);
        let settings = Settings { netns: Some(control_netns), controllers: true, ..Settings::new(&bin) };
        let control = ControlPlane::start(run.path(), settings);
        let mut cluster = Cluster { workers: Vec::new(), control, underlay, bin, run };
        for ((name, ip, labels), runtime) in NODES.into_iter().zip(&runtimes) {
            let netns = cluster.run.netns("ycln");
            connect(&cluster.underlay, &netns, name, ip);
            netns.must(&format!("ip route add default via {CONTROL_PLANE_IP}"));
            let runtime = (runtime, sandbox_image.as_str(), images.as_slice());
            let worker =
                WorkerNode::start(&cluster.run, &cluster.control.pki, &cluster.bin, (name, ip, netns), labels, runtime);
            cluster.workers.push(worker);
        }
        cluster.set_up_fabric();
        let nodes: Vec<String> =
            cluster.workers.iter().map(|w| format!("{} on {}", w.name, w.runtime.describe())).collect();
        report(&format!("cluster: Kubernetes {}, {}", kubernetes_version(&cluster.bin), nodes.join(", ")));
        report(&format!(
            "cluster: built/checked binaries and images in {built:.1?}, nodes registered {:.1?} after that",
            started.elapsed() - built
        ));
        cluster
    }

    /// Each node's subnet.env from its podCIDR, and a route to every other node's podCIDR (from the
    /// other nodes and from the control plane).
    fn set_up_fabric(&self) {
        let cidrs: Vec<String> = self
            .workers
            .iter()
            .map(|w| {
                self.wait_for(&format!("node {} registered with a podCIDR", w.name), || {
                    let (ok, out, _) = self.kubectl(&["get", "node", &w.name, "-o", "jsonpath={.spec.podCIDR}"]);
                    (ok && !out.trim().is_empty()).then(|| out.trim().to_string())
                })
            })
            .collect();
        for (i, worker) in self.workers.iter().enumerate() {
            worker.write_subnet(&cidrs[i]);
            // The control plane is on the pod network too, as its nodes would be with a CNI of
            // their own: the API server's proxy and webhooks reach pods by their address.
            self.control_netns().must(&format!("ip route add {} via {}", cidrs[i], worker.ip));
            for (j, other) in self.workers.iter().enumerate() {
                if i != j {
                    worker.netns.must(&format!("ip route add {} via {}", cidrs[j], other.ip));
                }
            }
        }
    }

    pub fn worker(&self, name: &str) -> &WorkerNode {
        self.workers.iter().find(|w| w.name == name).unwrap_or_else(|| panic!("no node {name}"))
    }

    /// The control plane's network namespace, on the underlay.
    pub fn control_netns(&self) -> &Netns {
        self.control.netns().expect("the cluster's control plane has a namespace of its own")
    }

    /// kubectl as the cluster's admin: success, stdout, stderr.
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.control.kubectl().args(args).output().unwrap();
        texts(out)
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl(args);
        assert!(ok, "kubectl {}: {err}{out}", args.join(" "));
        out
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply_text(&self, yaml: &str) -> String {
        use std::io::Write;
        let mut child = self
            .control
            .kubectl()
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(yaml.as_bytes()).unwrap();
        let (ok, out, err) = texts(child.wait_with_output().unwrap());
        assert!(ok, "kubectl apply: {err}{out}\n{yaml}");
        out
    }

    /// A JSON object from `kubectl get ... -o json`.
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl_ok(&all)).unwrap()
    }

    /// Poll `check` until it returns Some, for at most PATIENCE; panics with the cluster's logs.
    pub fn wait_for<T>(&self, what: &str, check: impl FnMut() -> Option<T>) -> T {
        self.wait_for_within(PATIENCE, what, check)
    }

    /// `wait_for` for what takes longer than PATIENCE by design (a recovery paced by the
    /// kubelet's and kube-proxy's own retries).
    pub fn wait_for_within<T>(&self, patience: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let started = Instant::now();
        loop {
            if let Some(value) = check() {
                return value;
            }
            if started.elapsed() > patience {
                panic!("timed out after {patience:?} waiting for {what}\n{}", self.diagnostics());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// `kubectl rollout status` of yh-genie's DaemonSet within `timeout` (`300s`); on a timeout,
    /// panics with its pods described, their containers' logs and `diagnostics`.
    pub fn rollout_yh_genie(&self, timeout: &str) {
        let (ok, out, err) = self.kubectl(&[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "daemonset/yh-genie",
            &format!("--timeout={timeout}"),
        ]);
        if ok {
            return;
        }
        let selector = ["-n", "kube-system", "-l", "app.kubernetes.io/name=yh-genie"];
        let (_, described, _) = self.kubectl(&[&["describe", "pods"][..], &selector[..]].concat());
        let (_, logs, _) = self.kubectl(
            &[&["logs", "--all-containers", "--prefix", "--tail=20", "--ignore-errors"][..], &selector[..]].concat(),
        );
        panic!(
            "yh-genie's DaemonSet did not roll out within {timeout}: {err}{out}\n{described}\n{logs}\n{}",
            self.diagnostics()
        );
    }

    /// What helps to understand a failure: the pods, events, and the tails of the logs.
    pub fn diagnostics(&self) -> String {
        let (_, pods, _) = self.kubectl(&["get", "pods", "-A", "-o", "wide"]);
        let (_, nodes, _) = self.kubectl(&["get", "nodes", "-o", "wide"]);
        let (_, events, _) = self.kubectl(&["get", "events", "-A", "--sort-by=.lastTimestamp"]);
        let events: Vec<&str> = events.lines().collect();
        let mut text = format!(
            "nodes:\n{nodes}\npods:\n{pods}\nevents:\n{}\n",
            events[events.len().saturating_sub(25)..].join("\n")
        );
        for w in &self.workers {
            for component in ["kubelet", w.runtime.name()] {
                let name = format!("{}-{component}", w.name);
                text.push_str(&format!("--- {name}:\n{}\n", self.run.log_tail(&name, 12)));
            }
        }
        text
    }

    /// The API server's audit events (one JSON object each), in order.
    pub fn audit_events(&self) -> Vec<Value> {
        let log = std::fs::read_to_string(self.control.audit_log()).unwrap_or_default();
        log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    pub fn stop_apiserver(&mut self) {
        self.control.stop_apiserver();
    }

    pub fn restart_apiserver(&mut self) {
        self.control.restart_apiserver();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let started = Instant::now();
        self.run.end();
        report(&format!("cluster: stopped in {:.1?}", started.elapsed()));
    }
}

fn texts(out: Output) -> (bool, String, String) {
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A veth from the underlay's bridge to `ul0` in `member`, which gets `ip`/24.
fn connect(underlay: &Netns, member: &Netns, port: &str, ip: &str) {
    underlay.must(&format!(
        "ip link add {port} type veth peer name ul0 netns {member} && ip link set {port} master br0 up",
        member = member.name
    ));
    member.must(&format!("ip addr add {ip}/24 dev ul0 && ip link set ul0 up"));
}

/// The Kubernetes binaries' directory, built (once per version) by scripts/cluster/build.sh: the
/// cluster's commands only.
pub fn kubernetes_bin() -> PathBuf {
    build_kubernetes(&["--without-e2e"])
}

/// The same directory with Kubernetes' e2e suite and what it runs (e2e.test, ginkgo, agnhost,
/// CoreDNS) too.
pub fn kubernetes_bin_with_e2e() -> PathBuf {
    build_kubernetes(&[])
}

fn build_kubernetes(args: &[&str]) -> PathBuf {
    let script = crate::repository().join("scripts/cluster/build.sh");
    let out = Command::new(&script).args(args).output().expect("scripts/cluster/build.sh runs");
    let (ok, stdout, stderr) = texts(out);
    assert!(ok, "scripts/cluster/build.sh failed:\n{stderr}{stdout}");
    for line in stdout.lines().filter(|l| l.starts_with("built") || l.starts_with("kubernetes")) {
        report(&format!("cluster: {line}"));
    }
    PathBuf::from(stdout.lines().last().expect("build.sh prints the bin dir").trim())
}

/// The version of the Kubernetes in `bin` (`kubelet --version`: `Kubernetes v1.37.2`), `v1.37.2`.
pub fn kubernetes_version(bin: &Path) -> String {
    let out = crate::process::must(&format!("{} --version", bin.join("kubelet").display()));
    out.split_whitespace().last().unwrap_or_else(|| panic!("kubelet --version: {out}")).to_string()
}

/// The minor of `kubernetes_version`: 37 for v1.37.2.
pub fn kubernetes_minor(bin: &Path) -> u32 {
    let version = kubernetes_version(bin);
    let minor = version.trim_start_matches("v1.").split('.').next().and_then(|m| m.parse().ok());
    minor.unwrap_or_else(|| panic!("not a Kubernetes 1.x version: {version}"))
}

/// The runtime of each node (`NODES`) with the Kubernetes in `bin`. containerd:
/// `YH_GENIE_CLUSTER_CONTAINERD_BIN` when set (a containerd 2.x build's bin dir, or empty for
/// Debian's 1.6); else containerd 2.x (scripts/containerd2.sh, built once per version) from
/// Kubernetes 1.36 on, whose kubelets need a runtime that answers the CRI's RuntimeConfig, and
/// Debian's 1.6 before. With `YH_GENIE_CLUSTER_CRIO_BIN` (scripts/crio.sh's bin dir), node-b runs
/// CRI-O instead, so that one cluster has a node of each.
fn node_runtimes(bin: &Path) -> Vec<NodeRuntime> {
    let containerd = if let Some(dir) = std::env::var_os("YH_GENIE_CLUSTER_CONTAINERD_BIN") {
        NodeRuntime::Containerd { bin: (!dir.is_empty()).then(|| PathBuf::from(dir)) }
    } else if kubernetes_minor(bin) < 36 {
        NodeRuntime::Containerd { bin: None }
    } else {
        NodeRuntime::Containerd { bin: Some(built_by("scripts/containerd2.sh")) }
    };
    let crio = std::env::var_os("YH_GENIE_CLUSTER_CRIO_BIN").filter(|d| !d.is_empty());
    let node_b = crio.map_or_else(|| containerd.clone(), |dir| NodeRuntime::Crio { bin: PathBuf::from(dir) });
    vec![containerd, node_b]
}

/// The bin dir a build script prints on its last line (building it once per version).
fn built_by(script: &str) -> PathBuf {
    let out = Command::new(crate::repository().join(script)).output().unwrap_or_else(|e| panic!("{script}: {e}"));
    let (ok, stdout, stderr) = texts(out);
    assert!(ok, "{script} failed:\n{stderr}{stdout}");
    PathBuf::from(stdout.lines().last().unwrap_or_else(|| panic!("{script} printed nothing")).trim())
}

/// The images every node imports: pause (named `sandbox_image`), busybox, and yh-genie under the
/// manifests' name.
fn build_images(run: &RunDir, sandbox_image: &str) -> Vec<PathBuf> {
    let dir = |name: &str| {
        let d = run.path().join("images").join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let binary = images::static_yh_genie();
    vec![
        images::pause(&dir("pause"), sandbox_image),
        images::busybox(&dir("busybox")),
        images::yh_genie(&dir("yh-genie"), &images::yh_genie_name(), &binary),
    ]
}
