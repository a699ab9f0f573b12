//! The cluster's own network as the default, read in place, as root: a kindnet-like conflist
//! (Debian's reference ptp, host-local and portmap, CNI 0.3.1) written directly in the conf dir
//! beside `00-yh-genie.conflist`, named by `defaultNetwork` (its file name, or `auto`).

use crate::support::node::{NetnsNode, addresses_on};
use serde_json::{Value, json};
use testkit::apiserver::literal;

/// kindnetd's conflist on this node's pod range `10.<octet>.0.0/24`.
fn kindnet(n: &NetnsNode, octet: u8) -> Value {
    json!({"cniVersion": "0.3.1", "name": "kindnet", "plugins": [
        {"type": "ptp", "ipMasq": false, "mtu": 1500, "ipam": {"type": "host-local", "dataDir": n.ipam_dir(),
            "ranges": [[{"subnet": format!("10.{octet}.0.0/24")}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": true}}]})
}

/// A node whose cluster network wrote `10-kindnet.conflist`, and the selector's conf with
/// `defaultNetwork` set to `default`.
fn node(default: &str) -> (NetnsNode, String) {
    let n = NetnsNode::new();
    n.write_conf("10-kindnet.conflist", &kindnet(&n, 61));
    n.selector_conflist("1.1.0");
    let conf = n.selector_conf("1.1.0", json!({"defaultNetwork": default, "agentSocket": ""}));
    (n, conf)
}

fn pod_range(pod: &crate::support::node::Pod) -> Vec<String> {
    addresses_on(pod, "eth0").iter().map(|a| a.split('.').take(2).collect::<Vec<_>>().join(".")).collect()
}

#[test]
fn pods_get_the_cluster_network_in_place_and_its_owners_updates() {
    for default in ["10-kindnet.conflist", "auto"] {
        let (n, conf) = node(default);
        n.api.put_pod("default", "web", json!([{"name": "app", "image": "nginx"}]));
        assert_eq!(n.call("STATUS", &n.pod("web"), &conf).code, 0, "{default}: a 0.3.1 network is ready");
        let pod = n.pod("web");
        n.call("ADD", &pod, &conf).ok();
        assert_eq!(pod_range(&pod), ["10.61"], "{default}");
        assert_eq!(n.record(&pod)["network"], "10-kindnet.conflist", "{default}");
        // The owner rewrites its file: the next pod follows it, nothing was copied.
        n.write_conf("10-kindnet.conflist", &kindnet(&n, 62));
        let next = n.pod("web");
        n.call("ADD", &next, &conf).ok();
        assert_eq!(pod_range(&next), ["10.62"], "{default}");
        // DEL undoes what the record holds, whatever the file says now.
        n.write_conf("10-kindnet.conflist", &kindnet(&n, 63));
        for p in [&pod, &next] {
            assert_eq!(n.call("DEL", p, &conf).code, 0, "{default}");
        }
        n.assert_nothing_left(&next, default);
        n.assert_nothing_left(&pod, default);
    }
}

#[test]
fn a_pod_cannot_name_the_file_in_the_conf_dir_itself() {
    let (n, conf) = node("10-kindnet.conflist");
    for (name, value) in [("by-file", "10-kindnet.conflist"), ("by-auto", "auto"), ("own", "00-yh-genie.conflist")] {
        n.api.put_pod("default", name, literal(value));
        let pod = n.pod(name);
        let e = n.call("ADD", &pod, &conf).err();
        assert_eq!(e["code"], 7, "{name}: {e}");
        n.assert_failed_add_left_nothing(&pod, name);
        n.call("DEL", &pod, &conf).ok();
    }
}

#[test]
fn auto_waits_for_the_network_and_status_waits_for_its_plugins() {
    let n = NetnsNode::new();
    n.selector_conflist("1.1.0");
    let conf = n.selector_conf("1.1.0", json!({"defaultNetwork": "auto", "agentSocket": ""}));
    n.api.put_pod("default", "web", json!([{"name": "app", "image": "nginx"}]));
    let pod = n.pod("web");
    let e = n.call("STATUS", &pod, &conf).err();
    assert_eq!(e["code"], 50, "not ready before the network writes its file: {e}");
    let e = n.call("ADD", &pod, &conf).err();
    assert_eq!(e["code"], 11, "try again later: {e}");
    assert!(e["msg"].as_str().unwrap().contains("waiting for the cluster's network"), "{e}");
    n.call("DEL", &pod, &conf).ok();

    n.write_conf("10-kindnet.conflist", &kindnet(&n, 64));
    assert_eq!(n.call("STATUS", &pod, &conf).code, 0);
    // Its plugin not installed yet: not ready, naming it.
    std::fs::remove_file(n.sb.bin().join("ptp")).unwrap();
    let e = n.call("STATUS", &pod, &conf).err();
    assert_eq!(e["code"], 50, "{e}");
    assert!(e["msg"].as_str().unwrap().contains("ptp (plugins[0].type)"), "{e}");
}
