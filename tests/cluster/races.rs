//! The cluster suite's tests of what the runtime hands the selector (a hostPort, bandwidth
//! annotations) and of pods that come and go while their network is being made (deleted mid-ADD
//! and recreated).

use super::{NS, YH_BRIDGENET, condition};
use std::collections::BTreeSet;
use testkit::cluster::pods::{Network, in_cidr, sleeper, web_server};
use testkit::cluster::{Cluster, NODES, PATIENCE};
use testkit::process::report;

const HOST_PORT: u16 = 18080;

/// A pod on yonghui (whose shipped configuration chains portmap) asks for hostPort 18080: the
/// kubelet hands it to the runtime, the runtime to the selector as `runtimeConfig.portMappings`,
/// the selector to portmap. A pod on the other node reaches it at its node's address and that
/// port; once the pod is gone, nothing answers there and the node has no DNAT rule for the port
/// left.
pub fn a_host_port_answers_on_the_node_while_its_pod_lives(cluster: &mut Cluster) {
    let pod = "hostport";
    let node_ip = NODES.iter().find(|(name, _, _)| *name == "node-a").map(|(_, ip, _)| *ip).unwrap();
    cluster
        .apply_text(&web_server(NS, pod).on_slot("a").host_port(HOST_PORT).network(Network::Named("yonghui")).yaml());
    cluster.wait_pod_ready(NS, pod);
    let worker = cluster.worker("node-a");
    let dnat = || -> Vec<String> {
        let rules = worker.must("iptables-save -t nat");
        rules
            .lines()
            .filter(|l| l.contains(&format!("--dport {HOST_PORT}")) && l.contains("DNAT"))
            .map(String::from)
            .collect()
    };
    let rules = dnat();
    assert!(
        !rules.is_empty(),
        "node-a has no DNAT rule for {HOST_PORT} while {pod} runs:\n{}",
        worker.must("iptables-save -t nat")
    );
    // From yh-b, on node-b: across the underlay to node-a's own address.
    let answer = host_port_answer(cluster, "yh-b", node_ip);
    assert!(answer.starts_with("HTTP/1.1 200"), "{node_ip}:{HOST_PORT} from node-b: {answer:?}");
    assert_eq!(answer.split_once("\r\n\r\n").map(|(_, body)| body.trim()), Some(pod), "{answer:?}");

    cluster.delete_pod(NS, pod);
    let worker = cluster.worker("node-a");
    cluster.wait_for(&format!("node-a's DNAT rules for {HOST_PORT} gone"), || {
        let rules = worker.must("iptables-save -t nat");
        (!rules.lines().any(|l| l.contains(&format!("--dport {HOST_PORT}")))).then_some(())
    });
    let answer = host_port_answer(cluster, "yh-b", node_ip);
    assert_eq!(answer, "", "{node_ip}:{HOST_PORT} still answers after {pod} is gone");
    report(&format!("cluster: hostPort {HOST_PORT} answered on {node_ip} through {rules:?}, gone with the pod"));
}

/// A pod on yh-bridgenet (examples/networks: yh-bridge, portmap and bandwidth chained; the nodes'
/// `/opt/cni/bin` has Debian's bandwidth plugin, as kind's node image has not) carries the
/// kubelet's `kubernetes.io/ingress-bandwidth` and `egress-bandwidth` annotations: the kubelet
/// hands them to the runtime, the runtime to the selector as `runtimeConfig.bandwidth`, the
/// selector to bandwidth. The limit into the pod is a tbf on the pod's host veth, the limit out of
/// it a tbf on the ifb device (`bwp...`) the plugin made for the pod; both go with the pod, from
/// the values the selector recorded at ADD.
pub fn bandwidth_annotations_shape_the_pod_while_it_lives(cluster: &mut Cluster) {
    let pod = "shaped";
    let worker = cluster.worker("node-a");
    let shaping = || -> Vec<String> {
        let qdiscs = worker.must("tc qdisc show");
        qdiscs.lines().filter(|l| l.starts_with("qdisc tbf ")).map(String::from).collect()
    };
    assert_eq!(shaping(), Vec::<String>::new(), "node-a shapes something before {pod} exists");
    let shaped = sleeper(NS, pod)
        .on_slot("a")
        .annotation("kubernetes.io/ingress-bandwidth", "2M")
        .annotation("kubernetes.io/egress-bandwidth", "1M")
        .network(Network::Named("yh-bridgenet"));
    cluster.apply_text(&shaped.yaml());
    let ip = cluster.wait_pod_ready(NS, pod)["status"]["podIP"].as_str().unwrap_or_default().to_string();
    assert!(in_cidr(&ip, YH_BRIDGENET), "{pod}'s podIP {ip:?} is not in yh-bridgenet's {YH_BRIDGENET}");
    let tbf = shaping();
    let on = |device_is_ifb: bool, rate: &str| {
        tbf.iter().any(|l| {
            let device = l.split_whitespace().skip_while(|w| *w != "dev").nth(1).unwrap_or_default();
            device.starts_with("bwp") == device_is_ifb && l.contains(&format!("rate {rate} "))
        })
    };
    let qdiscs = || worker.must("tc qdisc show");
    assert!(on(true, "1Mbit"), "no 1Mbit tbf on a bwp ifb device for {pod}'s egress:\n{}", qdiscs());
    assert!(on(false, "2Mbit"), "no 2Mbit tbf on {pod}'s host veth for its ingress:\n{}", qdiscs());

    cluster.delete_pod(NS, pod);
    cluster.wait_for(&format!("node-a's shaping of {pod} gone"), || shaping().is_empty().then_some(()));
    let links = worker.must("ip -o link show");
    assert!(!links.contains("bwp"), "{pod}'s ifb device is left on node-a:\n{links}");
    report(&format!("cluster: {pod} ({ip}) shaped by {tbf:?}, gone with the pod"));
}

/// What `from` gets for an HTTP GET of `ip`:18080 (empty when nothing answers).
fn host_port_answer(cluster: &Cluster, from: &str, ip: &str) -> String {
    let request = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {ip} {HOST_PORT} || true");
    cluster.exec(NS, from, &["sh", "-c", &request])
}

/// A pod on two networks (yonghui, ptplan@net1) is deleted at once after the API server names its
/// node, forcibly (the object goes now, whatever its sandbox is doing), and created again under
/// the same name. The new pod is Ready with eth0 and net1 in their networks, its network-status
/// lists its own addresses (the old sandbox's status write, if any, did not land on it), and
/// every address taken meanwhile on the node belongs to a running sandbox: the old sandbox's
/// leases were freed.
pub fn a_pod_recreated_mid_add_gets_its_network(cluster: &mut Cluster) {
    let pod = "reborn";
    let manifest = sleeper(NS, pod).on_slot("a").network(Network::FromConfigMap("net-multi")).yaml();
    let worker = cluster.worker("node-a");
    let leases_before = lease_owners(cluster);
    cluster.apply_text(&manifest);
    let old = cluster.wait_for(&format!("{pod} scheduled"), || {
        let object = cluster.get_json(&["-n", NS, "get", "pod", pod]);
        object["spec"]["nodeName"].as_str()?;
        object["metadata"]["uid"].as_str().map(String::from)
    });
    cluster.kubectl_ok(&["-n", NS, "delete", "pod", pod, "--wait=false", "--grace-period=0", "--force"]);
    let old_sandboxes = sandboxes_of(worker, &old);
    cluster.apply_text(&manifest);
    let object = cluster.wait_pod_ready(NS, pod);
    let new = object["metadata"]["uid"].as_str().unwrap().to_string();
    assert_ne!(new, old, "{pod} was not recreated");
    report(&format!("cluster: {pod}'s old sandboxes when it was deleted: {old_sandboxes:?}"));

    let ip = object["status"]["podIP"].as_str().unwrap_or_default().to_string();
    let cidr = cluster.pod_cidr("node-a");
    assert!(in_cidr(&ip, &cidr), "{pod}: status.podIP {ip:?} is not in {cidr}");
    assert_eq!(cluster.pod_addresses(NS, pod, "eth0"), vec![ip.clone()]);
    let net1 = cluster.pod_addresses(NS, pod, "net1");
    assert!(net1.len() == 1 && in_cidr(&net1[0], super::PTPLAN), "{pod}: net1 holds {net1:?}");
    let listed = cluster.network_status(NS, pod, Some(&new));
    let want = vec![("eth0".to_string(), ip.clone()), ("net1".to_string(), net1[0].clone())];
    assert_eq!(listed, want, "the new {pod}: its network-status");

    let worker = cluster.worker("node-a");
    cluster.wait_for(&format!("{pod}'s old sandboxes gone from node-a's containerd"), || {
        sandboxes_of(worker, &old).is_empty().then_some(())
    });
    // The old sandbox's DEL may still be on its way: give it the harness's patience.
    let since = std::time::Instant::now();
    loop {
        let running = running_sandbox_ids(worker);
        let leaked: Vec<(String, String)> = lease_owners(cluster)
            .difference(&leases_before)
            .filter(|(_, owner)| !running.contains(owner))
            .cloned()
            .collect();
        if leaked.is_empty() {
            break;
        }
        assert!(since.elapsed() < PATIENCE, "node-a: leases of no running sandbox: {leaked:?}");
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert!(condition(&cluster.get_json(&["-n", NS, "get", "pod", pod]), "Ready"));
    cluster.delete_pod(NS, pod);
}

/// The sandbox containers of the pod with uid `uid` on the worker (running or not).
fn sandboxes_of(worker: &testkit::cluster::worker::WorkerNode, uid: &str) -> Vec<String> {
    let filter = format!("labels.\"io.kubernetes.pod.uid\"=={uid},labels.\"io.cri-containerd.kind\"==sandbox");
    worker.ctr(&["containers", "ls", "-q", &filter]).lines().map(String::from).collect()
}

/// The ids of the worker's sandboxes whose pause process runs.
fn running_sandbox_ids(worker: &testkit::cluster::worker::WorkerNode) -> BTreeSet<String> {
    let sandboxes: BTreeSet<String> = worker
        .ctr(&["containers", "ls", "-q", "labels.\"io.cri-containerd.kind\"==sandbox"])
        .lines()
        .map(String::from)
        .collect();
    worker
        .ctr(&["tasks", "ls"])
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == "RUNNING" && sandboxes.contains(f[0])).then(|| f[0].to_string())
        })
        .collect()
}

/// node-a's host-local leases: (the lease file, the container id it names).
fn lease_owners(cluster: &Cluster) -> BTreeSet<(String, String)> {
    let worker = cluster.worker("node-a");
    let mut leases = BTreeSet::new();
    testkit::inspect::walk(&worker.node_path("/var/lib/cni/networks"), &mut |p| {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.parse::<std::net::Ipv4Addr>().is_ok() {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let owner = text.lines().next().unwrap_or_default().trim().to_string();
            leases.insert((p.display().to_string(), owner));
        }
    });
    leases
}

/// The node state of one pod, as 0.1.0 laid it out on node-a: the selector's results on the data
/// disk (`<dataDir>/results/`, where 0.2.0 keeps them on tmpfs, `/run/yh-genie/results<dataDir>/`),
/// yonghui's saved delegate configuration in `/var/lib/cni/yonghui/` (0.2.0: `/run/yh-genie/yonghui/`).
struct StateOf010 {
    pod: &'static str,
    /// Its attachment record, where both releases keep it.
    record: String,
    /// Its results where 0.2.0 writes them, then where 0.1.0 did (and this pod now has them).
    results: [String; 2],
    /// Its yonghui saved delegate configuration, the same way.
    yonghui: [String; 2],
    /// host-local's lease of its address, and its veth on the node.
    lease: String,
    host_veth: String,
}

/// The data dir the DaemonSet's installer writes into the conflist (its `--data-dir` default).
const DATA_DIR: &str = "/var/lib/cni/yh-genie";

impl StateOf010 {
    /// Start `pod` on node-a on yonghui, then move what 0.2.0 wrote for it where 0.1.0 wrote it.
    fn make(cluster: &Cluster, pod: &'static str) -> StateOf010 {
        cluster.apply_text(&sleeper(NS, pod).on_slot("a").network(Network::Named("yonghui")).yaml());
        let ip = cluster.wait_pod_ready(NS, pod)["status"]["podIP"].as_str().unwrap_or_default().to_string();
        let worker = cluster.worker("node-a");
        let sandboxes = worker.running_sandboxes(pod);
        assert_eq!(sandboxes.len(), 1, "{pod}'s sandboxes: {sandboxes:?}");
        let attachment = format!("{}:eth0", sandboxes[0]);
        let peer_index = cluster.exec(NS, pod, &["cat", "/sys/class/net/eth0/iflink"]).trim().to_string();
        let links = worker.must("ip -o link show");
        let host_veth = links
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{peer_index}: ")))
            .and_then(|rest| rest.split([':', '@']).next())
            .unwrap_or_else(|| panic!("no link {peer_index} on node-a for {pod}'s eth0:\n{links}"))
            .to_string();
        let state = StateOf010 {
            pod,
            record: format!("{DATA_DIR}/attachments/{attachment}"),
            results: [
                format!("/run/yh-genie/results{DATA_DIR}/{attachment}"),
                format!("{DATA_DIR}/results/{attachment}"),
            ],
            yonghui: [format!("/run/yh-genie/yonghui/{attachment}"), format!("/var/lib/cni/yonghui/{attachment}")],
            lease: format!("/var/lib/cni/networks/yonghui/{ip}"),
            host_veth,
        };
        for [now, then] in [&state.results, &state.yonghui] {
            let (now, then) = (worker.node_path(now), worker.node_path(then));
            let bytes = std::fs::read(&now).unwrap_or_else(|e| panic!("{pod}: {}: {e}", now.display()));
            std::fs::create_dir_all(then.parent().unwrap()).unwrap();
            std::fs::write(&then, bytes).unwrap();
            std::fs::set_permissions(&then, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
            std::fs::remove_file(&now).unwrap();
        }
        for path in [&state.record, &state.results[1], &state.yonghui[1], &state.lease] {
            assert!(worker.node_path(path).exists(), "{pod}: no {path}");
        }
        state
    }

    /// What of the pod node-a still holds.
    fn left(&self, cluster: &Cluster) -> Vec<String> {
        let worker = cluster.worker("node-a");
        let files = [&self.record, &self.lease].into_iter().chain(&self.results).chain(&self.yonghui);
        let mut left: Vec<String> = files.filter(|p| worker.node_path(p).exists()).cloned().collect();
        let veth = worker.node_command("ip").args(["link", "show", "dev", &self.host_veth]).output().unwrap();
        if veth.status.success() {
            left.push(format!("host veth {}", self.host_veth));
        }
        left
    }
}

/// The DaemonSet is rolled to a new image (the same binary tagged under a second name on each
/// node, as a registry would serve it) while six pods start on both nodes: each installer pod is
/// replaced, its agent with it, under the pods' ADDs. Every pod is Ready with an address of its
/// node, and the rollout finishes: both nodes' installer pods run the new image and are Ready.
/// Before the roll, a running pod is given the state 0.1.0 wrote (docs/install.md's upgrade
/// guarantee); deleted after it, it leaves no lease, record, result, saved delegate or host veth.
pub fn daemonset_rolled_while_pods_start_loses_nothing(cluster: &mut Cluster) {
    let from_010 = StateOf010::make(cluster, "from-0-1-0");
    let rolled = format!("yh-genie:{}-rolled", env!("CARGO_PKG_VERSION"));
    let rolled = rolled.as_str();
    let current = testkit::cluster::images::yh_genie_name();
    for worker in &cluster.workers {
        worker.tag_image(&current, &testkit::cluster::images::normalized(rolled));
    }
    cluster.kubectl_ok(&["-n", "kube-system", "set", "image", "daemonset/yh-genie", &format!("install={rolled}")]);
    let pods: Vec<(String, &str)> = (0..6).map(|i| (format!("roll-{i}"), ["a", "b"][i % 2])).collect();
    for (pod, slot) in &pods {
        cluster.apply_text(&sleeper(NS, pod).on_slot(slot).network(Network::Named("yonghui")).yaml());
    }
    for (pod, slot) in &pods {
        let object = cluster.wait_pod_ready(NS, pod);
        let cidr = cluster.pod_cidr(&format!("node-{slot}"));
        let ip = object["status"]["podIP"].as_str().unwrap_or_default().to_string();
        assert!(in_cidr(&ip, &cidr), "{pod}: status.podIP {ip:?} is not in {cidr}");
        assert_eq!(cluster.pod_addresses(NS, pod, "eth0"), vec![ip], "{pod}");
    }
    cluster.rollout_yh_genie("120s");
    let installers = cluster.get_json(&["-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=yh-genie"]);
    let running: Vec<(&str, &str, bool)> = installers["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let node = p["spec"]["nodeName"].as_str().unwrap_or_default();
            (node, p["spec"]["containers"][0]["image"].as_str().unwrap_or_default(), condition(p, "Ready"))
        })
        .collect();
    assert_eq!(running.len(), 2, "{running:?}");
    assert!(running.iter().all(|(_, image, ready)| *image == rolled && *ready), "{running:?}");
    for (pod, _) in &pods {
        cluster.kubectl_ok(&["-n", NS, "delete", "pod", pod, "--wait=false"]);
    }

    assert_eq!(from_010.left(cluster).len(), 5, "the roll kept 0.1.0's state, lease and veth");
    cluster.delete_pod(NS, from_010.pod);
    // The sandbox's DEL may still be on its way: give it the harness's patience.
    let since = std::time::Instant::now();
    loop {
        let left = from_010.left(cluster);
        if left.is_empty() {
            break;
        }
        assert!(since.elapsed() < PATIENCE, "node-a still holds, of {}: {left:?}", from_010.pod);
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    report(&format!("cluster: {} deleted after the roll from 0.1.0's state, nothing left", from_010.pod));
}
