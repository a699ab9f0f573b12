//! `veth` and `router` against a real kernel, driven by libcni (cnidrive) as containerd drives them.
//!
//! The topology: a netns plays the node, with a "parent" NIC `par0` (one end of a veth pair whose
//! other end sits in a third netns, the wire) addressed 192.168.77.1/24; pods get a macvlan on
//! `par0` from the reference macvlan plugin, so they cannot reach the node until `veth` or `router`
//! gives them a way. Everything is checked with `ip -j` as an operator would.

use crate::support::driver::{Call, PLUGINS, Reply, cni, cnidrive_run};
use crate::support::versions;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use testkit::netns::Netns;
use testkit::require_root;
use testkit::sandbox::Sandbox;
use yh_genie::platform::cni::CniVersion;
use yh_genie::programs::plugins::via_node::plan::host_veth_name;

const NODE_IP: &str = "192.168.77.1";
const SERVICE_IP: &str = "10.96.0.10";
const OVERLAY_IP: &str = "10.244.3.4";

/// The node, its wire, and a sandbox whose plugins run on the node.
struct VethRouterNode {
    node: Netns,
    wire: Netns,
    sb: Sandbox,
}

impl VethRouterNode {
    fn new() -> Self {
        require_root();
        let node = Netns::new("vrn");
        let wire = Netns::new("vrw");
        node.must(&format!(
            "ip link add par0 type veth peer name wire0 && ip link set wire0 netns {} && \
             ip link set par0 addrgenmode none && ip addr add {NODE_IP}/24 dev par0 && ip link set par0 up",
            wire.name
        ));
        wire.must("ip link set wire0 up");
        // The carrier comes up asynchronously; snapshots taken before it would differ from later ones.
        let up = (0..200).any(|_| {
            let up = node.must("cat /sys/class/net/par0/operstate").trim() == "up";
            if !up {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            up
        });
        assert!(up, "par0 never came up");
        let sb = Sandbox::on_node(&node, &PLUGINS);
        VethRouterNode { node, wire, sb }
    }

    /// (The parents make no IPv6 link-local address: one appearing late would look like a change.)
    /// Everything DEL must leave as ADD found it: links, routes and rules of every table,
    /// neighbours, and the node-wide rp_filter sysctls.
    fn snapshot(&self) -> Vec<Value> {
        let mut out: Vec<Value> = [
            "ip -j link show",
            "ip -j -4 route show table all",
            "ip -j -6 route show table all",
            "ip -j -4 rule",
            "ip -j -6 rule",
            "ip -j -4 neigh show",
        ]
        .iter()
        .map(|c| serde_json::from_str(&self.node.must(c)).unwrap())
        .collect();
        out.push(self.node.must("sysctl -n net.ipv4.conf.all.rp_filter net.ipv4.conf.default.rp_filter").into());
        out
    }

    /// Write a conflist of `plugins` (1.0.0, the newest the reference plugins speak).
    fn conflist(&self, name: &str, plugins: Value) -> PathBuf {
        self.conflist_at(CniVersion::V1_0_0, name, plugins)
    }

    /// Write a conflist of `plugins` at `version`.
    fn conflist_at(&self, version: CniVersion, name: &str, plugins: Value) -> PathBuf {
        let list = json!({"cniVersion": version.as_str(), "name": name, "plugins": plugins});
        self.sb.write(&format!("net/{name}.conflist"), &list.to_string())
    }

    fn dir(&self, rel: &str) -> String {
        self.sb.path().join(rel).display().to_string()
    }

    /// A macvlan on `parent` with one address from `subnet` (host-local from .10 on, state in the
    /// sandbox), and a default route only if asked (a second NIC's would collide with the first's).
    fn macvlan(&self, parent: &str, subnet: &str, gateway: &str, default_route: bool) -> Value {
        let routes = if default_route { json!([{"dst": "0.0.0.0/0"}]) } else { json!([]) };
        let start = subnet.replace(".0/24", ".10");
        json!({"type": "macvlan", "master": parent, "mode": "bridge",
               "ipam": {"type": "host-local", "dataDir": self.dir("ipam"),
                        "ranges": [[{"subnet": subnet, "gateway": gateway, "rangeStart": start}]], "routes": routes}})
    }

    /// A `veth` or `router` entry with the test's subnets, state and log in the sandbox, and `extra` keys.
    fn hijack(&self, plugin: &str, extra: Value) -> Value {
        let mut v = json!({"type": plugin,
            "overlay_hijack_subnet": ["10.244.0.0/16"], "service_hijack_subnet": ["10.96.0.0/12"],
            "data_dir": self.dir(plugin), "log_options": {"log_file": self.dir(&format!("{plugin}.log"))}});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        v
    }

    fn drive(&self, cmd: &str, list: &Path, pod: &Netns, cid: &str, ifname: &str) -> crate::support::driver::Reply {
        cnidrive_run(&self.sb, cmd, list, &pod.path().display().to_string(), cid, ifname, "")
    }

    fn must_drive(&self, cmd: &str, list: &Path, pod: &Netns, cid: &str, ifname: &str) -> Value {
        let r = self.drive(cmd, list, pod, cid, ifname);
        assert_eq!(r.code, 0, "cnidrive {cmd} {}: {r:?}", list.display());
        if r.stdout.trim().is_empty() { Value::Null } else { serde_json::from_str(&r.stdout).unwrap() }
    }

    /// The record files under a plugin's data_dir.
    fn records(&self, plugin: &str) -> Vec<String> {
        match std::fs::read_dir(self.sb.path().join(plugin)) {
            Ok(d) => d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => vec![],
        }
    }
}

fn ip_json(ns: &Netns, cmd: &str) -> Value {
    serde_json::from_str(&ns.must(cmd)).unwrap()
}

/// `ip route get` in `ns`: (dev, gateway).
fn route_get(ns: &Netns, args: &str) -> (String, Option<String>) {
    let v = ip_json(ns, &format!("ip -j route get {args}"));
    (v[0]["dev"].as_str().unwrap().to_string(), v[0]["gateway"].as_str().map(String::from))
}

/// `ip route show table <t>`; empty when the table does not exist (never used in this netns).
fn route_table(ns: &Netns, t: u32) -> String {
    ns.exec(&format!("ip route show table {t}"))
        .1
        .lines()
        .filter(|l| !l.contains("does not exist") && !l.contains("Dump terminated"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn pings(ns: &Netns, ip: &str) -> bool {
    ns.exec(&format!("ping -c1 -W1 {ip}")).0
}

fn mac_of(ns: &Netns, dev: &str) -> String {
    ip_json(ns, &format!("ip -j link show {dev}"))[0]["address"].as_str().unwrap().to_string()
}

/// The error a plugin returned through cnidrive (a plugin's own error: exit status 1).
fn cnidrive_error(r: &crate::support::driver::Reply) -> Value {
    assert_eq!(r.code, 1, "expected a plugin's error: {r:?}");
    r.err()
}

#[test]
fn veth_connects_a_macvlan_pod_to_its_node_until_del() {
    let n = VethRouterNode::new();
    let pod = Netns::new("vrp");
    let before = n.snapshot();

    // Without veth, the macvlan pod cannot reach its node: that is the problem `veth` solves.
    let plain = n.conflist("plain", json!([n.macvlan("par0", "192.168.77.0/24", "192.168.77.254", true)]));
    n.must_drive("add", &plain, &pod, "plain1", "eth0");
    assert!(!pings(&pod, NODE_IP), "a macvlan child must not reach its parent");
    n.must_drive("del", &plain, &pod, "plain1", "eth0");

    let list = n.conflist(
        "mv",
        json!([n.macvlan("par0", "192.168.77.0/24", "192.168.77.254", true), n.hijack("veth", json!({}))]),
    );
    let cid = "c0ffee0123456789abcdef";
    let result = n.must_drive("add", &list, &pod, cid, "eth0");
    let host_veth = result["interfaces"].as_array().unwrap().iter().find(|i| i.get("sandbox").is_none()).unwrap();
    let host_veth = host_veth["name"].as_str().unwrap().to_string();
    assert!(host_veth.starts_with("veth") && host_veth.len() == 15, "{result}");
    assert!(result["interfaces"].as_array().unwrap().iter().any(|i| i["name"] == "veth0" && i["sandbox"].is_string()));
    let pod_ip = result["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().to_string();

    assert!(pings(&pod, NODE_IP), "after veth the pod reaches its node");
    assert!(n.node.exec(&format!("ping -c1 -W1 {pod_ip}")).0, "and the node reaches the pod");
    assert_eq!(route_get(&pod, SERVICE_IP), ("veth0".into(), Some(NODE_IP.into())));
    assert_eq!(route_get(&pod, OVERLAY_IP), ("veth0".into(), Some(NODE_IP.into())));
    assert_eq!(route_get(&pod, "8.8.8.8").0, "eth0", "the default route stays with the macvlan NIC");

    // Neighbours both ways, permanent, naming the other end's MAC.
    let pod_neigh = ip_json(&pod, &format!("ip -j neigh show {NODE_IP} dev veth0"));
    assert_eq!(pod_neigh[0]["lladdr"], mac_of(&n.node, &host_veth));
    assert_eq!(pod_neigh[0]["state"], json!(["PERMANENT"]));
    let node_neigh = ip_json(&n.node, &format!("ip -j neigh show {pod_ip} dev {host_veth}"));
    assert_eq!(node_neigh[0]["lladdr"], mac_of(&pod, "veth0"));
    assert_eq!(node_neigh[0]["state"], json!(["PERMANENT"]));
    let node_route = ip_json(&n.node, &format!("ip -j route show {pod_ip}/32"));
    assert_eq!(
        (node_route[0]["dev"].as_str(), node_route[0]["scope"].as_str()),
        (Some(host_veth.as_str()), Some("link"))
    );

    // rp_filter: on the interfaces concerned only; nothing node-wide.
    assert_eq!(n.node.must(&format!("sysctl -n net.ipv4.conf.{host_veth}.rp_filter")).trim(), "2");
    assert_eq!(pod.must("sysctl -n net.ipv4.conf.veth0.rp_filter").trim(), "2");
    assert_eq!(n.snapshot()[6], before[6]);

    // CHECK verifies what ADD made, and notices when it is gone.
    n.must_drive("check", &list, &pod, cid, "eth0");
    pod.must("ip route del 10.96.0.0/12");
    let r = n.drive("check", &list, &pod, cid, "eth0");
    let e = cnidrive_error(&r);
    assert!(e["msg"].as_str().unwrap().contains("10.96.0.0/12"), "{e}");

    n.must_drive("del", &list, &pod, cid, "eth0");
    assert_eq!(n.snapshot(), before, "DEL leaves the node exactly as it was");
    assert!(n.records("veth").is_empty());
    assert!(!pod.exec("ip link show veth0").0);
    // DEL again, and DEL of something never added, succeed.
    n.must_drive("del", &list, &pod, cid, "eth0");
    n.must_drive("del", &list, &pod, "never-added", "eth0");
}

#[test]
fn veth_on_a_second_nic_migrates_its_routes_by_migrate_route() {
    let n = VethRouterNode::new();
    n.node.must(&format!(
        "ip link add par1 type veth peer name wire1 && ip link set wire1 netns {} && \
         ip link set par1 addrgenmode none && ip addr add 192.168.88.1/24 dev par1 && ip link set par1 up",
        n.wire.name
    ));
    n.wire.must("ip link set wire1 up");
    // (mode, first NIC, second NIC, whether the second migrates)
    let cases = [
        (-1, "eth0", "net1", true),
        (0, "eth0", "net1", false),
        (1, "eth0", "net1", true),
        (-1, "net1", "eth0", false),
        (1, "net1", "eth0", true),
    ];
    for (mode, first, second, migrates) in cases {
        let pod = Netns::new("vrp");
        let before = n.snapshot();
        let cid = format!("mig{}{first}", mode + 1);
        let veth = n.hijack("veth", json!({"migrate_route": mode}));
        let a = n.conflist(
            &format!("a{cid}"),
            json!([n.macvlan("par0", "192.168.77.0/24", "192.168.77.254", true), veth.clone()]),
        );
        let b = n
            .conflist(&format!("b{cid}"), json!([n.macvlan("par1", "192.168.88.0/24", "192.168.88.254", false), veth]));
        n.must_drive("add", &a, &pod, &cid, first);
        let res = n.must_drive("add", &b, &pod, &cid, second);
        assert!(
            !res["interfaces"].as_array().unwrap().iter().any(|i| i["name"] == "veth0"),
            "the pair is the first NIC's"
        );
        let second_ip = res["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().to_string();
        let rules = pod.must("ip rule");
        let table = route_table(&pod, 200);
        let case = format!("migrate_route {mode}, {first} then {second}: rules\n{rules}\ntable 200\n{table}");
        assert_eq!(rules.contains(&format!("from {second_ip} lookup 200")), migrates, "{case}");
        if migrates {
            assert!(table.contains(&format!("default via 192.168.88.254 dev {second}")), "{case}");
            assert!(table.contains(&format!("192.168.88.0/24 dev {second}")), "{case}");
            // The next hop is the node's address toward this NIC's address.
            assert!(table.contains("10.96.0.0/12 via 192.168.88.1 dev veth0"), "{case}");
            assert_eq!(route_get(&pod, &format!("8.8.8.8 from {second_ip}")).0, second, "{case}");
        } else {
            assert!(table.trim().is_empty(), "{case}");
        }
        assert_eq!(route_get(&pod, "8.8.8.8").0, first, "{case}: the first NIC keeps the default route");
        // The node reaches the second NIC's address through the pair too.
        assert!(n.node.exec(&format!("ping -c1 -W1 {second_ip}")).0, "{case}");

        // Removing the second NIC undoes only its part: the first still reaches the node.
        n.must_drive("del", &b, &pod, &cid, second);
        assert!(route_table(&pod, 200).trim().is_empty(), "{case}");
        assert!(!pod.must("ip rule").contains("lookup 200"), "{case}");
        assert!(pings(&pod, NODE_IP), "{case}");
        n.must_drive("del", &a, &pod, &cid, first);
        assert_eq!(n.snapshot(), before, "{case}");
    }
}

#[test]
fn bad_configuration_is_refused_yet_del_cleans_up() {
    let n = VethRouterNode::new();
    let pod = Netns::new("vrp");
    let before = n.snapshot();
    for (bad, want) in [
        (
            json!({"service_hijack_subnet": ["10.96.0.1/12"]}),
            "service_hijack_subnet[0]: \"10.96.0.1/12\" has host bits set",
        ),
        (json!({"overlay_hijack_subnet": []}), "overlay_hijack_subnet: at least one subnet is required"),
        (json!({"migrate_route": 5}), "migrate_route: 5 is not one of -1"),
        (json!({"rp_filter": 7}), "rp_filter: 7 is not one of 0"),
        (json!({"route_table": 255}), "route_table: 255"),
    ] {
        let list = n.conflist(
            "bad",
            json!([n.macvlan("par0", "192.168.77.0/24", "192.168.77.254", true), n.hijack("veth", bad)]),
        );
        let r = n.drive("add", &list, &pod, "bad1", "eth0");
        let e = cnidrive_error(&r);
        assert_eq!(e["code"], 7, "{e}");
        assert!(e["msg"].as_str().unwrap().contains(want), "{e}");
        assert!(!pod.exec("ip link show veth0").0, "nothing half-made in the pod");
        assert!(n.records("veth").is_empty());
        // The runtime's DEL after the failed ADD succeeds although the configuration is still bad.
        n.must_drive("del", &list, &pod, "bad1", "eth0");
        assert_eq!(n.snapshot(), before);
    }
}

/// At every version of the suite's table the reference macvlan speaks: veth with `skip_call` hands
/// macvlan's result on in that version's shape and makes nothing.
#[test]
fn skip_call_only_passes_the_result_on() {
    let n = VethRouterNode::new();
    let pod = Netns::new("vrp");
    let before = n.snapshot();
    for version in versions::with_reference() {
        let list = n.conflist_at(
            version,
            "skip",
            json!([
                n.macvlan("par0", "192.168.77.0/24", "192.168.77.254", true),
                n.hijack("veth", json!({"skip_call": true}))
            ]),
        );
        let cid = format!("skip-{version}");
        let res = n.must_drive("add", &list, &pod, &cid, "eth0");
        assert_eq!(res["cniVersion"], version.as_str(), "{res}");
        if version.has_ip4_ip6_result() {
            assert!(res["ip4"]["ip"].as_str().is_some_and(|ip| ip.starts_with("192.168.77.")), "{res}");
        } else {
            assert_eq!(res["interfaces"].as_array().unwrap().len(), 1, "only macvlan's interface: {res}");
        }
        assert!(!pod.exec("ip link show veth0").0, "at {version}");
        assert!(!pings(&pod, NODE_IP), "at {version}");
        if version.has_check() {
            n.must_drive("check", &list, &pod, &cid, "eth0");
        }
        n.must_drive("del", &list, &pod, &cid, "eth0");
        assert_eq!(n.snapshot(), before, "at {version}");
    }
}

#[test]
fn router_sends_the_cluster_by_the_overlay_the_rest_by_the_new_nic() {
    let n = VethRouterNode::new();
    let pod = Netns::new("vrp");
    let before = n.snapshot();
    let overlay = n.conflist(
        "overlay",
        json!([{"type": "ptp", "ipam": {"type": "host-local", "dataDir": n.dir("ipam"),
                "ranges": [[{"subnet": "10.244.5.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]),
    );
    let second = n.conflist(
        "second",
        json!([n.macvlan("par0", "192.168.77.0/24", "192.168.77.254", false), n.hijack("router", json!({}))]),
    );
    let cid = "r0uter";
    let eth0 = n.must_drive("add", &overlay, &pod, cid, "eth0");
    let eth0_ip = eth0["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().to_string();
    let gw = eth0["ips"][0]["gateway"].as_str().unwrap().to_string();
    let res = n.must_drive("add", &second, &pod, cid, "net1");
    assert_eq!(res["interfaces"].as_array().unwrap().len(), 1, "router adds no interface: {res}");
    let net1_ip = res["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().to_string();

    assert_eq!(route_get(&pod, "8.8.8.8"), ("net1".into(), Some("192.168.77.254".into())), "default by the new NIC");
    for cluster in [SERVICE_IP, OVERLAY_IP] {
        assert_eq!(route_get(&pod, cluster), ("eth0".into(), Some(gw.clone())), "{cluster} by the overlay");
    }
    assert_eq!(
        route_get(&pod, &format!("8.8.8.8 from {eth0_ip}")),
        ("eth0".into(), Some(gw.clone())),
        "replies from eth0's address"
    );
    let rules = pod.must("ip rule");
    for want in [
        format!("from {eth0_ip} lookup 200"),
        "to 10.244.0.0/16 lookup 200".into(),
        "to 10.96.0.0/12 lookup 200".into(),
    ] {
        assert!(rules.contains(&want), "missing {want}:\n{rules}");
    }
    assert!(route_table(&pod, 200).contains(&format!("default via {gw} dev eth0")));
    assert!(!pod.must("ip route show default").contains("eth0"), "the overlay's default left main");

    // The pod still reaches its node (by the overlay), and the node the new NIC's address.
    assert!(pings(&pod, NODE_IP));
    assert!(n.node.exec(&format!("ping -c1 -W1 {net1_ip}")).0);
    let host_route = ip_json(&n.node, &format!("ip -j route show {net1_ip}/32"));
    let peer = host_route[0]["dev"].as_str().unwrap().to_string();
    assert!(peer.starts_with("veth"), "by the overlay's host end: {host_route}");
    let neigh = ip_json(&n.node, &format!("ip -j neigh show {net1_ip} dev {peer}"));
    assert_eq!(
        (neigh[0]["lladdr"].as_str(), &neigh[0]["state"]),
        (Some(mac_of(&pod, "eth0").as_str()), &json!(["PERMANENT"]))
    );

    n.must_drive("check", &second, &pod, cid, "net1");
    pod.must(&format!("ip rule del from {eth0_ip} lookup 200"));
    assert!(cnidrive_error(&n.drive("check", &second, &pod, cid, "net1"))["msg"].as_str().unwrap().contains(&eth0_ip));
    pod.must(&format!("ip rule add from {eth0_ip} lookup 200 pref 1000"));

    // DEL of the second NIC gives the overlay its default back and leaves no rule or table behind.
    n.must_drive("del", &second, &pod, cid, "net1");
    assert_eq!(route_get(&pod, "8.8.8.8"), ("eth0".into(), Some(gw.clone())));
    assert!(!pod.must("ip rule").contains("lookup 200"));
    assert!(route_table(&pod, 200).trim().is_empty());
    assert!(n.records("router").is_empty());
    n.must_drive("del", &overlay, &pod, cid, "eth0");
    assert_eq!(n.snapshot(), before);
}

#[test]
fn router_refuses_an_overlay_or_missing_nic() {
    let n = VethRouterNode::new();
    let pod = Netns::new("vrp");
    let list = n.conflist(
        "self",
        json!([n.macvlan("par0", "192.168.77.0/24", "192.168.77.254", true), n.hijack("router", json!({}))]),
    );
    let e = cnidrive_error(&n.drive("add", &list, &pod, "self1", "eth0"));
    assert_eq!(e["code"], 7);
    assert!(e["msg"].as_str().unwrap().contains("overlay_interface"), "{e}");
    n.must_drive("del", &list, &pod, "self1", "eth0");
    let e = cnidrive_error(&n.drive("add", &list, &pod, "self2", "net1"));
    assert_eq!(e["code"], 7);
    assert!(e["msg"].as_str().unwrap().contains("no interface eth0"), "{e}");
    n.must_drive("del", &list, &pod, "self2", "net1");
    assert!(n.records("router").is_empty());
}

/// A macvlan pod (container `rep1`) and the stdin of `veth` chained after it, as the suite's
/// driver hands it (`prevResult` the macvlan's result).
fn veth_after_a_macvlan_pod(n: &VethRouterNode, pod: &Netns) -> String {
    let plain = n.conflist("plain", json!([n.macvlan("par0", "192.168.77.0/24", "192.168.77.254", true)]));
    let prev = n.must_drive("add", &plain, pod, "rep1", "eth0");
    let mut conf = n.hijack("veth", json!({}));
    conf["cniVersion"] = "1.0.0".into();
    conf["name"] = "rep".into();
    conf["prevResult"] = prev;
    conf.to_string()
}

/// `veth`'s `command` for `container_id` in `pod`, with `config` on stdin.
fn veth_call(n: &VethRouterNode, command: &str, container_id: &str, pod: &Netns, config: &str) -> Reply {
    let netns = pod.path().display().to_string();
    cni(&n.sb, &Call { plugin: "veth", command, container_id, netns: &netns, ifname: "eth0", args: "", config })
}

/// The host end's name is taken: refused with code 106, nothing made, nothing recorded.
#[test]
fn a_taken_host_veth_name_fails_with_nothing_made() {
    let n = VethRouterNode::new();
    let pod = Netns::new("vrp");
    let config = veth_after_a_macvlan_pod(&n, &pod);
    let before = n.snapshot();
    let taken = host_veth_name("rep2");
    n.node.must(&format!("ip link add {taken} type veth peer name other0"));
    let e = veth_call(&n, "ADD", "rep2", &pod, &config).err();
    assert_eq!(e["code"], 106, "{e}");
    assert!(!pod.exec("ip link show veth0").0);
    assert!(n.records("veth").is_empty());
    n.node.must(&format!("ip link del {taken}"));
    assert_eq!(n.snapshot(), before);
}

/// ADD twice without DEL: the second replaces the first, and one DEL undoes it all.
#[test]
fn a_repeated_add_replaces_the_first() {
    let n = VethRouterNode::new();
    let pod = Netns::new("vrp");
    let config = veth_after_a_macvlan_pod(&n, &pod);
    let before = n.snapshot();
    let first = veth_call(&n, "ADD", "rep1", &pod, &config).ok();
    let second = veth_call(&n, "ADD", "rep1", &pod, &config).ok();
    assert_eq!(first["interfaces"][1]["name"], second["interfaces"][1]["name"]);
    assert!(pings(&pod, NODE_IP));
    veth_call(&n, "CHECK", "rep1", &pod, &config).ok();
    veth_call(&n, "DEL", "rep1", &pod, &config).ok();
    assert_eq!(n.snapshot(), before);
    assert!(!pod.exec("ip link show veth0").0);
}

#[test]
fn veth_routes_both_families_of_a_dual_stack_pod() {
    let n = VethRouterNode::new();
    n.node.must("ip addr add fd00:77::1/64 dev par0 nodad");
    let pod = Netns::new("vrp");
    let before = n.snapshot();
    let mut mv = n.macvlan("par0", "192.168.77.0/24", "192.168.77.254", true);
    mv["ipam"]["ranges"].as_array_mut().unwrap().push(json!([{"subnet": "fd00:77::/64", "rangeStart": "fd00:77::10"}]));
    let list = n.conflist(
        "dual",
        json!([mv, n.hijack("veth", json!({"service_hijack_subnet": ["10.96.0.0/12", "fd00:96::/112"]}))]),
    );
    let res = n.must_drive("add", &list, &pod, "dual1", "eth0");
    let host_veth = res["interfaces"][1]["name"].as_str().unwrap().to_string();
    let pod_v6 = res["ips"][1]["address"].as_str().unwrap().split('/').next().unwrap().to_string();

    assert_eq!(route_get(&pod, "fd00:96::10"), ("veth0".into(), Some("fd00:77::1".into())));
    assert_eq!(route_get(&pod, SERVICE_IP), ("veth0".into(), Some(NODE_IP.into())));
    assert_eq!(pod.must("sysctl -n net.ipv6.conf.veth0.disable_ipv6").trim(), "0");
    assert_eq!(n.node.must(&format!("sysctl -n net.ipv6.conf.{host_veth}.disable_ipv6")).trim(), "0");
    let neigh = ip_json(&pod, "ip -j -6 neigh show fd00:77::1 dev veth0");
    assert_eq!(
        (neigh[0]["lladdr"].as_str(), &neigh[0]["state"]),
        (Some(mac_of(&n.node, &host_veth).as_str()), &json!(["PERMANENT"]))
    );
    let neigh = ip_json(&n.node, &format!("ip -j -6 neigh show {pod_v6} dev {host_veth}"));
    assert_eq!(neigh[0]["lladdr"].as_str(), Some(mac_of(&pod, "veth0").as_str()));
    assert_eq!(
        ip_json(&n.node, &format!("ip -j -6 route show {pod_v6}/128"))[0]["dev"].as_str(),
        Some(host_veth.as_str())
    );
    n.must_drive("check", &list, &pod, "dual1", "eth0");
    n.must_drive("del", &list, &pod, "dual1", "eth0");
    assert_eq!(n.snapshot(), before);
}

#[test]
fn del_without_a_record_forgets_a_record_write_that_was_interrupted() {
    let n = VethRouterNode::new();
    let pod = Netns::new("vrp");
    let list = n.conflist(
        "net",
        json!([n.macvlan("par0", "192.168.77.0/24", "192.168.77.254", true), n.hijack("veth", json!({}))]),
    );
    // What a record write leaves when its process is killed before the rename: a temp file of a
    // process that is gone.
    let mut writer = std::process::Command::new("true").spawn().unwrap();
    writer.wait().unwrap();
    std::fs::create_dir_all(n.dir("veth")).unwrap();
    std::fs::write(format!("{}/.c1-eth0.json.tmp-{}-0123456789ab", n.dir("veth"), writer.id()), "{\"half\":").unwrap();
    n.must_drive("del", &list, &pod, "c1", "eth0");
    assert!(n.records("veth").is_empty(), "{:?}", n.records("veth"));
}
