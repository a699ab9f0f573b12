//! The `veth` plugin (docs/veth-router.md): for a pod whose NIC comes from macvlan or SR-IOV, a veth pair
//! (`veth0` in the pod, `veth<hash>` on the node) through which the pod reaches its node and the
//! overlay and service subnets, which the macvlan NIC cannot: a macvlan child never talks to its parent.
//!
//! Chained after the plugin that made the NIC (`CNI_IFNAME`), it makes, on the first NIC of a pod:
//! the pair; permanent neighbour entries both ways (`<pod ip>` on the host end, `<node ip>` on
//! `veth0`), because neither side answers ARP for the other's addresses on this link; in the pod,
//! `<node ip>/32 dev veth0 scope link` and `<hijacked subnet> via <node ip> dev veth0`; on the node,
//! `<pod ip>/32 dev veth<hash> scope link`; and the rp_filter (and, with IPv6, disable_ipv6) sysctls
//! of the interfaces concerned. A later NIC of the same pod reuses the pair, adds its own addresses
//! to it, and by `migrate_route` moves its routes to a table of its own.

use crate::platform::cni::{CniError, CniResult, Invocation, Operation, Plugin, PluginConf, code, result::Interface};
use crate::platform::logging::LogConfig;
use crate::platform::netlink::MacAddr;
use crate::programs::plugins::via_node;
use crate::programs::plugins::via_node::config::{HijackConfig, MAIN_TABLE};
use crate::programs::plugins::via_node::kernel::{self, Namespaces};
use crate::programs::plugins::via_node::model::{Change, Ns, Op, RouteSpec, VethSpec};
use crate::programs::plugins::via_node::plan::{self, NodeAddresses, POD_VETH};
use ipnetwork::IpNetwork;
use std::net::IpAddr;

pub const NAME: &str = "veth";

pub struct Veth;

impl Plugin for Veth {
    fn name(&self) -> &'static str {
        NAME
    }

    fn log_config(&self, conf: &PluginConf) -> LogConfig {
        via_node::log_config(NAME, conf)
    }

    fn add(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<CniResult, CniError> {
        let config = HijackConfig::parse(NAME, &conf.raw)?;
        config.log.scope(|| {
            let mut result = via_node::chained_result(NAME, conf)?;
            if config.skip_call {
                tracing::info!("ADD {} {}: skip_call is set, passing the result on", inv.container_id, inv.ifname);
                return Ok(result);
            }
            if inv.ifname == POD_VETH {
                return Err(CniError::invalid_config(format!(
                    "veth cannot be chained on {POD_VETH}, the interface it makes"
                )));
            }
            let pod_path = inv.container_netns()?;
            let created = crate::platform::async_runtime::block_on(async {
                let ns = Namespaces::open(pod_path)?;
                via_node::undo_earlier(inv, &config.data_dir, &ns).await?;
                let facts = Facts::gather(&ns, inv, &result).await?;
                let plan = plan(&config, &facts, (MacAddr::random()?, MacAddr::random()?))?;
                for subnet in &plan.skipped {
                    tracing::warn!("no node address of {subnet}'s family for the pod; not routing it by {POD_VETH}");
                }
                via_node::execute(NAME, inv, &config.data_dir, &ns, plan.changes).await?;
                Ok::<_, CniError>(plan.created)
            })?;
            if let Some(pair) = created {
                result.interfaces.push(Interface {
                    name: pair.host,
                    mac: Some(pair.host_mac.to_string()),
                    ..Default::default()
                });
                result.interfaces.push(Interface {
                    name: pair.pod,
                    mac: Some(pair.pod_mac.to_string()),
                    sandbox: Some(pod_path.display().to_string()),
                    ..Default::default()
                });
            }
            Ok(result)
        })
    }

    fn del(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<(), CniError> {
        via_node::del(NAME, inv, conf)
    }

    fn check(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<(), CniError> {
        via_node::check(inv, &HijackConfig::parse(NAME, &conf.raw)?)
    }
}

/// What ADD finds before it plans.
#[derive(Debug, Clone)]
struct Facts {
    nic: String,
    nic_ips: Vec<IpNetwork>,
    nic_mtu: u32,
    /// Gateways the chain's result gives for the NIC's addresses.
    nic_gateways: Vec<IpAddr>,
    nic_routes: Vec<RouteSpec>,
    other_nics: Vec<String>,
    host_veth: String,
    /// MACs (host end, pod end) of the pair an earlier NIC of this pod made.
    existing_pair: Option<(MacAddr, MacAddr)>,
    node: NodeAddresses,
}

impl Facts {
    async fn gather(ns: &Namespaces, inv: &Invocation, prev: &CniResult) -> Result<Self, CniError> {
        let pod = ns.pod()?;
        let nic = pod.link_by_name(&inv.ifname).await?.ok_or_else(|| {
            CniError::invalid_config(format!(
                "the pod has no interface {}: veth must follow the plugin that creates it",
                inv.ifname
            ))
        })?;
        let nic_ips = kernel::global_addresses(pod, nic.index).await?;
        if nic_ips.is_empty() {
            return Err(CniError::new(code::IPAM, format!("{} has no global address in the pod", inv.ifname)));
        }
        let host_veth = plan::host_veth_name(&inv.container_id);
        let existing_pair = match pod.link_by_name(POD_VETH).await? {
            None => None,
            Some(pod_end) => {
                let host_end = ns.host.link_by_name(&host_veth).await?;
                match (host_end.and_then(|h| h.mac), pod_end.mac) {
                    (Some(h), Some(p)) => Some((h, p)),
                    _ => {
                        return Err(CniError::new(
                            code::ALREADY_EXISTS,
                            format!(
                                "the pod has a {POD_VETH} whose node end is not {host_veth}: it is not this plugin's"
                            ),
                        ));
                    }
                }
            }
        };
        Ok(Facts {
            nic: inv.ifname.clone(),
            nic_gateways: plan::gateways_of(prev, &nic_ips),
            nic_routes: kernel::routes_of(&kernel::all_routes(pod).await?, &nic, MAIN_TABLE),
            other_nics: kernel::pod_nics(pod).await?.into_iter().map(|l| l.name).filter(|n| *n != inv.ifname).collect(),
            node: kernel::node_addresses(&ns.host, &nic_ips, &plan::families(&nic_ips)).await?,
            nic_mtu: nic.mtu,
            nic_ips,
            host_veth,
            existing_pair,
        })
    }
}

#[derive(Debug)]
struct VethPlan {
    changes: Vec<Change>,
    /// The pair, when this ADD creates it.
    created: Option<VethSpec>,
    /// Hijacked subnets of a family the pod has no node address for.
    skipped: Vec<IpNetwork>,
}

/// The changes for one NIC; `new_macs` (host end, pod end) are used when the pair is new.
fn plan(config: &HijackConfig, f: &Facts, new_macs: (MacAddr, MacAddr)) -> Result<VethPlan, CniError> {
    let (host_mac, pod_mac) = f.existing_pair.unwrap_or(new_macs);
    let migrate = plan::migrates(config.migrate_route, &f.nic, &f.other_nics);
    let table = if migrate { plan::nic_table(config.route_table, &f.nic, &f.other_nics)? } else { MAIN_TABLE };
    let ipv6 = plan::families(&f.nic_ips).contains(&crate::platform::netlink::IpFamily::V6);
    let mut changes = Vec::new();

    let created = f.existing_pair.is_none().then(|| VethSpec {
        host: f.host_veth.clone(),
        host_mac,
        pod: POD_VETH.into(),
        pod_mac,
        mtu: f.nic_mtu,
    });
    if let Some(pair) = &created {
        changes.push(Change::host(Op::CreateVeth(pair.clone())));
        let mut host_sysctls = Vec::new();
        if config.rp_filter.set_host {
            host_sysctls.extend(plan::rp_filter(config.rp_filter.value, &[&f.host_veth]));
        }
        if ipv6 {
            host_sysctls.push(plan::enable_ipv6(&f.host_veth));
        }
        changes.extend(plan::sysctls(Ns::Host, host_sysctls));
    }
    let mut pod_sysctls = plan::rp_filter(config.rp_filter.value, &["all", &f.nic, POD_VETH]);
    if ipv6 {
        pod_sysctls.push(plan::enable_ipv6(POD_VETH));
    }
    changes.extend(plan::sysctls(Ns::Pod, pod_sysctls));

    changes.extend(plan::neighbours(Ns::Host, f.nic_ips.iter().map(|n| n.ip()), &f.host_veth, pod_mac));
    changes.extend(plan::neighbours(Ns::Pod, f.node.all.iter().copied(), POD_VETH, host_mac));
    changes.extend(plan::node_routes(&f.node, POD_VETH, &[], table));
    let (hijack_routes, skipped) = plan::hijack_routes(config.hijacked_subnets(), &f.node, POD_VETH, table);
    changes.extend(hijack_routes);
    changes.extend(
        f.nic_ips
            .iter()
            .map(|n| Change::host(Op::AddRoute(RouteSpec::on_link(plan::host_net(n.ip()), &f.host_veth, MAIN_TABLE)))),
    );
    if migrate {
        changes.extend(plan::migration(&f.nic, &f.nic_ips, &f.nic_routes, &f.nic_gateways, table));
    }
    Ok(VethPlan { changes, created, skipped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::netlink::IpFamily;
    use crate::programs::plugins::via_node::config::MigrateRoute;
    use serde_json::json;

    fn config(extra: serde_json::Value) -> HijackConfig {
        let mut v = json!({"overlay_hijack_subnet": ["10.244.0.0/16"], "service_hijack_subnet": ["10.96.0.0/12", "fd00:96::/112"]});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        HijackConfig::parse(NAME, v.as_object().unwrap()).unwrap()
    }

    fn mac(last: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, last])
    }

    fn first_nic() -> Facts {
        let nic_ips = vec!["192.168.7.10/24".parse().unwrap()];
        Facts {
            nic: "eth0".into(),
            nic_mtu: 1500,
            nic_gateways: vec!["192.168.7.254".parse().unwrap()],
            nic_routes: vec![
                RouteSpec::via("0.0.0.0/0".parse().unwrap(), "192.168.7.254".parse().unwrap(), "eth0", MAIN_TABLE),
                RouteSpec::on_link("192.168.7.0/24".parse().unwrap(), "eth0", MAIN_TABLE),
            ],
            other_nics: vec![],
            host_veth: "vethabcdef01234".into(),
            existing_pair: None,
            node: NodeAddresses::new(
                &["192.168.7.1".parse().unwrap(), "172.18.0.2".parse().unwrap()],
                &["192.168.7.1".parse().unwrap()],
                &plan::families(&nic_ips),
            ),
            nic_ips,
        }
    }

    fn lines(p: &VethPlan) -> Vec<String> {
        p.changes.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn the_first_nic_is_wired_through_a_new_veth_pair() {
        let p = plan(&config(json!({})), &first_nic(), (mac(1), mac(2))).unwrap();
        assert_eq!(
            lines(&p),
            [
                "host: veth pair vethabcdef01234 (pod end veth0, mtu 1500)",
                "host: sysctl net.ipv4.conf.vethabcdef01234.rp_filter=2",
                "pod: sysctl net.ipv4.conf.all.rp_filter=2",
                "pod: sysctl net.ipv4.conf.eth0.rp_filter=2",
                "pod: sysctl net.ipv4.conf.veth0.rp_filter=2",
                "host: neighbour 192.168.7.10 dev vethabcdef01234 lladdr 02:00:00:00:00:02 nud permanent",
                "pod: neighbour 192.168.7.1 dev veth0 lladdr 02:00:00:00:00:01 nud permanent",
                "pod: neighbour 172.18.0.2 dev veth0 lladdr 02:00:00:00:00:01 nud permanent",
                "pod: route 192.168.7.1/32 dev veth0 scope link",
                "pod: route 172.18.0.2/32 dev veth0 scope link",
                "pod: route 10.244.0.0/16 via 192.168.7.1 dev veth0",
                "pod: route 10.96.0.0/12 via 192.168.7.1 dev veth0",
                "host: route 192.168.7.10/32 dev vethabcdef01234 scope link",
            ]
        );
        assert_eq!(p.skipped, vec!["fd00:96::/112".parse::<IpNetwork>().unwrap()]);
        assert_eq!(p.created.unwrap().pod_mac, mac(2));
    }

    #[test]
    fn rp_filter_without_set_host_leaves_the_host_alone() {
        let p = plan(&config(json!({"rp_filter": {"set_host": false, "value": 0}})), &first_nic(), (mac(1), mac(2)))
            .unwrap();
        assert!(!lines(&p).iter().any(|l| l.starts_with("host: sysctl")));
        assert!(lines(&p).contains(&"pod: sysctl net.ipv4.conf.veth0.rp_filter=0".to_string()));
    }

    #[test]
    fn ipv6_enables_it_on_both_ends() {
        let mut f = first_nic();
        f.nic_ips.push("fd00:7::10/64".parse().unwrap());
        f.node = NodeAddresses::new(
            &["fd00:7::1".parse().unwrap()],
            &["192.168.7.1".parse().unwrap()],
            &[IpFamily::V4, IpFamily::V6],
        );
        let l = lines(&plan(&config(json!({})), &f, (mac(1), mac(2))).unwrap());
        assert!(l.contains(&"host: sysctl net.ipv6.conf.vethabcdef01234.disable_ipv6=0".to_string()));
        assert!(l.contains(&"pod: sysctl net.ipv6.conf.veth0.disable_ipv6=0".to_string()));
        assert!(l.contains(&"pod: route fd00:96::/112 via fd00:7::1 dev veth0".to_string()));
        assert!(l.contains(&"host: route fd00:7::10/128 dev vethabcdef01234 scope link".to_string()));
    }

    fn second_nic() -> Facts {
        let mut f = first_nic();
        f.nic = "net1".into();
        f.nic_ips = vec!["10.1.0.5/24".parse().unwrap()];
        f.nic_gateways = vec!["10.1.0.1".parse().unwrap()];
        f.nic_routes = vec![RouteSpec::on_link("10.1.0.0/24".parse().unwrap(), "net1", MAIN_TABLE)];
        f.other_nics = vec!["eth0".into()];
        f.existing_pair = Some((mac(1), mac(2)));
        f
    }

    #[test]
    fn a_second_nic_reuses_the_pair() {
        let p = plan(&config(json!({})), &second_nic(), (mac(9), mac(9))).unwrap();
        assert!(p.created.is_none());
        let l = lines(&p);
        assert!(!l.iter().any(|l| l.contains("veth pair") || l.starts_with("host: sysctl")));
    }

    #[test]
    fn a_second_nic_migrates_routes_into_a_table_by_default() {
        let c = config(json!({}));
        assert_eq!(c.migrate_route, MigrateRoute::Auto);
        let l = lines(&plan(&c, &second_nic(), (mac(9), mac(9))).unwrap());
        for want in [
            "host: neighbour 10.1.0.5 dev vethabcdef01234 lladdr 02:00:00:00:00:02 nud permanent",
            "host: route 10.1.0.5/32 dev vethabcdef01234 scope link",
            "pod: route 192.168.7.1/32 dev veth0 scope link table 200",
            "pod: route 10.96.0.0/12 via 192.168.7.1 dev veth0 table 200",
            "pod: route 10.1.0.0/24 dev net1 scope link table 200",
            "pod: route 0.0.0.0/0 via 10.1.0.1 dev net1 table 200",
            "pod: rule priority 1000 from 10.1.0.5/32 lookup 200",
        ] {
            assert!(l.contains(&want.to_string()), "missing {want}: {l:#?}");
        }
    }

    #[test]
    fn migrate_route_zero_leaves_the_main_table_alone() {
        let l = lines(&plan(&config(json!({"migrate_route": 0})), &second_nic(), (mac(9), mac(9))).unwrap());
        assert!(!l.iter().any(|l| l.contains("table") || l.contains("rule")), "{l:#?}");
    }

    #[test]
    fn route_table_names_the_table_routes_migrate_to() {
        let l = lines(&plan(&config(json!({"route_table": 300})), &second_nic(), (mac(9), mac(9))).unwrap());
        assert!(l.contains(&"pod: rule priority 1000 from 10.1.0.5/32 lookup 300".to_string()));
    }
}
