//! A network moved from whereabouts to `yh-ipam`: two agents of two nodes against the fake API
//! server, which holds whereabouts' IPPools and OverlappingRangeIPReservations. Before the first ADD
//! of the pool the addresses whereabouts handed out are imported as `FixedAddress`es in fixed
//! blocks (an IPPool's allocations and a reservation alone alike; another range's left alone), so
//! that the next pods get others; the imported pod's DEL frees its address, which the next taker of
//! a fixed address gets; the releaser's sweep frees the address of a pod gone without its DEL. With
//! whereabouts' resources not served, ADDs go on as before. An address in a block a node holds
//! already is a conflict the ADD is refused with, until whereabouts' objects no longer hold it; an
//! agent not allowed to read them hands out nothing of the pool (code 11).

use super::{SHORT_LEASES, lan, start_agent_with};
use serde_json::json;
use std::path::Path;
use testkit::agent::{Agent, METRICS_PORT};
use testkit::apiserver::literal;
use yh_genie::node::agent_socket::addresses::{AddressOwner, PoolSpec};
use yh_genie::node::agent_socket::client::exchange;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, Request};

/// What the agent on `socket` answers the ADD of pod `default/name` (`uid`), sandbox `cid`, on
/// `net1`, in pool `pool` over `subnet`.
fn allocate(socket: &Path, pool: &str, subnet: &str, name: &str, cid: &str) -> String {
    match ask_allocate(socket, pool, subnet, name, cid) {
        Answer::Allocated { addresses } => addresses[0].address.to_string(),
        other => panic!("{other:?}"),
    }
}

/// `allocate`'s answer, whatever it is.
fn ask_allocate(socket: &Path, pool: &str, subnet: &str, name: &str, cid: &str) -> Answer {
    let base = subnet.trim_end_matches("0/24");
    let pool: PoolSpec = serde_json::from_value(json!({
        "name": pool, "blockSize": 4, "exclude": [],
        "rangeSets": [[{"subnet": subnet, "start": format!("{base}1"), "end": format!("{base}30"),
                        "gateway": format!("{base}1")}]],
    }))
    .unwrap();
    let owner = AddressOwner {
        uid: format!("uid-default-{name}"),
        container_id: cid.into(),
        ifname: "net1".into(),
        pod: format!("default/{name}"),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let ask = Ask::Allocate { pool, owner, requested: vec![], claim: None };
    exchange(socket, &Request::new(ask), deadline).unwrap()
}

/// The DEL of sandbox `cid`'s net1 in pool `lan`, without a pod uid (as whereabouts' pods' DEL may
/// come).
fn release(socket: &Path, name: &str, cid: &str) {
    let uid = Some(format!("uid-default-{name}"));
    let ask = Ask::Release { pool: "lan".into(), container_id: cid.into(), ifname: "net1".into(), uid };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    assert_eq!(exchange(socket, &Request::new(ask), deadline).unwrap(), Answer::Released);
}

#[test]
fn a_pool_moved_from_whereabouts_keeps_its_pods_addresses_until_their_del() {
    let n = crate::support::node::NetnsNode::new();
    let _ = lan(&n);
    // Pods whereabouts gave addresses to, still running: two of an IPPool's allocations (offsets
    // from 10.81.0.0) on two nodes, one of a reservation alone; and one of another range.
    let on = |node: &str| json!({"nodeName": node, "containers": literal("lan")});
    for (name, node) in [("wa", "yh-node"), ("wb", "second-node"), ("wc", "yh-node"), ("wd", "yh-node")] {
        n.api.put_pod_spec("default", name, on(node));
    }
    n.api.put_ip_pool(
        "kube-system",
        "10.81.0.0-24",
        "10.81.0.0/24",
        json!({"2": {"id": "cid-wa", "podref": "default/wa", "ifname": "net1"},
               "6": {"id": "cid-wb", "podref": "default/wb", "ifname": "net1"}}),
    );
    n.api.put_ip_reservation("kube-system", "10.81.0.10", "cid-wc", "default/wc", "net1");
    n.api.put_ip_pool(
        "kube-system",
        "10.99.0.0-24",
        "10.99.0.0/24",
        json!({"3": {"id": "cid-wd", "podref": "default/wd", "ifname": "net1"}}),
    );
    n.api.put_stateful_set("default", "web", "uid-sts-web", 1);
    n.api.put_stateful_set_pod(
        ("default", "web-0", "uid-default-web-0"),
        ("web", "uid-sts-web", 0),
        "yh-node",
        literal("lan"),
    );
    let first = start_agent_with(&n, &SHORT_LEASES);
    let socket = n.agent_socket();
    let second_socket = n.sb.path().join("second-node").join("agent.sock");
    std::fs::create_dir_all(second_socket.parent().unwrap()).unwrap();
    let mut flags = vec!["--node-name=second-node"];
    flags.extend(SHORT_LEASES);
    let second = Agent::start(&n.netns, &n.api, n.sb.path(), &second_socket, METRICS_PORT + 1, &flags);
    second.wait_ready();

    // whereabouts not installed (its resources not served): an ADD as before, nothing imported.
    n.api.deny("ippools", None, 404);
    assert_eq!(allocate(&socket, "other", "10.82.0.0/24", "plain", "cid-plain"), "10.82.0.2");
    assert!(n.api.fixed_addresses().is_empty());
    n.api.clear_denials();

    // The first ADD of the pool imports whereabouts' addresses in its ranges; the new pods get others.
    assert_eq!(allocate(&socket, "lan", "10.81.0.0/24", "new1", "cid-new1"), "10.81.0.12");
    let imported = n.api.fixed_addresses();
    assert_eq!(imported.keys().collect::<Vec<_>>(), ["10.81.0.10", "10.81.0.2", "10.81.0.6"]);
    let spec = &imported["10.81.0.2"]["spec"];
    assert_eq!(
        spec["owner"],
        json!({"kind": "Whereabouts", "namespace": "default", "name": "wa", "uid": "cid-wa", "ordinal": 0})
    );
    assert_eq!(spec["interface"], "net1");
    for block in ["10.81.0.0-30", "10.81.0.4-30", "10.81.0.8-30"] {
        assert_eq!(n.api.ip_blocks()[block]["fixed"], true, "{block}");
    }
    assert!(n.api.lease("default", "yh-ipam-imported-lan").is_some(), "the import's mark");
    assert_eq!(allocate(&second_socket, "lan", "10.81.0.0/24", "new2", "cid-new2"), "10.81.0.16");
    assert_eq!(n.api.fixed_addresses().len(), 3, "imported once");

    // The imported pods' DEL frees their addresses; the next taker of a fixed address gets one.
    release(&socket, "wa", "cid-wa");
    release(&socket, "wc", "cid-wc");
    let left = n.api.fixed_addresses();
    assert_eq!(left.keys().collect::<Vec<_>>(), ["10.81.0.6"]);
    assert_eq!(allocate(&socket, "lan", "10.81.0.0/24", "web-0", "cid-web-0"), "10.81.0.2");

    // A pod gone without its DEL: the releaser's sweep frees its address, never while it exists.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert!(n.api.fixed_addresses().contains_key("10.81.0.6"), "kept while its pod exists");
    n.api.remove_pod("default", "wb");
    first.wait_for("wb's address freed", || !n.api.fixed_addresses().contains_key("10.81.0.6"));
    drop(second);
}

#[test]
fn an_address_whereabouts_gave_in_a_block_a_node_holds_is_refused_until_settled() {
    let n = crate::support::node::NetnsNode::new();
    let _ = lan(&n);
    n.api.put_ip_block("10.81.0.0-30", json!({"cidr": "10.81.0.0/30", "pool": "lan", "node": "other-node"}));
    let allocation = json!({"2": {"id": "cid-wa", "podref": "default/wa", "ifname": "net1"}});
    n.api.put_ip_pool("kube-system", "10.81.0.0-24", "10.81.0.0/24", allocation);
    let _agent = start_agent_with(&n, &[]);
    let socket = n.agent_socket();
    // Not allowed to read whereabouts' objects: no address until it is (code 11).
    n.api.deny("overlappingrangeipreservations", None, 403);
    match ask_allocate(&socket, "lan", "10.81.0.0/24", "new1", "cid-new1") {
        Answer::NoAddress { why, retry: true, .. } => {
            assert!(why.contains("the ClusterRole of manifests/yh-genie.yaml grants it"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    n.api.clear_denials();
    match ask_allocate(&socket, "lan", "10.81.0.0/24", "new1", "cid-new1") {
        Answer::NoAddress { why, retry: false, invalid: false } => assert!(
            why.contains("10.81.0.2 (pod default/wa, sandbox cid-wa) is in block 10.81.0.0/30, which a node holds"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(n.api.lease("default", "yh-ipam-imported-lan").is_none(), "not marked imported");
    // Settled (the pod deleted, its allocation removed from whereabouts' pool): the ADD goes on.
    n.api.put_ip_pool("kube-system", "10.81.0.0-24", "10.81.0.0/24", json!({}));
    assert_eq!(allocate(&socket, "lan", "10.81.0.0/24", "new1", "cid-new1"), "10.81.0.4");
    assert!(n.api.lease("default", "yh-ipam-imported-lan").is_some());
}
