//! The `router` plugin (docs/veth-router.md): for a pod whose first NIC (`overlay_interface`, `eth0`) comes from
//! the overlay CNI and whose second NIC (`CNI_IFNAME`, e.g. `net1`) from macvlan or SR-IOV. North-south
//! traffic leaves by the new NIC; east-west traffic (overlay and service subnets, the node) and
//! replies from the overlay address stay on the overlay NIC, by policy routing:
//!
//! - the overlay NIC's routes are copied from `main` into `route_table` (200), and its default route
//!   leaves `main`; `from <overlay ip>` and `to <overlay/service/additional subnet>` rules select
//!   that table; if `main` is left without a default route, the new NIC's gateway becomes it;
//! - in the pod, `<node ip>/32 via <overlay gateway> dev eth0`, so the node is reached by the overlay
//!   (the macvlan NIC cannot reach its parent);
//! - on the node, when the overlay NIC is a veth: `<new NIC's ip>/32 dev <its host end>` and a
//!   permanent neighbour entry for it, so the node reaches the new NIC's addresses the same way.

use crate::platform::cni::env::validate_ifname;
use crate::platform::cni::{CniError, CniResult, Invocation, Operation, Plugin, PluginConf, code};
use crate::platform::logging::LogConfig;
use crate::platform::netlink::{IpFamily, MacAddr};
use crate::programs::plugins::via_node;
use crate::programs::plugins::via_node::config::{HijackConfig, Keys, MAIN_TABLE};
use crate::programs::plugins::via_node::kernel::{self, Namespaces};
use crate::programs::plugins::via_node::model::{Change, Ns, Op, RouteSpec, RuleSpec, Selector};
use crate::programs::plugins::via_node::plan::{self, NodeAddresses, RULE_PRIORITY};
use ipnetwork::IpNetwork;
use std::net::IpAddr;

pub const NAME: &str = "router";

pub struct Router;

/// The shared keys plus `overlay_interface`.
#[derive(Debug, Clone)]
struct RouterConfig {
    common: HijackConfig,
    overlay_interface: String,
}

impl RouterConfig {
    fn parse(conf: &PluginConf) -> Result<Self, CniError> {
        let common = HijackConfig::parse(NAME, &conf.raw)?;
        let keys = Keys { plugin: NAME, raw: &conf.raw };
        let overlay_interface = keys.string("overlay_interface")?.unwrap_or("eth0").to_string();
        validate_ifname(&overlay_interface).map_err(|e| keys.invalid("overlay_interface", e))?;
        Ok(RouterConfig { common, overlay_interface })
    }
}

impl Plugin for Router {
    fn name(&self) -> &'static str {
        NAME
    }

    fn add(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<CniResult, CniError> {
        let config = RouterConfig::parse(conf)?;
        config.common.log.scope(|| {
            let result = via_node::chained_result(NAME, conf)?;
            if config.common.skip_call {
                tracing::info!("ADD {} {}: skip_call is set, passing the result on", inv.container_id, inv.ifname);
                return Ok(result);
            }
            if inv.ifname == config.overlay_interface {
                return Err(CniError::invalid_config(format!(
                    "router is chained on {}, its overlay_interface; chain it on the pod's second NIC",
                    inv.ifname
                )));
            }
            let pod_path = inv.container_netns()?;
            crate::platform::async_runtime::block_on(async {
                let ns = Namespaces::open(pod_path)?;
                via_node::undo_earlier(inv, &config.common.data_dir, &ns).await?;
                let facts = Facts::gather(&ns, inv, &config, &result).await?;
                if facts.host_peer.is_none() {
                    tracing::warn!(
                        "{} is not a veth with its peer on the node: the node will not reach {}'s addresses",
                        facts.overlay,
                        facts.nic
                    );
                }
                via_node::execute(NAME, inv, &config.common.data_dir, &ns, plan(&config, &facts)).await
            })?;
            Ok(result)
        })
    }

    fn del(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<(), CniError> {
        via_node::del(NAME, inv, conf)
    }

    fn check(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<(), CniError> {
        via_node::check(inv, &RouterConfig::parse(conf)?.common)
    }
    fn log_config(&self, conf: &PluginConf) -> LogConfig {
        via_node::log_config(NAME, conf)
    }
}

/// What ADD finds before it plans.
#[derive(Debug, Clone)]
struct Facts {
    nic: String,
    nic_ips: Vec<IpNetwork>,
    nic_gateways: Vec<IpAddr>,
    overlay: String,
    overlay_ips: Vec<IpNetwork>,
    overlay_mac: MacAddr,
    /// The overlay NIC's routes in `main`.
    overlay_routes: Vec<RouteSpec>,
    /// The overlay NIC's default gateways (from `main`, or from the table if an earlier NIC moved them).
    overlay_gateways: Vec<IpAddr>,
    /// The overlay NIC's host end, when it is a veth.
    host_peer: Option<String>,
    /// Families for which `main` has a default route on another NIC than the overlay.
    other_defaults: Vec<IpFamily>,
    node: NodeAddresses,
}

impl Facts {
    async fn gather(
        ns: &Namespaces,
        inv: &Invocation,
        config: &RouterConfig,
        prev: &CniResult,
    ) -> Result<Self, CniError> {
        let pod = ns.pod()?;
        let missing =
            |name: &str, why: &str| CniError::invalid_config(format!("the pod has no interface {name}: {why}"));
        let nic = pod
            .link_by_name(&inv.ifname)
            .await?
            .ok_or_else(|| missing(&inv.ifname, "router must follow the plugin that creates it"))?;
        let overlay = pod
            .link_by_name(&config.overlay_interface)
            .await?
            .ok_or_else(|| missing(&config.overlay_interface, "it is router's overlay_interface"))?;
        let nic_ips = kernel::global_addresses(pod, nic.index).await?;
        let overlay_ips = kernel::global_addresses(pod, overlay.index).await?;
        for (name, ips) in [(&nic.name, &nic_ips), (&overlay.name, &overlay_ips)] {
            if ips.is_empty() {
                return Err(CniError::new(code::IPAM, format!("{name} has no global address in the pod")));
            }
        }
        let routes = kernel::all_routes(pod).await?;
        let overlay_routes = kernel::routes_of(&routes, &overlay, MAIN_TABLE);
        let moved = kernel::routes_of(&routes, &overlay, config.common.route_table);
        let overlay_gateways =
            overlay_routes.iter().chain(&moved).filter(|r| r.is_default()).filter_map(|r| r.via).collect();
        let other_defaults = [IpFamily::V4, IpFamily::V6]
            .into_iter()
            .filter(|family| {
                routes.iter().any(|r| {
                    r.table == MAIN_TABLE
                        && r.is_default()
                        && IpFamily::of_net(&r.dst) == *family
                        && r.oif.is_some_and(|i| i != overlay.index)
                })
            })
            .collect();
        let host_peer = kernel::host_peer(ns, &overlay).await?.map(|l| l.name);
        let node = kernel::node_addresses(&ns.host, &nic_ips, &plan::families(&overlay_ips)).await?;
        Ok(Facts {
            nic: nic.name,
            nic_gateways: plan::gateways_of(prev, &nic_ips),
            nic_ips,
            overlay: overlay.name,
            overlay_mac: overlay
                .mac
                .ok_or_else(|| CniError::invalid_config(format!("{} has no MAC address", config.overlay_interface)))?,
            overlay_ips,
            overlay_routes,
            overlay_gateways,
            host_peer,
            other_defaults,
            node,
        })
    }
}

fn plan(config: &RouterConfig, f: &Facts) -> Vec<Change> {
    let c = &config.common;
    let table = c.route_table;
    let mut changes = plan::sysctls(Ns::Pod, plan::rp_filter(c.rp_filter.value, &["all", &f.overlay, &f.nic]));
    if let Some(peer) = &f.host_peer {
        if c.rp_filter.set_host {
            changes.extend(plan::sysctls(Ns::Host, plan::rp_filter(c.rp_filter.value, &[peer])));
        }
        changes.extend(plan::neighbours(Ns::Host, f.nic_ips.iter().map(|n| n.ip()), peer, f.overlay_mac));
        changes.extend(
            f.nic_ips
                .iter()
                .map(|n| Change::host(Op::AddRoute(RouteSpec::on_link(plan::host_net(n.ip()), peer, MAIN_TABLE)))),
        );
    }
    changes.extend(plan::node_routes(&f.node, &f.overlay, &f.overlay_gateways, MAIN_TABLE));
    changes.extend(plan::migration(&f.overlay, &f.overlay_ips, &f.overlay_routes, &[], table));
    let overlay_families = plan::families(&f.overlay_ips);
    changes.extend(
        c.hijacked_subnets()
            .filter(|s| overlay_families.contains(&IpFamily::of_net(s)))
            .map(|s| Change::pod(Op::AddRule(RuleSpec { selector: Selector::To(*s), table, priority: RULE_PRIORITY }))),
    );
    for gw in &f.nic_gateways {
        let family = IpFamily::of(*gw);
        let default_leaves_main = f.overlay_routes.iter().any(|r| r.is_default() && IpFamily::of_net(&r.dst) == family);
        if default_leaves_main && !f.other_defaults.contains(&family) {
            changes.push(Change::pod(Op::AddRoute(RouteSpec::via(family.default_route(), *gw, &f.nic, MAIN_TABLE))));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(extra: serde_json::Value) -> RouterConfig {
        let mut v = json!({"cniVersion": "1.0.0", "name": "n", "type": "router",
            "overlay_hijack_subnet": ["10.244.0.0/16"], "service_hijack_subnet": ["10.96.0.0/12", "fd00:96::/112"]});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        RouterConfig::parse(&PluginConf::from_value(v).unwrap()).unwrap()
    }

    fn facts() -> Facts {
        let overlay_ips = vec!["10.244.5.2/24".parse().unwrap()];
        Facts {
            nic: "net1".into(),
            nic_ips: vec!["192.168.7.10/24".parse().unwrap()],
            nic_gateways: vec!["192.168.7.254".parse().unwrap()],
            overlay: "eth0".into(),
            overlay_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            overlay_routes: vec![
                RouteSpec::via("0.0.0.0/0".parse().unwrap(), "10.244.5.1".parse().unwrap(), "eth0", MAIN_TABLE),
                RouteSpec::on_link("10.244.5.1/32".parse().unwrap(), "eth0", MAIN_TABLE),
            ],
            overlay_gateways: vec!["10.244.5.1".parse().unwrap()],
            host_peer: Some("veth1234".into()),
            other_defaults: vec![],
            node: NodeAddresses::new(&["192.168.7.1".parse().unwrap()], &[], &plan::families(&overlay_ips)),
            overlay_ips,
        }
    }

    fn lines(c: &[Change]) -> Vec<String> {
        c.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn the_new_nic_takes_the_default_route_leaving_the_overlay_a_table() {
        assert_eq!(
            lines(&plan(&config(json!({})), &facts())),
            [
                "pod: sysctl net.ipv4.conf.all.rp_filter=2",
                "pod: sysctl net.ipv4.conf.eth0.rp_filter=2",
                "pod: sysctl net.ipv4.conf.net1.rp_filter=2",
                "host: sysctl net.ipv4.conf.veth1234.rp_filter=2",
                "host: neighbour 192.168.7.10 dev veth1234 lladdr 02:00:00:00:00:01 nud permanent",
                "host: route 192.168.7.10/32 dev veth1234 scope link",
                "pod: route 192.168.7.1/32 via 10.244.5.1 dev eth0",
                "pod: route 10.244.5.1/32 dev eth0 scope link table 200",
                "pod: route 0.0.0.0/0 via 10.244.5.1 dev eth0 table 200",
                "pod: rule priority 1000 from 10.244.5.2/32 lookup 200",
                "pod: route 0.0.0.0/0 via 10.244.5.1 dev eth0 removed",
                "pod: rule priority 1000 from all to 10.244.0.0/16 lookup 200",
                "pod: rule priority 1000 from all to 10.96.0.0/12 lookup 200",
                "pod: route 0.0.0.0/0 via 192.168.7.254 dev net1",
            ]
        );
    }

    #[test]
    fn an_existing_default_route_is_kept() {
        let mut f = facts();
        f.other_defaults = vec![IpFamily::V4];
        let l = lines(&plan(&config(json!({"route_table": 300, "overlay_interface": "eth0"})), &f));
        assert!(!l.contains(&"pod: route 0.0.0.0/0 via 192.168.7.254 dev net1".to_string()));
        assert!(l.contains(&"pod: rule priority 1000 from all to 10.96.0.0/12 lookup 300".to_string()));
    }

    #[test]
    fn without_a_host_peer_nothing_is_done_on_the_host() {
        let mut f = facts();
        f.host_peer = None;
        let l = lines(&plan(&config(json!({"route_table": 300, "overlay_interface": "eth0"})), &f));
        assert!(!l.iter().any(|l| l.starts_with("host:")), "{l:#?}");
        assert!(l.contains(&"pod: rule priority 1000 from all to 10.96.0.0/12 lookup 300".to_string()));
    }

    #[test]
    fn overlay_interface_is_validated() {
        let v = json!({"cniVersion": "1.0.0", "name": "n", "type": "router", "overlay_hijack_subnet": ["10.244.0.0/16"],
            "service_hijack_subnet": ["10.96.0.0/12"], "overlay_interface": "a-name-far-too-long"});
        let e = RouterConfig::parse(&PluginConf::from_value(v).unwrap()).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("overlay_interface"), "{e}");
        assert_eq!(config(json!({})).overlay_interface, "eth0");
    }
}
