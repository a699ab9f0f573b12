//! The decisions both plugins make, as pure functions: names, NIC order, whether and where a NIC's
//! routes migrate, which host addresses a pod must reach, and the route, rule and sysctl changes
//! that follow. Nothing here touches the kernel, so all of it is unit-tested.

use super::config::{MAIN_TABLE, MigrateRoute};
use super::model::{Change, NeighSpec, Ns, Op, RouteSpec, RuleSpec, Selector, SysctlSpec};
use crate::platform::cni::{CniError, CniResult};
use crate::platform::netlink::{IpFamily, MacAddr};
use ipnetwork::IpNetwork;
use sha2::{Digest, Sha256};
use std::cmp::Ordering;
use std::net::IpAddr;

/// The pod end of the `veth` plugin's pair, the name the original plugin gives it.
pub const POD_VETH: &str = "veth0";

/// Priority of every policy rule these plugins add: ahead of `main` (32766), after `local` (0).
pub const RULE_PRIORITY: u32 = 1000;

/// Host interfaces whose addresses are not "the node's": container and overlay plumbing whose
/// traffic the pod reaches through the hijacked subnets, never as a node address (the original
/// plugins' list, plus `lo`).
const NOT_NODE_LINKS: [&str; 12] = [
    "docker",
    "cbr",
    "dummy",
    "virbr",
    "lxcbr",
    "veth",
    "cali",
    "flannel",
    "kube-ipvs",
    "cni",
    "vx-submariner",
    "cilium",
];

/// The host end of the pod's veth pair: `veth` and 11 hex digits of the SHA-256 of the container id:
/// 15 bytes, the most a Linux interface name holds, the same on every call for the same container,
/// and safe whatever characters the runtime's id contains.
pub fn host_veth_name(container_id: &str) -> String {
    format!("veth{:.11x}", Sha256::digest(container_id.as_bytes()))
}

/// NIC name order as the original plugins mean it, `eth0 < net1 < net2 < net10`: by the name's text without
/// its trailing number, then by that number.
pub fn nic_order(a: &str, b: &str) -> Ordering {
    fn split(name: &str) -> (&str, Option<u64>) {
        let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
        (stem, name[stem.len()..].parse().ok())
    }
    split(a).cmp(&split(b)).then_with(|| a.cmp(b))
}

/// How many of the pod's other NICs come before `nic` in name order.
fn rank(nic: &str, other_nics: &[String]) -> usize {
    other_nics.iter().filter(|o| nic_order(o, nic) == Ordering::Less).count()
}

/// Whether the chained NIC's routes leave `main` (`migrate_route`). Only a NIC that is not the pod's
/// only one can migrate: moving the only default route out of `main` would leave every socket that
/// has not picked a source address without a route.
pub fn migrates(mode: MigrateRoute, nic: &str, other_nics: &[String]) -> bool {
    match mode {
        MigrateRoute::Never => false,
        MigrateRoute::Always => !other_nics.is_empty(),
        MigrateRoute::Auto => rank(nic, other_nics) > 0,
    }
}

/// The table a migrating NIC's routes move into: `base` for the second NIC in name order, `base + 1`
/// for the third, and so on, so that each NIC's default route has a table of its own.
pub fn nic_table(base: u32, nic: &str, other_nics: &[String]) -> Result<u32, CniError> {
    let offset = u32::try_from(rank(nic, other_nics).saturating_sub(1)).unwrap_or(u32::MAX);
    base.checked_add(offset)
        .filter(|t| *t != MAIN_TABLE)
        .ok_or_else(|| CniError::invalid_config(format!("route_table {base} leaves no table for NIC {nic}")))
}

/// Whether addresses on host link `name` count as the node's own.
pub fn is_node_link(name: &str) -> bool {
    name != "lo" && !NOT_NODE_LINKS.iter().any(|p| name.starts_with(p))
}

/// `ip/32` or `ip/128`.
pub fn host_net(ip: IpAddr) -> IpNetwork {
    IpNetwork::new(ip, if ip.is_ipv4() { 32 } else { 128 }).expect("a full-length prefix is always valid")
}

/// The node's addresses as the pod needs them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAddresses {
    /// Every address the pod must reach directly, at most one family the pod does not have removed.
    pub all: Vec<IpAddr>,
    /// Per family, the address the node uses toward the pod (`ip route get <pod ip>`): the next hop
    /// for hijacked subnets, because the node answers to it on any interface.
    pub toward_pod: Vec<IpAddr>,
}

impl NodeAddresses {
    /// `found` are the node's addresses (already filtered by link), `toward_pod` the sources the node
    /// routes from toward the pod; only families in `families` are kept, duplicates dropped, and a
    /// family without a route toward the pod falls back to its first node address.
    pub fn new(found: &[IpAddr], toward_pod: &[IpAddr], families: &[IpFamily]) -> Self {
        let wanted = |ip: &&IpAddr| families.contains(&IpFamily::of(**ip));
        let mut all: Vec<IpAddr> = Vec::new();
        for ip in toward_pod.iter().chain(found).filter(wanted) {
            if !all.contains(ip) {
                all.push(*ip);
            }
        }
        let toward_pod = families
            .iter()
            .filter_map(|f| {
                let of_family = |ip: &&IpAddr| IpFamily::of(**ip) == *f;
                toward_pod.iter().find(of_family).or_else(|| all.iter().find(of_family)).copied()
            })
            .collect();
        NodeAddresses { all, toward_pod }
    }

    pub fn next_hop(&self, family: IpFamily) -> Option<IpAddr> {
        self.toward_pod.iter().copied().find(|ip| IpFamily::of(*ip) == family)
    }
}

/// The families of a NIC's addresses, IPv4 first.
pub fn families(ips: &[IpNetwork]) -> Vec<IpFamily> {
    [IpFamily::V4, IpFamily::V6].into_iter().filter(|f| ips.iter().any(|n| IpFamily::of_net(n) == *f)).collect()
}

/// Pod routes `<node ip>/32 dev <dev> scope link` (or `via <gw>` when the family has one in
/// `gateways`) in `table`.
pub fn node_routes(node: &NodeAddresses, dev: &str, gateways: &[IpAddr], table: u32) -> Vec<Change> {
    node.all
        .iter()
        .map(|ip| {
            let dst = host_net(*ip);
            let route = match gateways.iter().find(|gw| IpFamily::of(**gw) == IpFamily::of(*ip)) {
                Some(gw) => RouteSpec::via(dst, *gw, dev, table),
                None => RouteSpec::on_link(dst, dev, table),
            };
            Change::pod(Op::AddRoute(route))
        })
        .collect()
}

/// Pod routes `<subnet> via <node ip> dev <dev>` in `table` for every hijacked subnet of a family the
/// pod has a next hop for; the subnets of other families are returned apart, to be logged.
pub fn hijack_routes<'a>(
    subnets: impl Iterator<Item = &'a IpNetwork>,
    node: &NodeAddresses,
    dev: &str,
    table: u32,
) -> (Vec<Change>, Vec<IpNetwork>) {
    let mut changes = Vec::new();
    let mut skipped = Vec::new();
    for subnet in subnets {
        match node.next_hop(IpFamily::of_net(subnet)) {
            Some(gw) => changes.push(Change::pod(Op::AddRoute(RouteSpec::via(*subnet, gw, dev, table)))),
            None => skipped.push(*subnet),
        }
    }
    (changes, skipped)
}

/// Move NIC `nic`'s routes out of `main` into `table`, with `from <nic ip> lookup <table>` so that
/// replies from its addresses leave by it (the original plugins' `MigrateRoute`):
/// - every route of the NIC in `main` is copied into `table`, on-link ones first so that the
///   gateways of the others resolve there;
/// - a family with a gateway (from the plugin chain's result) but no default route of its own gets
///   `default via <gw> dev <nic>` in `table`;
/// - the NIC's default routes then leave `main`; its other routes stay, so its own subnet is still
///   reached directly whatever the source.
pub fn migration(
    nic: &str,
    nic_ips: &[IpNetwork],
    main_routes: &[RouteSpec],
    gateways: &[IpAddr],
    table: u32,
) -> Vec<Change> {
    let mut routes: Vec<&RouteSpec> = main_routes.iter().collect();
    routes.sort_by_key(|r| r.via.is_some());
    let mut changes: Vec<Change> = routes.iter().map(|r| Change::pod(Op::AddRoute(r.in_table(table)))).collect();
    for gw in gateways {
        let family = IpFamily::of(*gw);
        if !routes.iter().any(|r| r.is_default() && IpFamily::of_net(&r.dst) == family) {
            changes.push(Change::pod(Op::AddRoute(RouteSpec::via(family.default_route(), *gw, nic, table))));
        }
    }
    changes.extend(nic_ips.iter().map(|ip| {
        Change::pod(Op::AddRule(RuleSpec {
            selector: Selector::From(host_net(ip.ip())),
            table,
            priority: RULE_PRIORITY,
        }))
    }));
    changes.extend(routes.iter().filter(|r| r.is_default()).map(|r| Change::pod(Op::RemoveRoute((*r).clone()))));
    changes
}

/// The gateways the chain's result gives for the addresses `nic_ips` (deduplicated, in order).
pub fn gateways_of(prev: &CniResult, nic_ips: &[IpNetwork]) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for ip in &prev.ips {
        if let Some(gw) = ip.gateway
            && nic_ips.iter().any(|n| n.ip() == ip.address.ip())
            && !out.contains(&gw)
        {
            out.push(gw);
        }
    }
    out
}

/// Permanent neighbour entries on `dev` (in `ns`) resolving each of `ips` to `mac`: the two ends
/// of a path whose link layer the kernel could not resolve by itself (the original plugins' `setupNeighborhood`).
pub fn neighbours(ns: Ns, ips: impl IntoIterator<Item = IpAddr>, dev: &str, mac: MacAddr) -> Vec<Change> {
    ips.into_iter().map(|ip| Change { ns, op: Op::AddNeighbour(NeighSpec { ip, dev: dev.into(), mac }) }).collect()
}

/// Sysctl changes in `ns`.
pub fn sysctls(ns: Ns, specs: impl IntoIterator<Item = SysctlSpec>) -> Vec<Change> {
    specs.into_iter().map(|s| Change { ns, op: Op::SetSysctl(s) }).collect()
}

/// `net/ipv4/conf/<iface>/rp_filter = value` for each interface.
pub fn rp_filter(value: u8, ifaces: &[&str]) -> Vec<SysctlSpec> {
    ifaces.iter().map(|i| SysctlSpec::new(format!("net/ipv4/conf/{i}/rp_filter"), value)).collect()
}

/// `net/ipv6/conf/<iface>/disable_ipv6 = 0`: IPv6 routes and neighbours need it on the interface.
pub fn enable_ipv6(iface: &str) -> SysctlSpec {
    SysctlSpec::new(format!("net/ipv6/conf/{iface}/disable_ipv6"), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn net(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    #[test]
    fn host_veth_names_are_deterministic_per_container() {
        let a = host_veth_name("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
        assert_eq!(a, host_veth_name("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
        assert_ne!(host_veth_name("c1"), host_veth_name("c2"));
    }

    #[test]
    fn host_veth_names_are_valid_interface_names() {
        let a = host_veth_name("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
        assert_eq!(a.len(), 15);
        assert!(a.starts_with("veth"));
        assert!(crate::platform::cni::env::validate_ifname(&host_veth_name("weird.id_-x")).is_ok());
    }

    #[test]
    fn nic_order_is_natural() {
        let mut v = names(&["net10", "net2", "eth0", "net1", "eth1"]);
        v.sort_by(|a, b| nic_order(a, b));
        assert_eq!(v, names(&["eth0", "eth1", "net1", "net2", "net10"]));
    }

    #[test]
    fn migrate_route_modes() {
        let none: Vec<String> = vec![];
        // The pod's only NIC never migrates, even when told to.
        for mode in [MigrateRoute::Auto, MigrateRoute::Never, MigrateRoute::Always] {
            assert!(!migrates(mode, "eth0", &none));
        }
        assert!(migrates(MigrateRoute::Auto, "net1", &names(&["eth0"])));
        assert!(!migrates(MigrateRoute::Auto, "eth0", &names(&["net1"])));
        assert!(!migrates(MigrateRoute::Never, "net1", &names(&["eth0"])));
        assert!(migrates(MigrateRoute::Always, "eth0", &names(&["net1"])));
    }

    #[test]
    fn each_migrating_nic_gets_its_own_table() {
        assert_eq!(nic_table(200, "net1", &names(&["eth0"])).unwrap(), 200);
        assert_eq!(nic_table(200, "net2", &names(&["eth0", "net1"])).unwrap(), 201);
        assert_eq!(nic_table(200, "eth0", &names(&["net1"])).unwrap(), 200);
        assert_eq!(nic_table(253, "net2", &names(&["eth0", "net1"])).unwrap_err().code, 7);
        assert!(nic_table(u32::MAX, "net2", &names(&["eth0", "net1"])).is_err());
    }

    #[test]
    fn node_links() {
        for name in ["eth0", "ens3", "bond0", "eth0.100", "br-ext"] {
            assert!(is_node_link(name), "{name}");
        }
        for name in ["lo", "veth12345", "cni0", "flannel.1", "cali123", "docker0", "kube-ipvs0", "cilium_host"] {
            assert!(!is_node_link(name), "{name}");
        }
    }

    /// Node addresses of two families, 192.168.7.1 the route's source, for an IPv4 pod.
    fn node_addresses_for_an_ipv4_pod() -> NodeAddresses {
        NodeAddresses::new(&[ip("172.18.0.2"), ip("192.168.7.1"), ip("fd00::2")], &[ip("192.168.7.1")], &[IpFamily::V4])
    }

    #[test]
    fn node_addresses_put_the_route_source_first() {
        let n = node_addresses_for_an_ipv4_pod();
        assert_eq!(n.all, vec![ip("192.168.7.1"), ip("172.18.0.2")]);
        assert_eq!(n.next_hop(IpFamily::V4), Some(ip("192.168.7.1")));
    }

    #[test]
    fn node_addresses_keep_only_the_pods_families() {
        let n = node_addresses_for_an_ipv4_pod();
        assert_eq!(n.next_hop(IpFamily::V6), None);
        let n = NodeAddresses::new(&[ip("172.18.0.2"), ip("fd00::2")], &[], &[IpFamily::V4, IpFamily::V6]);
        assert_eq!(n.toward_pod, vec![ip("172.18.0.2"), ip("fd00::2")]);
    }

    #[test]
    fn node_routes_reach_the_node_on_link_or_through_the_pods_gateway() {
        let n = NodeAddresses::new(&[ip("192.168.7.1")], &[], &[IpFamily::V4]);
        let routes = node_routes(&n, "veth0", &[], 254);
        assert_eq!(routes[0].to_string(), "pod: route 192.168.7.1/32 dev veth0 scope link");
        let routes = node_routes(&n, "eth0", &[ip("fd00::1"), ip("10.1.0.1")], 254);
        assert_eq!(routes[0].to_string(), "pod: route 192.168.7.1/32 via 10.1.0.1 dev eth0");
    }

    #[test]
    fn hijack_routes_send_the_subnets_of_the_pods_families_via_the_node() {
        let n = NodeAddresses::new(&[ip("192.168.7.1")], &[], &[IpFamily::V4]);
        let subnets = [net("10.96.0.0/12"), net("fd00:96::/112")];
        let (routes, skipped) = hijack_routes(subnets.iter(), &n, "veth0", 200);
        assert_eq!(routes.len(), 1);
        assert_eq!(routes[0].to_string(), "pod: route 10.96.0.0/12 via 192.168.7.1 dev veth0 table 200");
        assert_eq!(skipped, vec![net("fd00:96::/112")]);
    }

    #[test]
    fn migration_copies_then_moves_the_default() {
        let connected = RouteSpec { protocol: 2, ..RouteSpec::on_link(net("10.1.0.0/24"), "net1", 254) };
        let default = RouteSpec::via(net("0.0.0.0/0"), ip("10.1.0.1"), "net1", 254);
        let got: Vec<String> =
            migration("net1", &[net("10.1.0.5/24")], &[default.clone(), connected], &[ip("10.1.0.1")], 200)
                .iter()
                .map(|c| c.to_string())
                .collect();
        assert_eq!(
            got,
            [
                "pod: route 10.1.0.0/24 dev net1 scope link table 200",
                "pod: route 0.0.0.0/0 via 10.1.0.1 dev net1 table 200",
                "pod: rule priority 1000 from 10.1.0.5/32 lookup 200",
                "pod: route 0.0.0.0/0 via 10.1.0.1 dev net1 removed",
            ]
        );
        // Without a default of its own, the NIC's gateway makes one in its table; nothing leaves main.
        let got = migration("net1", &[net("10.1.0.5/24")], &[], &[ip("10.1.0.1")], 200);
        assert_eq!(got[0].to_string(), "pod: route 0.0.0.0/0 via 10.1.0.1 dev net1 table 200");
        assert!(!got.iter().any(|c| matches!(c.op, Op::RemoveRoute(_))));
    }

    #[test]
    fn gateways_come_from_the_result_for_the_nics_addresses() {
        let prev = CniResult::from_json(
            &serde_json::json!({"ips": [
                {"address": "10.1.0.5/24", "gateway": "10.1.0.1"},
                {"address": "10.2.0.5/24", "gateway": "10.2.0.1"},
                {"address": "fd00::5/64"}
            ]}),
            crate::platform::cni::CniVersion::LATEST,
        )
        .unwrap();
        assert_eq!(gateways_of(&prev, &[net("10.1.0.5/24"), net("fd00::5/64")]), vec![ip("10.1.0.1")]);
    }

    #[test]
    fn sysctl_keys() {
        assert_eq!(rp_filter(2, &["all", "veth0"])[1].key, "net/ipv4/conf/veth0/rp_filter");
        assert_eq!(enable_ipv6("veth0").value, "0");
    }
}
