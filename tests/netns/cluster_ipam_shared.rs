//! `yh-ipam` with exactly as many addresses as pods, on two nodes against the fake API server: the
//! pool's last free address sits in the other node's block. The node that finds the pool exhausted
//! asks the other (a mark on its lease), which shares its block: its pod's address a `FixedAddress`,
//! its record written again, the `IPBlock` made fixed with `sharedBy` naming it. The asking node then
//! takes that address as a `FixedAddress` of its pod's. Started again, the sharing agent keeps its
//! pod's address and hands out nothing from the shared block from memory; a pod's DEL deletes its
//! object, and the address goes to the next pod of either node; nothing is left after every DEL.

use super::{SHORT_LEASES, start_agent_with, walk_json};
use serde_json::{Value, json};
use std::path::Path;
use testkit::agent::{Agent, METRICS_PORT, ipam_records};
use testkit::apiserver::literal;
use yh_genie::node::agent_socket::addresses::{AddressOwner, PoolSpec};
use yh_genie::node::agent_socket::client::exchange;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, Request};

/// Pool `lan`, 10.81.0.2 to .5 in blocks of four: .0/30 holds .2 and .3, .4/30 holds .4 and .5.
fn pool() -> PoolSpec {
    serde_json::from_value(json!({
        "name": "lan", "blockSize": 4, "exclude": [],
        "rangeSets": [[{"subnet": "10.81.0.0/24", "start": "10.81.0.2", "end": "10.81.0.5", "gateway": "10.81.0.1"}]],
    }))
    .unwrap()
}

/// What the agent on `socket` answers the ADD of pod `default/name`, sandbox `cid-<name>`, on net1.
fn allocate(socket: &Path, name: &str) -> Answer {
    let owner = AddressOwner {
        uid: format!("uid-default-{name}"),
        container_id: format!("cid-{name}"),
        ifname: "net1".into(),
        pod: format!("default/{name}"),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let ask = Ask::Allocate { pool: pool(), owner, requested: vec![], claim: None };
    exchange(socket, &Request::new(ask), deadline).unwrap()
}

/// The address handed out, and whether it is a shared block's (a `FixedAddress` of the pod's).
fn address(answer: Answer) -> (String, bool) {
    match answer {
        Answer::Allocated { addresses } => {
            assert_eq!(addresses.len(), 1);
            (addresses[0].address.to_string(), addresses[0].shared)
        }
        other => panic!("{other:?}"),
    }
}

fn release(socket: &Path, name: &str) {
    let ask = Ask::Release {
        pool: "lan".into(),
        container_id: format!("cid-{name}"),
        ifname: "net1".into(),
        uid: Some(format!("uid-default-{name}")),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    assert_eq!(exchange(socket, &Request::new(ask), deadline).unwrap(), Answer::Released, "{name}'s DEL");
}

/// The `FixedAddress`es: address to (owner kind, pod name, node).
fn fixed(n: &crate::support::node::NetnsNode) -> Vec<(String, String, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    n.api
        .fixed_addresses()
        .values()
        .map(|o| {
            let spec = &o["spec"];
            (
                text(&spec["address"]),
                text(&spec["owner"]["kind"]),
                text(&spec["pod"]["name"]),
                text(&spec["pod"]["node"]),
            )
        })
        .collect()
}

fn held(address: &str, pod: &str, node: &str) -> (String, String, String, String) {
    (address.into(), "Pod".into(), pod.into(), node.into())
}

#[test]
fn a_node_shares_its_block_when_another_finds_the_pool_exhausted() {
    let n = crate::support::node::NetnsNode::new();
    for name in ["a1", "a2", "a3"] {
        n.api.put_pod("default", name, literal("lan"));
    }
    for name in ["b1", "b2"] {
        n.api.put_pod_spec("default", name, json!({"nodeName": "second-node", "containers": literal("lan")}));
    }
    let first = start_agent_with(&n, &SHORT_LEASES);
    let first_socket = n.agent_socket();
    let second_socket = n.sb.path().join("second-node").join("agent.sock");
    std::fs::create_dir_all(second_socket.parent().unwrap()).unwrap();
    let second_flags = [&["--node-name=second-node"][..], &SHORT_LEASES[..]].concat();
    let mut second = Agent::start(&n.netns, &n.api, n.sb.path(), &second_socket, METRICS_PORT + 1, &second_flags);
    second.wait_ready();

    // second-node takes .2 of block .0/30; the first node fills .4/30.
    assert_eq!(address(allocate(&second_socket, "b1")), ("10.81.0.2".into(), false));
    assert_eq!(address(allocate(&first_socket, "a1")), ("10.81.0.4".into(), false));
    assert_eq!(address(allocate(&first_socket, "a2")), ("10.81.0.5".into(), false));
    assert_eq!(n.api.ip_blocks()["10.81.0.0-30"]["node"], "second-node");

    // The pool's last address is in second-node's block: it is asked to share, and does.
    match allocate(&first_socket, "a3") {
        Answer::NoAddress { why, retry: true, invalid: false } => assert!(
            why.contains("pool \"lan\" has no free address in 10.81.0.2-10.81.0.5")
                && why.contains(
                    "nodes second-node hold blocks of it and are asked to share the addresses left in them: try again"
                ),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    second.wait_for("second-node to share block .0/30", || n.api.ip_blocks()["10.81.0.0-30"]["fixed"] == true);
    assert_eq!(
        n.api.ip_blocks()["10.81.0.0-30"],
        json!({"cidr": "10.81.0.0/30", "pool": "lan", "node": "", "fixed": true, "sharedBy": "second-node"})
    );
    assert_eq!(fixed(&n), [held("10.81.0.2", "b1", "second-node")], "b1's address, kept as its own");
    let asked = n.api.calls().into_iter().filter(|c| c.resource == "leases" && c.verb == "patch").count();
    assert_eq!(asked, 1, "the first node marked second-node's lease once");
    second.wait_for("the mark removed by second-node's next renewal", || {
        n.api.lease("default", "yh-ipam-second-node").unwrap()["metadata"]["annotations"]
            .get("share.ipam.yh-genie.io/lan")
            .is_none()
    });

    // The retried ADD takes the shared block's free address.
    assert_eq!(address(allocate(&first_socket, "a3")), ("10.81.0.3".into(), true));
    assert_eq!(address(allocate(&first_socket, "a3")), ("10.81.0.3".into(), true), "a retry, the same");
    assert_eq!(fixed(&n), [held("10.81.0.2", "b1", "second-node"), held("10.81.0.3", "a3", "yh-node")]);
    assert_eq!(first.metric("yh_genie_agent_ipam_fixed_addresses{pool=\"lan\"}"), 1);
    assert_eq!(second.metric("yh_genie_agent_ipam_blocks{pool=\"lan\"}"), 0, "second-node holds no block now");

    // second-node started again: b1 keeps .2 (its record says shared), nothing from memory.
    second.kill();
    let second = Agent::start(&n.netns, &n.api, n.sb.path(), &second_socket, METRICS_PORT + 1, &second_flags);
    second.wait_ready();
    assert_eq!(address(allocate(&second_socket, "b1")), ("10.81.0.2".into(), true));
    assert!(matches!(allocate(&second_socket, "b2"), Answer::NoAddress { .. }), "the pool is full");
    assert_eq!(fixed(&n).len(), 2);

    // a3's DEL deletes its object; the address goes to the next pod, on the other node.
    release(&first_socket, "a3");
    assert_eq!(fixed(&n), [held("10.81.0.2", "b1", "second-node")]);
    assert_eq!(address(allocate(&second_socket, "b2")), ("10.81.0.3".into(), true));
    assert_eq!(fixed(&n), [held("10.81.0.2", "b1", "second-node"), held("10.81.0.3", "b2", "second-node")]);

    for (socket, name) in [(&second_socket, "b1"), (&second_socket, "b2"), (&first_socket, "a1"), (&first_socket, "a2")]
    {
        release(socket, name);
    }
    assert_eq!(fixed(&n), [], "every object deleted by its pod's DEL");
    assert_eq!(walk_json(&ipam_records(&first_socket)) + walk_json(&ipam_records(&second_socket)), 0, "no record left");
    drop((first, second));
}
