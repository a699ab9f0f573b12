//! The ADD result, held in the newest (1.1.0) shape, parsed from and printed in whatever version a
//! config asks for. The 0.1.0/0.2.0 shape (`ip4`/`ip6`) and its conversions are in [`legacy`].

mod legacy;

use super::error::CniError;
use super::version::CniVersion;
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::IpAddr;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_path: Option<String>,
    #[serde(default, rename = "pciID", skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Address with its prefix length (`10.1.17.2/24`), host bits kept.
    pub address: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    pub dst: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u32>,
}

impl Route {
    pub fn to(dst: IpNetwork) -> Self {
        Route { dst, gw: None, mtu: None, advmss: None, priority: None, table: None, scope: None }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// An ADD result. Parsed from any supported version; printed in any supported version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniResult {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub dns: Dns,
}

impl CniResult {
    /// Parse a result of any supported version. Its shape is that of its own `cniVersion`, or,
    /// when it has none, of `assumed` (the version of the configuration it answers), as libcni
    /// reads a result without a version. `ips[].version` of 0.3.x/0.4.0 is checked, then dropped.
    pub fn from_json(v: &Value, assumed: CniVersion) -> Result<Self, CniError> {
        let version = match v.get("cniVersion").and_then(Value::as_str) {
            None | Some("") => assumed,
            Some(declared) => CniVersion::parse(declared).unwrap_or(CniVersion::LATEST),
        };
        if version.has_ip4_ip6_result() {
            return legacy::parse(v);
        }
        if let Some(ips) = v.get("ips").and_then(Value::as_array) {
            for ip in ips {
                if let (Some(ver), Some(addr)) =
                    (ip.get("version").and_then(Value::as_str), ip.get("address").and_then(Value::as_str))
                {
                    let is_v4 = addr.parse::<IpNetwork>().map(|n| n.is_ipv4()).unwrap_or(true);
                    if (ver == "4") != is_v4 {
                        return Err(CniError::decode(format!("result ip {addr:?} does not match its version {ver:?}")));
                    }
                }
            }
        }
        Self::deserialize(v).map_err(|e| CniError::decode(format!("invalid result: {e}")))
    }

    /// `from_json` of a plugin's stdout.
    pub fn from_slice(bytes: &[u8], assumed: CniVersion) -> Result<Self, CniError> {
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| CniError::decode(format!("invalid result JSON: {e}")))?;
        Self::from_json(&v, assumed)
    }

    /// The result as the spec's JSON for `version`. Only the 0.1.0/0.2.0 shape can fail: it needs
    /// an address (code 1).
    pub fn to_json(&self, version: CniVersion) -> Result<Value, CniError> {
        if version.has_ip4_ip6_result() {
            return legacy::print(self, version);
        }
        let mut out = self.clone();
        if !version.has_v110_fields() {
            for i in &mut out.interfaces {
                i.mtu = None;
                i.socket_path = None;
                i.pci_id = None;
            }
            for r in &mut out.routes {
                r.mtu = None;
                r.advmss = None;
                r.priority = None;
                r.table = None;
                r.scope = None;
            }
        }
        let mut v = serde_json::to_value(&out).expect("a result always serializes");
        v["cniVersion"] = version.as_str().into();
        if version.has_ip_version_field()
            && let Some(ips) = v.get_mut("ips").and_then(Value::as_array_mut)
        {
            for (ip, cfg) in ips.iter_mut().zip(&self.ips) {
                ip["version"] = if cfg.address.is_ipv4() { "4" } else { "6" }.into();
            }
        }
        Ok(v)
    }

    /// The result in the newest version, which holds everything and cannot fail.
    pub fn to_latest_json(&self) -> Value {
        let mut v = serde_json::to_value(self).expect("a result always serializes");
        v["cniVersion"] = CniVersion::LATEST.as_str().into();
        v
    }

    pub fn to_string(&self, version: CniVersion) -> Result<String, CniError> {
        self.to_json(version).map(|v| v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> CniResult {
        from(json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "cni0", "mac": "aa:bb:cc:dd:ee:ff"}, {"name": "eth0", "sandbox": "/run/netns/p", "mtu": 1450}],
            "ips": [{"address": "10.1.17.2/24", "gateway": "10.1.17.1", "interface": 1},
                    {"address": "fd00::2/64", "interface": 1}],
            "routes": [{"dst": "10.1.0.0/16", "table": 200}, {"dst": "0.0.0.0/0", "gw": "10.1.17.1"}],
            "dns": {"nameservers": ["10.96.0.10"]}
        }))
    }

    fn from(v: Value) -> CniResult {
        CniResult::from_json(&v, CniVersion::LATEST).unwrap()
    }

    #[test]
    fn ips_carry_their_version_from_0_3_0_to_0_4_0_only() {
        for v in [CniVersion::V0_3_0, CniVersion::V0_3_1, CniVersion::V0_4_0] {
            let j = sample().to_json(v).unwrap();
            assert_eq!(j["cniVersion"], v.as_str());
            assert_eq!(j["ips"][0]["version"], "4");
            assert_eq!(j["ips"][1]["version"], "6");
        }
        let j = sample().to_json(CniVersion::V1_0_0).unwrap();
        assert!(j["ips"][0].get("version").is_none());
    }

    #[test]
    fn versions_before_1_1_0_drop_the_fields_it_added() {
        for v in [CniVersion::V0_3_0, CniVersion::V0_3_1, CniVersion::V0_4_0] {
            let j = sample().to_json(v).unwrap();
            assert!(j["interfaces"][1].get("mtu").is_none());
            assert!(j["routes"][0].get("table").is_none());
        }
        let j = sample().to_json(CniVersion::V1_0_0).unwrap();
        assert!(j["routes"][0].get("table").is_none());
    }

    #[test]
    fn version_1_1_0_keeps_the_fields_it_added() {
        let j = sample().to_json(CniVersion::V1_1_0).unwrap();
        assert_eq!(j["routes"][0]["table"], 200);
        assert_eq!(j["interfaces"][1]["mtu"], 1450);
    }

    #[test]
    fn conversion_round_trips_through_every_version() {
        for v in [CniVersion::V0_3_0, CniVersion::V0_3_1, CniVersion::V0_4_0, CniVersion::V1_0_0] {
            let down = sample().to_json(v).unwrap();
            let back = CniResult::from_json(&down, CniVersion::LATEST).unwrap();
            assert_eq!(back.ips, sample().ips);
            assert_eq!(
                back.routes.iter().map(|r| (r.dst, r.gw)).collect::<Vec<_>>(),
                sample().routes.iter().map(|r| (r.dst, r.gw)).collect::<Vec<_>>()
            );
            assert_eq!(back.to_json(CniVersion::V1_1_0).unwrap()["cniVersion"], "1.1.0");
        }
    }

    #[test]
    fn an_address_keeps_its_host_bits() {
        assert_eq!(sample().ips[0].address.to_string(), "10.1.17.2/24");
    }

    #[test]
    fn a_malformed_result_is_a_decode_error() {
        let latest = CniVersion::LATEST;
        assert_eq!(CniResult::from_json(&json!({"ips": [{"address": "nope"}]}), latest).unwrap_err().code, 6);
        assert_eq!(
            CniResult::from_json(&json!({"ips": [{"version": "6", "address": "10.0.0.1/24"}]}), latest)
                .unwrap_err()
                .code,
            6
        );
        assert_eq!(CniResult::from_slice(b"{", latest).unwrap_err().code, 6);
    }

    #[test]
    fn empty_dns_is_an_object() {
        let j = CniResult::default().to_json(CniVersion::V1_0_0).unwrap();
        assert_eq!(j, json!({"cniVersion": "1.0.0", "dns": {}}));
        assert_eq!(CniResult::default().to_latest_json(), json!({"cniVersion": "1.1.0", "dns": {}}));
        assert_eq!(sample().to_latest_json(), sample().to_json(CniVersion::LATEST).unwrap());
    }

    #[test]
    fn the_shape_is_the_results_own_version_or_else_the_assumed_one() {
        let legacy = json!({"ip4": {"ip": "10.0.0.2/24", "gateway": "10.0.0.1"}, "dns": {}});
        // No version: the configuration's decides, as libcni's fixupResultVersion has it.
        let r = CniResult::from_json(&legacy, CniVersion::V0_2_0).unwrap();
        assert_eq!(r.ips[0].address.to_string(), "10.0.0.2/24");
        assert!(CniResult::from_json(&legacy, CniVersion::V1_0_0).unwrap().ips.is_empty());
        // A result's own version wins over the configuration's.
        let mut declared = legacy.clone();
        declared["cniVersion"] = "0.1.0".into();
        assert_eq!(CniResult::from_json(&declared, CniVersion::V1_0_0).unwrap().ips.len(), 1);
        let current = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}]});
        assert_eq!(CniResult::from_json(&current, CniVersion::V0_2_0).unwrap().ips.len(), 1);
        assert_eq!(CniResult::from_json(&json!({"cniVersion": ""}), CniVersion::V0_1_0).unwrap(), CniResult::default());
    }

    #[test]
    fn every_version_round_trips_the_first_address_of_each_family() {
        for v in CniVersion::ALL {
            let printed = sample().to_json(v).unwrap();
            assert_eq!(printed["cniVersion"], v.as_str());
            let back = CniResult::from_json(&printed, CniVersion::LATEST).unwrap();
            let addresses = |r: &CniResult| r.ips.iter().map(|ip| (ip.address, ip.gateway)).collect::<Vec<_>>();
            assert_eq!(addresses(&back), addresses(&sample()), "{v}");
        }
    }
}
