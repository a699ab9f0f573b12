//! `yh-bridge` against the reference `bridge` plugin (Debian's containernetworking-plugins), as a
//! runtime drives them: each configuration is run through both plugins, each in its own throwaway
//! "node" netns with its own pod netns, and what an operator would inspect (`ip -j`, sysctls,
//! `iptables-save`) is compared after normalising what is random (MACs, veth names, link-local
//! addresses). Then CHECK, DEL and every documented failure are exercised on yh-bridge alone.
//!
//! One known, deliberate difference is normalised away: the reference creates veths with
//! `txqueuelen 0` (Go's zero value); yh-bridge leaves the kernel's default.

use crate::support::driver::{Call, PLUGINS, Reply, cni, cnidrive_run};
use crate::support::versions;
use serde_json::{Value, json};
use std::net::IpAddr;
use std::path::PathBuf;
use testkit::inspect::link_names;
use testkit::netns::Netns;
use testkit::process::unique;
use testkit::require_root;
use testkit::sandbox::Sandbox;

const OURS: &str = "yh-bridge";
const REFERENCE: &str = "bridge";

/// A node netns with a sandbox whose plugins run inside it.
struct BridgeNode {
    ns: Netns,
    sb: Sandbox,
}

impl BridgeNode {
    fn new() -> Self {
        let ns = Netns::new("brn");
        let sb = Sandbox::on_node(&ns, &PLUGINS);
        BridgeNode { ns, sb }
    }

    fn ipam_dir(&self) -> PathBuf {
        self.sb.path().join("ipam")
    }

    /// A plugin's stdin: network `name`, host-local in the sandbox on 10.66.0.0/24, then `extra`
    /// merged in (objects merged key by key, `null` removes a key).
    fn conf(&self, plugin: &str, name: &str, extra: &Value) -> Value {
        let mut c = json!({
            "cniVersion": "1.0.0", "name": name, "type": plugin,
            "ipam": {"type": "host-local", "dataDir": self.ipam_dir(), "ranges": [[{"subnet": "10.66.0.0/24"}]]}
        });
        merge(&mut c, extra);
        c
    }

    /// The same plugin configuration as a one-plugin conflist file, for cnidrive.
    fn conflist(&self, conf: &Value) -> PathBuf {
        let mut plugin = conf.as_object().unwrap().clone();
        let name = plugin.remove("name").unwrap();
        let version = plugin.remove("cniVersion").unwrap();
        let list = json!({"cniVersion": version, "name": name, "plugins": [plugin]});
        self.sb.write(&format!("net/{}.conflist", unique("l")), &list.to_string())
    }

    /// Addresses host-local holds for network `name`.
    fn leases(&self, name: &str) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(self.ipam_dir().join(name)) else { return Vec::new() };
        dir.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|f| f.parse::<IpAddr>().is_ok())
            .collect()
    }

    /// The node's NAT tables, both families, without iptables-save's timestamp comments.
    fn nat(&self) -> String {
        let dump = self.ns.must("iptables-save -t nat; ip6tables-save -t nat");
        dump.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n")
    }
}

fn merge(base: &mut Value, extra: &Value) {
    let (Value::Object(b), Value::Object(e)) = (base, extra) else { return };
    for (k, v) in e {
        match (b.get_mut(k), v) {
            (_, Value::Null) => {
                b.remove(k);
            }
            (Some(existing @ Value::Object(_)), Value::Object(_)) => merge(existing, v),
            _ => {
                b.insert(k.clone(), v.clone());
            }
        }
    }
}

fn json_of(ns: &Netns, cmd: &str) -> Value {
    serde_json::from_str(&ns.must(cmd)).unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

fn sysctl(ns: &Netns, key: &str) -> String {
    ns.exec(&format!("cat /proc/sys/{key}")).1.trim().to_string()
}

/// How a test drives the plugin: libcni (as containerd does) or the bare CNI protocol.
#[derive(Clone, Copy, Debug)]
enum Via {
    Cnidrive,
    Driver,
}

const IFNAME: &str = "eth0";

fn driver(node: &BridgeNode, command: &str, cid: &str, netns: &str, conf: &Value, args: &str) -> Reply {
    let plugin = conf["type"].as_str().unwrap().to_string();
    cni(
        &node.sb,
        &Call { plugin: &plugin, command, container_id: cid, netns, ifname: IFNAME, args, config: &conf.to_string() },
    )
}

fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = prev.clone();
    c
}

/// ADD, then CHECK if `check`, through `via`; returns the ADD result.
fn add_and_check(node: &BridgeNode, via: Via, cid: &str, pod: &Netns, conf: &Value, check: bool) -> Value {
    let netns = pod.path().display().to_string();
    match via {
        Via::Cnidrive => {
            let list = node.conflist(conf);
            let result = cnidrive_run(&node.sb, "add", &list, &netns, cid, IFNAME, "").ok();
            if check {
                cnidrive_run(&node.sb, "check", &list, &netns, cid, IFNAME, "").ok();
            }
            result
        }
        Via::Driver => {
            let result = driver(node, "ADD", cid, &netns, conf, "").ok();
            if check {
                driver(node, "CHECK", cid, &netns, &with_prev(conf, &result), "").ok();
            }
            result
        }
    }
}

fn del(node: &BridgeNode, via: Via, cid: &str, pod: &Netns, conf: &Value, prev: &Value) {
    let netns = pod.path().display().to_string();
    match via {
        Via::Cnidrive => cnidrive_run(&node.sb, "del", &node.conflist(conf), &netns, cid, IFNAME, "").ok(),
        Via::Driver => driver(node, "DEL", cid, &netns, &with_prev(conf, prev), "").ok(),
    };
}

/// The ADD result without what is random: MACs, the host veth's name, the sandbox path.
fn normal_result(result: &Value) -> Value {
    let mut r = result.clone();
    for i in r["interfaces"].as_array_mut().unwrap() {
        let i = i.as_object_mut().unwrap();
        assert!(i.remove("mac").is_some(), "every interface has a MAC");
        if i["name"].as_str().unwrap().starts_with("veth") {
            i.insert("name".into(), "veth*".into());
        }
        if i.contains_key("sandbox") {
            i.insert("sandbox".into(), "POD".into());
        }
    }
    r
}

/// A link as `ip -j -d link` shows it, minus what is random or per-run.
fn link_view(l: &Value) -> Value {
    json!({
        "ifname": l["ifname"], "flags": l["flags"], "mtu": l["mtu"], "operstate": l["operstate"],
        "kind": l["linkinfo"]["info_kind"], "master": l["master"], "promiscuity": l["promiscuity"],
        "hairpin": l["linkinfo"]["info_slave_data"]["hairpin"],
    })
}

/// Global addresses of one `ip -j addr` entry (link-local ones derive from random MACs).
fn global_addrs(entry: &Value) -> Vec<Value> {
    entry["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["scope"] != "link")
        .map(|a| json!({"family": a["family"], "local": a["local"], "prefixlen": a["prefixlen"], "broadcast": a["broadcast"]}))
        .collect()
}

/// Routes of every table, without the per-link-local-address host routes.
fn routes(ns: &Netns, family: &str) -> Value {
    let all = json_of(ns, &format!("ip -j {family} route show table all"));
    let keep: Vec<Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !(r["dst"].as_str().unwrap_or("").starts_with("fe80::") && r["dst"] != "fe80::/64"))
        .cloned()
        .collect();
    Value::Array(keep)
}

/// What the pod sees: its links, global addresses, routes of both families, and the sysctls set on its interface.
fn pod_view(pod: &Netns) -> Value {
    wait_for_carrier(pod);
    let links: Vec<Value> = json_of(pod, "ip -j -d link show").as_array().unwrap().iter().map(link_view).collect();
    let addrs: Vec<Value> = json_of(pod, "ip -j addr show")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| json!({"ifname": e["ifname"], "addrs": global_addrs(e)}))
        .collect();
    json!({
        "links": links, "addrs": addrs, "routes4": routes(pod, "-4"), "routes6": routes(pod, "-6"),
        "accept_dad": sysctl(pod, "net/ipv6/conf/eth0/accept_dad"),
        "arp_notify": sysctl(pod, "net/ipv4/conf/eth0/arp_notify"),
        "disable_ipv6": sysctl(pod, "net/ipv6/conf/eth0/disable_ipv6"),
    })
}

/// The kernel applies a link's carrier to its operational state in the background (linkwatch, up
/// to a second later): wait (boundedly) until the pod's eth0 shows the carrier both plugins gave it,
/// so that the views compare the plugins' doing, not the kernel's pace.
fn wait_for_carrier(pod: &Netns) {
    for _ in 0..60 {
        let eth0 = &json_of(pod, "ip -j link show dev eth0")[0];
        if eth0["operstate"] != "DOWN" && !eth0["flags"].as_array().is_some_and(|f| f.contains(&json!("NO-CARRIER"))) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// What the node holds for the pod: the bridge (link, global addresses), the host veth as its port,
/// forwarding, accept_ra on both, the NAT tables.
fn node_view(node: &BridgeNode, result: &Value) -> Value {
    let bridge = result["interfaces"][0]["name"].as_str().unwrap();
    let port = result["interfaces"][1]["name"].as_str().unwrap();
    let bridge_link = &json_of(&node.ns, &format!("ip -j -d link show dev {bridge}"))[0];
    let mut port_link = link_view(&json_of(&node.ns, &format!("ip -j -d link show dev {port}"))[0]);
    port_link["ifname"] = "veth*".into();
    json!({
        "bridge": link_view(bridge_link),
        "bridge_addrs": global_addrs(&json_of(&node.ns, &format!("ip -j addr show dev {bridge}"))[0]),
        "port": port_link,
        "bridge_accept_ra": sysctl(&node.ns, &format!("net/ipv6/conf/{bridge}/accept_ra")),
        "port_accept_ra": sysctl(&node.ns, &format!("net/ipv6/conf/{port}/accept_ra")),
        "ip_forward": sysctl(&node.ns, "net/ipv4/ip_forward"),
        "ipv6_forwarding": sysctl(&node.ns, "net/ipv6/conf/all/forwarding"),
        "nat": node.nat(),
    })
}

fn assert_same(what: &str, ours: &Value, reference: &Value) {
    assert_eq!(
        ours,
        reference,
        "{what} differs\n--- yh-bridge:\n{}\n--- reference bridge:\n{}",
        serde_json::to_string_pretty(ours).unwrap(),
        serde_json::to_string_pretty(reference).unwrap()
    );
}

/// The kernel destroys a deleted netns's veths in the background; wait (boundedly) until the node
/// has none left, so the checks after it see the plugin's doing, not the kernel's pace.
fn wait_for_netns_teardown(node: &BridgeNode) {
    for _ in 0..200 {
        if link_names(&node.ns, "type veth").is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// After DEL: no veth on the node, no lease, no NAT rule, no interface in the pod.
fn assert_clean(node: &BridgeNode, name: &str, pod: Option<&Netns>) {
    assert_eq!(link_names(&node.ns, "type veth"), Vec::<String>::new(), "veths left on the node");
    assert_eq!(node.leases(name), Vec::<String>::new(), "leases left in host-local");
    assert!(!node.nat().contains("CNI-"), "NAT rules left:\n{}", node.nat());
    if let Some(pod) = pod {
        assert!(!pod.exec("ip link show dev eth0").0, "eth0 left in the pod");
    }
}

/// Run the configuration `make` gives for each plugin through yh-bridge and the reference on
/// identical nodes, at every version of the suite's table both speak whose results list
/// interfaces (0.1.0 and 0.2.0: `legacy_versions`); compare the result, the pod and the node.
/// Then CHECK (inside `add_and_check`, where the version has it), DEL, DEL again on yh-bridge, and
/// DEL on the reference, so that both nodes meet the next version alike.
fn compare(make: impl Fn(&BridgeNode, &str, &str) -> Value, via: Via) {
    require_root();
    let name = unique("net");
    let nodes = [(OURS, BridgeNode::new()), (REFERENCE, BridgeNode::new())];
    for version in versions::with_reference().filter(|v| !v.has_ip4_ip6_result()) {
        let cid = unique("cid");
        let mut seen = Vec::new();
        for (plugin, node) in &nodes {
            let pod = Netns::new("brp");
            let mut conf = make(node, plugin, &name);
            conf["cniVersion"] = version.as_str().into();
            let result = add_and_check(node, via, &cid, &pod, &conf, *plugin == OURS && version.has_check());
            assert_eq!(result["cniVersion"], version.as_str(), "{plugin}: {result}");
            seen.push((normal_result(&result), pod_view(&pod), node_view(node, &result)));
            del(node, via, &cid, &pod, &conf, &result);
            if *plugin == OURS {
                assert_clean(node, &name, Some(&pod));
                del(node, via, &cid, &pod, &conf, &result);
            }
        }
        let (reference, ours) = (seen.pop().unwrap(), seen.pop().unwrap());
        assert_same(&format!("the ADD result at {version}"), &ours.0, &reference.0);
        assert_same(&format!("the pod netns at {version}"), &ours.1, &reference.1);
        assert_same(&format!("the node at {version}"), &ours.2, &reference.2);
    }
}

/// `compare` for a bridge configuration: the defaults of `BridgeNode::conf` plus `extra`.
fn compare_with_reference(extra: Value, via: Via) {
    compare(|node, plugin, name| node.conf(plugin, name, &extra), via);
}

#[test]
fn same_as_reference_default() {
    compare_with_reference(json!({}), Via::Driver);
}

#[test]
fn same_as_reference_default_through_libcni() {
    compare_with_reference(json!({}), Via::Cnidrive);
}

#[test]
fn same_as_reference_bridge_options() {
    compare_with_reference(json!({"bridge": unique("br"), "mtu": 1400, "hairpinMode": true}), Via::Cnidrive);
}

#[test]
fn same_as_reference_default_gateway() {
    compare_with_reference(json!({"isDefaultGateway": true}), Via::Cnidrive);
}

#[test]
fn same_as_reference_ip_masq() {
    compare_with_reference(json!({"isGateway": true, "ipMasq": true, "ipMasqBackend": "iptables"}), Via::Cnidrive);
}

#[test]
fn same_as_reference_no_gateway_with_routes() {
    compare_with_reference(
        json!({"isGateway": false, "ipam": {"routes": [{"dst": "10.0.0.0/8"}, {"dst": "192.168.5.0/24", "gw": "10.66.0.254"}]}}),
        Via::Cnidrive,
    );
}

#[test]
fn same_as_reference_dual_stack() {
    let extra = json!({
        "isDefaultGateway": true, "ipMasq": true, "ipMasqBackend": "iptables",
        "ipam": {"ranges": [[{"subnet": "10.66.0.0/24"}], [{"subnet": "fd66:1::/64"}]],
                 "routes": [{"dst": "10.0.0.0/8"}, {"dst": "fd00::/8"}]}
    });
    compare_with_reference(extra.clone(), Via::Cnidrive);
    compare_with_reference(extra, Via::Driver);
}

#[test]
fn same_as_reference_l2_only() {
    compare_with_reference(json!({"ipam": null}), Via::Driver);
}

/// yonghui's generated delegate run by yh-bridge (its default, in process) and by the reference
/// bridge (`delegate.type: bridge`, exec'd) gives the same pod network, NAT rules included
/// (FLANNEL_IPMASQ=false makes the delegate masquerade).
#[test]
fn yonghui_through_yh_bridge_same_as_through_reference() {
    let yonghui = |node: &BridgeNode, plugin: &str, name: &str| {
        let subnet_env = node.sb.write(
            "subnet.env",
            "FLANNEL_NETWORK=10.66.0.0/16\nFLANNEL_SUBNET=10.66.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
        );
        let delegate = if plugin == OURS { json!({}) } else { json!({"type": "bridge"}) };
        json!({
            "cniVersion": "1.0.0", "name": name, "type": "yonghui", "subnetFile": subnet_env,
            "dataDir": node.sb.path().join("yonghui"), "ipam": {"dataDir": node.ipam_dir()}, "delegate": delegate,
        })
    };
    compare(yonghui, Via::Cnidrive);
}

#[test]
fn nftables_backend_keeps_one_chain_per_pod() {
    require_root();
    let node = BridgeNode::new();
    let pod = Netns::new("brp");
    let name = unique("net");
    let cid = unique("cid");
    let conf = node.conf(
        OURS,
        &name,
        &json!({"isGateway": true, "ipMasq": true, "ipMasqBackend": "nftables",
                "ipam": {"ranges": [[{"subnet": "10.66.0.0/24"}], [{"subnet": "fd66:1::/64"}]]}}),
    );
    let result = add_and_check(&node, Via::Driver, &cid, &pod, &conf, true);
    let table = node.ns.must("nft list table inet yh_bridge");
    assert!(table.contains("type nat hook postrouting priority srcnat"), "{table}");
    assert!(table.contains("ip saddr 10.66.0.2 ip daddr != { 10.66.0.0/24, 224.0.0.0/4 } masquerade"), "{table}");
    assert!(table.contains("ip6 saddr fd66:1::2 ip6 daddr != { fd66:1::/64, ff00::/8 } masquerade"), "{table}");
    assert!(table.contains(&format!("comment \"name: {name} id: {cid}\"")), "{table}");
    assert!(!node.nat().contains("CNI-"), "the iptables backend was not used");
    // DEL without prevResult: the rules are found by network name and container id alone.
    driver(&node, "DEL", &cid, &pod.path().display().to_string(), &conf, "").ok();
    let table = node.ns.must("nft list table inet yh_bridge");
    assert!(!table.contains("CNI-"), "{table}");
    assert_clean(&node, &name, Some(&pod));
    assert_eq!(result["ips"].as_array().unwrap().len(), 2);
}

/// The NAT rules really masquerade: a host beyond the node, which has no route back to the pod
/// subnet, answers the pod's pings only when `ipMasq` is on. For each backend.
#[test]
fn masquerade_lets_the_pod_reach_beyond_the_node() {
    require_root();
    for (masq, backend) in [(false, "iptables"), (true, "iptables"), (true, "nftables")] {
        let node = BridgeNode::new();
        let outside = Netns::new("bro");
        node.ns.must(&format!("ip link add up0 type veth peer name up1 netns {}", outside.name));
        node.ns.must("ip addr add 192.168.200.1/24 dev up0 && ip link set up0 up");
        outside.must("ip addr add 192.168.200.2/24 dev up1 && ip link set up1 up");
        let pod = Netns::new("brp");
        let conf = node.conf(
            OURS,
            &unique("net"),
            &json!({"isDefaultGateway": true, "ipMasq": masq, "ipMasqBackend": backend}),
        );
        driver(&node, "ADD", &unique("cid"), &pod.path().display().to_string(), &conf, "").ok();
        let (reached, out) = pod.exec("ping -c 1 -W 3 192.168.200.2");
        assert_eq!(reached, masq, "ipMasq {masq}, backend {backend}: {out}");
    }
}

#[test]
fn forty_pods_eight_at_a_time_get_distinct_addresses_leaving_nothing() {
    require_root();
    let node = BridgeNode::new();
    let name = unique("net");
    let conf = node.conf(
        OURS,
        &name,
        &json!({"bridge": unique("br"), "isGateway": true, "ipMasq": true, "ipMasqBackend": "iptables"}),
    );
    let pods: Vec<(Netns, String)> = (0..40).map(|_| (Netns::new("brq"), unique("cid"))).collect();
    let mut results = Vec::new();
    for batch in pods.chunks(8) {
        std::thread::scope(|s| {
            let handles: Vec<_> = batch
                .iter()
                .map(|(pod, cid)| {
                    let conf = &conf;
                    let node = &node;
                    s.spawn(move || driver(node, "ADD", cid, &pod.path().display().to_string(), conf, "").ok())
                })
                .collect();
            results.extend(handles.into_iter().map(|h| h.join().unwrap()));
        });
    }
    let mut addresses: Vec<String> =
        results.iter().map(|r| r["ips"][0]["address"].as_str().unwrap().to_string()).collect();
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 40, "addresses are distinct");
    assert_eq!(node.leases(&name).len(), 40);
    assert_eq!(link_names(&node.ns, "type veth").len(), 40);
    assert_eq!(node.nat().matches("-A POSTROUTING").count(), 40, "{}", node.nat());
    // Every pod really has its address, and CHECK agrees.
    for ((pod, cid), result) in pods.iter().zip(&results) {
        let addr = result["ips"][0]["address"].as_str().unwrap();
        assert!(pod.must("ip -4 addr show dev eth0").contains(addr));
        driver(&node, "CHECK", cid, &pod.path().display().to_string(), &with_prev(&conf, result), "").ok();
    }
    for batch in pods.chunks(8).zip(results.chunks(8)) {
        std::thread::scope(|s| {
            for ((pod, cid), result) in batch.0.iter().zip(batch.1) {
                let conf = with_prev(&conf, result);
                let node = &node;
                s.spawn(move || driver(node, "DEL", cid, &pod.path().display().to_string(), &conf, "").ok());
            }
        });
    }
    assert_clean(&node, &name, None);
}

/// ADD with `extra` in a fresh node and pod (after `prepare`) must fail with `code` and a message
/// containing `needle`, and leave no new link in the pod, no new veth on the node, no lease.
/// Returns the node for further checks.
fn add_fails(extra: Value, prepare: impl FnOnce(&BridgeNode, &Netns), code: u64, needle: &str) -> BridgeNode {
    require_root();
    let node = BridgeNode::new();
    let pod = Netns::new("brp");
    prepare(&node, &pod);
    let (pod_before, veths_before) = (link_names(&pod, ""), link_names(&node.ns, "type veth"));
    let name = unique("net");
    let conf = node.conf(OURS, &name, &extra);
    let e = driver(&node, "ADD", &unique("cid"), &pod.path().display().to_string(), &conf, "").err();
    assert_eq!(e["code"], code, "{e}");
    assert!(e["msg"].as_str().unwrap().contains(needle), "{e}");
    assert_eq!(e["cniVersion"], "1.0.0");
    assert_eq!(link_names(&pod, ""), pod_before, "links left in the pod");
    assert_eq!(link_names(&node.ns, "type veth"), veths_before, "veths left on the node");
    assert_eq!(node.leases(&name), Vec::<String>::new(), "a lease was left behind");
    node
}

#[test]
fn bridge_name_taken_by_a_non_bridge() {
    let br = unique("br");
    let node = add_fails(
        json!({"bridge": br}),
        |node, _| {
            node.ns.must(&format!("ip link add {br} type veth peer name {br}p"));
        },
        106,
        "already exists but is not a bridge",
    );
    assert_eq!(link_names(&node.ns, "type veth").len(), 2, "only the two ends the test made");
}

#[test]
fn interface_name_taken_in_the_pod() {
    let node = add_fails(
        json!({}),
        |_, pod| {
            pod.must("ip link add eth0 type veth peer name eth0peer");
        },
        106,
        "interface \"eth0\" already exists in the container",
    );
    assert_eq!(link_names(&node.ns, "type veth"), Vec::<String>::new());
}

#[test]
fn ipam_failure_leaves_nothing() {
    let node = add_fails(json!({"ipam": {"ranges": [[{"subnet": "10.66.0.0/32"}]]}}), |_, _| {}, 999, "too small");
    assert_eq!(link_names(&node.ns, "type veth"), Vec::<String>::new());
    let node = add_fails(json!({"ipam": {"type": "no-such-ipam"}}), |_, _| {}, 7, "no-such-ipam");
    assert_eq!(link_names(&node.ns, "type veth"), Vec::<String>::new());
}

#[test]
fn failure_after_ipam_undoes_what_was_made() {
    // The bridge already carries another IPv4 address: the gateway step (after IPAM) must fail.
    let br = unique("br");
    let prepare = |node: &BridgeNode, _: &Netns| {
        node.ns.must(&format!("ip link add {br} type bridge && ip addr add 192.168.99.1/24 dev {br}"));
    };
    let node =
        add_fails(json!({"bridge": br, "isGateway": true}), prepare, 106, "already has an IP address different from");
    assert_eq!(link_names(&node.ns, "type veth"), Vec::<String>::new());
    // forceAddress replaces it instead.
    let pod = Netns::new("brp");
    let conf = node.conf(OURS, &unique("net"), &json!({"bridge": br, "isGateway": true, "forceAddress": true}));
    driver(&node, "ADD", &unique("cid"), &pod.path().display().to_string(), &conf, "").ok();
    let addrs = node.ns.must(&format!("ip -4 addr show dev {br}"));
    assert!(addrs.contains("10.66.0.1/24") && !addrs.contains("192.168.99.1"), "{addrs}");
}

#[test]
fn missing_netns_makes_nothing() {
    require_root();
    let node = BridgeNode::new();
    let br = unique("br");
    let conf = node.conf(OURS, &unique("net"), &json!({"bridge": br}));
    let e = driver(&node, "ADD", "c1", "/run/netns/does-not-exist", &conf, "").err();
    assert_eq!(e["code"], 102);
    assert!(e["msg"].as_str().unwrap().contains("/run/netns/does-not-exist"), "{e}");
    assert!(!node.ns.exec(&format!("ip link show dev {br}")).0, "the bridge was made");
}

#[test]
fn invalid_configuration_makes_nothing() {
    for (extra, needle) in [
        (json!({"vlan": 5000}), "invalid VLAN ID 5000"),
        (json!({"mtu": 10}), "invalid mtu 10"),
        (json!({"hairpinMode": true, "promiscMode": true}), "hairpin mode and promiscuous mode"),
        (json!({"runtimeConfig": {"mac": "not-a-mac"}}), "runtimeConfig.mac"),
    ] {
        let br = unique("br");
        let mut extra = extra;
        extra["bridge"] = br.clone().into();
        let node = add_fails(extra, |_, _| {}, 7, needle);
        assert!(!node.ns.exec(&format!("ip link show dev {br}")).0, "the bridge was made");
    }
}

#[test]
fn mac_from_cni_args() {
    require_root();
    let node = BridgeNode::new();
    let pod = Netns::new("brp");
    let conf = node.conf(OURS, &unique("net"), &json!({}));
    let r =
        driver(&node, "ADD", "c1", &pod.path().display().to_string(), &conf, "IgnoreUnknown=1;MAC=0a:58:0a:42:00:99")
            .ok();
    assert_eq!(r["interfaces"][2]["mac"], "0a:58:0a:42:00:99");
    assert_eq!(json_of(&pod, "ip -j link show dev eth0")[0]["address"], "0a:58:0a:42:00:99");
}

#[test]
fn del_is_idempotent_even_without_the_netns() {
    require_root();
    let node = BridgeNode::new();
    let name = unique("net");
    let conf = node.conf(OURS, &name, &json!({"isGateway": true, "ipMasq": true, "ipMasqBackend": "iptables"}));

    // Netns deleted before DEL (the veth went with it): the lease and the NAT rules still go.
    let pod = Netns::new("brp");
    let path = pod.path().display().to_string();
    let result = driver(&node, "ADD", "c1", &path, &conf, "").ok();
    drop(pod);
    driver(&node, "DEL", "c1", &path, &with_prev(&conf, &result), "").ok();
    wait_for_netns_teardown(&node);
    assert_clean(&node, &name, None);

    // Empty CNI_NETNS and no prevResult: the same.
    let pod = Netns::new("brp");
    driver(&node, "ADD", "c2", &pod.path().display().to_string(), &conf, "").ok();
    drop(pod);
    driver(&node, "DEL", "c2", "", &conf, "").ok();
    wait_for_netns_teardown(&node);
    assert_clean(&node, &name, None);

    // DEL of something never added, twice.
    driver(&node, "DEL", "c3", "", &conf, "").ok();
    driver(&node, "DEL", "c3", "/run/netns/does-not-exist", &conf, "").ok();
}

#[test]
fn del_survives_a_configuration_broken_since_add() {
    require_root();
    let node = BridgeNode::new();
    let pod = Netns::new("brp");
    let name = unique("net");
    let conf = node.conf(OURS, &name, &json!({"ipMasq": true, "ipMasqBackend": "iptables", "isGateway": true}));
    let result = driver(&node, "ADD", "c1", &pod.path().display().to_string(), &conf, "").ok();
    let mut broken = with_prev(&conf, &result);
    broken["mtu"] = json!(-5);
    broken["vlan"] = json!("not a number");
    driver(&node, "DEL", "c1", &pod.path().display().to_string(), &broken, "").ok();
    assert_clean(&node, &name, Some(&pod));
}

#[test]
fn check_notices_what_changed() {
    require_root();
    let node = BridgeNode::new();
    let pod = Netns::new("brp");
    let conf = node.conf(
        OURS,
        &unique("net"),
        &json!({"isDefaultGateway": true, "ipam": {"routes": [{"dst": "10.0.0.0/8"}]}}),
    );
    let netns = pod.path().display().to_string();
    let result = driver(&node, "ADD", "c1", &netns, &conf, "").ok();
    let checked = with_prev(&conf, &result);
    driver(&node, "CHECK", "c1", &netns, &checked, "").ok();

    pod.must("ip route del 10.0.0.0/8");
    let e = driver(&node, "CHECK", "c1", &netns, &checked, "").err();
    assert!(e["msg"].as_str().unwrap().contains("route 10.0.0.0/8 is missing"), "{e}");
    pod.must("ip route add 10.0.0.0/8 via 10.66.0.1 dev eth0");

    // A later network of the pod may move routes into a policy table (`router` moves eth0's
    // default out of `main`): still the pod's routes, still found.
    pod.must("ip route del default && ip route add default via 10.66.0.1 dev eth0 table 200");
    driver(&node, "CHECK", "c1", &netns, &checked, "").ok();
    pod.must("ip route del default table 200");
    let e = driver(&node, "CHECK", "c1", &netns, &checked, "").err();
    assert!(e["msg"].as_str().unwrap().contains("route 0.0.0.0/0 via 10.66.0.1 is missing"), "{e}");
    pod.must("ip route add default via 10.66.0.1 dev eth0");

    pod.must("ip addr del 10.66.0.2/24 dev eth0");
    let e = driver(&node, "CHECK", "c1", &netns, &checked, "").err();
    assert!(e["msg"].as_str().unwrap().contains("address 10.66.0.2/24 is not on \"eth0\""), "{e}");
    pod.must("ip addr add 10.66.0.2/24 dev eth0 && ip route replace default via 10.66.0.1 && ip route replace 10.0.0.0/8 via 10.66.0.1");

    let port = result["interfaces"][1]["name"].as_str().unwrap();
    node.ns.must(&format!("ip link set {port} nomaster"));
    let e = driver(&node, "CHECK", "c1", &netns, &checked, "").err();
    assert!(e["msg"].as_str().unwrap().contains("no port of bridge \"cni0\" is the peer of \"eth0\""), "{e}");

    let e = driver(&node, "CHECK", "c1", &netns, &conf, "").err();
    assert_eq!(e["code"], 7, "CHECK without prevResult: {e}");
}

/// A bridge takes the lowest MAC of its ports unless its own MAC has been set: a new port with a
/// lower MAC (here one the test adds; on a node, the next pod's) would change it, and CHECK of a pod
/// whose result recorded the old one would fail. With `isGateway` the reference pins the MAC only
/// after the first pod's port has joined, so pods set up at the same moment could record a MAC
/// that is about to change too (netns::concurrency).
#[test]
fn the_bridge_keeps_the_mac_its_pods_recorded_whatever_its_ports() {
    require_root();
    for gateway in [false, true] {
        let node = BridgeNode::new();
        let pod = Netns::new("brp");
        let bridge = unique("br");
        let conf = node.conf(OURS, &unique("net"), &json!({"bridge": bridge, "isGateway": gateway}));
        let netns = pod.path().display().to_string();
        let result = driver(&node, "ADD", "c1", &netns, &conf, "").ok();
        node.ns.must(&format!(
            "ip link add lowmac0 address 00:00:5e:00:53:01 type veth peer name lowmac1 && \
             ip link set lowmac0 master {bridge} up && ip link set lowmac1 up"
        ));
        driver(&node, "CHECK", "c1", &netns, &with_prev(&conf, &result), "").ok();
    }
}

#[test]
fn unsupported_keys_are_refused() {
    require_root();
    let node = BridgeNode::new();
    let conf = node.conf(OURS, &unique("net"), &json!({"macspoofchk": true}));
    let e = driver(&node, "ADD", "c1", "/run/netns/whatever", &conf, "").err();
    assert_eq!(e["code"], 2);
    assert!(e["msg"].as_str().unwrap().contains("macspoofchk"));
}
