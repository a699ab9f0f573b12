//! The Network Plumbing Working Group's pod annotation `k8s.v1.cni.cncf.io/networks`: the further
//! networks a pod asks for, each a NetworkAttachmentDefinition, in the two forms Multus reads.
//!
//! - Text: comma-separated `name`, `namespace/name`, `name@interface`, `namespace/name@interface`.
//! - JSON: an array of objects with `name` (required), `namespace`, `interface`, `ips` (addresses
//!   with prefix length), `mac`, `default-route` (gateway addresses), `cni-args` (an object given to
//!   every plugin as `args.cni`), `portMappings` and `bandwidth` (for the network's plugins that
//!   declare those capabilities, as Multus gives them), `deviceID` (which of the pod's devices a
//!   device network's attachment takes: it must be one the kubelet allocated to the pod for that
//!   network's resource, checked when the devices are known), `ipam-claim-reference` (the
//!   IPAMClaim of the pod's namespace whose address `yh-ipam` keeps for it, NPWG v1.3).
//!
//! Multus keys this selector does not implement (`infiniband-guid`) are refused with code 2 naming the key rather than dropped,
//! so a pod never silently runs without what it asked for; any other key is code 7 (a misspelling).

use crate::platform::cni::{CniError, code};
use crate::platform::netlink::MacAddr;
use crate::programs::selector::netconf::capabilities::{self, Bandwidth, PortMapping};
use crate::programs::selector::requests::value::interface;
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::net::IpAddr;

/// The annotation's key.
pub const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
/// Multus's annotation that replaces the pod's first network (`eth0`) with one
/// NetworkAttachmentDefinition, in the same syntax (one element).
pub const MULTUS_DEFAULT_NETWORK: &str = "v1.multus-cni.io/default-network";
/// CNI-Genie's annotation: the pod's networks by name (`weave,canal`, `weave@eth5`).
pub const GENIE_CNI: &str = "cni";

/// Multus keys that ask for something this selector does not do.
const UNSUPPORTED: [&str; 1] = ["infiniband-guid"];
const SUPPORTED: [&str; 11] = [
    "name",
    "namespace",
    "interface",
    "ips",
    "mac",
    "default-route",
    "cni-args",
    "portMappings",
    "bandwidth",
    "ipam-claim-reference",
    "deviceID",
];

/// One network the annotation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The NetworkAttachmentDefinition's namespace; `None`: the pod's.
    pub namespace: Option<String>,
    pub name: String,
    pub ifname: Option<String>,
    pub extras: Extras,
    /// The element as written (for messages and `explain`).
    pub text: String,
}

/// What a request asks for beyond the network itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Extras {
    /// Addresses for the IPAM plugin (`runtimeConfig.ips` of plugins with the `ips` capability, and
    /// `CNI_ARGS` `IP=` where the policy's `annotationIps` says).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpNetwork>,
    /// The interface's MAC (`CNI_ARGS` `MAC=`, and `runtimeConfig.mac` where declared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Gateways: the pod's default route goes by this interface (one per address family).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_route: Vec<IpAddr>,
    /// Given to every plugin of the network as `args.cni`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni_args: Option<Map<String, Value>>,
    /// Host ports to this interface (`runtimeConfig.portMappings` where declared).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_mappings: Vec<PortMapping>,
    /// Shaping of this interface (`runtimeConfig.bandwidth` where declared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    /// The device of a device network this attachment takes, of those allocated to the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    /// The IPAMClaim (of the pod's namespace) whose address `yh-ipam` keeps for this interface:
    /// `runtimeConfig.ipamClaimReference` of the network's plugins whose IPAM is `yh-ipam`.
    #[serde(default, rename = "ipamClaimReference", skip_serializing_if = "Option::is_none")]
    pub ipam_claim: Option<String>,
}

impl Extras {
    pub fn is_empty(&self) -> bool {
        *self == Extras::default()
    }
}

/// Parse the annotation's value. An empty value asks for nothing. Errors are code 7 (code 2 for a
/// Multus key that is not implemented) and say which element is wrong and why.
pub fn parse(value: &str) -> Result<Vec<Request>, CniError> {
    parse_as(NETWORKS, value)
}

/// `parse` for an annotation of the same syntax under another `key` (Multus's default-network), so
/// that errors name the annotation the pod wrote.
pub fn parse_as(key: &str, value: &str) -> Result<Vec<Request>, CniError> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let bad = |msg: String| CniError::invalid_config(format!("annotation {key}: {msg}"));
    if value.starts_with(['[', '{', '"']) {
        let elements: Vec<Value> =
            serde_json::from_str(value).map_err(|e| bad(format!("its JSON form must be an array of objects: {e}")))?;
        return elements
            .iter()
            .enumerate()
            .map(|(i, element)| {
                json_element(element)
                    .map_err(|e| CniError::new(e.code, format!("annotation {key}: element {}: {}", i + 1, e.msg)))
            })
            .collect();
    }
    value
        .split(',')
        .enumerate()
        .map(|(i, raw)| {
            let text = raw.trim();
            text_element(text).map_err(|why| bad(format!("element {} ({text:?}): {why}", i + 1)))
        })
        .collect()
}

/// `[namespace/]name[@interface]`.
fn text_element(text: &str) -> Result<Request, String> {
    if text.is_empty() {
        return Err("it is empty".into());
    }
    let (reference, ifname) = match text.split_once('@') {
        Some((reference, ifname)) => (reference, Some(interface(ifname)?)),
        None => (text, None),
    };
    let (namespace, name) = match reference.split_once('/') {
        Some((namespace, name)) => (Some(namespace_name(namespace)?), object_name(name)?),
        None => (None, object_name(reference)?),
    };
    Ok(Request { namespace, name, ifname, extras: Extras::default(), text: text.to_string() })
}

fn json_element(element: &Value) -> Result<Request, CniError> {
    let bad = |msg: String| CniError::invalid_config(msg);
    let Value::Object(map) = element else {
        return Err(bad(format!("{element} is not an object")));
    };
    for key in map.keys() {
        if UNSUPPORTED.contains(&key.as_str()) {
            return Err(CniError::new(
                code::UNSUPPORTED_FIELD,
                format!("{key:?} is not supported by yh-genie (supported: {})", SUPPORTED.join(", ")),
            ));
        }
        if !SUPPORTED.contains(&key.as_str()) {
            return Err(bad(format!("unknown key {key:?} (known: {})", SUPPORTED.join(", "))));
        }
    }
    let string = |key: &str| -> Result<Option<&str>, CniError> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(other) => Err(bad(format!("{key:?} must be a string, not {other}"))),
        }
    };
    let strings = |key: &str| -> Result<Vec<&str>, CniError> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().ok_or_else(|| bad(format!("{key:?} must be a list of strings, not {v}"))))
                .collect(),
            Some(other) => Err(bad(format!("{key:?} must be a list of strings, not {other}"))),
        }
    };
    let name = string("name")?.ok_or_else(|| bad("\"name\" is required".into()))?;
    let name = object_name(name).map_err(|why| bad(format!("\"name\": {why}")))?;
    let at = |key: &str, why: String| bad(format!("{key:?} of {name:?}: {why}"));
    let namespace = string("namespace")?.map(namespace_name).transpose().map_err(|why| at("namespace", why))?;
    let ifname = string("interface")?.map(interface).transpose().map_err(|why| at("interface", why))?;
    let ips = strings("ips")?
        .into_iter()
        .map(|ip| {
            ip.parse::<IpNetwork>()
                .ok()
                .filter(|_| ip.contains('/'))
                .ok_or_else(|| format!("{ip:?} is not an address with a prefix length (10.1.1.5/24)"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|why| at("ips", why))?;
    let mac = string("mac")?
        .map(|mac| MacAddr::assignable(mac).map(|m| m.to_string()))
        .transpose()
        .map_err(|why| at("mac", why))?;
    let default_route = strings("default-route")?
        .into_iter()
        .map(|gw| gw.parse::<IpAddr>().map_err(|_| format!("{gw:?} is not an IP address")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|why| at("default-route", why))?;
    let cni_args = match map.get("cni-args") {
        None | Some(Value::Null) => None,
        Some(Value::Object(args)) => Some(args.clone()),
        Some(other) => return Err(bad(format!("\"cni-args\" of {name:?} must be an object, not {other}"))),
    };
    let mut text = match &namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.clone(),
    };
    if let Some(ifname) = &ifname {
        text = format!("{text}@{ifname}");
    }
    let port_mappings = match map.get("portMappings") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => capabilities::port_mappings(v).map_err(|why| at("portMappings", why))?,
    };
    let bandwidth = match map.get("bandwidth") {
        None | Some(Value::Null) => None,
        Some(v) => Some(capabilities::bandwidth(v).map_err(|why| at("bandwidth", why))?),
    };
    let device_id = string("deviceID")?.map(str::trim).filter(|id| !id.is_empty()).map(String::from);
    let ipam_claim = string("ipam-claim-reference")?
        .map(|claim| dns1123(claim, 253, true).map_err(|why| format!("{claim:?} is not an IPAMClaim name: {why}")))
        .transpose()
        .map_err(|why| at("ipam-claim-reference", why))?;
    let extras = Extras { ips, mac, default_route, cni_args, port_mappings, bandwidth, device_id, ipam_claim };
    Ok(Request { namespace, name, ifname, extras, text })
}

/// A NetworkAttachmentDefinition's name: a DNS-1123 subdomain, as the API server requires (it
/// goes into a URL: nothing else may pass).
fn object_name(name: &str) -> Result<String, String> {
    dns1123(name, 253, true).map_err(|why| format!("{name:?} is not a NetworkAttachmentDefinition name: {why}"))
}

/// A namespace's name: a DNS-1123 label.
fn namespace_name(name: &str) -> Result<String, String> {
    dns1123(name, 63, false).map_err(|why| format!("{name:?} is not a namespace name: {why}"))
}

/// Lowercase letters, digits and `-` (and `.` in subdomains), alphanumeric at both ends.
pub fn dns1123(name: &str, max: usize, dots: bool) -> Result<String, String> {
    let alphanumeric = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > max {
        return Err(format!("it must be 1 to {max} characters"));
    }
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || (dots && *b == b'.');
    if !alphanumeric(bytes.first()) || !alphanumeric(bytes.last()) || !bytes.iter().all(allowed) {
        let extra = if dots { ", '-' and '.'" } else { " and '-'" };
        return Err(format!("only lowercase letters, digits{extra}, starting and ending alphanumeric"));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(value: &str) -> Vec<(Option<String>, String, Option<String>)> {
        parse(value).unwrap().into_iter().map(|r| (r.namespace, r.name, r.ifname)).collect()
    }

    fn r(ns: Option<&str>, name: &str, ifname: Option<&str>) -> (Option<String>, String, Option<String>) {
        (ns.map(String::from), name.to_string(), ifname.map(String::from))
    }

    #[test]
    fn text_form() {
        assert_eq!(
            refs(" lan , infra/storage@stor0,macvlan-router@net1 "),
            [r(None, "lan", None), r(Some("infra"), "storage", Some("stor0")), r(None, "macvlan-router", Some("net1"))]
        );
        assert_eq!(parse("  ").unwrap(), []);
        assert_eq!(parse("a.b-c").unwrap()[0].text, "a.b-c");
    }

    #[test]
    fn json_form_with_every_supported_key() {
        let requests = parse(
            r#"[{"name": "lan", "namespace": "infra", "interface": "lan0", "ips": ["10.1.1.5/24", "fd00::5/64"],
                 "mac": "02:00:00:AA:bb:01", "default-route": ["10.1.1.1"], "cni-args": {"vlan": 7},
                 "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
                 "bandwidth": {"egressRate": 1000000, "egressBurst": 100000}, "ipam-claim-reference": "vm-a.net1"},
                {"name": "plain"}]"#,
        )
        .unwrap();
        assert_eq!(requests.len(), 2);
        let lan = &requests[0];
        assert_eq!(
            (lan.namespace.as_deref(), lan.name.as_str(), lan.ifname.as_deref()),
            (Some("infra"), "lan", Some("lan0"))
        );
        assert_eq!(lan.extras.ips.iter().map(ToString::to_string).collect::<Vec<_>>(), ["10.1.1.5/24", "fd00::5/64"]);
        assert_eq!(lan.extras.mac.as_deref(), Some("02:00:00:aa:bb:01"));
        assert_eq!(lan.extras.default_route, ["10.1.1.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(lan.extras.cni_args.as_ref().unwrap()["vlan"], 7);
        assert_eq!((lan.extras.port_mappings[0].host_port, lan.extras.port_mappings[0].container_port), (8080, 80));
        assert_eq!(lan.extras.bandwidth.as_ref().unwrap().egress_rate, Some(1000000));
        assert_eq!(lan.extras.ipam_claim.as_deref(), Some("vm-a.net1"));
        assert_eq!(lan.text, "infra/lan@lan0");
        assert!(requests[1].extras.is_empty());
    }

    #[test]
    fn bad_elements_are_refused_naming_them() {
        for (value, code, want) in [
            ("a,,b", 7, "element 2 (\"\"): it is empty"),
            ("a/b/c", 7, "\"b/c\" is not a NetworkAttachmentDefinition name"),
            ("Web", 7, "\"Web\" is not a NetworkAttachmentDefinition name"),
            ("ns.x/a", 7, "\"ns.x\" is not a namespace name"),
            ("a@", 7, "interface name is empty"),
            ("a@way-too-long-interface", 7, "longer than 15"),
            ("a@lo", 7, "loopback"),
            ("a@net%d", 7, "invalid"),
            ("a@n\u{1b}x", 7, "invalid"),
            (r#"[{"name":"a","interface":"lo"}]"#, 7, "loopback"),
            (r#"[{"name":"a","interface":"n\u0000"}]"#, 7, "invalid"),
            ("a?x", 7, "\"a?x\""),
            ("../a", 7, "namespace"),
            ("{\"name\":\"a\"}", 7, "must be an array"),
            ("[1]", 7, "element 1: 1 is not an object"),
            (r#"[{"namespace":"a"}]"#, 7, "\"name\" is required"),
            (r#"[{"name":"a","interfce":"x"}]"#, 7, "unknown key \"interfce\""),
            (r#"[{"name":"a","infiniband-guid":"x"}]"#, 2, "\"infiniband-guid\" is not supported"),
            (r#"[{"name":"a","portMappings":[{"hostPort":80}]}]"#, 7, "\"portMappings\" of \"a\": must be a list"),
            (r#"[{"name":"a","bandwidth":{}}]"#, 7, "\"bandwidth\" of \"a\": it asks for nothing"),
            (
                r#"[{"name":"a","ips":["10.1.1.5"]}]"#,
                7,
                "\"ips\" of \"a\": \"10.1.1.5\" is not an address with a prefix",
            ),
            (r#"[{"name":"a","ips":"10.1.1.5/24"}]"#, 7, "list of strings"),
            (r#"[{"name":"a","mac":"zz"}]"#, 7, "\"zz\" is not a MAC address"),
            (r#"[{"name":"a","mac":"01:00:5e:00:00:01"}]"#, 7, "is a multicast address"),
            (r#"[{"name":"a","mac":"00:00:00:00:00:00"}]"#, 7, "is all zeros"),
            (r#"[{"name":"a","default-route":["x"]}]"#, 7, "\"x\" is not an IP address"),
            (r#"[{"name":"a","cni-args":"x"}]"#, 7, "must be an object"),
            (r#"[{"name":"a","ipam-claim-reference":"Vm"}]"#, 7, "\"Vm\" is not an IPAMClaim name"),
            (r#"[{"name":5}]"#, 7, "must be a string"),
        ] {
            let e = parse(value).unwrap_err();
            assert_eq!(e.code, code, "{value}: {e}");
            assert!(e.msg.contains(NETWORKS) && e.msg.contains(want), "{value}: {e}");
        }
    }

    #[test]
    fn dns1123_names() {
        assert!(dns1123("a-b.c", 253, true).is_ok());
        assert!(dns1123("a.b", 63, false).is_err());
        assert!(dns1123("-a", 63, false).is_err());
        assert!(dns1123(&"a".repeat(64), 63, false).is_err());
        assert!(dns1123("", 63, false).is_err());
    }
}
