//! `yh-ipam`'s fixed addresses: a StatefulSet's ordinal keeps its address across its pods and
//! nodes. Two agents of two nodes against the fake API server: the address taken in a fixed block
//! (an `IPBlock` held by no node) as a `FixedAddress`, kept by a pod's DEL, refused (code 11) to
//! the next pod of the ordinal on the other node while the old pod object exists, handed over once
//! it is gone, and freed by the releaser's sweep once the StatefulSet is scaled down and its last
//! pod gone; never a duplicate with the nodes' blocks. An IPAMClaim's address held by two pods at
//! once (a VM's live migration), written into the claim's status, freed once the claim is gone.

use super::{SHORT_LEASES, lan, start_agent_with};
use crate::support::agent::AgentAnswers;
use crate::support::node::addresses_on;
use serde_json::{Value, json};
use std::path::Path;
use testkit::agent::{Agent, METRICS_PORT};
use testkit::apiserver::literal;
use yh_genie::node::agent_socket::addresses::{AddressOwner, PoolSpec};
use yh_genie::node::agent_socket::client::exchange;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, Request};
use yh_genie::programs::selector::requests::annotation::NETWORKS;

/// What the agent on `socket` answers the ADD of pod `default/name` (`uid`), sandbox `cid`, on `net1`.
fn allocate(socket: &Path, name: &str, uid: &str, cid: &str) -> Answer {
    allocate_for(socket, name, uid, cid, None)
}

/// `allocate`, the pod naming IPAMClaim `claim` (its `ipam-claim-reference`).
fn allocate_for(socket: &Path, name: &str, uid: &str, cid: &str, claim: Option<&str>) -> Answer {
    let pool: PoolSpec = serde_json::from_value(json!({
        "name": "lan", "blockSize": 4, "exclude": [],
        "rangeSets": [[{"subnet": "10.81.0.0/24", "start": "10.81.0.1", "end": "10.81.0.9", "gateway": "10.81.0.1"}]],
    }))
    .unwrap();
    let owner = AddressOwner {
        uid: uid.into(),
        container_id: cid.into(),
        ifname: "net1".into(),
        pod: format!("default/{name}"),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let claim = claim.map(String::from);
    exchange(socket, &Request::new(Ask::Allocate { pool, owner, requested: vec![], claim }), deadline).unwrap()
}

fn release(socket: &Path, uid: &str, cid: &str) {
    let ask =
        Ask::Release { pool: "lan".into(), container_id: cid.into(), ifname: "net1".into(), uid: Some(uid.into()) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    assert_eq!(exchange(socket, &Request::new(ask), deadline).unwrap(), Answer::Released);
}

fn address(answer: Answer) -> String {
    match answer {
        Answer::Allocated { addresses } => {
            assert_eq!(addresses.len(), 1);
            addresses[0].address.to_string()
        }
        other => panic!("{other:?}"),
    }
}

/// The `FixedAddress` of `address`: its spec.
fn fixed_spec(n: &crate::support::node::NetnsNode, address: &str) -> Option<Value> {
    n.api.fixed_addresses().get(address).map(|o| o["spec"].clone())
}

/// The second agent, of node `second-node`, listening on its own socket: (agent, socket).
fn second_agent(n: &crate::support::node::NetnsNode) -> (Agent, std::path::PathBuf) {
    let second_socket = n.sb.path().join("second-node").join("agent.sock");
    std::fs::create_dir_all(second_socket.parent().unwrap()).unwrap();
    let mut flags = vec!["--node-name=second-node"];
    flags.extend(SHORT_LEASES);
    let second = Agent::start(&n.netns, &n.api, n.sb.path(), &second_socket, METRICS_PORT + 1, &flags);
    second.wait_ready();
    (second, second_socket)
}

#[test]
fn two_pods_of_one_ipam_claim_hold_its_address_at_once_on_two_nodes() {
    let n = crate::support::node::NetnsNode::new();
    let _ = lan(&n);
    n.api.put_ipam_claim("default", "vm-a", "uid-claim-vm-a");
    n.api.put_pod("default", "virt-a", literal("lan"));
    n.api.put_pod_spec("default", "virt-b", json!({"nodeName": "second-node", "containers": literal("lan")}));
    n.api.put_pod("default", "plain", literal("lan"));
    let first = start_agent_with(&n, &SHORT_LEASES);
    let first_socket = n.agent_socket();
    let (second, second_socket) = second_agent(&n);

    // The VM's pod on the first node: the claim's address, from a fixed block, in its status.ips.
    let claim = Some("vm-a");
    assert_eq!(address(allocate_for(&first_socket, "virt-a", "uid-default-virt-a", "cid-a", claim)), "10.81.0.2");
    assert_eq!(n.api.ip_blocks()["10.81.0.0-30"]["fixed"], true);
    let spec = fixed_spec(&n, "10.81.0.2").expect("the claim's FixedAddress");
    assert_eq!(
        spec["owner"],
        json!({"kind": "IPAMClaim", "namespace": "default", "name": "vm-a", "uid": "uid-claim-vm-a", "ordinal": 0})
    );
    let status = n.api.ipam_claim("default", "vm-a").unwrap()["status"].clone();
    assert_eq!(status["ips"], json!(["10.81.0.2/24"]));
    assert_eq!(status["ownerPod"], json!({"name": "virt-a"}));
    assert_eq!(claim_condition(&status), ("True".into(), "SuccessfulAllocation".into()), "{status}");
    // Live migration: the target pod on the other node gets it too, while the source still runs.
    assert_eq!(address(allocate_for(&second_socket, "virt-b", "uid-default-virt-b", "cid-b", claim)), "10.81.0.2");
    assert_eq!(fixed_spec(&n, "10.81.0.2").unwrap()["pod"]["node"], "second-node", "the latest pod");
    let status = n.api.ipam_claim("default", "vm-a").unwrap()["status"].clone();
    assert_eq!(status["ownerPod"], json!({"name": "virt-b"}), "the latest pod");
    assert_eq!(first.metric("yh_genie_agent_ipam_fixed_addresses{pool=\"lan\"}"), 1);
    assert_eq!(second.metric("yh_genie_agent_ipam_fixed_addresses{pool=\"lan\"}"), 1);
    // Never another pod's: a plain pod gets one of its node's block.
    assert_eq!(address(allocate(&first_socket, "plain", "uid-default-plain", "cid-p")), "10.81.0.4");
    // A claim that does not exist: code 11 until it does.
    match allocate_for(&first_socket, "plain", "uid-default-plain", "cid-q", Some("vm-b")) {
        Answer::NoAddress { why, retry: true, .. } => {
            assert!(why.contains("names IPAMClaim default/vm-b (ipam-claim-reference), which does not exist"), "{why}")
        }
        other => panic!("{other:?}"),
    }

    // The source's DEL frees nothing; the claim deleted, the address goes once its last pod is gone.
    release(&first_socket, "uid-default-virt-a", "cid-a");
    n.api.remove_ipam_claim("default", "vm-a");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert!(fixed_spec(&n, "10.81.0.2").is_some(), "kept while its pod exists");
    n.api.remove_pod("default", "virt-b");
    first.wait_for("the claim's address freed", || fixed_spec(&n, "10.81.0.2").is_none());
    let logs = first.logged() + &second.logged();
    assert!(
        logs.contains("fixed address 10.81.0.2 of pool \"lan\" is free: IPAMClaim default/vm-a is gone (deleted)"),
        "{logs}"
    );

    // Claims until the pool's fixed blocks are full and no block is left to claim: the last
    // claim's status says why it has no address.
    for (vm, expected) in [("vm-c", "10.81.0.2"), ("vm-d", "10.81.0.3"), ("vm-e", "10.81.0.8"), ("vm-f", "10.81.0.9")] {
        n.api.put_ipam_claim("default", vm, &format!("uid-claim-{vm}"));
        let pod = format!("virt-{vm}");
        assert_eq!(address(allocate_for(&first_socket, &pod, &format!("uid-{pod}"), &pod, Some(vm))), expected);
    }
    n.api.put_ipam_claim("default", "vm-g", "uid-claim-vm-g");
    assert!(matches!(
        allocate_for(&first_socket, "virt-g", "uid-virt-g", "cid-g", Some("vm-g")),
        Answer::NoAddress { retry: false, .. }
    ));
    let status = n.api.ipam_claim("default", "vm-g").unwrap()["status"].clone();
    assert_eq!(claim_condition(&status), ("False".into(), "SubnetExhausted".into()), "{status}");
    assert_eq!(status["ips"], json!([]), "{status}");
    assert!(
        status["conditions"][0]["message"].as_str().unwrap().contains("pool \"lan\" has no free address"),
        "{status}"
    );
}

/// The claim's `IPsAllocated` condition in its `status`: (status, reason).
fn claim_condition(status: &Value) -> (String, String) {
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let found = conditions.iter().find(|c| c["type"] == "IPsAllocated").cloned().unwrap_or_default();
    (found["status"].as_str().unwrap_or_default().into(), found["reason"].as_str().unwrap_or_default().into())
}

#[test]
fn a_statefulset_ordinal_keeps_its_address_across_nodes_until_scaled_down() {
    let n = crate::support::node::NetnsNode::new();
    let _ = lan(&n);
    let set = ("web", "uid-sts-web", 0);
    n.api.put_stateful_set("default", "web", "uid-sts-web", 2);
    n.api.put_stateful_set_pod(("default", "web-0", "uid-web-0-a"), set, "yh-node", literal("lan"));
    n.api.put_stateful_set_pod(("default", "web-1", "uid-web-1"), ("web", "uid-sts-web", 1), "yh-node", literal("lan"));
    n.api.put_pod("default", "plain", literal("lan"));
    let first = start_agent_with(&n, &SHORT_LEASES);
    let first_socket = n.agent_socket();
    let (second, second_socket) = second_agent(&n);
    for (name, uid) in [("web-0", "uid-web-0-a"), ("web-1", "uid-web-1"), ("plain", "uid-default-plain")] {
        first.wait_holds(&first_socket, name, uid, |_| true);
    }

    // web-0 gets a fixed address: a fixed block claimed for the pool, the address its object.
    assert_eq!(address(allocate(&first_socket, "web-0", "uid-web-0-a", "cid-0a")), "10.81.0.2");
    assert_eq!(
        n.api.ip_blocks()["10.81.0.0-30"],
        json!({"cidr": "10.81.0.0/30", "pool": "lan", "node": "", "fixed": true})
    );
    let spec = fixed_spec(&n, "10.81.0.2").expect("web-0's FixedAddress");
    assert_eq!(
        spec["owner"],
        json!({"kind": "StatefulSet", "namespace": "default", "name": "web", "uid": "uid-sts-web", "ordinal": 0})
    );
    assert_eq!(spec["pod"], json!({"uid": "uid-web-0-a", "namespace": "default", "name": "web-0", "node": "yh-node"}));
    assert_eq!(spec["interface"], "net1");
    // A retry gets it again; another ordinal gets the fixed block's next address; a plain pod one of
    // a block of the node, never of the fixed block.
    assert_eq!(address(allocate(&first_socket, "web-0", "uid-web-0-a", "cid-0a")), "10.81.0.2");
    assert_eq!(address(allocate(&first_socket, "web-1", "uid-web-1", "cid-1")), "10.81.0.3");
    assert_eq!(address(allocate(&first_socket, "plain", "uid-default-plain", "cid-p")), "10.81.0.4");
    assert_eq!(n.api.ip_blocks()["10.81.0.4-30"]["node"], "yh-node");
    assert_eq!(first.metric("yh_genie_agent_ipam_fixed_addresses{pool=\"lan\"}"), 2);
    assert_eq!(first.metric("yh_genie_agent_ipam_blocks{pool=\"lan\"}"), 1, "the fixed block is no node's");

    // web-0's DEL frees nothing: the address stays its ordinal's.
    release(&first_socket, "uid-web-0-a", "cid-0a");
    assert_eq!(fixed_spec(&n, "10.81.0.2").unwrap()["pod"]["uid"], "uid-web-0-a");
    assert_eq!(first.metric("yh_genie_agent_ipam_fixed_addresses{pool=\"lan\"}"), 1);

    // The ordinal's next pod, on the other node, while the old pod object still exists: code 11
    // (try again), naming it. (It runs under another name here so that both objects can exist.)
    n.api.put_stateful_set_pod(("default", "web-0-next", "uid-web-0-b"), set, "second-node", literal("lan"));
    second.wait_holds(&second_socket, "web-0-next", "uid-web-0-b", |_| true);
    match allocate(&second_socket, "web-0-next", "uid-web-0-b", "cid-0b") {
        Answer::NoAddress { why, retry: true, .. } => assert!(
            why.contains(
                "fixed address 10.81.0.2 of pool \"lan\" is kept for StatefulSet default/web ordinal 0 and held by pod \
                 default/web-0 (uid uid-web-0-a) on node yh-node, whose object still exists"
            ),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    // Gone: handed over.
    n.api.remove_pod("default", "web-0");
    assert_eq!(address(allocate(&second_socket, "web-0-next", "uid-web-0-b", "cid-0b")), "10.81.0.2");
    assert_eq!(
        fixed_spec(&n, "10.81.0.2").unwrap()["pod"],
        json!({"uid": "uid-web-0-b", "namespace": "default", "name": "web-0-next", "node": "second-node"})
    );
    assert_eq!(second.metric("yh_genie_agent_ipam_fixed_addresses{pool=\"lan\"}"), 1);
    let log = second.logged();
    assert!(log.contains("handed over from pod default/web-0 (uid uid-web-0-a) on node yh-node, gone"), "{log}");

    // Scaled down to one: ordinal 0 stays (0 < 1); to none, it goes once its last pod is gone.
    n.api.put_stateful_set("default", "web", "uid-sts-web", 1);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(n.api.fixed_addresses().len(), 2, "both ordinals kept: web-1's pod still exists");
    n.api.remove_pod("default", "web-1");
    first.wait_for("web-1's address freed", || fixed_spec(&n, "10.81.0.3").is_none());
    n.api.put_stateful_set("default", "web", "uid-sts-web", 0);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert!(fixed_spec(&n, "10.81.0.2").is_some(), "kept while its pod exists");
    n.api.remove_pod("default", "web-0-next");
    first.wait_for("web-0's address freed", || fixed_spec(&n, "10.81.0.2").is_none());
    let logs = first.logged() + &second.logged();
    assert!(
        logs.contains(
            "fixed address 10.81.0.3 of pool \"lan\" is free: StatefulSet default/web ordinal 1 is gone (its \
             StatefulSet is scaled down to 1), and its last pod default/web-1 is gone"
        ),
        "{logs}"
    );
    assert_eq!(n.api.ip_blocks()["10.81.0.0-30"]["fixed"], true, "the fixed block stays the pool's");
}

/// Through the selector: a pod's `ipam-claim-reference` on a further network reaches `yh-ipam`
/// (run in process by yh-bridge), whose address on net1 is the claim's; eth0, of the same pool
/// without a claim, gets one of the node's block.
#[test]
fn a_pods_ipam_claim_reference_gives_its_interface_the_claims_address() {
    let n = crate::support::node::NetnsNode::new();
    let _ = lan(&n);
    n.api.put_nad("default", "lan", None);
    n.api.put_ipam_claim("default", "vm-a", "uid-claim-vm-a");
    let networks = r#"[{"name": "lan", "interface": "net1", "ipam-claim-reference": "vm-a"}]"#;
    n.api.put_annotated_pod("default", "virt-a", json!({NETWORKS: networks}), literal("lan"));
    let agent = start_agent_with(&n, &SHORT_LEASES);
    agent.wait_holds(&n.agent_socket(), "virt-a", "uid-default-virt-a", |_| true);
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("virt-a");
    let reply = n.call("ADD", &pod, &conf);
    assert_eq!(reply.code, 0, "{reply:?}");
    // eth0 (the ADD's first) claimed .0/30 for the node; net1's address is the claim's, from the
    // next block, claimed as a fixed block.
    assert_eq!(addresses_on(&pod, "eth0"), ["10.81.0.2/24"], "the pod's own, from the node's block");
    assert_eq!(addresses_on(&pod, "net1"), ["10.81.0.4/24"], "the claim's, from a fixed block");
    assert_eq!(n.api.ip_blocks()["10.81.0.4-30"]["fixed"], true);
    assert_eq!(n.api.ipam_claim("default", "vm-a").unwrap()["status"]["ips"], json!(["10.81.0.4/24"]));
    assert_eq!(fixed_spec(&n, "10.81.0.4").unwrap()["interface"], "net1");
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    assert!(fixed_spec(&n, "10.81.0.4").is_some(), "kept for the claim after the pod's DEL");
}
