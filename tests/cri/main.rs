//! yh-genie on the real runtime path: a container runtime calls it as the kubelet asks for pod
//! sandboxes, containerd's CRI plugin through go-cni and libcni, CRI-O through ocicni and libcni.
//! Each test starts a node (`support::node`): a private runtime (Debian's containerd 1.6;
//! `scripts/test.sh --cri` runs the suite again with containerd 2.x, built from the module proxy,
//! in `YH_GENIE_CONTAINERD_BIN`, and `scripts/test.sh --matrix` under CRI-O, scripts/crio.sh's, in
//! `YH_GENIE_CRIO_BIN`) in a throwaway netns and mount namespace, its CNI dirs laid out by
//! `yh-genie install` as the DaemonSet does, and the fake API server holding the pods and
//! ConfigMaps. The tests speak CRI v1 gRPC to the runtime (RunPodSandbox, PodSandboxStatus,
//! StopPodSandbox, RemovePodSandbox, ListPodSandbox, Status) and check what the kubelet would see
//! (the pod IP the runtime reports, errors, NetworkReady) and what the node holds (addresses in the
//! pod's netns, records, leases, locks, veths, NAT rules, netns, mounts, processes). Where the
//! runtimes differ (who maps host ports, when STATUS is asked), each test says what each does.

mod support;

use serde_json::json;
use std::collections::BTreeSet;
use std::time::Instant;
use support::node::{BRIDGE, CriNode, MACVLAN_ROUTER, MACVLAN_VETH, NODE_IP, Network, Sandbox, YONGHUI};
use support::runtime::Engine;
use testkit::apiserver::{from_config_map, literal};
use testkit::process::report;
use yh_genie::programs::selector::NETWORK_STATUS;

/// How long a node's state may take to follow a change.
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// How a pod chooses its network.
#[derive(Clone, Copy, Debug)]
enum Choice {
    /// A ConfigMap key holding the seed's JSON form naming the network's file.
    SeedJson,
    /// A ConfigMap key holding the network's name.
    BareName,
    /// A literal env value `network/file`.
    Literal,
}

/// Put pod `name` choosing `network` by `choice` into the API server.
fn put_choosing(node: &CriNode, name: &str, network: &Network, choice: Choice) {
    let containers = match choice {
        Choice::SeedJson => {
            let seed = json!({"kubernetes": {"kubeconfig": node.network_file(network)}}).to_string();
            node.api.put_config_map("default", &format!("{name}-cm"), json!({"cni_network_config": seed}));
            from_config_map(&format!("{name}-cm"), "cni_network_config")
        }
        Choice::BareName => {
            node.api.put_config_map("default", &format!("{name}-cm"), json!({"network": network.name}));
            from_config_map(&format!("{name}-cm"), "network")
        }
        Choice::Literal => literal(&format!("{0}/{0}.conflist", network.name)),
    };
    node.put_pod(name, containers);
}

/// What the kubelet and the node must see of a sandbox of `network`: the runtime reports an IP of
/// the network, that IP is on the pod's eth0, and the selector recorded the network for the pod
/// named by the CNI_ARGS the runtime built.
fn assert_on_network(node: &CriNode, sandbox: &Sandbox, network: &Network) {
    let case = format!("pod {} (sandbox {})", sandbox.pod, sandbox.id);
    assert!(network.contains(&sandbox.ip), "{case}: the runtime reports {:?}, not in {network:?}", sandbox.ip);
    assert_eq!(node.sandbox_addresses(sandbox), [sandbox.ip.as_str()], "{case}: eth0 in the pod's netns");
    let record = node.record(sandbox);
    assert_eq!(record["network"], network.name, "{case}: {record}");
    let uid = format!("uid-default-{}", sandbox.pod);
    assert_eq!(record["pod"], json!({"namespace": "default", "name": sandbox.pod, "uid": uid}), "{case}");
}

fn pings(node: &CriNode, from: &Sandbox, to: &str) -> bool {
    node.in_sandbox(from, &format!("ping -c1 -W2 {to}")).0
}

#[test]
fn the_pod_ip_the_runtime_reports_is_in_the_network_the_pod_chose() {
    let node = CriNode::start();
    let mut sandboxes: Vec<(Sandbox, Network)> = Vec::new();
    for network in [YONGHUI, BRIDGE, MACVLAN_VETH] {
        for choice in [Choice::SeedJson, Choice::BareName, Choice::Literal] {
            let name = format!("{}-{}", network.name, format!("{choice:?}").to_lowercase());
            put_choosing(&node, &name, &network, choice);
            node.wait_agent_holds(&name);
            let sandbox = node.run_pod(&name, 0).unwrap_or_else(|e| panic!("{name}: {e}\n{}", node.logs()));
            assert_on_network(&node, &sandbox, &network);
            sandboxes.push((sandbox, network));
        }
    }
    node.put_pod("no-choice", json!([{"name": "app", "image": "nginx"}]));
    node.wait_agent_holds("no-choice");
    let sandbox = node.run_pod("no-choice", 0).unwrap_or_else(|e| panic!("no-choice: {e}\n{}", node.logs()));
    assert_on_network(&node, &sandbox, &YONGHUI);
    sandboxes.push((sandbox, YONGHUI));
    assert_eq!(node.api_gets(), 0, "every ADD took the node agent's answer: no API request on the ADD path");

    // Pod to pod: each pod reaches the next pod of its network.
    for network in [YONGHUI, BRIDGE, MACVLAN_VETH] {
        let on: Vec<&Sandbox> = sandboxes.iter().filter(|(_, n)| n.name == network.name).map(|(s, _)| s).collect();
        for pair in on.windows(2) {
            assert!(pings(&node, pair[0], &pair[1].ip), "{} reaches {} ({})", pair[0].pod, pair[1].pod, pair[1].ip);
        }
    }
    // The macvlan pods reach their node through the veth the chain added (a macvlan child alone cannot).
    for (sandbox, network) in &sandboxes {
        if network.name == MACVLAN_VETH.name {
            assert!(pings(&node, sandbox, NODE_IP), "{} reaches its node {NODE_IP}", sandbox.pod);
        }
    }

    // As the kubelet does when pods go: StopPodSandbox (again, as it repeats it), then
    // RemovePodSandbox; containerd DELs at each, the later ones with an empty CNI_NETNS; CRI-O at
    // the first StopPodSandbox only.
    for (sandbox, _) in &sandboxes {
        node.cri.stop_pod_sandbox(&sandbox.id).unwrap_or_else(|e| panic!("StopPodSandbox {}: {e}", sandbox.pod));
        node.remove_pod(sandbox);
    }
    assert_eq!(node.api_gets(), 0, "the runtime's DELs, first and repeated, made no API request either");
    node.finish();
}

#[test]
fn a_sandbox_whose_add_fails_is_retried_from_nothing() {
    let node = CriNode::start();
    let network = YONGHUI;
    // A pod the node agent holds gets its network through an API server outage...
    put_choosing(&node, "known", &network, Choice::BareName);
    node.wait_agent_holds("known");
    node.api.down();
    let known = node.run_pod("known", 0).unwrap_or_else(|e| panic!("known, API server down: {e}\n{}", node.logs()));
    assert_on_network(&node, &known, &network);
    node.remove_pod(&known);

    // ...one created during the outage, which the agent cannot have seen, takes the direct path
    // after the agent's bounded wait, and fails.
    put_choosing(&node, "retried", &network, Choice::BareName);
    let started = Instant::now();
    let error = node.run_pod("retried", 0).expect_err("RunPodSandbox fails while the API server is down");
    let message = error.message();
    assert!(
        message.contains("unreachable") && message.contains(&node.api.url()),
        "the CRI error carries the CNI error naming the API server: {message}"
    );
    report(&format!("failed RunPodSandbox took {:?}: {message}", started.elapsed()));
    node.assert_nothing_left("after the failed RunPodSandbox");

    // The kubelet retries with the next attempt number.
    node.api.up();
    let sandbox = node.run_pod("retried", 1).unwrap_or_else(|e| panic!("the retry: {e}\n{}", node.logs()));
    assert_on_network(&node, &sandbox, &network);
    node.remove_pod(&sandbox);
    node.finish();
}

#[test]
fn a_dozen_sandboxes_at_once_get_distinct_addresses() {
    let node = CriNode::start();
    let names: Vec<String> = (0..12).map(|i| format!("many-{i}")).collect();
    for name in &names {
        node.put_pod(name, json!([{"name": "app", "image": "nginx"}]));
    }
    let configs = names.iter().map(|name| node.sandbox_config(name, 0)).collect();
    let started = Instant::now();
    let results = node.cri.run_pod_sandboxes(configs);
    report(&format!("12 concurrent RunPodSandbox took {:?}", started.elapsed()));
    let sandboxes: Vec<Sandbox> = results
        .into_iter()
        .zip(&names)
        .map(|(r, name)| node.sandbox(&r.unwrap_or_else(|e| panic!("{name}: {e}\n{}", node.logs()))))
        .collect();
    for sandbox in &sandboxes {
        assert_on_network(&node, sandbox, &YONGHUI);
    }
    let distinct: BTreeSet<&str> = sandboxes.iter().map(|s| s.ip.as_str()).collect();
    assert_eq!(distinct.len(), 12, "distinct addresses: {sandboxes:#?}");
    assert!(pings(&node, &sandboxes[0], &sandboxes[11].ip), "the first pod reaches the last");
    for sandbox in &sandboxes {
        node.remove_pod(sandbox);
    }
    node.finish();
}

/// The runtime stops (its shims or conmons, and the pod, stay), the API server goes down, the
/// runtime starts again and recovers the sandbox (CRI-O CHECKs it, from its cached result); the
/// pod then goes, DEL working from the attachment record alone.
#[test]
fn sandboxes_are_torn_down_after_a_runtime_restart_with_the_api_server_down() {
    let mut node = CriNode::start();
    put_choosing(&node, "survivor", &YONGHUI, Choice::SeedJson);
    let sandbox = node.run_pod("survivor", 0).unwrap_or_else(|e| panic!("{e}\n{}", node.logs()));
    assert_on_network(&node, &sandbox, &YONGHUI);

    node.stop_runtime();
    let kept = node.sandbox_processes();
    let monitor = match node.engine() {
        Engine::Containerd { .. } => "containerd-shim",
        Engine::Crio { .. } => "conmon",
    };
    assert!(kept.iter().any(|p| p.contains(monitor)), "the {monitor} keeps running: {kept:?}");
    assert_eq!(node.sandbox_addresses(&sandbox), [sandbox.ip.as_str()], "the pod keeps its address");
    node.api.down();
    node.restart_runtime();
    assert_eq!(node.sandbox(&sandbox.id).ip, sandbox.ip, "the runtime recovered the sandbox and its IP");

    // DEL works from the attachment record alone: the API server is still down.
    node.remove_pod(&sandbox);
    node.finish();
}

/// `ip -j route get` in the sandbox: the interface the packet leaves by.
fn route_dev(node: &CriNode, sandbox: &Sandbox, to: &str) -> String {
    let (ok, out) = node.in_sandbox(sandbox, &format!("ip -j route get {to}"));
    assert!(ok, "{}: {out}", sandbox.pod);
    let route: serde_json::Value = serde_json::from_str(&out).unwrap();
    route[0]["dev"].as_str().unwrap_or_default().to_string()
}

/// The `router` pattern of docs/veth-router.md under the runtime: the overlay on eth0 and a macvlan
/// on net1 with `router`. The runtime takes the pod IP from the result for the interface it named
/// (eth0), so the selector hands it the first network's result alone; the second network is the
/// pod's all the same.
#[test]
fn the_runtime_reports_the_first_of_a_pods_two_networks() {
    let node = CriNode::start();
    node.put_pod("overlay-peer", json!([{"name": "app", "image": "nginx"}]));
    put_choosing(&node, "lan-peer", &MACVLAN_VETH, Choice::BareName);
    node.api.put_config_map("default", "two-cm", json!({"networks": "yonghui,macvlan-router@net1"}));
    node.put_pod("two", from_config_map("two-cm", "networks"));
    let overlay_peer = node.run_pod("overlay-peer", 0).unwrap_or_else(|e| panic!("{e}\n{}", node.logs()));
    let lan_peer = node.run_pod("lan-peer", 0).unwrap_or_else(|e| panic!("{e}\n{}", node.logs()));
    let two = node.run_pod("two", 0).unwrap_or_else(|e| panic!("{e}\n{}", node.logs()));

    assert_on_network(&node, &two, &YONGHUI);
    let net1 = node.sandbox_addresses_on(&two, "net1");
    assert!(net1.len() == 1 && MACVLAN_ROUTER.contains(&net1[0]), "net1 on the LAN: {net1:?}");
    assert_ne!(two.ip, net1[0], "the runtime reports eth0's address, not net1's");
    let records = testkit::inspect::list_dir(&node.path("var/lib/cni/yh-genie/attachments"));
    assert!(
        records.contains(&format!("{}:eth0", two.id)) && records.contains(&format!("{}:net1", two.id)),
        "a record per network: {records:?}"
    );
    let (_, rules) = node.in_sandbox(&two, "ip rule");
    assert!(rules.contains("lookup 200"), "router's policy rules: {rules}");

    // Each peer through the interface of its network.
    assert_eq!(route_dev(&node, &two, &overlay_peer.ip), "eth0");
    assert!(pings(&node, &two, &overlay_peer.ip), "the overlay peer {} through eth0", overlay_peer.ip);
    assert_eq!(route_dev(&node, &two, &lan_peer.ip), "net1");
    assert!(pings(&node, &two, &lan_peer.ip), "the LAN peer {} through net1", lan_peer.ip);

    // What the pod got, for people and tools: the node agent writes it on its own time, after the ADD.
    let status = node.wait_pod_annotation("two", NETWORK_STATUS);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap_or_else(|e| panic!("{e}: {status}"));
    let interfaces: Vec<(&str, &str)> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["interface"].as_str().unwrap_or_default(), s["ips"][0].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(interfaces, [("eth0", two.ip.as_str()), ("net1", net1[0].as_str())], "{status}");
    assert_eq!(status[0]["default"], true, "{status}");

    for sandbox in [&two, &lan_peer, &overlay_peer] {
        node.remove_pod(sandbox);
    }
    node.finish();
}

/// The kubelet's hostPort and bandwidth annotation. containerd hands both to its CNI, through the
/// selector's declared capabilities to the portmap and bandwidth plugins of the pod's network;
/// CRI-O hands it the bandwidth alone and maps the host port itself (its nftables table), so the
/// network's portmap gets nothing to do.
#[test]
fn the_kubelets_capability_arguments_reach_the_networks_plugins() {
    let node = CriNode::start();
    node.put_pod("web", json!([{"name": "app", "image": "nginx"}]));
    node.wait_agent_holds("web");
    let mut config = node.sandbox_config("web", 0);
    config.port_mappings = vec![support::client::PortMapping {
        protocol: 0,
        container_port: 80,
        host_port: 18090,
        host_ip: String::new(),
    }];
    config.annotations.insert("kubernetes.io/egress-bandwidth".into(), "1M".into());
    let id = node.cri.run_pod_sandbox(config).unwrap_or_else(|e| panic!("{e}\n{}", node.logs()));
    let sandbox = node.sandbox(&id);
    assert_on_network(&node, &sandbox, &YONGHUI);

    // A server in the pod answers on the node's address and the host port.
    let mut server = std::process::Command::new("nsenter")
        .arg(format!("--net=/proc/{}/ns/net", sandbox.pid))
        .args(["busybox", "nc", "-l", "-p", "80", "-e", "echo", "from-the-pod"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if node.in_sandbox(&sandbox, "ss -Hltn sport = :80").1.contains("LISTEN") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (_, answer) = node.netns.exec(&format!("busybox nc -w 3 {NODE_IP} 18090 </dev/null"));
    let _ = server.kill();
    let _ = server.wait();
    assert!(answer.contains("from-the-pod"), "{NODE_IP}:18090: {answer:?}\n{}", node.logs());
    let dnat = || -> Vec<String> {
        testkit::inspect::cni_nat_lines(&node.netns).into_iter().filter(|l| l.contains("--dport 18090")).collect()
    };
    let crio_maps = || -> Vec<String> {
        support::node::crio_host_ports(&node.netns).into_iter().filter(|e| e.contains("18090")).collect()
    };
    match node.engine() {
        Engine::Containerd { .. } => {
            assert!(dnat().iter().any(|l| l.contains(&format!("{}:80", sandbox.ip))), "{:#?}", dnat())
        }
        Engine::Crio { .. } => {
            assert!(dnat().is_empty(), "portmap mapped a port CRI-O never handed the CNI: {:#?}", dnat());
            let maps = crio_maps();
            assert!(maps.iter().any(|e| e.contains(&sandbox.ip) && e.contains("80")), "CRI-O's mapping: {maps:#?}");
        }
    }
    // The egress limit: a tbf on the ifb device the bandwidth plugin made for the pod.
    let (_, qdiscs) = node.netns.exec("tc qdisc show");
    assert!(qdiscs.lines().any(|l| l.contains("tbf") && l.contains("bwp")), "{qdiscs}");

    // The pod goes, and its rule and shaping with it (the runtime's DEL, the values from the
    // record; CRI-O's own mapping with its sandbox).
    node.remove_pod(&sandbox);
    assert!(dnat().is_empty(), "{:#?}", dnat());
    assert!(crio_maps().is_empty(), "{:#?}", crio_maps());
    let (_, qdiscs) = node.netns.exec("tc qdisc show");
    assert!(!qdiscs.contains("tbf"), "{qdiscs}");
    node.finish();
}

/// CNI 1.1 STATUS through the runtime, as each runtime asks it. The default network made a 1.1.0
/// chain of built-ins (yonghui -> yh-bridge), the fabric's subnet.env goes away:
/// - containerd 2.x asks the CNI's STATUS for every CRI Status (the kubelet's, every 5 s) and
///   reports NetworkReady by it: the node's network is not ready, with yonghui's reason, until the
///   file is back;
/// - containerd 1.6 has no STATUS: ready whenever a configuration is installed, the selector never
///   asked;
/// - CRI-O asks STATUS only from its start until the first success (later polls need
///   `cni_status_grace_period`, off by default): ready while it runs on, no STATUS asked; started
///   again while the file is gone, not ready with yonghui's reason until the file is back.
#[test]
fn network_readiness_follows_the_default_networks_status() {
    let mut node = CriNode::start();
    let fabric = json!({"cniVersion": "1.1.0", "name": "fabric11", "plugins": [{
        "type": "yonghui", "subnetFile": "/run/flannel/subnet.env", "dataDir": node.path("var/lib/cni/yonghui"),
        "delegate": {"type": "yh-bridge", "isDefaultGateway": true},
        "ipam": {"dataDir": node.path("var/lib/cni/networks")}}]});
    node.make_default_network("fabric11", &fabric);
    let subnet = std::fs::read(node.subnet_file()).unwrap();
    std::fs::remove_file(node.subnet_file()).unwrap();
    let statuses = |node: &CriNode| node.logs().lines().filter(|l| l.contains("command=\"STATUS\"")).count();
    match node.engine().clone() {
        Engine::Containerd { bin } if support::containerd::major_version(bin.as_deref()) >= 2 => {
            let reason = wait_not_ready(&node, "containerd 2");
            assert!(reason.contains("fabric11") && reason.contains("subnet"), "NetworkReady false for: {reason}");
            std::fs::write(node.subnet_file(), subnet).unwrap();
            wait_ready(&node);
            assert!(statuses(&node) > 0, "containerd 2 asked STATUS, and the selector logged it");
        }
        Engine::Containerd { .. } => {
            for _ in 0..10 {
                assert!(node.network_ready().0, "containerd 1.6 has no STATUS: ready with a configuration");
            }
            assert_eq!(statuses(&node), 0, "containerd 1.6 never asks STATUS");
            std::fs::write(node.subnet_file(), subnet).unwrap();
        }
        Engine::Crio { .. } => {
            let asked = statuses(&node);
            for _ in 0..10 {
                assert!(node.network_ready().0, "CRI-O keeps the readiness it found at its start");
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            assert_eq!(statuses(&node), asked, "CRI-O asks no STATUS once the network was ready");
            node.stop_runtime();
            node.start_runtime();
            let reason = wait_not_ready(&node, "CRI-O started again");
            assert!(reason.contains("subnet"), "NetworkReady false for: {reason}");
            std::fs::write(node.subnet_file(), subnet).unwrap();
            wait_ready(&node);
            assert!(statuses(&node) > asked, "CRI-O asked STATUS at its start, and the selector logged it");
        }
    }
    node.finish();
}

/// The reason of NetworkReady false, once the runtime (`what`) reports it.
fn wait_not_ready(node: &CriNode, what: &str) -> String {
    let started = Instant::now();
    loop {
        let (ready, reason) = node.network_ready();
        if !ready {
            return reason;
        }
        assert!(started.elapsed() < PATIENCE, "{what} still reports the network ready\n{}", node.logs());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Returns once the runtime reports the network ready again.
fn wait_ready(node: &CriNode) {
    let started = Instant::now();
    while !node.network_ready().0 {
        assert!(started.elapsed() < PATIENCE, "not ready again with subnet.env back\n{}", node.logs());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
