//! `yh-ipam` and the addresses a pod asks for (`runtimeConfig.ips`, from the `ips` of its networks
//! annotation): exec'd as a reference plugin execs its IPAM, with the agent running against the
//! fake API server. An address is handed out only inside the pool and only when free: from the
//! node's block, or from a block no node held (claimed for the node); refused, saying why, when it
//! is outside the pool, the gateway, taken, or in another node's block.

use super::{cni_error as error, exec_ipam, lan, start_agent};
use crate::support::driver::Reply;
use crate::support::node::{NetnsNode, Pod};
use serde_json::{Value, json};
use testkit::apiserver::literal;

/// `command` of `yh-ipam` for `pod`, as `macvlan` execs it, with `ips` asked for.
fn ipam(n: &NetnsNode, command: &str, pod: &Pod, list: &Value, ips: Value) -> Reply {
    let conf = json!({"cniVersion": "1.0.0", "name": "lan", "type": "macvlan", "master": "eth1",
                      "runtimeConfig": {"ips": ips}, "ipam": list["plugins"][0]["ipam"]});
    exec_ipam(n, command, pod, &conf)
}

#[test]
fn yh_ipam_hands_out_an_address_asked_for_only_from_the_pool_and_only_when_free() {
    let n = NetnsNode::new();
    // 10.81.0.1 to .9, the gateway .1, blocks of four; another node holds .4/30.
    let list = lan(&n);
    n.api.put_ip_block("10.81.0.4-30", json!({"cidr": "10.81.0.4/30", "pool": "lan", "node": "other-node"}));
    for name in ["a", "b", "c"] {
        n.api.put_pod("default", name, literal("lan"));
    }
    let agent = start_agent(&n);
    let (a, b) = (n.pod("a"), n.pod("b"));

    // .9 is in .8/30, which no node holds: claimed for this node, .9 handed out; a retry gets it again.
    let reply = ipam(&n, "ADD", &a, &list, json!(["10.81.0.9/24"]));
    assert_eq!(reply.ok()["ips"], json!([{"address": "10.81.0.9/24", "gateway": "10.81.0.1"}]), "{reply:?}");
    assert_eq!(n.api.ip_blocks()["10.81.0.8-30"]["node"], "yh-node");
    assert_eq!(ipam(&n, "ADD", &a, &list, json!(["10.81.0.9/24"])).ok()["ips"][0]["address"], "10.81.0.9/24");

    // Taken: code 104, naming the address, the pool and its holder.
    let (code, msg) = error(&ipam(&n, "ADD", &b, &list, json!(["10.81.0.9"])));
    assert_eq!(code, 104, "{msg}");
    assert!(
        msg.contains(
            "address 10.81.0.9 asked for in 'ips' cannot be had from pool \"lan\": it is taken, held by pod default/a"
        ),
        "{msg}"
    );
    // In another node's block: found so by its AlreadyExists, code 104.
    let (code, msg) = error(&ipam(&n, "ADD", &b, &list, json!(["10.81.0.5/24"])));
    assert_eq!(code, 104, "{msg}");
    assert!(msg.contains("it is in block 10.81.0.4/30, which node other-node holds"), "{msg}");
    assert_eq!(n.api.ip_blocks()["10.81.0.4-30"]["node"], "other-node", "left alone");
    // Never the pool's: code 7, saying why.
    for (asked, says) in [
        ("10.81.0.20", "it is outside the pool's ranges 10.81.0.1-10.81.0.9"),
        ("10.81.0.1", "it is the gateway of 10.81.0.0/24"),
        ("10.99.0.2/24", "it is outside"),
    ] {
        let (code, msg) = error(&ipam(&n, "ADD", &b, &list, json!([asked])));
        assert_eq!(code, 7, "{asked}: {msg}");
        assert!(msg.contains(&format!("is not one pool \"lan\" hands out: {says}")), "{asked}: {msg}");
    }
    let (code, msg) = error(&ipam(&n, "ADD", &b, &list, json!(["not-an-address"])));
    assert_eq!(code, 7, "{msg}");
    assert!(msg.contains("runtimeConfig.ips holds \"not-an-address\""), "{msg}");
    assert_eq!(agent.metric("yh_genie_agent_ipam_addresses{pool=\"lan\",state=\"used\"}"), 1, "refusals take nothing");

    // Free again after a's DEL: b asks for it and gets it.
    assert_eq!(ipam(&n, "DEL", &a, &list, json!([])).code, 0);
    let reply = ipam(&n, "ADD", &b, &list, json!(["10.81.0.9/24"]));
    assert_eq!(reply.ok()["ips"][0]["address"], "10.81.0.9/24", "{reply:?}");
    // A pod asking nothing gets the node's block's next free address, never one asked for.
    let c = n.pod("c");
    assert_eq!(ipam(&n, "ADD", &c, &list, Value::Null).ok()["ips"][0]["address"], "10.81.0.8/24");
    for pod in [&b, &c] {
        assert_eq!(ipam(&n, "DEL", pod, &list, Value::Null).code, 0);
    }
}
