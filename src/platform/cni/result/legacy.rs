//! The result shape of CNI 0.1.0 and 0.2.0: at most one IPv4 and one IPv6 address, each an object
//! (`ip4`, `ip6`) with its gateway and the routes of its family; `dns`; no interfaces.
//!
//! Conversions follow libcni's (`types/040` and `types/100`): up, `ip4` then `ip6` become `ips`
//! (without interface index) and their routes are concatenated in that order; down, the first IPv4
//! and the first IPv6 address are kept with their gateways, each route goes to the object of its
//! destination's family (dropped when there is none), and interfaces and 1.1.0 fields are dropped.
//! A result with no address at all cannot be written in this shape.

use super::{CniResult, Dns, IpConfig, Route};
use crate::platform::cni::error::{CniError, code};
use crate::platform::cni::version::CniVersion;
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::IpAddr;

#[derive(Debug, Default, Serialize, Deserialize)]
struct LegacyResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip4: Option<LegacyIp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ip6: Option<LegacyIp>,
    #[serde(default)]
    dns: Dns,
}

#[derive(Debug, Serialize, Deserialize)]
struct LegacyIp {
    /// Address with its prefix length, host bits kept.
    ip: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    routes: Vec<LegacyRoute>,
}

/// A route as 0.2.0 has it: destination and gateway, nothing else.
#[derive(Debug, Serialize, Deserialize)]
struct LegacyRoute {
    dst: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gw: Option<IpAddr>,
}

/// Parse a 0.1.0/0.2.0 result into the current shape. Keys of other versions are ignored, as the
/// Go library ignores them; an `ip4` holding an IPv6 address (or the reverse) is a decode error.
pub fn parse(v: &Value) -> Result<CniResult, CniError> {
    let legacy = LegacyResult::deserialize(v).map_err(|e| CniError::decode(format!("invalid 0.2.0 result: {e}")))?;
    let mut result = CniResult { dns: legacy.dns, ..CniResult::default() };
    for (key, ip, wants_v4) in [("ip4", legacy.ip4, true), ("ip6", legacy.ip6, false)] {
        let Some(ip) = ip else { continue };
        if ip.ip.is_ipv4() != wants_v4 {
            return Err(CniError::decode(format!("result '{key}.ip' {} is not an {key} address", ip.ip)));
        }
        result.ips.push(IpConfig { address: ip.ip, gateway: ip.gateway, interface: None });
        result.routes.extend(ip.routes.into_iter().map(|r| Route { gw: r.gw, ..Route::to(r.dst) }));
    }
    Ok(result)
}

/// `result` in the 0.1.0/0.2.0 shape, labelled `version`. Code 1 when it has no address: the shape
/// cannot say anything without one, so the network needs a later version.
pub fn print(result: &CniResult, version: CniVersion) -> Result<Value, CniError> {
    let first = |v4: bool| {
        result.ips.iter().find(|ip| ip.address.is_ipv4() == v4).map(|ip| LegacyIp {
            ip: ip.address,
            gateway: ip.gateway,
            routes: Vec::new(),
        })
    };
    let mut legacy = LegacyResult { ip4: first(true), ip6: first(false), dns: result.dns.clone() };
    if legacy.ip4.is_none() && legacy.ip6.is_none() {
        return Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            format!(
                "a result with no IP address cannot be written as a {version} result (it has only 'ip4' and 'ip6')"
            ),
        )
        .with_details("use cniVersion 0.3.0 or later for a network whose result carries no address"));
    }
    for route in &result.routes {
        let family = if route.dst.is_ipv4() { &mut legacy.ip4 } else { &mut legacy.ip6 };
        if let Some(ip) = family {
            ip.routes.push(LegacyRoute { dst: route.dst, gw: route.gw });
        }
    }
    let mut v = serde_json::to_value(&legacy).expect("a result always serializes");
    v["cniVersion"] = version.as_str().into();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn current(v: Value) -> CniResult {
        CniResult::from_json(&v, CniVersion::V1_1_0).unwrap()
    }

    #[test]
    fn a_dual_stack_result_with_routes_round_trips_through_0_2_0() {
        let r = current(json!({
            "cniVersion": "1.1.0",
            "ips": [{"address": "10.1.17.2/24", "gateway": "10.1.17.1"}, {"address": "fd00::2/64", "gateway": "fd00::1"}],
            "routes": [{"dst": "10.1.0.0/16"}, {"dst": "fd00:1::/56", "gw": "fd00::1"}, {"dst": "0.0.0.0/0", "gw": "10.1.17.1"}],
            "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]}
        }));
        let down = print(&r, CniVersion::V0_2_0).unwrap();
        assert_eq!(
            down,
            json!({
                "cniVersion": "0.2.0",
                "ip4": {"ip": "10.1.17.2/24", "gateway": "10.1.17.1",
                        "routes": [{"dst": "10.1.0.0/16"}, {"dst": "0.0.0.0/0", "gw": "10.1.17.1"}]},
                "ip6": {"ip": "fd00::2/64", "gateway": "fd00::1", "routes": [{"dst": "fd00:1::/56", "gw": "fd00::1"}]},
                "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]}
            })
        );
        let up = parse(&down).unwrap();
        assert_eq!(up.ips, r.ips);
        assert_eq!(up.dns, r.dns);
        // Routes come back grouped by family, IPv4 first, as libcni's up-conversion orders them.
        let dsts: Vec<String> = up.routes.iter().map(|r| r.dst.to_string()).collect();
        assert_eq!(dsts, ["10.1.0.0/16", "0.0.0.0/0", "fd00:1::/56"]);
        assert_eq!(print(&up, CniVersion::V0_2_0).unwrap(), down, "a 0.2.0 result round-trips exactly");
    }

    #[test]
    fn a_bare_ip4_result_round_trips_through_0_1_0() {
        let r = current(json!({"ips": [{"address": "10.0.0.5/8"}]}));
        let down = print(&r, CniVersion::V0_1_0).unwrap();
        assert_eq!(down, json!({"cniVersion": "0.1.0", "ip4": {"ip": "10.0.0.5/8"}, "dns": {}}));
        let up = parse(&down).unwrap();
        assert_eq!((up.ips[0].address.to_string(), up.ips[0].gateway), ("10.0.0.5/8".into(), None));
        assert!(up.routes.is_empty() && up.interfaces.is_empty());
    }

    #[test]
    fn a_0_2_0_result_without_ip4_is_ipv6_only_or_empty() {
        let up = parse(&json!({"cniVersion": "0.2.0", "ip6": {"ip": "fd00::9/64"}, "dns": {}})).unwrap();
        assert_eq!(up.ips.len(), 1);
        assert!(up.ips[0].address.is_ipv6());
        let empty = parse(&json!({"cniVersion": "0.2.0", "dns": {"domain": "x"}})).unwrap();
        assert!(empty.ips.is_empty());
        assert_eq!(empty.dns.domain.as_deref(), Some("x"));
    }

    /// Three addresses of two families on an interface, and routes 0.2.0 can only partly say.
    fn three_addresses_on_one_interface() -> CniResult {
        current(json!({
            "interfaces": [{"name": "eth0", "sandbox": "/run/netns/p"}],
            "ips": [{"address": "fd00::2/64", "interface": 0}, {"address": "10.0.0.2/24", "interface": 0},
                    {"address": "10.0.0.3/24", "interface": 0}],
            "routes": [{"dst": "192.168.0.0/16", "gw": "10.0.0.1", "table": 100}, {"dst": "fd01::/64"}]
        }))
    }

    #[test]
    fn going_down_to_0_2_0_keeps_the_first_address_of_each_family() {
        let down = print(&three_addresses_on_one_interface(), CniVersion::V0_2_0).unwrap();
        assert_eq!(down["ip4"], json!({"ip": "10.0.0.2/24", "routes": [{"dst": "192.168.0.0/16", "gw": "10.0.0.1"}]}));
        assert_eq!(down["ip6"], json!({"ip": "fd00::2/64", "routes": [{"dst": "fd01::/64"}]}));
    }

    #[test]
    fn going_down_to_0_2_0_drops_what_it_cannot_say() {
        let down = print(&three_addresses_on_one_interface(), CniVersion::V0_2_0).unwrap();
        assert!(down.get("interfaces").is_none() && down.get("ips").is_none());
        // A route whose family has no address has nowhere to go.
        let v4_only = current(json!({"ips": [{"address": "10.0.0.2/24"}], "routes": [{"dst": "fd01::/64"}]}));
        assert!(print(&v4_only, CniVersion::V0_2_0).unwrap()["ip4"].get("routes").is_none());
    }

    #[test]
    fn a_result_without_an_address_cannot_be_written_as_0_2_0() {
        let e = print(&CniResult::default(), CniVersion::V0_2_0).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e.msg.contains("0.2.0") && e.details.contains("0.3.0"), "{e}");
    }

    #[test]
    fn a_malformed_legacy_result_is_a_decode_error() {
        for bad in [
            json!({"ip4": {"ip": "fd00::1/64"}}),
            json!({"ip6": {"ip": "10.0.0.1/24"}}),
            json!({"ip4": {"ip": "nope"}}),
            json!({"ip4": {"gateway": "10.0.0.1"}}),
            json!({"ip4": {"ip": "10.0.0.1/24", "routes": [{"gw": "10.0.0.1"}]}}),
        ] {
            assert_eq!(parse(&bad).unwrap_err().code, 6, "{bad}");
        }
    }
}
