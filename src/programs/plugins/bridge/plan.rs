//! From the IPAM plugin's answer to what ADD configures: the result (every address on the container
//! interface, gateways filled in, a default route when asked), the gateway addresses for the
//! bridge, and the container's routes with their next hops. Pure, so it is tested without a kernel.

use super::config::Conf;
use crate::platform::cni::CniResult;
use crate::platform::cni::result::{IpConfig, Route};
use crate::platform::netlink::IpFamily;
use ipnetwork::IpNetwork;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// In the result, interfaces are `[bridge, host veth, container interface]`.
pub const CONTAINER_INTERFACE: usize = 2;

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The ADD result, still without interfaces (they are known once made).
    pub result: CniResult,
    /// `gateway/prefix` for the bridge, one per pod address (isGateway only).
    pub bridge_addresses: Vec<IpNetwork>,
    /// Routes for the container interface: destination and next hop.
    pub container_routes: Vec<(IpNetwork, Option<IpAddr>)>,
}

impl Plan {
    pub fn new(ipam: CniResult, conf: &Conf) -> Plan {
        let mut result = ipam;
        if let Some(dns) = &conf.dns {
            result.dns = dns.clone();
        }
        let mut bridge_addresses = Vec::new();
        let mut default_route_for = Vec::new();
        for ip in &mut result.ips {
            ip.interface = Some(CONTAINER_INTERFACE);
            if ip.gateway.is_none() && conf.is_gateway {
                ip.gateway = Some(first_host(&ip.address));
            }
            let family = IpFamily::of_net(&ip.address);
            if conf.is_default_gateway && !default_route_for.contains(&family) {
                default_route_for.push(family);
                let has_default = result.routes.iter().any(|r| r.gw.is_some() && r.dst == family.default_route());
                if !has_default {
                    result.routes.push(Route { gw: ip.gateway, ..Route::to(family.default_route()) });
                }
            }
            if conf.is_gateway
                && let Some(gw) = ip.gateway
            {
                bridge_addresses
                    .push(IpNetwork::new(gw, ip.address.prefix()).expect("prefix comes from a valid network"));
            }
        }
        let container_routes = container_routes(&result.ips, &result.routes);
        Plan { result, bridge_addresses, container_routes }
    }
}

/// Each route's next hop: its own `gw`, else the gateway of the first address of its family that
/// has one (the reference's `ConfigureIface`), else none (on-link).
fn container_routes(ips: &[IpConfig], routes: &[Route]) -> Vec<(IpNetwork, Option<IpAddr>)> {
    let gateway_of = |family: IpFamily| ips.iter().filter_map(|ip| ip.gateway).find(|gw| IpFamily::of(*gw) == family);
    routes.iter().map(|r| (r.dst, r.gw.or_else(|| gateway_of(IpFamily::of_net(&r.dst))))).collect()
}

/// The subnet's first host: `10.1.17.0/24` -> `10.1.17.1`, the reference's gateway default.
pub fn first_host(net: &IpNetwork) -> IpAddr {
    match net.network() {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a).wrapping_add(1))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a).wrapping_add(1))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::{CniArgs, PluginConf};
    use serde_json::{Value, json};

    fn conf(v: Value) -> Conf {
        let mut v = v;
        v["cniVersion"] = "1.0.0".into();
        v["name"] = "n".into();
        v["type"] = "yh-bridge".into();
        Conf::parse(&PluginConf::from_value(v).unwrap(), &CniArgs::default()).unwrap()
    }
    fn ipam(v: Value) -> CniResult {
        CniResult::from_json(&v, crate::platform::cni::CniVersion::LATEST).unwrap()
    }

    #[test]
    fn l3_without_gateway_keeps_ipam_answer() {
        let p = Plan::new(
            ipam(json!({"ips": [{"address": "10.1.0.2/24"}], "routes": [{"dst": "10.0.0.0/8"}]})),
            &conf(json!({})),
        );
        assert_eq!(p.result.ips[0].interface, Some(2));
        assert_eq!(p.result.ips[0].gateway, None);
        assert!(p.bridge_addresses.is_empty());
        assert_eq!(p.container_routes, vec![("10.0.0.0/8".parse().unwrap(), None)]);
    }

    /// A gateway bridge's plan for an IPAM answer of two families, the IPv6 one with its gateway.
    fn dual_stack_gateway_plan() -> Plan {
        Plan::new(
            ipam(json!({
                "ips": [{"address": "10.1.0.7/24"}, {"address": "fd00:1::7/64", "gateway": "fd00:1::fe"}],
                "routes": [{"dst": "10.0.0.0/8"}, {"dst": "fd00::/16"}, {"dst": "192.168.0.0/16", "gw": "10.1.0.254"}]
            })),
            &conf(json!({"isGateway": true})),
        )
    }

    #[test]
    fn a_missing_gateway_is_filled_in_per_family() {
        let p = dual_stack_gateway_plan();
        let gws: Vec<_> = p.result.ips.iter().map(|i| i.gateway.unwrap().to_string()).collect();
        assert_eq!(gws, ["10.1.0.1", "fd00:1::fe"]);
        let hops: Vec<_> = p.container_routes.iter().map(|(_, gw)| gw.unwrap().to_string()).collect();
        assert_eq!(hops, ["10.1.0.1", "fd00:1::fe", "10.1.0.254"]);
    }

    #[test]
    fn the_gateways_go_on_the_bridge() {
        let p = dual_stack_gateway_plan();
        let br: Vec<_> = p.bridge_addresses.iter().map(ToString::to_string).collect();
        assert_eq!(br, ["10.1.0.1/24", "fd00:1::fe/64"]);
    }

    #[test]
    fn default_gateway_adds_one_default_route_per_family_unless_present() {
        let p = Plan::new(
            ipam(json!({
                "ips": [{"address": "10.1.0.7/24"}, {"address": "10.2.0.7/24"}, {"address": "fd00::7/64"}],
                "routes": [{"dst": "::/0", "gw": "fd00::99"}]
            })),
            &conf(json!({"isDefaultGateway": true})),
        );
        let routes: Vec<_> = p.result.routes.iter().map(|r| (r.dst.to_string(), r.gw.map(|g| g.to_string()))).collect();
        assert_eq!(
            routes,
            [
                ("::/0".to_string(), Some("fd00::99".to_string())),
                ("0.0.0.0/0".to_string(), Some("10.1.0.1".to_string()))
            ]
        );
    }

    #[test]
    fn configured_dns_replaces_ipam_dns() {
        let answer = ipam(json!({"ips": [{"address": "10.1.0.7/24"}], "dns": {"nameservers": ["1.1.1.1"]}}));
        assert_eq!(Plan::new(answer.clone(), &conf(json!({}))).result.dns.nameservers, ["1.1.1.1"]);
        let p = Plan::new(answer, &conf(json!({"dns": {"nameservers": ["10.96.0.10"]}})));
        assert_eq!(p.result.dns.nameservers, ["10.96.0.10"]);
    }

    #[test]
    fn first_host_of_both_families() {
        assert_eq!(first_host(&"10.1.17.9/24".parse().unwrap()).to_string(), "10.1.17.1");
        assert_eq!(first_host(&"fd00:1::9/64".parse().unwrap()).to_string(), "fd00:1::1");
    }
}
