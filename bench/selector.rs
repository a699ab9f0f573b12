//! The selector's benchmark driver (run by `bench/selector.sh`; needs root). It measures ADD and DEL
//! latency of `yh-genie -> network` beside the same network's plugin run alone by this driver (as a
//! runtime would run it without the selector), one pod at a time and several at once: through the
//! node agent (which holds the pod's objects: no API request) and through the direct path (the
//! plugin asks the API server). Also API requests per ADD and DEL, the peak RSS of one ADD, and the
//! agent's RSS holding a full node's pods. It prints figures and judges nothing.
//!
//! The cases run interleaved (pod i through every case, then pod i+1), so that background load on a
//! shared machine hits them alike. Cases running a no-op plugin alone and through the selector
//! differ by the selector's own cost (start, agent or API, records, exec).
//!
//! Everything happens in a throwaway "node" netns that this process's threads join (so no
//! `ip netns exec` wrapper skews the timings), with a real API server and etcd in it
//! (`real_cluster`; `--fake-api`: the tests' fake API server instead), the agent running as the
//! DaemonSet runs it (`yh-genie install --agent`), and one netns per pod. The single-network part
//! runs `--runs` times (5), each run interleaved, and prints the median of the runs' ratios.

mod multinet;
mod real_cluster;

use real_cluster::RealCluster;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use testkit::agent::Agent;
use testkit::apiserver::ApiServer;
use testkit::fake_plugin::{self, FakePlugin};
use testkit::netns::Netns;
use testkit::process::unique;
use testkit::sandbox::{Plugins, Sandbox};
use yh_genie::node::agent_socket::client::exchange;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, PodObjects, Request};

/// yh-genie as the benchmark's sandbox installs it.
const PLUGINS: Plugins = Plugins {
    selector: yh_genie::programs::selector::NAME,
    plugins: &yh_genie::programs::plugins::NAMES,
    lock_dir_var: yh_genie::node::paths::LOCK_DIR_VAR,
};

struct Options {
    pods: usize,
    parallel: usize,
    /// `--networks-only`: only pods with 1, 2 and 4 networks (bench/multinet.rs).
    networks_only: bool,
    /// `--capabilities`: only the selector with and without the runtime's capability arguments.
    capabilities_only: bool,
    /// `--runs N`: the single-network part's runs, whose ratios' median is the figure.
    runs: usize,
    /// `--fake-api`: the tests' fake API server instead of a real one (no kube-apiserver built).
    fake_api: bool,
    /// `--single-network`: only the single-network part (no agent RSS, no several networks).
    single_network_only: bool,
    /// `--strace FILE`: one more ADD of the product path under `strace -f -ttt -T`, its trace in FILE.
    strace: Option<PathBuf>,
    /// Run by `cargo test --all-targets` (no `--bench`): a few pods, to show that the benchmark
    /// works, in a debug build whose figures mean nothing.
    smoke: bool,
}

impl Options {
    fn from_args() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let smoke = !args.iter().any(|a| a == "--bench");
        let (pods, parallel) = if smoke { (3, 2) } else { (100, 8) };
        let mut o = Options {
            pods,
            parallel,
            networks_only: false,
            capabilities_only: false,
            runs: if smoke { 1 } else { 5 },
            // The smoke run has no Kubernetes build to count on.
            fake_api: smoke,
            single_network_only: false,
            strace: None,
            smoke,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--pods" => o.pods = it.next().and_then(|v| v.parse().ok()).expect("--pods N"),
                "--parallel" => o.parallel = it.next().and_then(|v| v.parse().ok()).expect("--parallel N"),
                "--networks-only" => o.networks_only = true,
                "--capabilities" => o.capabilities_only = true,
                "--runs" => o.runs = it.next().and_then(|v| v.parse().ok()).filter(|n| *n > 0).expect("--runs N"),
                "--fake-api" => o.fake_api = true,
                "--single-network" => o.single_network_only = true,
                "--strace" => o.strace = Some(PathBuf::from(it.next().expect("--strace FILE"))),
                // `cargo bench` appends --bench.
                _ => {}
            }
        }
        o
    }
}

/// One way of attaching pods: the plugin calls that make one pod's networks, and one netns per pod.
struct Case {
    label: String,
    /// In order for ADD, in reverse for DEL: one through the selector, one per network run directly.
    steps: Vec<Step>,
    /// The selector's cases name their pods to the API server; the plugin-alone cases need no names.
    through_selector: bool,
    /// Whether the selector asks the node agent (else the API server).
    via_agent: bool,
    pods: Vec<Pod>,
}

/// One plugin call: the program, its stdin, and the interface it makes.
struct Step {
    program: PathBuf,
    stdin: Value,
    ifname: String,
}

struct Pod {
    netns: Netns,
    args: String,
    /// As the API server knows it (selector cases): name and uid.
    name: String,
    uid: String,
}

/// What one case measured in one round: the wall time of all its steps, per pod.
#[derive(Default)]
struct Times {
    add: Vec<Duration>,
    del: Vec<Duration>,
}

/// The API server the selector and its agent talk to.
#[allow(clippy::large_enum_variant)] // one per process
enum Backend {
    /// kube-apiserver and etcd, the agent with its node's own credentials.
    Real(RealCluster),
    /// The tests' fake API server, the agent against it.
    Fake { api: ApiServer, agent: Agent },
}

struct Bench {
    // Before the backend in drop order: nothing is left holding the sandbox's files.
    backend: Backend,
    sb: Sandbox,
    /// The node's volatile directory, `/run/yh-genie` on a node (the attachment locks, the
    /// selector's results; yonghui's saved configurations are in its `yonghui/`): on tmpfs, as a
    /// node's `/run` is. Made in `/dev/shm`, since the machine's `/run` may be on its disk.
    run_dir: tempfile::TempDir,
    node: Netns,
}

impl Bench {
    fn new(fake_api: bool) -> Self {
        testkit::require_root();
        let node = Netns::new("ybn");
        let sb = Sandbox::new(&PLUGINS);
        let backend = if fake_api {
            let api = ApiServer::start_in(&node);
            let agent = Agent::start(&node, &api, sb.path(), &sb.path().join("run/agent.sock"), 9745, &[]);
            agent.wait_ready();
            Backend::Fake { api, agent }
        } else {
            // The control plane's and the agent's processes start in the node netns.
            enter(&node);
            Backend::Real(RealCluster::start(&node, &sb.path().join("cluster")))
        };
        let run_dir = tempfile::Builder::new().prefix("yh-genie-bench-run").tempdir_in("/dev/shm").expect("/dev/shm");
        Bench { backend, sb, run_dir, node }
    }

    /// The attachment locks' directory in the node's volatile directory (the results beside them).
    fn lock_dir(&self) -> PathBuf {
        self.run_dir.path().join("attachments")
    }

    fn agent_socket(&self) -> PathBuf {
        match &self.backend {
            Backend::Real(cluster) => cluster.agent_socket(),
            Backend::Fake { .. } => self.sb.path().join("run/agent.sock"),
        }
    }

    fn kubeconfig(&self) -> PathBuf {
        match &self.backend {
            Backend::Real(cluster) => cluster.plugin_kubeconfig(),
            Backend::Fake { api, .. } => api.kubeconfig(),
        }
    }

    fn put_config_map(&self, namespace: &str, name: &str, data: Value) {
        match &self.backend {
            Backend::Real(cluster) => cluster.put_config_map(namespace, name, data),
            Backend::Fake { api, .. } => api.put_config_map(namespace, name, data),
        }
    }

    /// A pod of this node; its uid.
    fn put_pod(&self, namespace: &str, name: &str, containers: Value) -> String {
        match &self.backend {
            Backend::Real(cluster) => cluster.put_pod(namespace, name, containers),
            Backend::Fake { api, .. } => api.put_pod(namespace, name, containers),
        }
    }

    /// API requests the plugin made so far.
    fn plugin_requests(&self) -> usize {
        match &self.backend {
            Backend::Real(cluster) => cluster.plugin_requests(),
            Backend::Fake { api, .. } => api.plugin_requests(),
        }
    }

    /// Wait until the agent holds every pod of the agent's cases (as it does by the time a
    /// kubelet asks for a pod's network: it sees the pod when it is bound to the node).
    fn wait_for_agent(&self, cases: &[Case]) {
        let socket = self.agent_socket();
        for pod in cases.iter().filter(|c| c.via_agent).flat_map(|c| &c.pods) {
            match &self.backend {
                Backend::Fake { agent, .. } => agent.wait_for(&format!("the agent to hold pod {}", pod.name), || {
                    held_objects(&socket, &pod.name, &pod.uid).is_some()
                }),
                Backend::Real(_) => {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while held_objects(&socket, &pod.name, &pod.uid).is_none() {
                        assert!(Instant::now() < deadline, "the agent does not hold pod {}", pod.name);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        }
    }

    /// Join the node netns: every thread spawned afterwards, and every plugin process, is in it.
    fn enter_node(&self) {
        enter(&self.node);
    }

    /// A bridge + host-local network conf on `subnet`.
    fn bridge_network(&self, name: &str, subnet: &str) -> Value {
        json!({"cniVersion": "1.0.0", "name": name, "plugins": [{
            "type": "bridge", "bridge": unique("yb"), "isGateway": true,
            "ipam": {"type": "host-local", "subnet": subnet, "dataDir": self.sb.path().join("ipam")}}]})
    }

    /// `yonghui` delegating to `yh-bridge` (both in process), its subnet from a subnet.env.
    fn yonghui_network(&self) -> Value {
        self.yonghui_network_named("fabric", json!({"dataDir": self.sb.path().join("ipam")}))
    }

    /// `yonghui_network` named `name`, with `ipam`.
    fn yonghui_network_named(&self, name: &str, ipam: Value) -> Value {
        let subnet_file = self.sb.write(
            "subnet.env",
            "FLANNEL_NETWORK=10.90.0.0/16\nFLANNEL_SUBNET=10.90.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
        );
        json!({"cniVersion": "1.0.0", "name": name, "plugins": [{
            "type": "yonghui", "subnetFile": subnet_file, "dataDir": self.run_dir.path().join("yonghui"),
            "delegate": {"bridge": unique("yb")}, "ipam": ipam}]})
    }

    /// A plugin that does nothing and answers an empty result: what is left is process cost.
    fn noop_network(&self) -> Value {
        FakePlugin::new()
            .on("ADD", [fake_plugin::Step::Answer(json!({"cniVersion": "1.0.0"}))])
            .write(&self.sb.bin().join("noop"));
        json!({"cniVersion": "1.0.0", "name": "noop", "plugins": [{"type": "noop"}]})
    }

    /// Write network `name`'s configuration under the selector's conf dir.
    fn install(&self, name: &str, conf: &Value) {
        self.sb.write(&format!("net.d/{name}/10-{name}.conflist"), &conf.to_string());
    }

    /// The selector's stdin (records in `data_dir`; asking the agent or not), and a ConfigMap +
    /// pods whose CNI_NETWORK_CONFIG is `value` (networks installed already).
    fn choosing_case(&self, label: &str, value: &str, pods: usize, data_dir: &Path, via_agent: bool) -> Case {
        let prefix = unique("bp");
        let cm = format!("{prefix}-net");
        self.put_config_map("default", &cm, json!({"cni_network_config": value}));
        let socket = if via_agent { self.agent_socket() } else { PathBuf::new() };
        let stdin = json!({
            "cniVersion": "1.0.0", "name": "yh-genie", "type": "yh-genie",
            "kubeconfig": self.kubeconfig(), "confDir": self.sb.path().join("net.d"),
            "dataDir": data_dir, "binDir": self.sb.bin(), "agentSocket": socket,
        });
        let pods = (0..pods)
            .map(|i| {
                let name = format!("{prefix}-{i}");
                let uid = self.put_pod(
                    "default",
                    &name,
                    json!([{"name": "app", "image": "nginx", "env": [{"name": "CNI_NETWORK_CONFIG",
                        "valueFrom": {"configMapKeyRef": {"name": cm, "key": "cni_network_config"}}}]}]),
                );
                let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_UID={uid}");
                Pod { netns: Netns::new("ybp"), args, name, uid }
            })
            .collect();
        let step = Step { program: self.sb.bin().join("yh-genie"), stdin, ifname: "eth0".into() };
        Case { label: label.to_string(), steps: vec![step], through_selector: true, via_agent, pods }
    }

    /// `case` with `addedInterfaceEvents: false` in the selector's stdin.
    fn without_events(&self, mut case: Case) -> Case {
        for step in &mut case.steps {
            step.stdin["addedInterfaceEvents"] = false.into();
        }
        case
    }

    /// The first plugin of `conf` run directly, as libcni would for a one-plugin list.
    fn alone_case(&self, label: &str, conf: &Value, pods: usize) -> Case {
        self.direct_case(label, &[conf], pods)
    }

    /// The first plugin of each of `confs` run directly, one after the other, on `eth0`, `net1`...
    fn direct_case(&self, label: &str, confs: &[&Value], pods: usize) -> Case {
        let steps = confs
            .iter()
            .enumerate()
            .map(|(i, conf)| {
                let mut stdin = conf["plugins"][0].clone();
                stdin["name"] = conf["name"].clone();
                stdin["cniVersion"] = conf["cniVersion"].clone();
                let program = self.sb.bin().join(stdin["type"].as_str().unwrap());
                let ifname = if i == 0 { "eth0".to_string() } else { format!("net{i}") };
                Step { program, stdin, ifname }
            })
            .collect();
        let pods = (0..pods)
            .map(|_| Pod {
                netns: Netns::new("ybp"),
                args: "IgnoreUnknown=1".into(),
                name: String::new(),
                uid: String::new(),
            })
            .collect();
        Case { label: label.to_string(), steps, through_selector: false, via_agent: false, pods }
    }

    /// Start one plugin process like a runtime, `stdin` written and closed.
    fn spawn(&self, step: &Step, command: &str, cid: &str, pod: &Pod, stdin: &str) -> std::process::Child {
        let mut child = Command::new(&step.program)
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", cid)
            .env("CNI_NETNS", pod.netns.path())
            .env("CNI_IFNAME", &step.ifname)
            .env("CNI_ARGS", &pod.args)
            .env("CNI_PATH", self.sb.bin())
            .env(yh_genie::node::paths::LOCK_DIR_VAR, self.lock_dir())
            // cargo sets it for the bench process; a runtime does not, and it slows the dynamic loader.
            .env_remove("LD_LIBRARY_PATH")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child
    }

    /// Run one plugin process to its end; returns its stdout.
    fn call(&self, step: &Step, command: &str, cid: &str, pod: &Pod, stdin: &str) -> String {
        let out = self.spawn(step, command, cid, pod, stdin).wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{} {command} failed: {stdout} {}",
            step.program.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// ADD then DEL every pod of every case, `parallel` pods at a time, cases interleaved per pod.
    fn round(&self, cases: &[Case], pods: usize, parallel: usize) -> Vec<Times> {
        let cids: Vec<Vec<String>> = cases.iter().map(|_| (0..pods).map(|_| unique("bench")).collect()).collect();
        // The ADD result of each step of each pod of each case.
        let results: Vec<Vec<Mutex<Vec<Value>>>> =
            cases.iter().map(|_| (0..pods).map(|_| Mutex::new(Vec::new())).collect()).collect();
        let times: Vec<Mutex<Times>> = cases.iter().map(|_| Mutex::default()).collect();
        for command in ["ADD", "DEL"] {
            let next = Mutex::new(0usize);
            std::thread::scope(|s| {
                for _ in 0..parallel {
                    s.spawn(|| {
                        loop {
                            let i = {
                                let mut n = next.lock().unwrap();
                                *n += 1;
                                *n - 1
                            };
                            if i >= pods {
                                break;
                            }
                            for (c, case) in cases.iter().enumerate() {
                                let pod = &case.pods[i];
                                let started = Instant::now();
                                if command == "ADD" {
                                    let added: Vec<Value> = case
                                        .steps
                                        .iter()
                                        .map(|step| {
                                            let out =
                                                self.call(step, command, &cids[c][i], pod, &step.stdin.to_string());
                                            serde_json::from_str(&out).unwrap()
                                        })
                                        .collect();
                                    times[c].lock().unwrap().add.push(started.elapsed());
                                    *results[c][i].lock().unwrap() = added;
                                } else {
                                    let added = results[c][i].lock().unwrap().clone();
                                    for (step, result) in case.steps.iter().zip(added).rev() {
                                        let mut stdin = step.stdin.clone();
                                        // DEL gets the ADD result as prevResult, as libcni gives it from its
                                        // cache; the selector keeps its own.
                                        if !case.through_selector {
                                            stdin["prevResult"] = result;
                                        }
                                        self.call(step, command, &cids[c][i], pod, &stdin.to_string());
                                    }
                                    times[c].lock().unwrap().del.push(started.elapsed());
                                }
                            }
                        }
                    });
                }
            });
        }
        times.into_iter().map(|t| t.into_inner().unwrap()).collect()
    }
}

/// Samples a process's VmHWM (peak resident set) until it exits.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = PathBuf::from(format!("/proc/{pid}/status"));
    let mut peak = 0;
    // A zombie has no memory lines left; stop at the first read without them.
    while let Some(kib) = std::fs::read_to_string(&status).ok().and_then(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    }) {
        peak = peak.max(kib);
        std::thread::sleep(Duration::from_micros(200));
    }
    peak
}

fn percentile(times: &[Duration], p: f64) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// "median (min - max)" of `values`.
fn summarize(values: &[f64]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    format!("{:.2} ({:.2} - {:.2})", sorted[sorted.len() / 2], sorted[0], sorted[sorted.len() - 1])
}

fn ms(d: Duration) -> String {
    format!("{:7.2} ms", d.as_secs_f64() * 1000.0)
}

fn ratio(a: &[Duration], b: &[Duration], p: f64) -> String {
    format!("{:7.2}x   ", percentile(a, p).as_secs_f64() / percentile(b, p).as_secs_f64())
}

/// Join `netns`: every thread spawned afterwards, and every process, is in it.
fn enter(netns: &Netns) {
    let ns = std::fs::File::open(netns.path()).unwrap();
    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns node");
}

fn main() {
    let o = Options::from_args();
    let b = Bench::new(o.fake_api);
    b.enter_node();
    if o.smoke {
        println!("smoke run (cargo test, debug build, {} pods): the figures below are not measurements;", o.pods);
        println!("measure with bench/selector.sh");
    }
    if o.capabilities_only {
        return capabilities(&b, &o);
    }
    if !o.networks_only {
        single_network(&b, &o);
        if o.single_network_only {
            return;
        }
        agent_rss(&b);
    }
    multinet::run(&b, o.pods);
}

/// Pods with one network: the selector through yonghui and a no-op, via the agent and via the direct
/// path, beside the reference bridge and the no-op alone; sequential and several at once; API
/// requests; RSS; the lock's cost.
fn single_network(b: &Bench, o: &Options) {
    let noop = b.noop_network();
    let yonghui = b.yonghui_network();
    b.install("fabric", &yonghui);
    // The same, but host-local exec'd (a key the in-process host-local leaves to it: empty, so
    // host-local does nothing with it either).
    let exec_ipam = json!({"dataDir": b.sb.path().join("ipam-exec"), "resolvConf": ""});
    b.install("fabricexec", &b.yonghui_network_named("fabricexec", exec_ipam));
    b.install("noop", &noop);
    let data = b.sb.path().join("yh-genie");
    // Indices matter below: [0] is the baseline of [1] and [2], [3] of [4] and [5].
    let cases = [
        b.alone_case("bridge alone", &b.bridge_network("reference", "10.89.0.0/16"), o.pods),
        b.choosing_case("yonghui, via the agent", "fabric", o.pods, &data, true),
        b.choosing_case("yonghui, direct (API)", "fabric", o.pods, &data, false),
        b.alone_case("no-op alone", &noop, o.pods),
        b.choosing_case("no-op, via the agent", "noop", o.pods, &data, true),
        b.choosing_case("no-op, direct (API)", "noop", o.pods, &data, false),
        // [6]: [4] without the AddedInterface events' hand-over to the agent.
        b.without_events(b.choosing_case("no-op, agent, no events", "noop", o.pods, &data, true)),
        // [7]: [1] with host-local exec'd instead of run in process.
        b.choosing_case("yonghui, agent, IPAM exec", "fabricexec", o.pods, &data, true),
    ];
    b.wait_for_agent(&cases);

    let server = match &b.backend {
        Backend::Real(_) => "a real API server (kube-apiserver + etcd on this machine)",
        Backend::Fake { .. } => "the tests' fake API server",
    };
    println!(
        "yh-genie selector benchmark: {} pods, release build, cases interleaved per pod, {} runs, against {server}",
        o.pods, o.runs
    );
    println!("every selector case reads the network's bare name from a ConfigMap, records, runs the network's chain");
    println!("  bridge alone:          Debian's reference bridge + host-local exec'd by this driver, as libcni would");
    println!(
        "  yonghui:               yh-genie -> yonghui -> yh-bridge in process (subnet.env), host-local in process"
    );
    println!(
        "  IPAM exec:             the same with host-local exec'd (a configuration the in-process one leaves to it)"
    );
    println!("  via the agent:         the pod and its ConfigMap from the node agent's socket: no API request");
    println!("  direct (API):          GET pod + GET ConfigMap from the API server (agentSocket empty)");
    println!(
        "  no-op:                 a /bin/sh plugin answering an empty result; through the selector minus alone is the selector's own cost"
    );
    let modes = [1, o.parallel];
    // Per mode, per run: the product path's ADD median over the bridge's; the selector's own cost
    // (ms); the events' cost (ms, signed).
    let mut product: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut own: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut events: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut exec_ipam: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for run in 1..=o.runs {
        for (m, &parallel) in modes.iter().enumerate() {
            // Warm the page cache and every code path once, untimed.
            b.round(&cases, 1, 1);
            let times = b.round(&cases, o.pods, parallel);
            println!();
            let mode = if parallel == 1 { "one at a time".to_string() } else { format!("{parallel} at once") };
            println!("run {run}/{}, {mode:<14} ADD median     ADD p90    DEL median     DEL p90", o.runs);
            for (case, t) in cases.iter().zip(&times) {
                let [a50, a90, d50, d90] =
                    [(&t.add, 0.5), (&t.add, 0.9), (&t.del, 0.5), (&t.del, 0.9)].map(|(v, p)| ms(percentile(v, p)));
                println!("  {:<24} {a50}  {a90}  {d50}  {d90}", case.label);
            }
            for (label, sel, alone) in [
                ("yonghui agent / bridge", &times[1], &times[0]),
                ("yonghui API / bridge", &times[2], &times[0]),
                ("no-op agent / alone", &times[4], &times[3]),
                ("no-op API / alone", &times[5], &times[3]),
                ("IPAM exec'd / bridge", &times[7], &times[0]),
            ] {
                println!(
                    "  {label:<24} {}{}{}{}",
                    ratio(&sel.add, &alone.add, 0.5),
                    ratio(&sel.add, &alone.add, 0.9),
                    ratio(&sel.del, &alone.del, 0.5),
                    ratio(&sel.del, &alone.del, 0.9)
                );
            }
            let median_ms = |i: usize| percentile(&times[i].add, 0.5).as_secs_f64() * 1e3;
            product[m].push(median_ms(1) / median_ms(0));
            // Signed: under load the differences can come out either way.
            own[m].push(median_ms(4) - median_ms(3));
            events[m].push(median_ms(4) - median_ms(6));
            exec_ipam[m].push(median_ms(7) / median_ms(0));
            println!(
                "  selector's own cost per ADD (median, no-op difference): via the agent {:+.2} ms, direct {:+.2} ms",
                median_ms(4) - median_ms(3),
                median_ms(5) - median_ms(3)
            );
            println!(
                "  the AddedInterface events per ADD (median, no-op via the agent minus the same without events): {:+.2} ms",
                median_ms(4) - median_ms(6)
            );
        }
    }
    println!();
    println!("summary over {} runs (median of the runs' figures, and their range):", o.runs);
    for (m, &parallel) in modes.iter().enumerate() {
        let mode = if parallel == 1 { "one at a time".to_string() } else { format!("{parallel} at once") };
        let [p, s, e, x] = [&product[m], &own[m], &events[m], &exec_ipam[m]].map(|v| summarize(v));
        println!(
            "  {mode:<14} product path (yh-genie -> yonghui -> yh-bridge via the agent) / bridge alone, ADD: {p} x"
        );
        println!("  {mode:<14} the same with host-local exec'd instead of in process / bridge alone, ADD: {x} x");
        println!("  {mode:<14} selector's own cost (no-op via the agent minus no-op alone), ADD: {s} ms");
        println!("  {mode:<14} AddedInterface events (with minus without), ADD: {e} ms");
    }
    if let Backend::Real(cluster) = &b.backend {
        // Each ADD with events on hands one over per network; the agent sends them later.
        // Three cases with events on; every run and mode: one warming ADD of the first pod, then every pod.
        let handed = 3 * modes.len() * o.runs * (o.pods + 1);
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut created = cluster.added_interface_events("default");
        while created < handed && Instant::now() < deadline {
            std::thread::sleep(Duration::from_secs(2));
            created = cluster.added_interface_events("default");
        }
        println!("AddedInterface events: {created} in the API server for {handed} ADDs via the agent with events on");
    }
    println!();
    for case in cases.iter().filter(|c| c.through_selector) {
        let (add, del) = requests_of_one_pod(b, case);
        println!("API requests of one pod, {:<24} {add} per ADD, {del} per DEL", case.label);
    }

    // Peak RSS of one selector ADD per network: the yh-genie process's own VmHWM.
    println!();
    for case in cases.iter().filter(|c| c.through_selector) {
        let peak = peak_rss_of_add(b, case);
        println!(
            "peak RSS of one ADD, {:<24} {:.1} MB (VmHWM of the yh-genie process, sampled)",
            case.label,
            peak as f64 / 1024.0
        );
    }
    if let Some(file) = &o.strace {
        trace_one_add(b, &cases[1], file);
    }
    println!("{}", attachment_lock_cost(&b.run_dir.path().join("lock-cost")));
    println!(
        "targets: the product path via the agent, ADD median at most 0.9x the bridge alone; the selector's own cost at most 1.5 ms; \
         0 API requests per ADD; peak RSS of one ADD at most 15 MB"
    );
}

/// The selector's ADD and DEL with and without the runtime's capability arguments (what containerd
/// sends for a pod with a hostPort and a bandwidth annotation), through a no-op network whose plugin
/// declares those capabilities: the difference is the cost of handing them on (parsing the
/// network's configuration, injecting, writing it into the record).
fn capabilities(b: &Bench, o: &Options) {
    let script = b.noop_network();
    let mut declaring = script.clone();
    declaring["name"] = "noopcap".into();
    declaring["plugins"][0]["capabilities"] = json!({"portMappings": true, "bandwidth": true});
    b.install("noopcap", &declaring);
    let data = b.sb.path().join("yh-genie");
    let mut with = b.choosing_case("no-op, with runtimeConfig", "noopcap", o.pods, &data, true);
    with.steps[0].stdin["capabilities"] = json!({"portMappings": true, "bandwidth": true, "dns": true});
    with.steps[0].stdin["runtimeConfig"] = json!({
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"egressRate": 1000000, "egressBurst": 2147483647},
        "dns": {"servers": ["10.96.0.10"], "searches": ["default.svc.cluster.local"], "options": ["ndots:5"]},
    });
    let args = with.steps[0].stdin["runtimeConfig"].as_object().unwrap().clone();
    let cases = [b.choosing_case("no-op, no runtimeConfig", "noopcap", o.pods, &data, true), with];
    b.wait_for_agent(&cases);
    b.round(&cases, 1, 1);
    let times = b.round(&cases, o.pods, 1);
    println!("runtime capabilities: {} pods one at a time via the agent, cases interleaved per pod", o.pods);
    println!("{:<26} ADD median     ADD p90    DEL median     DEL p90", "");
    for (case, t) in cases.iter().zip(&times) {
        let [a50, a90, d50, d90] =
            [(&t.add, 0.5), (&t.add, 0.9), (&t.del, 0.5), (&t.del, 0.9)].map(|(v, p)| ms(percentile(v, p)));
        println!("  {:<24} {a50}  {a90}  {d50}  {d90}", case.label);
    }
    // The handing-on alone, in this process: what the difference above cannot resolve under load.
    // The shipped yonghui network, with bandwidth chained too.
    let text = json!({"cniVersion": "1.0.0", "name": "yonghui", "plugins": [
        {"type": "yonghui", "subnetFile": "/run/flannel/subnet.env",
         "delegate": {"type": "yh-bridge", "hairpinMode": true, "isDefaultGateway": true}},
        {"type": "portmap", "capabilities": {"portMappings": true}},
        {"type": "bandwidth", "capabilities": {"bandwidth": true}}]})
    .to_string();
    let rounds = 20_000;
    let started = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(yh_genie::programs::selector::netconf::capabilities::inject(
            std::hint::black_box(&text),
            &args,
        ));
    }
    let per_call = started.elapsed() / rounds;
    println!("  injecting them into the network's configuration, in process: {per_call:?} per ADD");
    println!(
        "  {:<24} {}{}{}{}",
        "with / without",
        ratio(&times[1].add, &times[0].add, 0.5),
        ratio(&times[1].add, &times[0].add, 0.9),
        ratio(&times[1].del, &times[0].del, 0.5),
        ratio(&times[1].del, &times[0].del, 0.9)
    );
}

/// API requests made with the plugin's token by one more pod's ADD and DEL through `case` (a
/// selector case).
fn requests_of_one_pod(b: &Bench, case: &Case) -> (usize, usize) {
    let cid = unique("req");
    let (pod, step) = (&case.pods[0], &case.steps[0]);
    let stdin = step.stdin.to_string();
    let before = b.plugin_requests();
    b.call(step, "ADD", &cid, pod, &stdin);
    let after_add = b.plugin_requests();
    b.call(step, "DEL", &cid, pod, &stdin);
    (after_add - before, b.plugin_requests() - after_add)
}

/// The agent's resident memory with a full node: `PODS` pods on its node, each referring to a
/// ConfigMap of its own (the most watches a node's pods can ask for: one each), among
/// `CONFIG_MAPS` ConfigMaps in the cluster, and as many pods on other nodes, which it never sees.
fn agent_rss(b: &Bench) {
    const PODS: usize = 110;
    const CONFIG_MAPS: usize = 200;
    let api = ApiServer::start_in(&b.node);
    for i in 0..CONFIG_MAPS {
        api.put_config_map(
            "default",
            &format!("cm-{i}"),
            json!({"cni_network_config": "fabric", "other": "x".repeat(200)}),
        );
    }
    let env = |i: usize| {
        json!([{"name": "app", "image": "registry.example/app:1.0", "env": [
            {"name": "CNI_NETWORK_CONFIG", "valueFrom": {"configMapKeyRef": {"name": format!("cm-{i}"), "key": "cni_network_config"}}},
            {"name": "OTHER", "value": "y".repeat(100)}]}])
    };
    for i in 0..PODS {
        api.put_annotated_pod("default", &format!("p-{i}"), json!({"team": "a".repeat(100)}), env(i));
        api.put_pod_spec("default", &format!("elsewhere-{i}"), json!({"nodeName": "other-node", "containers": env(i)}));
    }
    let socket = b.sb.path().join("run/rss.sock");
    let agent = Agent::start(&b.node, &api, b.sb.path(), &socket, 9746, &[]);
    agent.wait_ready();
    let started = Instant::now();
    for i in 0..PODS {
        let name = format!("p-{i}");
        let uid = format!("uid-default-{name}");
        agent.wait_for(&format!("the agent to hold pod {name}"), || {
            held_objects(&socket, &name, &uid).is_some_and(|o| o.config_maps.len() == 1)
        });
    }
    let held = started.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let (rss, hwm) = memory_kib(agent.pid());
    println!();
    println!(
        "agent (yh-genie install --agent) with {PODS} pods on its node (each with a ConfigMap of its own: {PODS} object watches), \
         {CONFIG_MAPS} ConfigMaps and {PODS} pods of another node in the cluster: RSS {:.1} MB, peak {:.1} MB; \
         all pods and objects held {:.2} s after it was ready",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0,
        held.as_secs_f64()
    );
    println!(
        "  its objects: {} pods, {} ConfigMaps, {} object watches; API requests it made: {}",
        agent.metric("yh_genie_agent_pods"),
        agent.metric("yh_genie_agent_objects{resource=\"configmaps\"}"),
        agent.metric("yh_genie_agent_object_watches"),
        api.calls().len()
    );
    drop(agent);
    let installer = Agent::start_without_agent(&b.node, &api, b.sb.path());
    std::thread::sleep(Duration::from_secs(2));
    let (rss, _) = memory_kib(installer.pid());
    println!("  the installer alone (without --agent), for comparison: RSS {:.1} MB", rss as f64 / 1024.0);
    println!("target: the agent's RSS at most 30 MB");
}

/// VmRSS and VmHWM of a process, in KiB.
fn memory_kib(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// What the attachment lock (taken by every ADD, CHECK and DEL) costs, measured in this process:
/// an ADD's take-and-release, then a DEL's take-and-remove, in `dir` (on tmpfs, as a node's
/// `/run/yh-genie` is).
fn attachment_lock_cost(dir: &Path) -> String {
    use yh_genie::platform::cni::attachment_lock::{WAIT, acquire};
    const PAIRS: u32 = 2000;
    let started = Instant::now();
    for i in 0..PAIRS {
        let cid = format!("lock{i}");
        drop(acquire(dir, &cid, "eth0", WAIT).expect("a free lock"));
        acquire(dir, &cid, "eth0", WAIT).expect("a free lock").remove();
    }
    let per_pair = started.elapsed() / PAIRS;
    let _ = std::fs::remove_dir(dir);
    format!(
        "attachment lock: {:.1} µs per ADD + DEL (take, release; take, remove), {PAIRS} pairs",
        per_pair.as_secs_f64() * 1e6
    )
}

/// ADD (then DEL) one pod of `case` under `strace -f -ttt -T` (every process, every system call,
/// with its time), the trace written to `file`: where one ADD's time goes.
fn trace_one_add(b: &Bench, case: &Case, file: &Path) {
    let cid = unique("trace");
    let pod = &case.pods[0];
    let step = &case.steps[0];
    let stdin = step.stdin.to_string();
    let mut command = Command::new("strace");
    command
        .args(["-f", "-ttt", "-T", "-o"])
        .arg(file)
        .arg(&step.program)
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", &cid)
        .env("CNI_NETNS", pod.netns.path())
        .env("CNI_IFNAME", &step.ifname)
        .env("CNI_ARGS", &pod.args)
        .env("CNI_PATH", b.sb.bin())
        .env(yh_genie::node::paths::LOCK_DIR_VAR, b.lock_dir())
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("strace runs");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "traced ADD: {}", String::from_utf8_lossy(&out.stdout));
    b.call(step, "DEL", &cid, pod, &stdin);
    println!("one ADD of {} traced into {}", case.label, file.display());
}

/// ADD one pod of `case` while sampling the selector's VmHWM, then DEL it; returns the peak in KiB.
fn peak_rss_of_add(b: &Bench, case: &Case) -> u64 {
    let cid = unique("rss");
    let pod = &case.pods[0];
    let step = &case.steps[0];
    let stdin = step.stdin.to_string();
    let child = b.spawn(step, "ADD", &cid, pod, &stdin);
    let peak = peak_rss_kib(child.id());
    assert!(child.wait_with_output().unwrap().status.success());
    b.call(step, "DEL", &cid, pod, &stdin);
    peak
}

/// What the agent listening on `socket` holds of pod default/`name` with `uid`, when it holds the
/// pod and all its objects, asked right now with the product's own client, as the plugin asks.
fn held_objects(socket: &Path, name: &str, uid: &str) -> Option<PodObjects> {
    let ask = Ask::Selection { namespace: "default".into(), name: name.into(), uid: Some(uid.into()), wait_ms: 0 };
    match exchange(socket, &Request::new(ask), Instant::now() + Duration::from_secs(5)) {
        Ok(Answer::Objects(objects)) => Some(*objects),
        _ => None,
    }
}
