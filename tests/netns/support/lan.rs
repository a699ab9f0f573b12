//! A LAN beside a netns node, for pods with a second NIC on it (the `router` pattern of
//! docs/veth-router.md): the node netns gets a "parent NIC" `par0`, one end of a veth pair whose
//! other end, `wire0`, sits in the LAN's own netns, which holds the LAN's gateway and a peer. Pods
//! get macvlan children of `par0`.
//! The overlay networks here are reference `ptp` + `host-local` chains (pod to node by a veth, node
//! to pod by a /32 route), so two pods on the overlay reach each other through the node.

use super::node::NetnsNode;
use serde_json::{Value, json};
use testkit::netns::Netns;

/// The LAN: `192.168.77.0/24`, its gateway and a peer host on it.
pub const LAN_SUBNET: &str = "192.168.77.0/24";
pub const LAN_GATEWAY: &str = "192.168.77.254";
pub const LAN_PEER: &str = "192.168.77.200";
/// The overlay: every pod network of the cluster, and the node's share of it.
pub const OVERLAY: &str = "10.244.0.0/16";
pub const OVERLAY_NODE_SUBNET: &str = "10.244.5.0/24";
pub const SERVICES: &str = "10.96.0.0/12";

/// The LAN's netns, held while the test needs the LAN: deleted (and `par0` with it) on drop.
pub struct Lan {
    _netns: Netns,
}

impl Lan {
    /// Make `par0` in the node's netns and the LAN behind it.
    pub fn beside(node: &NetnsNode) -> Self {
        let lan = Netns::new("lan");
        node.fixtures.lock().unwrap().push("par0".into());
        node.netns.must(&format!(
            "ip link add par0 type veth peer name wire0 && ip link set wire0 netns {} && \
             ip link set par0 addrgenmode none && ip link set par0 up",
            lan.name
        ));
        lan.must(&format!(
            "ip link set wire0 up && ip addr add {LAN_GATEWAY}/24 dev wire0 && ip addr add {LAN_PEER}/24 dev wire0"
        ));
        Lan { _netns: lan }
    }
}

/// The networks of the router pattern, written into a node's conf dir.
pub trait RouterNetworks {
    /// `ptpnet`: the overlay, eth0 (reference ptp + host-local, a default route by the node).
    fn add_ptpnet(&self) -> Value;
    /// `macvlan-router`: net1 on the LAN (reference macvlan + host-local, no default route of its
    /// own), then `router`: the default by net1, the overlay and Services by eth0 (table 200).
    fn add_macvlan_router(&self) -> Value;
    /// A macvlan network `name` on the LAN without router, its plugin's `extra` keys merged in.
    fn add_macvlan(&self, name: &str, extra: Value) -> Value;
}

impl RouterNetworks for NetnsNode {
    fn add_ptpnet(&self) -> Value {
        let list = json!({"cniVersion": "1.0.0", "name": "ptpnet", "plugins": [{
            "type": "ptp", "ipam": {"type": "host-local", "dataDir": self.ipam_dir(),
                "ranges": [[{"subnet": OVERLAY_NODE_SUBNET}]], "routes": [{"dst": "0.0.0.0/0"}]}}]});
        self.write_conf("ptpnet/ptpnet.conflist", &list);
        list
    }

    fn add_macvlan_router(&self) -> Value {
        let router = json!({"type": "router", "overlay_interface": "eth0",
            "overlay_hijack_subnet": [OVERLAY], "service_hijack_subnet": [SERVICES],
            "data_dir": self.sb.path().join("router"),
            "log_options": {"log_file": self.sb.path().join("router.log")},
            "rp_filter": {"set_host": false, "value": 2}});
        let list = json!({"cniVersion": "1.0.0", "name": "macvlan-router",
            "plugins": [macvlan_plugin(self, json!({})), router]});
        self.write_conf("macvlan-router/macvlan-router.conflist", &list);
        list
    }

    fn add_macvlan(&self, name: &str, extra: Value) -> Value {
        let list = json!({"cniVersion": "1.0.0", "name": name, "plugins": [macvlan_plugin(self, extra)]});
        self.write_conf(&format!("{name}/{name}.conflist"), &list);
        list
    }
}

/// A macvlan child of `par0` with an address from host-local on the LAN (from .10, no routes).
fn macvlan_plugin(node: &NetnsNode, extra: Value) -> Value {
    let mut plugin = json!({"type": "macvlan", "master": "par0", "mode": "bridge",
        "ipam": {"type": "host-local", "dataDir": node.ipam_dir(),
            "ranges": [[{"subnet": LAN_SUBNET, "gateway": LAN_GATEWAY, "rangeStart": "192.168.77.10", "rangeEnd": "192.168.77.99"}]]}});
    for (k, v) in extra.as_object().expect("extra is an object") {
        plugin[k] = v.clone();
    }
    plugin
}
