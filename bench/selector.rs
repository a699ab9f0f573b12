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
//! `ip netns exec` wrapper skews the timings), with the tests' fake API server on its 127.0.0.1,
//! the agent running as the DaemonSet runs it (`yh-genie install --agent`), and one netns per pod.

/// The node agent's answers, as the netns suite asks them.
#[path = "../tests/netns/support/agent.rs"]
mod agent_answers;
mod multinet;

use agent_answers::AgentAnswers;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use testkit::agent::Agent;
use testkit::apiserver::ApiServer;
use testkit::netns::Netns;
use testkit::process::unique;
use testkit::sandbox::{Plugins, Sandbox};

/// yh-genie as the benchmark's sandbox installs it.
const PLUGINS: Plugins = Plugins {
    selector: yh_genie::selector::NAME,
    plugins: &yh_genie::plugins::NAMES,
    lock_dir_var: yh_genie::cni::attachment_lock::DIR_VAR,
};

struct Options {
    pods: usize,
    parallel: usize,
    /// `--networks-only`: only pods with 1, 2 and 4 networks (bench/multinet.rs).
    networks_only: bool,
    /// `--capabilities`: only the selector with and without the runtime's capability arguments.
    capabilities_only: bool,
    /// Run by `cargo test --all-targets` (no `--bench`): a few pods, to show that the benchmark
    /// works, in a debug build whose figures mean nothing.
    smoke: bool,
}

impl Options {
    fn from_args() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let smoke = !args.iter().any(|a| a == "--bench");
        let (pods, parallel) = if smoke { (3, 2) } else { (100, 8) };
        let mut o = Options { pods, parallel, networks_only: false, capabilities_only: false, smoke };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--pods" => o.pods = it.next().and_then(|v| v.parse().ok()).expect("--pods N"),
                "--parallel" => o.parallel = it.next().and_then(|v| v.parse().ok()).expect("--parallel N"),
                "--networks-only" => o.networks_only = true,
                "--capabilities" => o.capabilities_only = true,
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

struct Bench {
    sb: Sandbox,
    api: ApiServer,
    node: Netns,
    agent: Agent,
}

impl Bench {
    fn new() -> Self {
        testkit::require_root();
        let node = Netns::new("ybn");
        let sb = Sandbox::new(&PLUGINS);
        let api = ApiServer::start_in(&node);
        let agent = Agent::start(&node, &api, sb.path(), &sb.path().join("run/agent.sock"), 9745, &[]);
        agent.wait_ready();
        Bench { sb, api, node, agent }
    }

    fn agent_socket(&self) -> PathBuf {
        self.sb.path().join("run/agent.sock")
    }

    /// Wait until the agent holds every pod of the agent's cases (as it does by the time a
    /// kubelet asks for a pod's network: it sees the pod when it is bound to the node).
    fn wait_for_agent(&self, cases: &[Case]) {
        let socket = self.agent_socket();
        for pod in cases.iter().filter(|c| c.via_agent).flat_map(|c| &c.pods) {
            self.agent.wait_holds(&socket, &pod.name, &pod.uid, |_| true);
        }
    }

    /// Join the node netns: every thread spawned afterwards, and every plugin process, is in it.
    fn enter_node(&self) {
        let ns = std::fs::File::open(self.node.path()).unwrap();
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns node");
    }

    /// A bridge + host-local network conf on `subnet`.
    fn bridge_network(&self, name: &str, subnet: &str) -> Value {
        json!({"cniVersion": "1.0.0", "name": name, "plugins": [{
            "type": "bridge", "bridge": unique("yb"), "isGateway": true,
            "ipam": {"type": "host-local", "subnet": subnet, "dataDir": self.sb.path().join("ipam")}}]})
    }

    /// `yonghui` delegating to `yh-bridge` (both in process), its subnet from a subnet.env.
    fn yonghui_network(&self) -> Value {
        let subnet_file = self.sb.write(
            "subnet.env",
            "FLANNEL_NETWORK=10.90.0.0/16\nFLANNEL_SUBNET=10.90.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
        );
        json!({"cniVersion": "1.0.0", "name": "fabric", "plugins": [{
            "type": "yonghui", "subnetFile": subnet_file, "dataDir": self.sb.path().join("yonghui"),
            "delegate": {"bridge": unique("yb")}, "ipam": {"dataDir": self.sb.path().join("ipam")}}]})
    }

    /// A plugin that does nothing and answers an empty result: what is left is process cost.
    fn noop_network(&self) -> Value {
        let script = self.sb.bin().join("noop");
        std::fs::write(
            &script,
            "#!/bin/sh\ncat >/dev/null\n[ \"$CNI_COMMAND\" = ADD ] && echo '{\"cniVersion\":\"1.0.0\"}'\nexit 0\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
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
        self.api.put_config_map("default", &cm, json!({"cni_network_config": value}));
        let socket = if via_agent { self.agent_socket() } else { PathBuf::new() };
        let stdin = json!({
            "cniVersion": "1.0.0", "name": "yh-genie", "type": "yh-genie",
            "kubeconfig": self.api.kubeconfig(), "confDir": self.sb.path().join("net.d"),
            "dataDir": data_dir, "binDir": self.sb.bin(), "agentSocket": socket,
        });
        let pods = (0..pods)
            .map(|i| {
                let name = format!("{prefix}-{i}");
                self.api.put_pod(
                    "default",
                    &name,
                    json!([{"name": "app", "image": "nginx", "env": [{"name": "CNI_NETWORK_CONFIG",
                        "valueFrom": {"configMapKeyRef": {"name": cm, "key": "cni_network_config"}}}]}]),
                );
                let uid = format!("uid-default-{name}");
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

fn ms(d: Duration) -> String {
    format!("{:7.2} ms", d.as_secs_f64() * 1000.0)
}

fn ratio(a: &[Duration], b: &[Duration], p: f64) -> String {
    format!("{:7.2}x   ", percentile(a, p).as_secs_f64() / percentile(b, p).as_secs_f64())
}

fn main() {
    let o = Options::from_args();
    let b = Bench::new();
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
    ];
    b.wait_for_agent(&cases);

    println!("yh-genie selector benchmark: {} pods, release build, cases interleaved per pod", o.pods);
    println!("every selector case reads the network's bare name from a ConfigMap, records, runs the network's chain");
    println!("  bridge alone:          Debian's reference bridge + host-local exec'd by this driver, as libcni would");
    println!("  yonghui:               yh-genie -> yonghui -> yh-bridge in process (subnet.env), host-local exec'd");
    println!("  via the agent:         the pod and its ConfigMap from the node agent's socket: no API request");
    println!("  direct (API):          GET pod + GET ConfigMap from the API server (agentSocket empty)");
    println!(
        "  no-op:                 a /bin/sh plugin answering an empty result; through the selector minus alone is the selector's own cost"
    );
    for parallel in [1, o.parallel] {
        // Warm the page cache and every code path once, untimed.
        b.round(&cases, 1, 1);
        let times = b.round(&cases, o.pods, parallel);
        println!();
        let mode = if parallel == 1 { "one at a time".to_string() } else { format!("{parallel} at once") };
        println!("{mode:<26} ADD median     ADD p90    DEL median     DEL p90");
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
        ] {
            println!(
                "  {label:<24} {}{}{}{}",
                ratio(&sel.add, &alone.add, 0.5),
                ratio(&sel.add, &alone.add, 0.9),
                ratio(&sel.del, &alone.del, 0.5),
                ratio(&sel.del, &alone.del, 0.9)
            );
        }
        let own = |i: usize| ms(percentile(&times[i].add, 0.5).saturating_sub(percentile(&times[3].add, 0.5)));
        println!(
            "  selector's own cost per ADD (median, no-op difference): via the agent {}, direct {}",
            own(4).trim(),
            own(5).trim()
        );
        // Signed: under load the difference can come out either way.
        let with = percentile(&times[4].add, 0.5).as_secs_f64() * 1e3;
        let without = percentile(&times[6].add, 0.5).as_secs_f64() * 1e3;
        println!(
            "  the AddedInterface events' hand-over per ADD (median, no-op via the agent minus the same without events): {:+.2} ms",
            with - without
        );
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
    println!("{}", attachment_lock_cost());
    println!(
        "targets: via the agent, ADD median at most 1.0x the bridge alone, 0 API requests per ADD; peak RSS of one ADD at most 15 MB"
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
        std::hint::black_box(yh_genie::selector::netconf::capabilities::inject(std::hint::black_box(&text), &args));
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
    let before = b.api.plugin_requests();
    b.call(step, "ADD", &cid, pod, &stdin);
    let after_add = b.api.plugin_requests();
    b.call(step, "DEL", &cid, pod, &stdin);
    (after_add - before, b.api.plugin_requests() - after_add)
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
        agent.wait_holds(&socket, &name, &format!("uid-default-{name}"), |o| o.config_maps.len() == 1);
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
/// an ADD's take-and-release, then a DEL's take-and-remove, on tmpfs beside the real directory.
fn attachment_lock_cost() -> String {
    use yh_genie::cni::attachment_lock::{DEFAULT_DIR, WAIT, acquire};
    let dir = Path::new(DEFAULT_DIR).with_file_name(format!("bench-{}", std::process::id()));
    const PAIRS: u32 = 2000;
    let started = Instant::now();
    for i in 0..PAIRS {
        let cid = format!("lock{i}");
        drop(acquire(&dir, &cid, "eth0", WAIT).expect("a free lock"));
        acquire(&dir, &cid, "eth0", WAIT).expect("a free lock").remove();
    }
    let per_pair = started.elapsed() / PAIRS;
    let _ = std::fs::remove_dir(&dir);
    format!(
        "attachment lock: {:.1} µs per ADD + DEL (take, release; take, remove), {PAIRS} pairs",
        per_pair.as_secs_f64() * 1e6
    )
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
