//! Several networks per pod, end to end, as root: a node netns with the plugins and the HTTPS fake
//! API server, a LAN beside it (`support::lan`), pods in netns of their own, driven through libcni
//! (cnidrive) with the selector's conflist, as containerd does. The `router` pattern of
//! docs/veth-router.md: an overlay `eth0` (ptp) and a macvlan `net1` on the LAN with `router`
//! policy-routing between them.

use crate::support::driver::{Reply, cnidrive_run};
use crate::support::lan::{LAN_GATEWAY, LAN_PEER, Lan, OVERLAY, RouterNetworks, SERVICES};
use crate::support::node::{NetnsNode, Pod, addresses_on};
use serde_json::{Value, json};
use std::path::PathBuf;
use testkit::apiserver::{from_config_map, literal};
use testkit::inspect::link_names;

use yh_genie::programs::selector::NETWORK_STATUS as STATUS;
use yh_genie::programs::selector::requests::annotation::NETWORKS;

/// A node with the LAN, the router pattern's networks and the selector's conflist.
struct Cluster {
    n: NetnsNode,
    _lan: Lan,
    conflist: PathBuf,
}

impl Cluster {
    fn new(selector_keys: Value) -> Self {
        let n = NetnsNode::new();
        let lan = Lan::beside(&n);
        n.add_ptpnet();
        n.add_macvlan_router();
        let mut conflist: Value = serde_json::from_str(&n.selector_conf("1.0.0", selector_keys)).unwrap();
        let plugin = conflist.as_object_mut().unwrap();
        plugin.remove("cniVersion");
        plugin.remove("name");
        let conflist = n.write_conf(
            "00-yh-genie.conflist",
            &json!({"cniVersion": "1.0.0", "name": "yh-genie", "plugins": [conflist]}),
        );
        Cluster { n, _lan: lan, conflist }
    }

    fn drive(&self, cmd: &str, pod: &Pod) -> Reply {
        cnidrive_run(&self.n.sb, cmd, &self.conflist, &pod.netns_path(), &pod.cid, "eth0", &pod.args)
    }

    fn must(&self, cmd: &str, pod: &Pod) -> Value {
        let reply = self.drive(cmd, pod);
        assert_eq!(reply.code, 0, "cnidrive {cmd} {}: {reply:?}", pod.name);
        if reply.stdout.trim().is_empty() { Value::Null } else { reply.json() }
    }

    /// Links, routes and rules of every table, and neighbours, of the node.
    fn node_snapshot(&self) -> Vec<String> {
        // iproute2 prints "Error: Peer netns reference is invalid." among the links while the netns
        // of some veth's peer is being torn down (other tests' pods, at the same moment): a passing
        // state of the kernel, not of this node.
        let steady = |text: String| -> String {
            text.lines()
                .filter(|l| !l.starts_with("Error: Peer netns reference is invalid"))
                .map(|l| format!("{l}\n"))
                .collect()
        };
        ["ip -o link show", "ip -4 route show table all", "ip -4 rule", "ip -4 neigh show nud permanent"]
            .iter()
            .map(|c| steady(self.n.netns.must(c)))
            .collect()
    }
}

/// IPv4 addresses (without prefix) on `dev` of the pod.
fn addresses(pod: &Pod, dev: &str) -> Vec<String> {
    addresses_on(pod, dev).into_iter().map(|a| a.split('/').next().unwrap().to_string()).collect()
}

/// `ip route get` in the pod: (dev, gateway).
fn route_get(pod: &Pod, to: &str) -> (String, Option<String>) {
    let out = pod.netns.must(&format!("ip -j route get {to}"));
    let v: Value = serde_json::from_str(&out).unwrap();
    (v[0]["dev"].as_str().unwrap().to_string(), v[0]["gateway"].as_str().map(String::from))
}

/// The routes of table 200; empty when the table does not exist.
fn table_200(pod: &Pod) -> String {
    let (_, out) = pod.netns.exec("ip route show table 200");
    out.lines()
        .filter(|l| !l.contains("does not exist") && !l.contains("Dump terminated"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn pings(pod: &Pod, ip: &str) -> bool {
    pod.netns.exec(&format!("ping -c1 -W2 {ip}")).0
}

/// The network-status annotation the pod was given, parsed.
fn network_status(n: &NetnsNode, pod: &str) -> Value {
    let annotations = &n.api.pod("default", pod).unwrap()["metadata"]["annotations"];
    let text = annotations[STATUS].as_str().unwrap_or_else(|| panic!("no {STATUS} on {pod}: {annotations}"));
    serde_json::from_str(text).unwrap()
}

/// Everything the router pattern promises a pod with `eth0` on the overlay and `net1` on the LAN,
/// checked as an operator would, then DEL and nothing left. `peer` is a pod on the overlay alone.
fn assert_the_router_pattern_then_del_leaves_nothing(c: &Cluster, pod: &Pod, peer: &Pod) {
    let n = &c.n;
    let node_before = c.node_snapshot();
    let result = c.must("add", pod);
    let eth0 = addresses(pod, "eth0");
    let net1 = addresses(pod, "net1");
    assert!(eth0.len() == 1 && eth0[0].starts_with("10.244.5."), "eth0 on the overlay: {eth0:?}");
    assert!(net1.len() == 1 && net1[0].starts_with("192.168.77."), "net1 on the LAN: {net1:?}");
    assert_eq!(
        result["ips"].as_array().unwrap().iter().map(|ip| ip["address"].as_str().unwrap()).collect::<Vec<_>>(),
        [format!("{}/24", eth0[0])],
        "the runtime gets the primary network's result, the pod IP on eth0: {result}"
    );
    let records: Vec<String> = n.records().into_iter().filter(|r| r.starts_with(&format!("{}:", pod.cid))).collect();
    assert_eq!(records, [format!("{}:eth0", pod.cid), format!("{}:net1", pod.cid)]);

    // `router`'s routing: policy rules into table 200, the overlay's routes there, the default by net1.
    let rules = pod.netns.must("ip rule");
    for want in [
        format!("from {} lookup 200", eth0[0]),
        format!("to {OVERLAY} lookup 200"),
        format!("to {SERVICES} lookup 200"),
    ] {
        assert!(rules.contains(&want), "missing rule {want}:\n{rules}");
    }
    let table = table_200(pod);
    assert!(table.contains("default via") && table.contains("dev eth0"), "table 200: {table}");
    assert_eq!(route_get(pod, "8.8.8.8"), ("net1".into(), Some(LAN_GATEWAY.into())), "the default goes by net1");
    assert_eq!(route_get(pod, LAN_PEER).0, "net1");
    assert!(pings(pod, LAN_PEER), "the LAN peer through net1");
    let peer_ip = &addresses(peer, "eth0")[0];
    assert_eq!(route_get(pod, peer_ip).0, "eth0", "the overlay by eth0");
    assert!(pings(pod, peer_ip), "the overlay peer {peer_ip} through eth0");
    assert!(pings(peer, &eth0[0]), "and back");

    // What the pod got, for people and tools.
    let status = network_status(n, &pod.name);
    assert_eq!(status.as_array().unwrap().len(), 2, "{status}");
    assert_eq!(
        (&status[0]["name"], &status[0]["interface"], &status[0]["ips"], &status[0]["default"]),
        (&json!("ptpnet"), &json!("eth0"), &json!([eth0[0]]), &json!(true))
    );
    assert_eq!((&status[1]["interface"], &status[1]["ips"]), (&json!("net1"), &json!([net1[0]])));
    assert!(status[1].get("default").is_none());
    assert!(status[1]["mac"].as_str().is_some_and(|m| m.len() == 17), "{status}");

    c.must("check", pod);
    c.must("del", pod);
    assert_eq!(link_names(&pod.netns, ""), ["lo"], "no interface left in the pod");
    assert!(!pod.netns.must("ip rule").contains("lookup 200"), "no rule left");
    assert_eq!(table_200(pod), "", "table 200 is empty");
    assert_eq!(c.node_snapshot(), node_before, "the node as before the pod");
    let left = n.leftovers_of(pod, "ptpnet");
    assert!(left.is_empty(), "left of the pod: {left:#?}");
    assert!(!n.leases().iter().any(|(_, cid)| *cid == pod.cid));
}

#[test]
fn a_configmap_list_gives_the_router_pattern_its_overlay_on_eth0_its_lan_on_net1() {
    let c = Cluster::new(json!({}));
    let n = &c.n;
    n.api.put_config_map("default", "router-pattern", json!({"networks": "ptpnet,macvlan-router@net1"}));
    n.api.put_pod("default", "web-0", from_config_map("router-pattern", "networks"));
    n.api.put_pod("default", "peer", literal("ptpnet"));
    let peer = n.pod("peer");
    c.must("add", &peer);
    assert_eq!(n.api.patches().len(), 0, "one network, no status write (networkStatus auto)");

    let pod = n.pod("web-0");
    let before = n.api.requests();
    assert_the_router_pattern_then_del_leaves_nothing(&c, &pod, &peer);
    let log = n.api.request_log();
    let add: Vec<&String> = log[before..].iter().collect();
    assert_eq!(
        add,
        [
            "GET /api/v1/namespaces/default/pods/web-0",
            "GET /api/v1/namespaces/default/configmaps/router-pattern",
            "PATCH /api/v1/namespaces/default/pods/web-0"
        ],
        "one GET per object and the status write; CHECK and DEL ask nothing"
    );
    c.must("del", &peer);
    let left = n.leftovers();
    assert!(left.is_empty(), "{left:#?}");
}

#[test]
fn a_network_attachment_definition_in_the_annotation_does_the_same() {
    let c = Cluster::new(json!({}));
    let n = &c.n;
    n.api.put_nad("default", "macvlan-router", None);
    n.api.put_config_map("default", "overlay", json!({"network": "ptpnet"}));
    n.api.put_annotated_pod(
        "default",
        "web-1",
        json!({NETWORKS: "macvlan-router@net1"}),
        from_config_map("overlay", "network"),
    );
    n.api.put_pod("default", "peer", literal("ptpnet"));
    let peer = n.pod("peer");
    c.must("add", &peer);
    let pod = n.pod("web-1");
    let before = n.api.request_log().len();
    assert_the_router_pattern_then_del_leaves_nothing(&c, &pod, &peer);
    let status = network_status(n, "web-1");
    assert_eq!(status[1]["name"], "default/macvlan-router", "a NAD's network is named by the NAD");
    // The requests of this pod's ADD are every kind of call the code makes, which the installer's
    // ClusterRole grants (offline::manifests holds that equal to API_CALLS), but DRA's: a pod
    // without resource claims asks nothing of resource.k8s.io (devices::dra's tests and the
    // cluster suite's DRA test make those calls).
    let calls: std::collections::BTreeSet<(String, String, String)> =
        n.api.request_log()[before..].iter().map(|line| rbac_of(line)).collect();
    let granted = yh_genie::platform::kube::API_CALLS
        .iter()
        .filter(|(group, _, _)| *group != "resource.k8s.io")
        .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()));
    assert_eq!(calls, granted.collect());
    c.must("del", &peer);
    assert!(n.leftovers().is_empty());
}

/// `GET /api/v1/namespaces/default/pods/web-1` as RBAC names it: ("", "pods", "get").
fn rbac_of(line: &str) -> (String, String, String) {
    let (method, path) = line.split_once(' ').unwrap();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, resource) = match parts.as_slice() {
        ["api", "v1", "namespaces", _, resource, _] => ("", *resource),
        ["apis", group, _, "namespaces", _, resource, _] => (*group, *resource),
        _ => panic!("unexpected request {line}"),
    };
    (group.to_string(), resource.to_string(), method.to_lowercase())
}

#[test]
fn an_inline_nad_configuration_runs_only_where_the_policy_allows_it() {
    // The configuration names host-local's dataDir in the test's sandbox, under the temp dir.
    let tmp = std::env::temp_dir();
    for (keys, allowed) in [
        (json!({}), false),
        (json!({"allowInlineConfig": true, "inlinePluginTypes": ["macvlan"], "inlinePathPrefixes": [tmp]}), false),
        (json!({"allowInlineConfig": true, "inlinePluginTypes": ["macvlan", "host-local"]}), false),
        (
            json!({"allowInlineConfig": true, "inlinePluginTypes": ["macvlan", "host-local"], "inlinePathPrefixes": [tmp]}),
            true,
        ),
    ] {
        let c = Cluster::new(keys.clone());
        let n = &c.n;
        let inline = n.add_macvlan("lan-inline", json!({})).to_string();
        n.api.put_nad("default", "lan-inline", Some(&inline));
        n.api.put_annotated_pod("default", "p", json!({NETWORKS: "lan-inline"}), literal("ptpnet"));
        let pod = n.pod("p");
        let reply = c.drive("add", &pod);
        if allowed {
            assert_eq!(reply.code, 0, "{keys}: {reply:?}");
            assert_eq!(addresses(&pod, "net1").len(), 1, "{keys}");
            c.must("del", &pod);
        } else {
            assert_ne!(reply.code, 0, "{keys}: {reply:?}");
            assert!(
                reply.stderr.contains("NetworkAttachmentDefinition default/lan-inline is refused"),
                "{keys}: {}",
                reply.stderr
            );
            n.assert_failed_add_left_nothing(&pod, "refused");
            c.must("del", &pod);
        }
        n.assert_nothing_left(&pod, &keys.to_string());
    }
}

/// Three bridge networks, the third failing after its bridge plugin made an interface and took an
/// address: what the first two made is undone, and the error says which network and interface.
#[test]
fn a_failure_in_the_third_network_leaves_nothing_of_the_first_two() {
    let n = NetnsNode::new();
    let bridge = |name: &str, subnet: u8, extra: Value| {
        let mut plugins = vec![json!({"type": "bridge", "bridge": testkit::process::unique("yb"), "isGateway": true,
            "ipam": {"type": "host-local", "subnet": format!("10.78.{subnet}.0/24"), "dataDir": n.ipam_dir()}})];
        if !extra.is_null() {
            plugins.push(extra);
        }
        n.write_conf(
            &format!("{name}/{name}.conflist"),
            &json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins}),
        );
    };
    bridge("first", 1, Value::Null);
    bridge("second", 2, Value::Null);
    bridge("third", 3, json!({"type": "tuning", "sysctl": {"kernel.hostname": "x"}}));
    n.api.put_pod("default", "p", literal("first,second,third"));
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("p");
    let err = n.call("ADD", &pod, &conf).err();
    let msg = err["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("network third on interface net2 (3 of 3): network third: plugin 2 of 2 (tuning) ADD"),
        "{err}"
    );
    n.assert_failed_add_left_nothing(&pod, "third of three failed");
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    n.assert_nothing_left(&pod, "DEL after the failed ADD");
}
