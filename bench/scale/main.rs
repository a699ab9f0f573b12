//! The node agents at cluster scale (run by `bench/scale.sh`; needs root): one real API server with
//! etcd (the test cluster's build), K simulated nodes each with its real node daemon as its
//! DaemonSet runs it (its own node name and credentials, `systems`), and the node-density workload
//! (`workload`): P pods per node created in a burst, churn, then the API server restarted. Side by
//! side in the same run, when given their binaries: Multus thick's daemons on the same K nodes and
//! workload. Each system gets a control plane of its own (so the API server's figures are its own).
//!
//! Per system it prints: the daemons' RSS (median and max: idle, the peak during the burst, after
//! it, after the churn), CPU seconds, TCP connections to the API server, API requests per node by
//! verb and resource and phase (the audit log), requests at start of a node with its pods, the API
//! server's peak RSS; for yh-genie, the time from a pod's creation to its node's agent holding
//! everything the ADD needs (p50, p99; every pod is asked for at its agent's socket, as the plugin
//! asks) and a sample of ADDs run during the burst (the plugin itself, a no-op network) answered by
//! the agent or falling back to the API server; after the restart, the relists per second and the
//! API server's peak RSS. It judges nothing.

mod audit;
mod control;
mod procs;
mod setup;
mod start_all;
mod systems;
mod workload;

use audit::Audit;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};
use systems::{NodeDaemon, System};
use testkit::fake_plugin::{FakePlugin, Step};
use testkit::netns::Netns;
use testkit::run_dir::RunDir;
use workload::{Created, Layout};
use yh_genie::node::agent_socket::client::exchange;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, Request};

/// The API server's advertised address (in its serving certificate): a veth of the benchmark's
/// network namespace.
pub const ADVERTISE_IP: &str = testkit::cluster::CONTROL_PLANE_IP;
/// How long all daemons may take to become ready.
const READY_PATIENCE: Duration = Duration::from_secs(900);
/// After a phase, before its figures are read.
const SETTLE: Duration = Duration::from_secs(10);
/// How long the relists after the API server's restart are watched.
const AFTER_RESTART: Duration = Duration::from_secs(60);

struct Options {
    nodes: usize,
    pods: usize,
    namespaces: usize,
    /// Every this many pods of the burst, an ADD is run through the plugin (yh-genie).
    add_every: usize,
    churn_rounds: usize,
    /// Daemons killed and started again after the churn, to count what a start costs with pods.
    restart_sample: usize,
    /// Keep each run's directory (logs, audit log) for a look afterwards.
    keep: bool,
    yh_genie: Option<PathBuf>,
    multus: Option<PathBuf>,
    /// The etcds each system runs on, a run each, side by side (`None`: the Kubernetes build's).
    etcds: Vec<Option<PathBuf>>,
    smoke: bool,
}

impl Options {
    fn from_args() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let smoke = !args.iter().any(|a| a == "--bench");
        let mut o = Options {
            nodes: if smoke { 2 } else { 100 },
            pods: if smoke { 3 } else { 30 },
            namespaces: 10,
            add_every: 10,
            churn_rounds: if smoke { 1 } else { 3 },
            restart_sample: 10,
            keep: false,
            yh_genie: Some(PathBuf::from(env!("CARGO_BIN_EXE_yh-genie"))),
            multus: None,
            etcds: Vec::new(),
            smoke,
        };
        let mut it = args.iter();
        let number = |v: Option<&String>, flag: &str| -> usize {
            v.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{flag} takes a number"))
        };
        while let Some(a) = it.next() {
            match a.as_str() {
                "--nodes" => o.nodes = number(it.next(), a),
                "--pods" => o.pods = number(it.next(), a),
                "--namespaces" => o.namespaces = number(it.next(), a).max(1),
                "--add-every" => o.add_every = number(it.next(), a).max(1),
                "--churn-rounds" => o.churn_rounds = number(it.next(), a),
                "--restart-sample" => o.restart_sample = number(it.next(), a),
                "--yh-genie-bin" => o.yh_genie = Some(PathBuf::from(it.next().expect("--yh-genie-bin PATH"))),
                "--no-yh-genie" => o.yh_genie = None,
                "--keep" => o.keep = true,
                "--multus-thick-bin" => o.multus = Some(PathBuf::from(it.next().expect("--multus-thick-bin DIR"))),
                "--etcd" => o.etcds.push(match it.next().expect("--etcd built|PATH").as_str() {
                    "built" => None,
                    path => Some(PathBuf::from(path)),
                }),
                _ => {}
            }
        }
        if o.etcds.is_empty() {
            o.etcds.push(None);
        }
        o
    }

    fn systems(&self) -> Vec<System> {
        let mut systems = Vec::new();
        if let Some(binary) = &self.yh_genie {
            systems.push(System::YhGenie { binary: binary.clone() });
        }
        if let Some(bin_dir) = &self.multus {
            systems.push(System::MultusThick { bin_dir: bin_dir.clone() });
        }
        systems
    }
}

fn main() {
    let o = Options::from_args();
    testkit::require_root();
    let Some(bin) = kubernetes_bin(o.smoke) else {
        println!("smoke run skipped: the Kubernetes binaries are not built (scripts/cluster/build.sh)");
        return;
    };
    if o.smoke {
        println!(
            "smoke run (cargo test, debug build, {} nodes, {} pods each): the figures below are not",
            o.nodes, o.pods
        );
        println!("measurements; measure with bench/scale.sh");
    }
    raise_open_files();
    let netns = Netns::new("ysc");
    netns.must(&format!(
        "ip link add yscv0 type veth peer name yscv1 && ip addr add {ADVERTISE_IP}/24 dev yscv0 && \
         ip link set yscv0 up && ip link set yscv1 up"
    ));
    // Every process and thread from here on is in the benchmark's namespace.
    let ns = std::fs::File::open(netns.path()).unwrap();
    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
    let mut results = Vec::new();
    for system in o.systems() {
        for etcd in &o.etcds {
            let etcd = etcd.clone().unwrap_or_else(|| bin.join("etcd"));
            results.push(run(&o, &bin, &system, &etcd));
        }
    }
    print_report(&o, &bin, &results);
    if o.smoke {
        smoke_checks(&results);
    }
}

/// The smoke run (the cluster tier runs it) fails when the driver no longer measures what it
/// claims, or when the agents do not hold their pods: every pod reached its agent, every sampled
/// ADD succeeded through it, every agent held one connection, and every agent started again with
/// its node's pods held them all and answered their ADDs, whatever its etcd. An etcd without
/// progress requests must also have made the API server refuse the agents' streaming lists, or the
/// run did not meet what it is there for.
fn smoke_checks(results: &[Outcome]) {
    for r in results.iter().filter(|r| r.yh_genie) {
        let which = &r.label;
        assert_eq!(r.propagation_missing, 0, "{which}: pods never held by their agent");
        assert!(!r.propagation_ms.is_empty(), "{which}: no pod was asked for at its agent");
        assert_eq!(r.adds[2], 0, "{which}: ADDs of the sample failed");
        assert!(r.adds[0] > 0, "{which}: no ADD of the sample was answered by the agent: {:?}", r.fallbacks);
        assert!(r.connections.iter().all(|c| *c == 1.0), "{which}: connections per agent: {:?}", r.connections);
        assert_eq!(r.start_all.never, 0, "{which}: agents started again never held their pods");
        assert!(!r.start_all.held_ms.is_empty(), "{which}: no agent was started again");
        assert_eq!(
            r.after_start_adds,
            (r.start_all.held_ms.len(), 0),
            "{which}: ADDs after the agents held their pods: (by the agent, otherwise)"
        );
        if without_progress_requests(&r.etcd_version) {
            assert!(r.start_all.refusals > 0, "{which}: the API server served every streaming list");
        }
    }
}

/// Whether an etcd of `version` cannot answer progress requests (before 3.4.31, or 3.5 before
/// 3.5.13), so that the API server does not serve streaming lists on it.
fn without_progress_requests(version: &str) -> bool {
    let parts: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [3, 4, patch] => *patch < 31,
        [3, 5, patch] => *patch < 13,
        [3, minor, ..] => *minor < 4,
        _ => false,
    }
}

/// scripts/cluster/build.sh's bin dir (`KUBERNETES_VERSION` picks the version); a smoke run does
/// not build it.
fn kubernetes_bin(smoke: bool) -> Option<PathBuf> {
    if smoke {
        let version = std::env::var("KUBERNETES_VERSION").unwrap_or_else(|_| "v1.37.2".into());
        let cache = std::env::var("YH_GENIE_CACHE").unwrap_or_else(|_| "/var/cache/yh-genie".into());
        let bin = Path::new(&cache).join(format!("kubernetes-{version}/bin"));
        if !bin.join("kube-apiserver").exists() || !bin.join("etcd").exists() {
            return None;
        }
    }
    Some(testkit::cluster::kubernetes_bin())
}

/// Thousands of watches over HTTP/1.1 (an agent of another build) each hold a descriptor in the
/// API server, which inherits this limit.
fn raise_open_files() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard.min(1 << 20), hard.min(1 << 20));
    }
}

/// One RSS sample of every daemon.
struct Sample {
    at: SystemTime,
    daemons: Vec<Option<u64>>,
}

/// What an API server restart cost.
struct RestartOutcome {
    /// The new API server's start to its readiness.
    ready_after: Duration,
    /// Its readiness to every daemon's.
    all_ready_after: Duration,
    peak_mib: f64,
    /// Each second from the new API server's start: the daemons' requests, and their relists
    /// (lists and streaming lists).
    requests: Vec<usize>,
    relists: Vec<usize>,
}

/// What one system's run measured.
struct Outcome {
    label: String,
    yh_genie: bool,
    etcd_version: String,
    ready_in: Duration,
    /// MiB: idle (all ready, no pods), peak during the burst, after the burst, after the churn.
    rss: [Vec<f64>; 4],
    cpu_seconds: Vec<f64>,
    connections: Vec<f64>,
    /// Per phase: requests by label, summed over the nodes.
    requests: Vec<(&'static str, BTreeMap<String, usize>)>,
    /// Requests of the daemons started again with their node's pods, each until ready + 5 s.
    start_requests: BTreeMap<String, usize>,
    start_per_node: Vec<f64>,
    restarted: usize,
    apiserver_peak_mib: f64,
    /// A rolling restart, and one after the watch history is gone.
    restarts: Vec<RestartOutcome>,
    /// Milliseconds from a pod's creation to its agent answering with everything (yh-genie).
    propagation_ms: Vec<f64>,
    propagation_missing: usize,
    /// ADDs during the burst: by the agent, falling back, failed; their milliseconds.
    adds: [usize; 3],
    add_ms: Vec<f64>,
    fallbacks: BTreeMap<String, usize>,
    /// Every agent started again at once with its node's pods (yh-genie).
    start_all: start_all::StartAll,
    /// ADDs, one a node, once its agent held its pods again: (by the agent, otherwise).
    after_start_adds: (usize, usize),
}

fn run(o: &Options, bin: &Path, system: &System, etcd: &Path) -> Outcome {
    let run_dir = RunDir::new("scale");
    let dir = run_dir.path().to_path_buf();
    let etcd_version = testkit::cluster::control_plane::etcd_version(etcd);
    let label = format!("{}, etcd {etcd_version}", system.label());
    eprintln!("== {label}: {} nodes, {} pods each, run dir {}", o.nodes, o.pods, dir.display());
    let mut cp = control::start(&dir.join("control"), bin, etcd);
    setup::apply_manifests(&cp, Path::new(env!("CARGO_MANIFEST_DIR")));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let access = yh_genie::programs::agent::watching::Access::Kubeconfig(cp.admin_kubeconfig());
    let client = runtime.block_on(yh_genie::programs::agent::watching::connect(&access)).expect("the admin's client");
    let names: Vec<String> = (0..o.nodes).map(|i| format!("node-{i:04}")).collect();
    let layout = Layout { nodes: names.clone(), namespaces: o.namespaces };
    runtime.block_on(setup::nodes(&client, &names));
    let prefix = system.service_account();
    let tokens = runtime.block_on(setup::node_tokens(&client, &names, system.service_account(), prefix));
    runtime.block_on(workload::objects(&client, &layout));
    write_plugin_files(&dir);

    let ca = cp.pki.path("ca.crt");
    let mut daemons: Vec<NodeDaemon> =
        names.iter().enumerate().map(|(i, node)| NodeDaemon::new(system, &dir, i, node, &tokens[i], &ca)).collect();
    let t_start = SystemTime::now();
    for daemon in &mut daemons {
        daemon.start();
    }
    let ready_in = systems::wait_all_ready(&mut daemons, READY_PATIENCE);
    eprintln!("   all {} ready in {:.1}s", o.nodes, ready_in.as_secs_f64());

    // The daemons' RSS every second.
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let pids: Arc<Mutex<Vec<Option<u32>>>> = Arc::new(Mutex::new(daemons.iter().map(NodeDaemon::pid).collect()));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (samples, pids, stop) = (samples.clone(), pids.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let daemons = pids.lock().unwrap().iter().map(|p| p.and_then(procs::rss_kib)).collect();
                samples.lock().unwrap().push(Sample { at: SystemTime::now(), daemons });
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    std::thread::sleep(SETTLE);
    let rss_idle = rss_now(&daemons);

    // The burst: P pods per node, one per node at a time; every pod asked for at its agent, a
    // sample ADDed through the plugin.
    let yh = matches!(system, System::YhGenie { .. });
    let (probe_tx, probe_rx) = mpsc::channel::<Created>();
    let (add_tx, add_rx) = mpsc::channel::<Created>();
    let probe_rx = Arc::new(Mutex::new(probe_rx));
    let add_rx = Arc::new(Mutex::new(add_rx));
    let propagation: Arc<Mutex<(Vec<f64>, usize)>> = Arc::default();
    let add_results: Arc<Mutex<Vec<(String, f64)>>> = Arc::default();
    let sockets: Arc<Vec<PathBuf>> = Arc::new(daemons.iter().map(|d| d.socket.clone()).collect());
    let mut workers = Vec::new();
    if yh {
        for _ in 0..16 {
            let (rx, sockets, propagation) = (probe_rx.clone(), sockets.clone(), propagation.clone());
            workers.push(std::thread::spawn(move || probe(&rx, &sockets, &propagation)));
        }
        for _ in 0..4 {
            let (rx, results, dir, binary) =
                (add_rx.clone(), add_results.clone(), dir.clone(), o.yh_genie.clone().unwrap());
            let sockets = sockets.clone();
            workers.push(std::thread::spawn(move || add_sample(&rx, &results, &dir, &binary, &sockets)));
        }
    }
    let t_burst = SystemTime::now();
    let order: Vec<(usize, String)> =
        (0..o.pods).flat_map(|k| (0..o.nodes).map(move |n| (n, format!("p{n:04}-{k}")))).collect();
    let live: Mutex<Vec<Vec<start_all::LivePod>>> = Mutex::new(vec![Vec::new(); o.nodes]);
    let count = std::sync::atomic::AtomicUsize::new(0);
    let on_created = |c: Created| {
        live.lock().unwrap()[c.node].push((c.namespace.clone(), c.name.clone(), c.uid.clone()));
        if yh {
            let i = count.fetch_add(1, Ordering::Relaxed);
            if i.is_multiple_of(o.add_every) {
                let _ = add_tx.send(c.clone());
            }
            let _ = probe_tx.send(c);
        }
    };
    runtime.block_on(workload::create_pods(&client, &layout, order, &on_created));
    drop((probe_tx, add_tx));
    for worker in workers {
        worker.join().unwrap();
    }
    eprintln!("   burst of {} pods done", o.nodes * o.pods);
    std::thread::sleep(SETTLE);
    let rss_burst = rss_now(&daemons);
    let rss_burst_peak = peaks(&samples.lock().unwrap(), t_burst, SystemTime::now(), o.nodes);
    let pids_now: Vec<u32> = daemons.iter().filter_map(NodeDaemon::pid).collect();
    let by_pid = procs::connections_to(6443);
    let connections: Vec<f64> = pids_now.iter().map(|p| by_pid.get(p).copied().unwrap_or(0) as f64).collect();

    // Churn: a third of each node's pods deleted and created anew, the ConfigMaps and NADs edited.
    let t_churn = SystemTime::now();
    for round in 1..=o.churn_rounds {
        let mut gone = Vec::new();
        let mut again = Vec::new();
        for (node, pods) in live.lock().unwrap().iter_mut().enumerate() {
            let third = pods.len() / 3;
            for (namespace, name, _) in pods.drain(..third) {
                gone.push((namespace, name));
                again.push((node, format!("p{node:04}-r{round}-{}", again.len())));
            }
        }
        runtime.block_on(workload::delete_pods(&client, gone));
        let on_created = |c: Created| live.lock().unwrap()[c.node].push((c.namespace, c.name, c.uid));
        runtime.block_on(workload::create_pods(&client, &layout, again, &on_created));
        runtime.block_on(workload::edit_networks(&client, &layout, round));
    }
    eprintln!("   churn done");
    std::thread::sleep(SETTLE * 2);
    let rss_churn = rss_now(&daemons);

    // A start with the node's pods there: a sample of daemons killed and started again.
    let restarted = o.restart_sample.min(o.nodes);
    let t_restarts = SystemTime::now();
    for daemon in daemons.iter_mut().take(restarted) {
        daemon.kill();
        daemon.start();
    }
    systems::wait_all_ready(&mut daemons[..restarted], READY_PATIENCE);
    std::thread::sleep(Duration::from_secs(5));
    let t_restarts_end = SystemTime::now();

    // Every agent started again at once with its node's pods: until each holds them all; then an
    // ADD of one pod a node, which its agent must answer.
    let mut start_all = start_all::StartAll::default();
    let mut after_start_adds = (0, 0);
    if yh {
        let pods = live.lock().unwrap().clone();
        start_all = start_all::run(&mut daemons, &pods);
        systems::wait_all_ready(&mut daemons, READY_PATIENCE);
        let sample = if o.smoke { o.nodes } else { o.restart_sample.min(o.nodes) };
        let results: Mutex<Vec<(String, f64)>> = Mutex::default();
        let (tx, rx) = mpsc::channel::<Created>();
        for (node, pods) in pods.iter().enumerate().take(sample) {
            if let Some((namespace, name, uid)) = pods.last() {
                let (namespace, name, uid) = (namespace.clone(), name.clone(), uid.clone());
                let _ = tx.send(Created { node, namespace, name, uid, at: Instant::now() });
            }
        }
        drop(tx);
        add_sample(&Mutex::new(rx), &results, &dir, o.yh_genie.as_ref().unwrap(), &sockets);
        let by_agent = results.lock().unwrap().iter().filter(|(selection, _)| selection == "agent").count();
        after_start_adds = (by_agent, results.lock().unwrap().len() - by_agent);
    }
    let t_start_all_end = SystemTime::now();
    *pids.lock().unwrap() = daemons.iter().map(NodeDaemon::pid).collect();

    // The API server restarted: once as a rolling restart does it, once after its watch history
    // is gone (every watch must list again).
    let apiserver_peak_mib = procs::peak_rss_kib(cp.apiserver_pid()).unwrap_or(0) as f64 / 1024.0;
    let mut restarts = Vec::new();
    for forget_history in [false, true] {
        let restart = control::restart_apiserver(&mut cp, forget_history);
        let all_ready = systems::wait_all_ready(&mut daemons, READY_PATIENCE);
        let waited = restart.ready.elapsed().unwrap_or_default();
        std::thread::sleep(AFTER_RESTART.saturating_sub(waited));
        let peak = procs::peak_rss_kib(restart.new_pid).unwrap_or(0) as f64 / 1024.0;
        restarts.push((restart, all_ready, peak, SystemTime::now()));
    }
    let cpu_seconds: Vec<f64> = daemons.iter().filter_map(|d| d.pid().and_then(procs::cpu_seconds)).collect();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();

    let audit = Audit::read(&cp.audit_log());
    let user = format!("system:serviceaccount:kube-system:{}", system.service_account());
    // Each phase until the next begins: what the daemons do after it (the status writes and events
    // the agent makes for the ADDs) counts with it.
    let requests = vec![
        ("start (no pods yet)", audit.table(&user, t_start, t_burst)),
        ("burst", audit.table(&user, t_burst, t_churn)),
        ("churn", audit.table(&user, t_churn, t_restarts)),
        ("every agent started again at once", audit.table(&user, t_restarts_end, t_start_all_end)),
        ("API server restart (60 s)", audit.table(&user, restarts[0].0.started, restarts[0].3)),
        ("API server restart, history gone (60 s)", audit.table(&user, restarts[1].0.started, restarts[1].3)),
    ];
    let restarted_nodes: Vec<&String> = names.iter().take(restarted).collect();
    let start_requests = {
        let mut table = BTreeMap::new();
        for r in audit.of(&user, t_restarts, t_restarts_end) {
            if r.node.as_ref().is_some_and(|n| restarted_nodes.contains(&n)) {
                *table.entry(r.label()).or_default() += 1;
            }
        }
        table
    };
    let start_per_node: Vec<f64> = audit
        .per_node(&user, t_restarts, t_restarts_end)
        .into_iter()
        .filter(|(node, _)| restarted_nodes.contains(&node))
        .map(|(_, n)| n as f64)
        .collect();
    let restarts = restarts
        .iter()
        .map(|(restart, all_ready, peak, end)| {
            let seconds = AFTER_RESTART.as_secs() as usize + 1;
            let (mut requests, mut relists) = (vec![0; seconds], vec![0; seconds]);
            for r in audit.of(&user, restart.started, *end) {
                let second = r.at.duration_since(restart.started).unwrap_or_default().as_secs() as usize;
                requests[second.min(seconds - 1)] += 1;
                if r.is_list() {
                    relists[second.min(seconds - 1)] += 1;
                }
            }
            RestartOutcome {
                ready_after: restart.ready.duration_since(restart.started).unwrap_or_default(),
                all_ready_after: *all_ready,
                peak_mib: *peak,
                requests,
                relists,
            }
        })
        .collect();
    let (propagation_ms, propagation_missing) = std::mem::take(&mut *propagation.lock().unwrap());
    let mut adds = [0; 3];
    let mut add_ms = Vec::new();
    let mut fallbacks = BTreeMap::new();
    for (selection, ms) in add_results.lock().unwrap().iter() {
        match selection.as_str() {
            "agent" => adds[0] += 1,
            "failed" => adds[2] += 1,
            other => {
                adds[1] += 1;
                *fallbacks.entry(other.chars().take(90).collect::<String>()).or_default() += 1;
            }
        }
        if selection != "failed" {
            add_ms.push(*ms);
        }
    }
    eprintln!("   done; stopping");
    drop(daemons);
    drop(cp);
    run_dir.end();
    if o.keep {
        eprintln!("   kept {}", run_dir.keep().display());
    }
    Outcome {
        label,
        yh_genie: yh,
        etcd_version,
        ready_in,
        rss: [rss_idle, rss_burst_peak, rss_burst, rss_churn],
        cpu_seconds,
        connections,
        requests,
        start_requests,
        start_per_node,
        restarted,
        apiserver_peak_mib,
        restarts,
        propagation_ms,
        propagation_missing,
        adds,
        add_ms,
        fallbacks,
        start_all,
        after_start_adds,
    }
}

/// Every daemon's RSS now, in MiB.
fn rss_now(daemons: &[NodeDaemon]) -> Vec<f64> {
    daemons.iter().filter_map(|d| d.pid().and_then(procs::rss_kib)).map(|k| k as f64 / 1024.0).collect()
}

/// Each daemon's highest sampled RSS in [from, to), in MiB.
fn peaks(samples: &[Sample], from: SystemTime, to: SystemTime, daemons: usize) -> Vec<f64> {
    let mut peak = vec![0u64; daemons];
    for sample in samples.iter().filter(|s| s.at >= from && s.at < to) {
        for (i, rss) in sample.daemons.iter().enumerate() {
            peak[i] = peak[i].max(rss.unwrap_or(0));
        }
    }
    peak.into_iter().map(|k| k as f64 / 1024.0).collect()
}

/// The no-op plugin and the networks the pods choose (the ConfigMap's and the five NADs'), as the
/// node's files the ADD sample's plugin reads.
fn write_plugin_files(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    FakePlugin::new().on("ADD", [Step::Answer(serde_json::json!({"cniVersion": "1.0.0"}))]).write(&bin.join("noop"));
    for network in std::iter::once(workload::PRIMARY).chain(workload::NADS) {
        let conf = serde_json::json!({"cniVersion": "1.0.0", "name": network, "plugins": [{"type": "noop"}]});
        let path = dir.join(format!("net.d/{network}/10-{network}.conflist"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, conf.to_string()).unwrap();
    }
    std::fs::create_dir_all(dir.join("locks")).unwrap();
}

/// Ask each created pod's agent for it, as the plugin does (waiting up to a second at a time),
/// until it answers with the pod and its objects: the time since the pod's creation.
fn probe(rx: &Mutex<mpsc::Receiver<Created>>, sockets: &[PathBuf], out: &Mutex<(Vec<f64>, usize)>) {
    loop {
        let Ok(pod) = rx.lock().unwrap().recv() else { return };
        let ask = Ask::Selection {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: Some(pod.uid.clone()),
            wait_ms: 1000,
        };
        let request = Request::new(ask);
        let held = loop {
            match exchange(&sockets[pod.node], &request, Instant::now() + Duration::from_secs(2)) {
                Ok(Answer::Objects(_)) => break true,
                _ if pod.at.elapsed() > Duration::from_secs(60) => break false,
                Ok(_) => {}
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        let mut out = out.lock().unwrap();
        if held {
            out.0.push(pod.at.elapsed().as_secs_f64() * 1000.0);
        } else {
            out.1 += 1;
        }
    }
}

/// Run the plugin's ADD (then DEL) for each pod sent, as the runtime would once the pod's sandbox
/// is up, through its node's agent, with a no-op network: where its selection came from (`agent`,
/// `api: <why>`, or `failed`) and how long the ADD took.
fn add_sample(
    rx: &Mutex<mpsc::Receiver<Created>>,
    results: &Mutex<Vec<(String, f64)>>,
    dir: &Path,
    binary: &Path,
    sockets: &[PathBuf],
) {
    loop {
        let Ok(pod) = rx.lock().unwrap().recv() else { return };
        let node_dir = dir.join("nodes").join(format!("node-{:04}", pod.node));
        let stdin = serde_json::json!({
            "cniVersion": "1.0.0", "name": "yh-genie", "type": "yh-genie",
            "kubeconfig": node_dir.join("host/net.d/yh-genie.d/yh-genie.kubeconfig"),
            "confDir": dir.join("net.d"), "dataDir": node_dir.join("plugin-data"), "binDir": dir.join("bin"),
            "agentSocket": sockets[pod.node],
        })
        .to_string();
        let cid = testkit::process::unique("scale");
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_UID={}",
            pod.namespace, pod.name, pod.uid
        );
        let call = |command: &str| {
            use std::io::Write;
            let mut child = std::process::Command::new(binary)
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("CNI_COMMAND", command)
                .env("CNI_CONTAINERID", &cid)
                .env("CNI_NETNS", "/proc/self/ns/net")
                .env("CNI_IFNAME", "eth0")
                .env("CNI_ARGS", &args)
                .env("CNI_PATH", dir.join("bin"))
                .env("YH_GENIE_LOCK_DIR", dir.join("locks"))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
            child.wait_with_output().unwrap()
        };
        let started = Instant::now();
        let added = call("ADD");
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let log = String::from_utf8_lossy(&added.stderr);
        let selection = if !added.status.success() {
            eprintln!("   ADD of {}/{} failed: {}", pod.namespace, pod.name, String::from_utf8_lossy(&added.stdout));
            "failed".to_string()
        } else {
            log.split("selection=")
                .nth(1)
                .and_then(|rest| {
                    serde_json::Deserializer::from_str(rest).into_iter::<String>().next().and_then(Result::ok)
                })
                .unwrap_or_else(|| "unknown".into())
        };
        results.lock().unwrap().push((selection, ms));
        call("DEL");
    }
}

fn print_report(o: &Options, bin: &Path, results: &[Outcome]) {
    let version = std::process::Command::new(bin.join("kube-apiserver"))
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!();
    println!(
        "scale: {} nodes x {} pods ({} pods; {} namespaces, each a networks ConfigMap and {} NADs; node i's pods in namespace i mod {}), {version}, {} CPUs",
        o.nodes,
        o.pods,
        o.nodes * o.pods,
        o.namespaces.min(o.nodes),
        workload::NADS.len(),
        o.namespaces,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let width = 58;
    let row = |label: &str, values: Vec<String>| {
        let cells: Vec<String> = values.iter().map(|v| format!("{v:>26}")).collect();
        println!("  {label:<width$}{}", cells.join(""));
    };
    row("", results.iter().map(|r| r.label.clone()).collect());
    let mm = |v: &[f64], unit: &str| {
        let (median, max) = procs::median_max(v);
        format!("{median:.1} / {max:.1} {unit}")
    };
    row("daemons ready after start", results.iter().map(|r| format!("{:.1} s", r.ready_in.as_secs_f64())).collect());
    let rss_rows =
        ["RSS idle (median / max)", "RSS peak during the burst", "RSS after the burst", "RSS after the churn"];
    for (i, label) in rss_rows.iter().enumerate() {
        row(label, results.iter().map(|r| mm(&r.rss[i], "MiB")).collect());
    }
    row(
        "RSS after churn / after burst (median)",
        results
            .iter()
            .map(|r| {
                let (before, after) = (procs::median_max(&r.rss[2]).0, procs::median_max(&r.rss[3]).0);
                format!("{:+.1} %", (after / before - 1.0) * 100.0)
            })
            .collect(),
    );
    row(
        "CPU seconds (median / max / all)",
        results
            .iter()
            .map(|r| {
                let (median, max) = procs::median_max(&r.cpu_seconds);
                format!("{median:.1} / {max:.1} / {:.0}", r.cpu_seconds.iter().sum::<f64>())
            })
            .collect(),
    );
    row("connections to the API server", results.iter().map(|r| mm(&r.connections, "")).collect());
    row("API server peak RSS", results.iter().map(|r| format!("{:.0} MiB", r.apiserver_peak_mib)).collect());
    for (phase, _) in &results[0].requests {
        println!("  requests per node, {phase}:");
        let labels: std::collections::BTreeSet<&String> =
            results.iter().flat_map(|r| r.requests.iter().find(|(p, _)| p == phase).unwrap().1.keys()).collect();
        for label in labels {
            row(
                &format!("  {label}"),
                results
                    .iter()
                    .map(|r| {
                        let n = r.requests.iter().find(|(p, _)| p == phase).unwrap().1.get(label).copied().unwrap_or(0);
                        format!("{:.2}", n as f64 / o.nodes as f64)
                    })
                    .collect(),
            );
        }
    }
    println!(
        "  requests at start of a node with its pods ({} daemons killed and started again):",
        results[0].restarted
    );
    let labels: std::collections::BTreeSet<&String> = results.iter().flat_map(|r| r.start_requests.keys()).collect();
    for label in labels {
        row(
            &format!("  {label}"),
            results
                .iter()
                .map(|r| {
                    format!(
                        "{:.1}",
                        r.start_requests.get(label).copied().unwrap_or(0) as f64 / r.restarted.max(1) as f64
                    )
                })
                .collect(),
        );
    }
    row("  all (median / max per node)", results.iter().map(|r| mm(&r.start_per_node, "")).collect());
    row(
        "pod created -> agent holds it (p50 / p99)",
        results.iter().map(|r| p50_p99(&r.propagation_ms, r.propagation_missing)).collect(),
    );
    row(
        "agents started at once -> each holds its pods (p50 / p99)",
        results.iter().map(|r| p50_p99(&r.start_all.held_ms, r.start_all.never)).collect(),
    );
    row(
        "  streaming lists refused: agents / refusals",
        results
            .iter()
            .map(|r| {
                if !r.yh_genie {
                    return "-".into();
                }
                format!("{} / {}", r.start_all.agents_refused, r.start_all.refusals)
            })
            .collect(),
    );
    row(
        "  then an ADD a node: agent / otherwise",
        results
            .iter()
            .map(|r| {
                if !r.yh_genie {
                    return "-".into();
                }
                format!("{} / {}", r.after_start_adds.0, r.after_start_adds.1)
            })
            .collect(),
    );
    row(
        "ADDs in the burst: agent / fallback / failed",
        results
            .iter()
            .map(|r| {
                if r.add_ms.is_empty() && r.adds[2] == 0 {
                    "-".into()
                } else {
                    format!("{} / {} / {}", r.adds[0], r.adds[1], r.adds[2])
                }
            })
            .collect(),
    );
    row(
        "  their time (p50 / p99)",
        results
            .iter()
            .map(|r| {
                if r.add_ms.is_empty() {
                    "-".into()
                } else {
                    format!("{:.0} / {:.0} ms", procs::quantile(&r.add_ms, 0.5), procs::quantile(&r.add_ms, 0.99))
                }
            })
            .collect(),
    );
    for r in results {
        for (why, n) in &r.fallbacks {
            println!("    {}: {n} x {why}", r.label);
        }
    }
    for (i, case) in
        ["after a rolling restart of the API server", "after a restart that lost the watch history"].iter().enumerate()
    {
        println!("  {case}:");
        let each = |f: &dyn Fn(&RestartOutcome) -> String| results.iter().map(|r| f(&r.restarts[i])).collect();
        row("  API server ready after", each(&|r| format!("{:.1} s", r.ready_after.as_secs_f64())));
        row("  all daemons ready again after that", each(&|r| format!("{:.1} s", r.all_ready_after.as_secs_f64())));
        row("  API server peak RSS", each(&|r| format!("{:.0} MiB", r.peak_mib)));
        row("  requests (60 s)", each(&|r| r.requests.iter().sum::<usize>().to_string()));
        row(
            "  relists; the busiest second's share",
            each(&|r| {
                let total: usize = r.relists.iter().sum();
                let max = r.relists.iter().copied().max().unwrap_or(0);
                format!("{total}; {:.0} %", if total == 0 { 0.0 } else { max as f64 * 100.0 / total as f64 })
            }),
        );
        for r in results {
            let restart = &r.restarts[i];
            let seconds = |v: &[usize]| {
                let last = v.iter().rposition(|n| *n > 0).unwrap_or(0);
                v[..=last].iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" ")
            };
            println!(
                "    {} requests per second from the new API server's start: [{}]",
                r.label,
                seconds(&restart.requests)
            );
            println!(
                "    {} relists per second:                                  [{}]",
                r.label,
                seconds(&restart.relists)
            );
        }
    }
}

/// `p50 / p99 ms`, and how many never came; `-` when there is nothing to say.
fn p50_p99(ms: &[f64], never: usize) -> String {
    let never = if never > 0 { format!(" ({never} never)") } else { String::new() };
    if ms.is_empty() {
        return if never.is_empty() { "-".into() } else { never.trim().to_string() };
    }
    format!("{:.0} / {:.0} ms{never}", procs::quantile(ms, 0.5), procs::quantile(ms, 0.99))
}
