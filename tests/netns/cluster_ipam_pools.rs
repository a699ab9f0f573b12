//! `yh-ipam` pools defined by `AddressPool` objects: a network that names a pool and gives no
//! ranges gets its addresses from the object of that name on the fake API server, through the
//! selector and `yh-bridge` as any network; refused, saying why and before anything is claimed,
//! while the object does not exist (code 11), when it is invalid (code 7), and for a network giving
//! its own ranges for a pool an object defines (code 7). A NetworkAttachmentDefinition may name
//! an AddressPool, and define a pool of its own only where the admin's policy allows it. An agent
//! that may not read the objects says so, and serves the networks that define their own pools.

use super::{block_requests, cni_error as error, exec_ipam, records, start_agent};
use crate::support::agent::AgentAnswers;
use crate::support::driver::Reply;
use crate::support::node::{NetnsNode, Pod, pod_addresses};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use testkit::apiserver::literal;
use testkit::process::unique;
use yh_genie::programs::selector::requests::annotation::MULTUS_DEFAULT_NETWORK;

/// The network `name`, whose yh-ipam names pool `pool` and gives no ranges.
fn naming_a_pool(n: &NetnsNode, name: &str, pool: &str) -> Value {
    let ipam = json!({"type": "yh-ipam", "pool": pool, "agentSocket": n.agent_socket()});
    let list = json!({"cniVersion": "1.0.0", "name": name,
                      "plugins": [{"type": "yh-bridge", "bridge": unique("yp"), "ipam": ipam}]});
    n.write_conf(&format!("{name}/10-{name}.conflist"), &list);
    list
}

/// `command` of `yh-ipam` alone for `pod`, with this `ipam`, as a reference plugin execs it.
fn ipam(n: &NetnsNode, command: &str, pod: &Pod, ipam: &Value) -> Reply {
    let conf = json!({"cniVersion": "1.0.0", "name": "lan", "type": "macvlan", "master": "eth1", "ipam": ipam});
    exec_ipam(n, command, pod, &conf)
}

#[test]
fn a_network_naming_an_address_pool_gets_its_addresses_from_it() {
    let n = NetnsNode::new();
    naming_a_pool(&n, "lan", "lan");
    for name in ["a", "b", "c"] {
        n.api.put_pod("default", name, literal("lan"));
    }
    let agent = start_agent(&n);
    let conf = n.selector_conf("1.0.0", json!({}));

    // No AddressPool "lan" yet: code 11 (the runtime retries), naming the pool and what to do,
    // and nothing claimed or recorded.
    let a = n.pod("a");
    let (code, msg) = error(&n.call("ADD", &a, &conf));
    assert_eq!(code, 11, "{msg}");
    assert!(
        msg.contains("pool \"lan\" is defined by no AddressPool")
            && msg.contains("AddressPool \"lan\" (ipam.yh-genie.io/v1alpha1), which does not exist; create it"),
        "{msg}"
    );
    assert!(pod_addresses(&a).is_empty());
    assert!(block_requests(&n).is_empty() && records(&n) == 0);

    // The admin creates it: the agent's watch sees it, and the retried ADD gets an address of its
    // ranges, in its blocks of four, with its routes.
    n.api.put_address_pool(
        "lan",
        json!({"ranges": [[{"subnet": "10.82.0.0/24", "rangeEnd": "10.82.0.9"}]], "blockSize": 4,
               "routes": [{"dst": "10.82.0.0/16"}]}),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut a = a;
    loop {
        a = a.renew("a");
        let reply = n.call("ADD", &a, &conf);
        if reply.code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the AddressPool is not used: {reply:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(pod_addresses(&a), ["10.82.0.2/24"]);
    let (_, routes) = a.netns.exec("ip -4 route show 10.82.0.0/16");
    assert!(routes.contains("10.82.0.0/16"), "the pool's route: {routes}");
    assert_eq!(n.api.ip_blocks()["10.82.0.0-30"], json!({"cidr": "10.82.0.0/30", "pool": "lan", "node": "yh-node"}));
    let b = n.pod("b");
    let reply = n.call("ADD", &b, &conf);
    assert_eq!(reply.code, 0, "{reply:?}");
    assert_eq!(pod_addresses(&b), ["10.82.0.3/24"]);
    assert_eq!(block_requests(&n), ["create"], "no request while the node's block has room");
    assert_eq!(records(&n), 2);

    // A network giving its own ranges for pool "lan", which the AddressPool defines: code 7,
    // naming both, nothing taken.
    let inline = json!({"type": "yh-ipam", "pool": "lan", "agentSocket": n.agent_socket(),
                        "ranges": [[{"subnet": "10.99.0.0/24"}]]});
    let c = n.pod("c");
    let (code, msg) = error(&ipam(&n, "ADD", &c, &inline));
    assert_eq!(code, 7, "{msg}");
    assert!(
        msg.contains("gives 'ranges' for pool \"lan\", and the AddressPool \"lan\" defines that pool too"),
        "{msg}"
    );

    // An invalid AddressPool: code 7 naming it and what is wrong, before anything is claimed.
    n.api.put_address_pool("bad", json!({"ranges": [[{"subnet": "10.83.0.1/24"}]]}));
    let named = json!({"type": "yh-ipam", "pool": "bad", "agentSocket": n.agent_socket()});
    let deadline = Instant::now() + Duration::from_secs(10);
    let msg = loop {
        let (code, msg) = error(&ipam(&n, "ADD", &c, &named));
        if code == 7 {
            break msg;
        }
        assert!(Instant::now() < deadline, "the AddressPool \"bad\" is not seen: {code} {msg}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(msg.contains("AddressPool \"bad\" is invalid: subnet 10.83.0.1/24 has host bits set"), "{msg}");
    assert_eq!(block_requests(&n), ["create"], "nothing claimed for an invalid pool");
    assert_eq!(records(&n), 2);

    // DEL releases into the AddressPool's pool: the address goes to the next pod.
    assert_eq!(n.call("DEL", &a, &conf).code, 0);
    assert_eq!(records(&n), 1);
    let reply = ipam(&n, "ADD", &c, &json!({"type": "yh-ipam", "pool": "lan", "agentSocket": n.agent_socket()}));
    assert_eq!(reply.code, 0, "{reply:?}");
    assert_eq!(reply.json()["ips"], json!([{"address": "10.82.0.2/24", "gateway": "10.82.0.1"}]));
    assert_eq!(reply.json()["routes"], json!([{"dst": "10.82.0.0/16"}]), "the pool's routes");
    drop(agent);
}

/// Through NetworkAttachmentDefinitions, whose authors the admin does not trust: with inline
/// configurations allowed, a NAD whose yh-ipam names the admin's AddressPool gets its addresses,
/// and one defining its own pool (`ranges`) is refused (code 7, before anything runs) unless the
/// admin sets `inlineYhIpamRanges`.
#[test]
fn a_nad_may_name_an_address_pool_and_define_one_only_where_the_admin_allows() {
    let n = NetnsNode::new();
    n.api.put_address_pool(
        "lan",
        json!({"ranges": [[{"subnet": "10.82.0.0/24", "rangeEnd": "10.82.0.9"}]], "blockSize": 4}),
    );
    let socket = n.agent_socket();
    let nad = |ipam: Value| {
        json!({"cniVersion": "1.0.0", "name": "tenant",
               "plugins": [{"type": "yh-bridge", "bridge": unique("yt"), "ipam": ipam}]})
        .to_string()
    };
    n.api.put_nad("default", "by-pool", Some(&nad(json!({"type": "yh-ipam", "pool": "lan", "agentSocket": socket}))));
    let own = json!({"type": "yh-ipam", "pool": "tenant", "agentSocket": socket,
                     "ranges": [[{"subnet": "10.84.0.0/24", "rangeEnd": "10.84.0.9"}]], "blockSize": 4});
    n.api.put_nad("default", "own-ranges", Some(&nad(own)));
    for (pod, nad) in [("a", "default/by-pool"), ("b", "default/own-ranges")] {
        n.api.put_annotated_pod("default", pod, json!({MULTUS_DEFAULT_NETWORK: nad}), json!([{"name": "app"}]));
    }
    let agent = start_agent(&n);
    for name in ["a", "b"] {
        agent.wait_holds(&n.agent_socket(), name, &format!("uid-default-{name}"), |_| true);
    }
    // The agent's socket is a host path of the inline configurations: allowed where it is.
    let dir = socket.parent().unwrap().to_str().unwrap().to_string();
    let open = json!({"allowInlineConfig": true, "inlinePathPrefixes": [dir]});
    let conf = n.selector_conf("1.0.0", open.clone());

    let a = n.pod("a");
    let reply = n.call("ADD", &a, &conf);
    assert_eq!(reply.code, 0, "{reply:?}");
    assert_eq!(pod_addresses(&a), ["10.82.0.2/24"], "the AddressPool's");

    let b = n.pod("b");
    let (code, msg) = error(&n.call("ADD", &b, &conf));
    assert_eq!(code, 7, "{msg}");
    assert!(
        msg.contains("NetworkAttachmentDefinition default/own-ranges is refused: spec.config plugins[0].ipam.")
            && msg.contains("defines a yh-ipam pool, and inlineYhIpamRanges is false on this node"),
        "{msg}"
    );
    assert!(pod_addresses(&b).is_empty());
    assert!(!n.api.ip_blocks().keys().any(|b| b.starts_with("10.84.")), "nothing claimed for it");

    let mut ranges = open;
    ranges["inlineYhIpamRanges"] = json!(true);
    let b = b.renew("b");
    let reply = n.call("ADD", &b, &n.selector_conf("1.0.0", ranges));
    assert_eq!(reply.code, 0, "{reply:?}");
    assert_eq!(pod_addresses(&b), ["10.84.0.2/24"], "its own pool, once the admin allows it");
    drop(agent);
}

/// An agent not allowed to read the `AddressPool`s (an older ClusterRole): a network naming a pool
/// object is refused with code 11 saying what to grant, one giving its own ranges is served as
/// without pool objects; once allowed, the watch lists them and the retried ADD is served.
#[test]
fn an_agent_not_allowed_to_read_address_pools_says_so_and_serves_inline_pools() {
    let n = NetnsNode::new();
    n.api.deny("addresspools", None, 403);
    n.api.put_address_pool(
        "lan",
        json!({"ranges": [[{"subnet": "10.82.0.0/24", "rangeEnd": "10.82.0.9"}]], "blockSize": 4}),
    );
    for name in ["a", "b"] {
        n.api.put_pod("default", name, literal("lan"));
    }
    let agent = start_agent(&n);
    let (a, b) = (n.pod("a"), n.pod("b"));
    let named = json!({"type": "yh-ipam", "pool": "lan", "agentSocket": n.agent_socket()});
    let (code, msg) = error(&ipam(&n, "ADD", &a, &named));
    assert_eq!(code, 11, "{msg}");
    assert!(
        msg.contains("pool \"lan\" is the AddressPool of that name, which the agent cannot read")
            && msg.contains("the agent's ClusterRole must allow list and watch on addresspools.ipam.yh-genie.io"),
        "{msg}"
    );
    let inline = json!({"type": "yh-ipam", "pool": "other", "agentSocket": n.agent_socket(),
                        "ranges": [[{"subnet": "10.85.0.0/24", "rangeEnd": "10.85.0.9"}]], "blockSize": 4});
    let reply = ipam(&n, "ADD", &b, &inline);
    assert_eq!(reply.json()["ips"], json!([{"address": "10.85.0.2/24", "gateway": "10.85.0.1"}]), "{reply:?}");
    assert!(agent.logged().contains("listing the AddressPool objects"), "{}", agent.logged());

    n.api.clear_denials();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let reply = ipam(&n, "ADD", &a, &named);
        if reply.code == 0 {
            assert_eq!(reply.json()["ips"], json!([{"address": "10.82.0.2/24", "gateway": "10.82.0.1"}]));
            break;
        }
        assert!(Instant::now() < deadline, "the AddressPools are not listed once allowed: {reply:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
