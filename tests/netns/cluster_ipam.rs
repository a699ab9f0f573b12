//! yh-genie's own IPAM, `yh-ipam`, end to end: a `yh-bridge` network whose addresses come from the
//! node agent (`yh-genie install --agent`, a real process) out of blocks it claims as `IPBlock`s on
//! the fake API server, where another node already holds one. Addresses in the pods' netns,
//! distinct, the same for a retried ADD, released on DEL, read back by an agent started again, an
//! exhausted pool a CNI error that names it; and given back by the agent when their pod is gone
//! without a DEL. The blocks of dead nodes, released by one elected agent only when their Node is
//! deleted or out-of-service and their lease expired, claimed again afterwards. Addresses asked for
//! in `ips`: `cluster_ipam_requested.rs`; StatefulSets' fixed addresses: `cluster_ipam_fixed.rs`; addresses imported
//! from whereabouts: `cluster_ipam_whereabouts.rs`; pools defined by `AddressPool` objects:
//! `cluster_ipam_pools.rs`.

#[path = "cluster_ipam_fixed.rs"]
mod fixed;
#[path = "cluster_ipam_pools.rs"]
mod pools;
#[path = "cluster_ipam_requested.rs"]
mod requested;
#[path = "cluster_ipam_shared.rs"]
mod shared;
#[path = "cluster_ipam_whereabouts.rs"]
mod whereabouts;

use crate::support::agent::AgentAnswers;
use crate::support::driver::{Call, Reply, cni_command};
use crate::support::node::{NetnsNode, Pod, pod_addresses};
use serde_json::{Value, json};
use std::io::Write;
use std::time::Duration;
use testkit::agent::{Agent, METRICS_PORT, ipam_records};
use testkit::apiserver::{Fault, literal};
use testkit::process::unique;
use yh_genie::node::agent_socket::addresses::{AddressOwner, PoolSpec};
use yh_genie::node::agent_socket::client::exchange;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, Request};

/// The network `lan`: 10.81.0.0/24 up to .9, the gateway .1, in blocks of four addresses.
fn lan(n: &NetnsNode) -> Value {
    lan_to(n, "10.81.0.9")
}

/// The network `lan` up to `end`.
fn lan_to(n: &NetnsNode, end: &str) -> Value {
    let ipam = json!({
        "type": "yh-ipam", "pool": "lan", "blockSize": 4, "agentSocket": n.agent_socket(),
        "ranges": [[{"subnet": "10.81.0.0/24", "rangeEnd": end}]],
        "routes": [{"dst": "10.81.0.0/16"}],
    });
    let list = json!({"cniVersion": "1.0.0", "name": "lan",
                      "plugins": [{"type": "yh-bridge", "bridge": unique("yi"), "ipam": ipam}]});
    n.write_conf("lan/10-lan.conflist", &list);
    list
}

fn add(n: &NetnsNode, pod: &Pod, conf: &str) -> Vec<String> {
    let reply = n.call("ADD", pod, conf);
    assert_eq!(reply.code, 0, "ADD of {} failed: {reply:?}", pod.name);
    pod_addresses(pod)
}

/// The agent's requests for `IPBlock`s so far, to claim blocks (not the dead-node releaser's lists).
fn block_requests(n: &NetnsNode) -> Vec<&'static str> {
    n.api.calls().into_iter().filter(|c| c.resource == "ipblocks" && c.verb != "list").map(|c| c.verb).collect()
}

/// What the agent answers `yh-ipam`'s ADD for pod `name`'s sandbox `cid`, asked directly.
fn allocate(n: &NetnsNode, list: &Value, name: &str, cid: &str) -> Answer {
    allocate_at(&n.agent_socket(), list, name, cid)
}

/// `allocate`, of the agent listening on `socket`.
fn allocate_at(socket: &std::path::Path, list: &Value, name: &str, cid: &str) -> Answer {
    let ipam = &list["plugins"][0]["ipam"];
    let range = &ipam["ranges"][0][0];
    let pool: PoolSpec = serde_json::from_value(json!({
        "name": "lan", "blockSize": 4, "exclude": [],
        "rangeSets": [[{"subnet": range["subnet"], "start": "10.81.0.1", "end": range["rangeEnd"], "gateway": "10.81.0.1"}]],
    }))
    .unwrap();
    let owner = AddressOwner {
        uid: format!("uid-default-{name}"),
        container_id: cid.into(),
        ifname: "eth0".into(),
        pod: format!("default/{name}"),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    exchange(socket, &Request::new(Ask::Allocate { pool, owner, requested: vec![], claim: None }), deadline).unwrap()
}

/// The one address of an `Allocated` answer.
fn address(answer: Answer) -> String {
    match answer {
        Answer::Allocated { addresses } => addresses[0].address.to_string(),
        other => panic!("{other:?}"),
    }
}

fn start_agent(n: &NetnsNode) -> Agent {
    start_agent_with(n, &[])
}

/// `command` of `yh-ipam` alone for `pod` on net1, with the network configuration `conf` on its
/// stdin, as a reference plugin (`macvlan`) execs its IPAM.
fn exec_ipam(n: &NetnsNode, command: &str, pod: &Pod, conf: &Value) -> Reply {
    let netns = pod.netns_path();
    let call = Call {
        plugin: "yh-ipam",
        command,
        container_id: &pod.cid,
        netns: &netns,
        ifname: "net1",
        args: &pod.args,
        config: "",
    };
    let mut child = cni_command(&n.sb, &call, &[]).spawn().expect("yh-ipam starts");
    child.stdin.take().unwrap().write_all(conf.to_string().as_bytes()).unwrap();
    Reply::from(child.wait_with_output().unwrap())
}

/// The error of a failed call: its code and its message with its details.
fn cni_error(reply: &Reply) -> (u64, String) {
    assert_ne!(reply.code, 0, "{reply:?}");
    let e = reply.json();
    (e["code"].as_u64().unwrap(), e["msg"].as_str().unwrap().to_string() + e["details"].as_str().unwrap_or_default())
}

fn start_agent_with(n: &NetnsNode, flags: &[&str]) -> Agent {
    let agent = Agent::start(&n.netns, &n.api, n.sb.path(), &n.agent_socket(), METRICS_PORT, flags);
    agent.wait_ready();
    agent
}

/// The agent's figures for pool `lan`: (blocks, addresses used, addresses free).
fn lan_metrics(agent: &Agent) -> (u64, u64, u64) {
    (
        agent.metric("yh_genie_agent_ipam_blocks{pool=\"lan\"}"),
        agent.metric("yh_genie_agent_ipam_addresses{pool=\"lan\",state=\"used\"}"),
        agent.metric("yh_genie_agent_ipam_addresses{pool=\"lan\",state=\"free\"}"),
    )
}

fn records(n: &NetnsNode) -> usize {
    walk_json(&ipam_records(&n.agent_socket()))
}

fn walk_json(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| {
            if e.path().is_dir() {
                walk_json(&e.path())
            } else {
                usize::from(e.path().extension().is_some_and(|x| x == "json"))
            }
        })
        .sum()
}

#[test]
fn yh_ipam_hands_out_addresses_from_the_nodes_blocks_through_its_agent() {
    let n = NetnsNode::new();
    let list = lan(&n);
    // Another node holds 10.81.0.4/30: this node's blocks are .0/30 (.2, .3) and .8/30 (.8, .9).
    n.api.put_ip_block("10.81.0.4-30", json!({"cidr": "10.81.0.4/30", "pool": "lan", "node": "other-node"}));
    let names = ["a", "b", "c", "d", "e"];
    for name in names {
        n.api.put_pod("default", name, literal("lan"));
    }
    let mut agent = start_agent(&n);
    for name in names {
        agent.wait_holds(&n.agent_socket(), name, &format!("uid-default-{name}"), |_| true);
    }
    let conf = n.selector_conf("1.0.0", json!({}));

    // The first ADD claims a block; the second takes from it with no API request.
    let (a, b) = (n.pod("a"), n.pod("b"));
    assert_eq!(add(&n, &a, &conf), ["10.81.0.2/24"]);
    assert_eq!(block_requests(&n), ["create"]);
    assert_eq!(add(&n, &b, &conf), ["10.81.0.3/24"]);
    assert_eq!(block_requests(&n), ["create"], "no request while the node's block has room");
    let blocks = n.api.ip_blocks();
    assert_eq!(blocks["10.81.0.0-30"], json!({"cidr": "10.81.0.0/30", "pool": "lan", "node": "yh-node"}));
    assert_eq!(records(&n), 2);
    assert_eq!(lan_metrics(&agent), (1, 2, 0), "one block of two usable addresses, both used");

    // A retried ADD (the same pod, sandbox and interface) gets the same address.
    match allocate(&n, &list, "a", &a.cid) {
        Answer::Allocated { addresses } => assert_eq!(addresses[0].address.to_string(), "10.81.0.2"),
        other => panic!("{other:?}"),
    }

    // Started again, the agent reads its records back before answering: a's address is a's, and
    // the next pod gets one of a new block, past the other node's.
    agent.kill();
    let agent = start_agent(&n);
    match allocate(&n, &list, "a", &a.cid) {
        Answer::Allocated { addresses } => assert_eq!(addresses[0].address.to_string(), "10.81.0.2"),
        other => panic!("{other:?}"),
    }
    assert_eq!(block_requests(&n), ["create"], "nothing asked to answer from the records");
    let (c, d) = (n.pod("c"), n.pod("d"));
    assert_eq!(add(&n, &c, &conf), ["10.81.0.8/24"]);
    assert_eq!(add(&n, &d, &conf), ["10.81.0.9/24"]);
    // .4/30: AlreadyExists, read back, the other node's; .8/30 claimed.
    assert_eq!(block_requests(&n), ["create", "create", "get", "create"]);
    assert_eq!(n.api.ip_blocks()["10.81.0.4-30"]["node"], "other-node", "the other node's block is left alone");
    assert_eq!(lan_metrics(&agent), (2, 4, 0), ".0/30 (.2, .3) and .8/30 (.8, .9: the range ends at .9)");

    // Exhausted: a CNI error naming the pool, and nothing left behind.
    let e = n.pod("e");
    let reply = n.call("ADD", &e, &conf);
    assert_ne!(reply.code, 0, "{reply:?}");
    let error = reply.json();
    assert_eq!(error["code"], 104, "{error}");
    let msg = error["msg"].as_str().unwrap().to_string() + error["details"].as_str().unwrap_or_default();
    assert!(msg.contains("pool \"lan\" has no free address in 10.81.0.1-10.81.0.9"), "{error}");
    assert!(pod_addresses(&e).is_empty());
    assert_eq!(records(&n), 4);

    // DEL releases: the address goes to the next pod.
    assert_eq!(n.call("DEL", &a, &conf).code, 0);
    assert!(pod_addresses(&a).is_empty());
    assert_eq!(records(&n), 3);
    assert_eq!(lan_metrics(&agent), (2, 3, 1));
    let e = e.renew("e");
    assert_eq!(add(&n, &e, &conf), ["10.81.0.2/24"]);
    for pod in [&b, &c, &d, &e] {
        assert_eq!(n.call("DEL", pod, &conf).code, 0, "{}", pod.name);
        // A repeated DEL is fine.
        assert_eq!(n.call("DEL", pod, &conf).code, 0, "{}", pod.name);
    }
    assert_eq!(records(&n), 0);
    // Nothing of pool lan was imported from whereabouts (its first ADD found out): a release the records
    // know nothing of (a DEL repeated past the selector's tombstone) asks the API server nothing.
    let fixed_address_requests = || n.api.calls().into_iter().filter(|c| c.resource == "fixedaddresses").count();
    let before = fixed_address_requests();
    let release = Ask::Release { pool: "lan".into(), container_id: "gone".into(), ifname: "eth0".into(), uid: None };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    assert_eq!(exchange(&n.agent_socket(), &Request::new(release), deadline).unwrap(), Answer::Released);
    assert_eq!(fixed_address_requests(), before, "a release of nothing looked for addresses imported from whereabouts");
    drop(agent);
}

#[test]
fn the_agent_gives_back_the_addresses_of_a_pod_gone_without_its_del() {
    let n = NetnsNode::new();
    let list = lan(&n);
    for name in ["a", "b", "c"] {
        n.api.put_pod("default", name, literal("lan"));
    }
    let reclaim = ["--ipam-reclaim-after=1"];
    let mut agent = start_agent_with(&n, &reclaim);
    for name in ["a", "b", "c"] {
        agent.wait_holds(&n.agent_socket(), name, &format!("uid-default-{name}"), |_| true);
    }
    let conf = n.selector_conf("1.0.0", json!({}));
    let (a, b) = (n.pod("a"), n.pod("b"));
    assert_eq!(add(&n, &a, &conf), ["10.81.0.2/24"]);
    assert_eq!(add(&n, &b, &conf), ["10.81.0.3/24"]);

    // Pod a is deleted and its DEL never comes: its address is free again, b's is not.
    n.api.remove_pod("default", "a");
    // The record goes first, the log line after it.
    agent.wait_for("the agent to give back the address of deleted pod a", || {
        records(&n) == 1 && agent.logged().contains("10.81.0.2 of pool \"lan\" are free")
    });
    let c = n.pod("c");
    assert_eq!(add(&n, &c, &conf), ["10.81.0.2/24"]);

    // Deleted while no agent watched: the next agent gives its address back once it has listed.
    agent.kill();
    n.api.remove_pod("default", "b");
    let agent = start_agent_with(&n, &reclaim);
    agent.wait_for("the agent to give back the address of pod b, deleted while it was down", || records(&n) == 1);
    match allocate(&n, &list, "c", &c.cid) {
        Answer::Allocated { addresses } => assert_eq!(addresses[0].address.to_string(), "10.81.0.2", "c's stays c's"),
        other => panic!("{other:?}"),
    }
    for pod in [&a, &b, &c] {
        assert_eq!(n.call("DEL", pod, &conf).code, 0, "{}", pod.name);
    }
    assert_eq!(records(&n), 0);
}

/// The node's lease on its blocks, as the fake API server holds it (the agent's namespace is the
/// kubeconfig's: `default`).
fn lease(n: &NetnsNode) -> Option<Value> {
    n.api.lease("default", "yh-ipam-yh-node")
}

#[test]
fn an_agent_cut_off_from_the_api_server_refuses_yh_ipam_adds_once_its_lease_is_old() {
    let n = NetnsNode::new();
    lan(&n);
    for name in ["a", "b"] {
        n.api.put_pod("default", name, literal("lan"));
    }
    let agent = start_agent_with(&n, &["--ipam-lease-duration=2"]);
    for name in ["a", "b"] {
        agent.wait_holds(&n.agent_socket(), name, &format!("uid-default-{name}"), |_| true);
    }
    assert_eq!(lease(&n), None, "no lease before the node hands out a yh-ipam address");
    let conf = n.selector_conf("1.0.0", json!({}));
    let a = n.pod("a");
    assert_eq!(add(&n, &a, &conf), ["10.81.0.2/24"]);

    // The lease is the node's, for 2 s, and renewed in the background (every half second).
    let first = lease(&n).expect("the node's lease");
    assert_eq!(first["spec"]["holderIdentity"], "yh-node", "{first}");
    assert_eq!(first["spec"]["leaseDurationSeconds"], 2, "{first}");
    agent.wait_for("two renewals of the lease", || {
        n.api.calls().iter().filter(|c| c.resource == "leases" && c.verb == "update").count() >= 2
    });
    assert_ne!(lease(&n).unwrap()["spec"]["renewTime"], first["spec"]["renewTime"]);

    // The API server stops answering: after 2 s without a renewal, ADDs are refused (try again
    // later), saying why, and the pod gets no address.
    n.api.inject_always(Fault::Hang);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let b = n.pod("b");
    let reply = n.call("ADD", &b, &conf);
    let error = reply.json();
    assert_eq!(error["code"], 11, "{reply:?}");
    let msg = error["msg"].as_str().unwrap().to_string() + error["details"].as_str().unwrap_or_default();
    for said in [
        "node yh-node has lost contact with the API server",
        "its yh-ipam lease (Lease default/yh-ipam-yh-node) was last renewed",
        "longer than --ipam-lease-duration (2s)",
        "check the node's connection to the API server",
    ] {
        assert!(msg.contains(said), "{said:?} not in {error}");
    }
    assert!(pod_addresses(&b).is_empty());
    assert_eq!(records(&n), 1);
    assert!(agent.metric("yh_genie_agent_ipam_lease_age_seconds") >= 2, "the lease's age on /metrics");
    assert!(agent.logged().contains("renewing the yh-ipam lease default/yh-ipam-yh-node"), "{}", agent.logged());

    // Answering again: the lease is renewed and the runtime's retry gets its address.
    n.api.clear_faults();
    agent.wait_for("the lease renewed again", || agent.logged().contains("is renewed again"));
    let b = b.renew("b");
    assert_eq!(add(&n, &b, &conf), ["10.81.0.3/24"]);
    for pod in [&a, &b] {
        assert_eq!(n.call("DEL", pod, &conf).code, 0, "{}", pod.name);
    }
    assert_eq!(records(&n), 0);
}

/// The `IPBlock`s' nodes, by block name.
fn block_nodes(n: &NetnsNode) -> std::collections::BTreeMap<String, String> {
    n.api.ip_blocks().into_iter().map(|(name, spec)| (name, spec["node"].as_str().unwrap().to_string())).collect()
}

/// Put `node`'s block `name` (`10.81.0.N-30`).
fn put_block(n: &NetnsNode, name: &str, node: &str) {
    let cidr = name.replace('-', "/");
    n.api.put_ip_block(name, json!({"cidr": cidr, "pool": "lan", "node": node}));
}

/// Put `node`'s lease (namespace `default`, as the agents keep theirs), renewed `ago` before now
/// for one second.
fn put_node_lease(n: &NetnsNode, node: &str, ago: Duration) {
    n.api.put_lease("default", &format!("yh-ipam-{node}"), node, 1, ago);
}

const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
/// The dead-node rule with short leases and 1 s of clock skew: a dead node's lease is expired for
/// the releaser once it is older than 3 s (the longer of its own duration, 1 s as `put_node_lease`
/// writes it, and the releaser's, plus the skew). The agents' leases last 2 s, renewed every half
/// second: with 1 s, an agent stalled by fsyncs on a busy disk (the tiers' builds beside the
/// tests) lets its lease lapse, and its ADDs are refused.
const SHORT_LEASES: [&str; 2] = ["--ipam-lease-duration=2", "--ipam-clock-skew=1"];

#[test]
fn a_dead_nodes_blocks_are_released_only_when_its_node_is_gone_and_its_lease_expired() {
    let n = NetnsNode::new();
    // Blocks .0/30 to .20/30; every one but .20/30 held by another node.
    let list = lan_to(&n, "10.81.0.23");
    let others = [
        ("10.81.0.0-30", "gone-node"),
        ("10.81.0.4-30", "gone-node"),
        ("10.81.0.8-30", "stopped-node"),
        ("10.81.0.12-30", "back-node"),
        ("10.81.0.16-30", "cut-off-node"),
    ];
    for (block, node) in others {
        put_block(&n, block, node);
    }
    // gone-node: its Node deleted (there is none), its lease not renewed again: released.
    // stopped-node: tainted out-of-service, its lease not renewed again: released.
    n.api.put_node("stopped-node", json!([{"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}]));
    // back-node: its Node deleted, but it runs and registers again: its agent renews its lease.
    // cut-off-node: not deleted, not out-of-service (only unreachable, perhaps cut off), its lease
    // not renewed: kept.
    n.api.put_node("cut-off-node", json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]));
    let names = ["a", "b", "c", "d", "e"];
    for name in names {
        n.api.put_pod("default", name, literal("lan"));
    }
    let agent = start_agent_with(&n, &SHORT_LEASES);
    for name in names {
        agent.wait_holds(&n.agent_socket(), name, &format!("uid-default-{name}"), |_| true);
    }
    let renewing = std::sync::atomic::AtomicBool::new(true);
    // Stops the renewals when the scope's checks end, failed or not: a failed check must fail the
    // test, not leave the scope waiting for them.
    struct StopRenewing<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for StopRenewing<'_> {
        fn drop(&mut self) {
            self.0.store(false, std::sync::atomic::Ordering::Relaxed);
        }
    }
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while renewing.load(std::sync::atomic::Ordering::Relaxed) {
                put_node_lease(&n, "back-node", Duration::ZERO);
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let _stop = StopRenewing(&renewing);
        // The other nodes' leases (1 s) renewed just now, the node's first allocation finds every
        // block another's but .20/30.
        for (_, node) in others {
            put_node_lease(&n, node, Duration::ZERO);
        }
        assert_eq!(address(allocate(&n, &list, "a", "cid-a")), "10.81.0.20");

        let released = "yh_genie_agent_ipam_dead_node_blocks_released_total";
        agent.wait_for("the blocks of gone-node and stopped-node released", || agent.metric(released) == 3);
        let log = agent.logged();
        for said in [
            "node gone-node is gone (its Node object is deleted) and its yh-ipam lease (Lease \
             default/yh-ipam-gone-node) was last renewed",
            "released its yh-ipam blocks 10.81.0.0-30, 10.81.0.4-30 (2 of 2 listed)",
            "node stopped-node is gone (its Node is tainted node.kubernetes.io/out-of-service) and its yh-ipam lease",
            "released its yh-ipam blocks 10.81.0.8-30 (1 of 1 listed)",
            "longer ago than its duration (2s) plus --ipam-clock-skew (1s)",
        ] {
            assert!(log.contains(said), "{said:?} not in {log}");
        }
        // Rounds go on (four a second): the others keep theirs.
        std::thread::sleep(Duration::from_millis(2500));
        let nodes = block_nodes(&n);
        assert_eq!(
            nodes.iter().map(|(b, n)| format!("{b} {n}")).collect::<Vec<_>>(),
            ["10.81.0.12-30 back-node", "10.81.0.16-30 cut-off-node", "10.81.0.20-30 yh-node"]
        );
        assert_eq!(agent.metric(released), 3);
        assert_eq!(agent.metric("yh_genie_agent_ipam_releaser"), 1);
        assert_eq!(n.api.lease("default", "yh-ipam-releaser").unwrap()["spec"]["holderIdentity"], "yh-node");
    });

    // The released range is claimed again: once .20/30 is full, the next address comes from .0/30,
    // gone-node's before.
    for (name, at) in [("b", "10.81.0.21"), ("c", "10.81.0.22"), ("d", "10.81.0.23"), ("e", "10.81.0.2")] {
        assert_eq!(address(allocate(&n, &list, name, &format!("cid-{name}"))), at, "{name}");
    }
    assert_eq!(block_nodes(&n)["10.81.0.0-30"], "yh-node");
    assert_eq!(block_nodes(&n).get("10.81.0.4-30"), None, "not claimed while .0/30 has room");
}

#[test]
fn of_two_agents_one_releases_a_dead_nodes_blocks() {
    let n = NetnsNode::new();
    let list = lan(&n);
    // gone-node holds .4/30, its Node deleted, its lease about to expire.
    put_block(&n, "10.81.0.4-30", "gone-node");
    put_node_lease(&n, "gone-node", Duration::ZERO);
    let mut first = start_agent_with(&n, &SHORT_LEASES);
    let second_socket = n.sb.path().join("second-node").join("agent.sock");
    std::fs::create_dir_all(second_socket.parent().unwrap()).unwrap();
    let mut flags = vec!["--node-name=second-node"];
    flags.extend(SHORT_LEASES);
    let mut second = Agent::start(&n.netns, &n.api, n.sb.path(), &second_socket, METRICS_PORT + 1, &flags);
    second.wait_ready();
    // Both hand out yh-ipam addresses, so both take part in the election.
    assert_eq!(address(allocate(&n, &list, "a", "cid-a")), "10.81.0.2");
    let x = address(allocate_at(&second_socket, &list, "x", "cid-x"));
    assert!(["10.81.0.4", "10.81.0.8"].contains(&x.as_str()), "{x}");

    let released = "yh_genie_agent_ipam_dead_node_blocks_released_total";
    first.wait_for("gone-node's block released", || !block_nodes(&n).values().any(|node| node == "gone-node"));
    // A few more rounds: nobody releases anything else, one agent holds the election.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(first.metric(released) + second.metric(released), 1);
    let releasers = [&first, &second].map(|agent| agent.metric("yh_genie_agent_ipam_releaser"));
    assert_eq!(releasers.iter().sum::<u64>(), 1, "{releasers:?}");
    let lines = |agent: &Agent| agent.logged().matches("released its yh-ipam blocks").count();
    assert_eq!(lines(&first) + lines(&second), 1);
    let holder = n.api.lease("default", "yh-ipam-releaser").unwrap()["spec"]["holderIdentity"].clone();
    let expected = if releasers[0] == 1 { "yh-node" } else { "second-node" };
    assert_eq!(holder, expected);
    let nodes = block_nodes(&n);
    assert_eq!(nodes["10.81.0.0-30"], "yh-node");
    assert!(nodes.values().filter(|node| *node == "second-node").count() == 1, "{nodes:?}");

    // The releaser stops: once its lease is older than its duration plus the skew, the other agent
    // takes over.
    let (stopped, other, other_node) =
        if releasers[0] == 1 { (&mut first, &second, "second-node") } else { (&mut second, &first, "yh-node") };
    stopped.kill();
    other.wait_for("the other agent to take over", || other.metric("yh_genie_agent_ipam_releaser") == 1);
    assert_eq!(n.api.lease("default", "yh-ipam-releaser").unwrap()["spec"]["holderIdentity"], other_node);
    assert!(other.logged().contains("this agent is now yh-ipam's dead-node releaser (Lease default/yh-ipam-releaser)"));
}

#[test]
fn an_agent_not_allowed_to_release_says_so_and_goes_on() {
    let n = NetnsNode::new();
    let list = lan(&n);
    put_block(&n, "10.81.0.4-30", "gone-node");
    put_node_lease(&n, "gone-node", Duration::from_secs(60));
    n.api.deny("nodes", None, 403);
    let agent = start_agent_with(&n, &SHORT_LEASES);
    assert_eq!(address(allocate(&n, &list, "a", "cid-a")), "10.81.0.2");
    agent.wait_for("the releaser to say it cannot work", || {
        agent.logged().contains("yh-ipam's dead-node releaser cannot work from this agent: 403")
    });
    let log = agent.logged();
    assert!(log.contains("the agent needs get on nodes"), "{log}");
    assert_eq!(block_nodes(&n)["10.81.0.4-30"], "gone-node", "kept: nothing decided without the Node");
    // The agent goes on answering.
    assert_eq!(address(allocate(&n, &list, "b", "cid-b")), "10.81.0.3");
    assert_eq!(agent.metric("yh_genie_agent_ipam_releaser"), 0);
}

#[test]
fn an_agent_whose_lease_ran_out_checks_its_blocks_before_handing_out_more() {
    let n = NetnsNode::new();
    let list = lan(&n);
    let flags = ["--ipam-lease-duration=2"];
    let mut agent = start_agent_with(&n, &flags);
    let before = ["10.81.0.2", "10.81.0.3", "10.81.0.4", "10.81.0.5", "10.81.0.6", "10.81.0.7", "10.81.0.8"];
    for (i, at) in before.iter().enumerate() {
        assert_eq!(address(allocate(&n, &list, &format!("p{i}"), &format!("cid-{i}"))), *at);
    }
    // While the node is down longer than its lease, its blocks are released: .0/30 claimed by
    // another node since, .4/30 not; .8/30 is left alone.
    agent.kill();
    n.api.put_ip_block("10.81.0.0-30", json!({"cidr": "10.81.0.0/30", "pool": "lan", "node": "other-node"}));
    n.api.remove_ip_block("10.81.0.4-30");
    let listed = n.api.ip_block("10.81.0.8-30").unwrap();
    std::thread::sleep(Duration::from_millis(2500));

    // Back, with its records: before anything more is handed out, .0/30 is lost to it, .4/30
    // claimed again, .8/30 confirmed by a write (a releaser that listed it before cannot delete it
    // any more: its resourceVersion changed). The pods holding addresses keep them.
    let agent = start_agent_with(&n, &flags);
    assert_eq!(address(allocate(&n, &list, "p7", "cid-7")), "10.81.0.9");
    let nodes = block_nodes(&n);
    assert_eq!(
        nodes.values().map(String::as_str).collect::<Vec<_>>(),
        ["other-node", "yh-node", "yh-node"],
        "{nodes:?}"
    );
    let confirmed = n.api.ip_block("10.81.0.8-30").unwrap();
    assert!(confirmed["metadata"]["annotations"]["ipam.yh-genie.io/confirmed"].is_string(), "{confirmed}");
    assert_ne!(confirmed["metadata"]["resourceVersion"], listed["metadata"]["resourceVersion"]);
    let log = agent.logged();
    assert!(log.contains("checking that its 3 blocks are still its own"), "{log}");
    assert!(log.contains("block 10.81.0.0/30 of pool \"lan\" is held by node other-node now"), "{log}");
    assert_eq!(address(allocate(&n, &list, "p0", "cid-0")), "10.81.0.2", "a retried ADD keeps its address");
    // Nothing more from .0/30: the pool is exhausted for this node.
    match allocate(&n, &list, "p8", "cid-8") {
        Answer::NoAddress { retry: false, why, .. } => {
            assert!(why.contains("pool \"lan\" has no free address"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(lan_metrics(&agent).0, 2, ".4/30 and .8/30");
}

#[test]
fn an_agent_not_allowed_to_confirm_its_blocks_takes_them_as_read() {
    let n = NetnsNode::new();
    let list = lan(&n);
    let flags = ["--ipam-lease-duration=2"];
    let mut agent = start_agent_with(&n, &flags);
    assert_eq!(address(allocate(&n, &list, "a", "cid-a")), "10.81.0.2");
    agent.kill();
    std::thread::sleep(Duration::from_millis(2500));
    // An older ClusterRole: no update on ipblocks.
    n.api.deny("ipblocks/update", None, 403);
    let agent = start_agent_with(&n, &flags);
    assert_eq!(address(allocate(&n, &list, "b", "cid-b")), "10.81.0.3");
    let log = agent.logged();
    assert!(log.contains("confirming IPBlock 10.81.0.0-30: "), "{log}");
    assert!(log.contains("it is taken as this node's as read"), "{log}");
}
