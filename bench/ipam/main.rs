//! Cluster-wide addresses, side by side (run by `bench/ipam.sh`; needs root): Spiderpool's
//! published workload shape, D Deployments of R replicas spread over K simulated nodes, each pod's
//! ADD exec'd on its node as a runtime execs its network plugin's IPAM (`burst`), for each IPAM
//! (`ipams`) and three cases: a pool of exactly as many addresses as pods, a /16, and a /16 where
//! one node's IPAM is killed and its node deleted mid-burst (its pods created again on the other
//! nodes). Each IPAM gets a control plane of its own (bench/scale's: a real API server and etcd,
//! its audit log), the pods exist there bound to their node, and yh-ipam's node agents run as
//! bench/scale runs them.
//!
//! Per IPAM and case it prints: the time until every pod has its address (or that it did not
//! finish within the time limit, and how many did), the API requests of the IPAM's per-node part
//! per address handed out (the audit log), conflicts (an address held by two live pods), and the
//! addresses still held once every pod's DEL ran (yh-ipam's records, host-local's files,
//! whereabouts' IPPools). It judges nothing.

#[allow(dead_code)]
#[path = "../scale/audit.rs"]
mod audit;
mod burst;
#[allow(dead_code)]
#[path = "../scale/control.rs"]
mod control;
mod ipams;
#[allow(dead_code)]
#[path = "../scale/setup.rs"]
mod setup;
#[allow(dead_code)]
#[path = "../scale/systems.rs"]
mod systems;

use ::kube::Api;
use ::kube::api::{DeleteParams, PostParams};
use burst::{Burst, NodeExec, Pod};
use futures::StreamExt;
use ipams::{Case, IpamKind, NodeSide, Pool};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};
use systems::{NodeDaemon, System};
use testkit::cluster::control_plane::ControlPlane;
use testkit::netns::Netns;
use testkit::run_dir::RunDir;

/// The API server's advertised address: a veth of the benchmark's network namespace.
const ADVERTISE_IP: &str = testkit::cluster::CONTROL_PLANE_IP;
/// Spiderpool's row: why it is not run here.
const SPIDERPOOL: &str = "not run: its IPAM asks its own agent on the node, and its controller's admission \
    webhooks must be reachable from the API server through a Service, which these simulated nodes do not have \
    (and github.com/spidernet-io/spiderpool was not available to this machine's Go: 403)";

struct Options {
    nodes: usize,
    deployments: usize,
    replicas: usize,
    per_node: usize,
    time_limit: Duration,
    ipams: Vec<IpamKind>,
    cases: Vec<Case>,
    yh_genie: PathBuf,
    whereabouts: PathBuf,
    keep: bool,
}

impl Options {
    fn from_args() -> Option<Self> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if !args.iter().any(|a| a == "--bench") {
            return None;
        }
        let cache = std::env::var("YH_GENIE_CACHE").unwrap_or_else(|_| "/var/cache/yh-genie".into());
        let mut o = Options {
            nodes: 10,
            deployments: 100,
            replicas: 10,
            per_node: 4,
            time_limit: Duration::from_secs(600),
            ipams: ["yh-ipam", "yh-ipam-4", "host-local", "whereabouts", "whereabouts-slices"]
                .iter()
                .filter_map(|n| IpamKind::parse(n))
                .collect(),
            cases: Case::ALL.to_vec(),
            yh_genie: PathBuf::from(env!("CARGO_BIN_EXE_yh-genie")),
            whereabouts: Path::new(&cache).join("whereabouts-v0.9.2"),
            keep: false,
        };
        let mut it = args.iter();
        let number = |v: Option<&String>, flag: &str| -> usize {
            v.and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or_else(|| panic!("{flag} takes a number above 0"))
        };
        while let Some(a) = it.next() {
            match a.as_str() {
                "--nodes" => o.nodes = number(it.next(), a),
                "--deployments" => o.deployments = number(it.next(), a),
                "--replicas" => o.replicas = number(it.next(), a),
                "--per-node" => o.per_node = number(it.next(), a),
                "--time-limit" => o.time_limit = Duration::from_secs(number(it.next(), a) as u64),
                "--systems" => {
                    let list = it.next().expect("--systems LIST");
                    o.ipams = list
                        .split(',')
                        .map(|n| IpamKind::parse(n).unwrap_or_else(|| panic!("unknown system {n}")))
                        .collect();
                }
                "--cases" => {
                    let list = it.next().expect("--cases LIST");
                    o.cases = list
                        .split(',')
                        .map(|n| {
                            *Case::ALL.iter().find(|c| c.name() == n).unwrap_or_else(|| panic!("unknown case {n}"))
                        })
                        .collect();
                }
                "--yh-genie-bin" => o.yh_genie = PathBuf::from(it.next().expect("--yh-genie-bin PATH")),
                "--whereabouts-dir" => o.whereabouts = PathBuf::from(it.next().expect("--whereabouts-dir DIR")),
                "--keep" => o.keep = true,
                _ => {}
            }
        }
        assert!(o.nodes >= 2, "--nodes: at least 2 (one is killed in the third case)");
        Some(o)
    }

    fn pods(&self) -> usize {
        self.deployments * self.replicas
    }
}

/// What one IPAM did in one case.
struct CaseResult {
    case: Case,
    /// Pods (the killed node's created again included) and those live with an address.
    pods: usize,
    with_address: usize,
    took: Option<Duration>,
    /// Requests of the IPAM's per-node part during the burst, and the addresses handed out.
    requests: Option<usize>,
    allocations: usize,
    conflicts: usize,
    /// Addresses still held after every DEL: of live nodes, of the killed node.
    leaks: usize,
    dead_node_leaks: usize,
    del_failures: usize,
    failed_attempts: usize,
    errors: Vec<String>,
}

fn main() {
    let Some(o) = Options::from_args() else {
        println!("bench/ipam runs with bench/ipam.sh (needs root, a control plane per system)");
        return;
    };
    testkit::require_root();
    let bin = testkit::cluster::kubernetes_bin();
    let netns = Netns::new("yip");
    netns.must(&format!(
        "ip link add yipv0 type veth peer name yipv1 && ip addr add {ADVERTISE_IP}/24 dev yipv0 && \
         ip link set yipv0 up && ip link set yipv1 up"
    ));
    // Every process and thread from here on is in the benchmark's namespace.
    let ns = std::fs::File::open(netns.path()).unwrap();
    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
    let mut results = Vec::new();
    for ipam in &o.ipams {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_system(&o, &bin, ipam)));
        let outcome = outcome.map_err(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        });
        results.push((ipam.label(), outcome));
    }
    print_report(&o, &results);
}

/// One IPAM, every case, on a control plane of its own.
fn run_system(o: &Options, bin: &Path, ipam: &IpamKind) -> Vec<CaseResult> {
    let run_dir = RunDir::new("ipam");
    let dir = run_dir.path().to_path_buf();
    eprintln!("== {}: {} nodes, {} pods, run dir {}", ipam.label(), o.nodes, o.pods(), dir.display());
    let cp = control::start(&dir.join("control"), bin, &bin.join("etcd"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    setup::apply_manifests(&cp, root);
    cp.kubectl_ok(&["apply", "-f", &root.join("manifests/ipam-crd.yaml").display().to_string()]);
    if ipam.service_account() == Some("whereabouts") {
        cp.kubectl_ok(&["apply", "-f", &o.whereabouts.join("crds").display().to_string()]);
        let rbac = dir.join("whereabouts-rbac.yaml");
        std::fs::write(&rbac, ipams::WHEREABOUTS_RBAC).unwrap();
        cp.kubectl_ok(&["apply", "-f", &rbac.display().to_string()]);
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let access = yh_genie::programs::agent::watching::Access::Kubeconfig(cp.admin_kubeconfig());
    let client = runtime.block_on(yh_genie::programs::agent::watching::connect(&access)).expect("the admin's client");
    let names: Vec<String> = (0..o.nodes).map(|i| format!("node-{i:03}")).collect();
    runtime.block_on(setup::nodes(&client, &names));
    let tokens = match ipam.service_account() {
        Some(account) => runtime.block_on(setup::node_tokens(&client, &names, account, account)),
        None => vec![String::new(); names.len()],
    };
    let ca = cp.pki.path("ca.crt");

    let mut daemons: Vec<NodeDaemon> = Vec::new();
    let mut sides: Vec<NodeSide> = Vec::new();
    for (i, node) in names.iter().enumerate() {
        let daemon = NodeDaemon::new(&System::YhGenie { binary: o.yh_genie.clone() }, &dir, i, node, &tokens[i], &ca);
        let side = NodeSide {
            index: i,
            name: node.clone(),
            dir: daemon.dir.clone(),
            socket: daemon.socket.clone(),
            kubeconfig: daemon.dir.join("kubeconfig"),
        };
        std::fs::write(&side.kubeconfig, ipams::kubeconfig(control::API_URL, &ca, &tokens[i])).unwrap();
        std::fs::create_dir_all(side.whereabouts_conf().parent().unwrap()).unwrap();
        std::fs::write(side.whereabouts_conf(), ipams::whereabouts_flat_conf(&side.kubeconfig)).unwrap();
        if matches!(ipam, IpamKind::YhIpam { .. }) {
            let mut daemon = daemon;
            daemon.extra_args.push(format!("--ipam-records={}", side.records().display()));
            daemon.start();
            daemons.push(daemon);
        }
        sides.push(side);
    }
    if !daemons.is_empty() {
        let ready = systems::wait_all_ready(&mut daemons, Duration::from_secs(600));
        eprintln!("   {} agents ready in {:.1} s", daemons.len(), ready.as_secs_f64());
    }
    let _controller = (*ipam == IpamKind::WhereaboutsSlices).then(|| ControllerProcess::node_slices(o, &cp, &dir));

    let mut results = Vec::new();
    for case in &o.cases {
        results.push(run_case(o, ipam, *case, &cp, &runtime, &client, &sides, &mut daemons));
    }
    if o.keep {
        eprintln!("   kept {}", run_dir.keep().display());
    }
    results
}

/// whereabouts' node slice controller, as its Deployment runs it (the admin's kubeconfig here).
struct ControllerProcess(Child);

impl ControllerProcess {
    fn node_slices(o: &Options, cp: &ControlPlane, dir: &Path) -> Self {
        let mut command = Command::new(o.whereabouts.join("nodeslicecontroller"));
        command
            .arg(format!("--kubeconfig={}", cp.admin_kubeconfig().display()))
            .env("WHEREABOUTS_NAMESPACE", "kube-system");
        ControllerProcess(testkit::process::spawn_logged(&mut command, dir, &dir.join("nodeslicecontroller.log")))
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[allow(clippy::too_many_arguments)]
fn run_case(
    o: &Options,
    ipam: &IpamKind,
    case: Case,
    cp: &ControlPlane,
    runtime: &tokio::runtime::Runtime,
    client: &::kube::Client,
    sides: &[NodeSide],
    daemons: &mut [NodeDaemon],
) -> CaseResult {
    let pool = Pool::for_case(case, o.pods(), o.nodes);
    let namespace = format!("bench-{}", case.name());
    eprintln!("   {}: pool {} from {} ({} addresses)", case.title(), pool.subnet, pool.first, pool.count);
    let execs: Vec<NodeExec> = sides
        .iter()
        .map(|side| NodeExec {
            plugin: ipams::plugin(ipam, side, &o.whereabouts),
            env: ipams::environment(ipam, side),
            network: ipams::network(ipam, case, &pool, side, sides.len()),
        })
        .collect();
    runtime.block_on(namespace_with_account(client, &namespace));
    if *ipam == IpamKind::WhereaboutsSlices {
        node_slice_pool(cp, &namespace, &execs[0].network, sides.len());
    }
    let wanted: Vec<(usize, String)> = (0..o.deployments)
        .flat_map(|d| (0..o.replicas).map(move |r| (d, r)))
        .enumerate()
        .map(|(i, (d, r))| (i % o.nodes, format!("app-{d:03}-{r:02}")))
        .collect();
    let pods = runtime.block_on(create_pods(
        client,
        &namespace,
        &sides.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
        wanted,
    ));
    let total = pods.len();

    let user = ipam.service_account().map(|a| format!("system:serviceaccount:kube-system:{a}"));
    let t0 = SystemTime::now();
    let started = Instant::now();
    let mut burst = Burst::start(&execs, pods, o.per_node, started + o.time_limit);
    let mut victim = None;
    if case == Case::Killed {
        while burst.allocated() < total / 2 && !burst.done() && started.elapsed() < o.time_limit {
            std::thread::sleep(Duration::from_millis(10));
        }
        let node = 0;
        victim = Some(node);
        let before = burst.allocated();
        burst.hold();
        burst.kill_node(node);
        if let Some(daemon) = daemons.get_mut(node) {
            daemon.kill();
        }
        eprintln!("   killed {}'s IPAM after {before} addresses, deleting the node", sides[node].name);
        let theirs: Vec<(usize, String)> = runtime.block_on(delete_node(client, &namespace, &sides[node].name));
        let others = o.nodes - 1;
        let again: Vec<(usize, String)> =
            theirs.into_iter().enumerate().map(|(j, (_, name))| (1 + j % others, format!("{name}-again"))).collect();
        // The node's pods are gone: as many again, elsewhere.
        let names: Vec<String> = sides.iter().map(|s| s.name.clone()).collect();
        let pods = runtime.block_on(create_pods(client, &namespace, &names, again));
        burst.add(pods);
        burst.release();
    }
    let finished = burst.finish();
    let t1 = SystemTime::now();
    let took = finished.all.then(|| finished.at - started);
    let status = match took {
        Some(took) => format!("every pod has its address after {:.1} s", took.as_secs_f64()),
        None => format!("did not finish in {} s", o.time_limit.as_secs()),
    };
    eprintln!(
        "   {status}; {} addresses, {} failed attempts {:?}",
        finished.held.len(),
        finished.failed_attempts,
        finished.errors
    );
    let requests = user.map(|user| audit::Audit::read(&cp.audit_log()).of(&user, t0, t1).count());
    let conflicts = finished.conflicts();
    let live: Vec<burst::Held> = finished.live().cloned().collect();

    // Every live pod's DEL, then what is still held.
    let (del_failures, del_error) = burst::delete_all(&execs, &live, o.per_node, Instant::now() + o.time_limit);
    if let Some(e) = del_error {
        eprintln!("   {del_failures} DELs failed: {e}");
    }
    std::thread::sleep(Duration::from_secs(1));
    let dead_pods: Vec<String> = finished
        .held
        .iter()
        .filter(|h| Some(h.pod.node) == victim)
        .map(|h| format!("{}/{}", h.pod.namespace, h.pod.name))
        .collect();
    let (mut leaks, mut dead_node_leaks) = (0, 0);
    for side in sides {
        let held = ipams::held_on_node(ipam, case, side);
        if Some(side.index) == victim { dead_node_leaks += held } else { leaks += held }
    }
    // whereabouts' allocations of this case's pods (its namespace's).
    for podref in whereabouts_podrefs(cp, ipam).iter().filter(|p| p.starts_with(&format!("{namespace}/"))) {
        if dead_pods.contains(podref) { dead_node_leaks += 1 } else { leaks += 1 }
    }
    // yh-ipam's addresses taken from shared blocks, each a FixedAddress object until its pod's DEL.
    for podref in yh_ipam_shared_podrefs(cp, ipam, case) {
        if dead_pods.contains(&podref) { dead_node_leaks += 1 } else { leaks += 1 }
    }
    cp.kubectl_ok(&["delete", "pods", "--all", "-n", &namespace, "--grace-period=0", "--force", "--wait=false"]);
    CaseResult {
        case,
        pods: total,
        with_address: live.len(),
        took,
        requests,
        allocations: finished.held.len(),
        conflicts,
        leaks,
        dead_node_leaks,
        del_failures,
        failed_attempts: finished.failed_attempts,
        errors: finished.errors,
    }
}

/// The pods' references (`namespace/name`) of every allocation in whereabouts' IPPools.
fn whereabouts_podrefs(cp: &ControlPlane, ipam: &IpamKind) -> Vec<String> {
    if !matches!(ipam, IpamKind::Whereabouts | IpamKind::WhereaboutsSlices) {
        return Vec::new();
    }
    let text = cp.kubectl_ok(&["get", "ippools.whereabouts.cni.cncf.io", "-n", "kube-system", "-o", "json"]);
    ipams::whereabouts_allocations(&text)
}

/// The pods (`namespace/name`) holding yh-ipam's addresses of `case`'s pool as `FixedAddress`
/// objects (from blocks shared when the pool ran low).
fn yh_ipam_shared_podrefs(cp: &ControlPlane, ipam: &IpamKind, case: Case) -> Vec<String> {
    if !matches!(ipam, IpamKind::YhIpam { .. }) {
        return Vec::new();
    }
    let selector = format!("ipam.yh-genie.io/pool=bench-{}", case.name());
    let text = cp.kubectl_ok(&["get", "fixedaddresses.ipam.yh-genie.io", "-l", &selector, "-o", "json"]);
    let objects: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    objects["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| format!("{}/{}", text(&o["spec"]["pod"]["namespace"]), text(&o["spec"]["pod"]["name"])))
        .collect()
}

/// The namespace and its default service account (no controller manager makes it).
async fn namespace_with_account(client: &::kube::Client, namespace: &str) {
    let pp = PostParams::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&pp, &serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap()).await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    accounts.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap()).await.unwrap();
}

/// A Deployment's pods as the scheduler would have bound them: `(node, name)` each.
async fn create_pods(
    client: &::kube::Client,
    namespace: &str,
    nodes: &[String],
    pods: Vec<(usize, String)>,
) -> Vec<Pod> {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let creates = pods.into_iter().map(|(node, name)| {
        let api = api.clone();
        let app = name.rsplit_once('-').map(|(a, _)| a.to_string()).unwrap_or_default();
        let object = json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"nodeName": nodes[node], "containers": [{"name": "app", "image": "registry.invalid/app:1"}]}
        });
        async move {
            let made = api
                .create(&PostParams::default(), &serde_json::from_value(object).unwrap())
                .await
                .unwrap_or_else(|e| panic!("pod {name}: {e}"));
            Pod { namespace: namespace.to_string(), name, uid: made.metadata.uid.unwrap_or_default(), node }
        }
    });
    futures::stream::iter(creates).buffered(32).collect().await
}

/// Delete node `node` and its pods (no kubelet: at once); the pods it had, `(node, name)`.
async fn delete_node(client: &::kube::Client, namespace: &str, node: &str) -> Vec<(usize, String)> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.delete(node, &DeleteParams::default()).await.unwrap_or_else(|e| panic!("deleting node {node}: {e}"));
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&::kube::api::ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .expect("the node's pods");
    let mut theirs = Vec::new();
    for pod in list.items {
        let name = pod.metadata.name.unwrap_or_default();
        api.delete(&name, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.ok();
        theirs.push((0, name));
    }
    theirs
}

/// whereabouts' node slices: the NetworkAttachmentDefinition the controller reads, and a wait
/// until its NodeSlicePool gives every node a slice.
fn node_slice_pool(cp: &ControlPlane, namespace: &str, network: &serde_json::Value, nodes: usize) {
    let name = network["name"].as_str().unwrap().to_string();
    let nad = json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                     "metadata": {"name": name, "namespace": namespace}, "spec": {"config": network.to_string()}});
    let file = cp.dir.join(format!("nad-{name}.json"));
    std::fs::write(&file, nad.to_string()).unwrap();
    cp.kubectl_ok(&["apply", "-f", &file.display().to_string()]);
    let started = Instant::now();
    loop {
        let out =
            cp.kubectl().args(["get", "nodeslicepools", "-n", "kube-system", &name, "-o", "json"]).output().unwrap();
        let pool: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let assigned = pool["status"]["allocations"]
            .as_array()
            .map_or(0, |a| a.iter().filter(|s| s["nodeName"].as_str().is_some_and(|n| !n.is_empty())).count());
        if assigned >= nodes {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the node slice controller gave {assigned} of {nodes} nodes a slice of {name}: {pool}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn print_report(o: &Options, results: &[(String, Result<Vec<CaseResult>, String>)]) {
    println!();
    println!(
        "Cluster-wide addresses: {} Deployments of {} replicas = {} pods over {} nodes, {} ADDs at once per node, \
         {} s per system and case",
        o.deployments,
        o.replicas,
        o.pods(),
        o.nodes,
        o.per_node,
        o.time_limit.as_secs()
    );
    for case in &o.cases {
        println!();
        println!("{}", case.title());
        println!();
        println!(
            "| system | time until every pod has its address | pods with an address | API requests per address | \
             conflicts | held after every DEL |"
        );
        println!("|---|---|---|---|---|---|");
        for (label, outcome) in results {
            let r = match outcome {
                Ok(cases) => cases.iter().find(|r| r.case == *case),
                Err(why) => {
                    println!("| {label} | failed to run: {} | | | | |", why.lines().next().unwrap_or_default());
                    continue;
                }
            };
            let Some(r) = r else { continue };
            let time = match r.took {
                Some(t) => format!("{:.1} s", t.as_secs_f64()),
                None => format!("did not finish in {} s", o.time_limit.as_secs()),
            };
            let requests = match r.requests {
                Some(n) if r.allocations > 0 => {
                    format!("{:.2} ({n} / {})", n as f64 / r.allocations as f64, r.allocations)
                }
                Some(n) => format!("{n} requests, no address"),
                None => "0 (no API server)".into(),
            };
            let leaks = match case {
                Case::Killed => format!("{} (+{} of the deleted node)", r.leaks, r.dead_node_leaks),
                _ => r.leaks.to_string(),
            };
            let leaks = if r.del_failures > 0 { format!("{leaks}; {} DELs failed", r.del_failures) } else { leaks };
            println!(
                "| {label} | {time} | {} of {} | {requests} | {} | {leaks} |",
                r.with_address, r.pods, r.conflicts
            );
        }
        println!("| Spiderpool | not run (below) | | | | |");
        for (label, outcome) in results {
            if let Ok(cases) = outcome
                && let Some(r) = cases.iter().find(|r| r.case == *case)
                && r.failed_attempts > 0
            {
                println!(
                    "  {label}: {} failed ADD attempts, first errors: {}",
                    r.failed_attempts,
                    r.errors.join(" | ")
                );
            }
        }
    }
    println!();
    println!("Spiderpool: {SPIDERPOOL}");
}
