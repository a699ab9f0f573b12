//! The networks annotation's `cni-args`, held to the rules of the keys it could stand in for.
//!
//! `cni-args` becomes every plugin's `args.cni`, and plugins read some of their options there:
//! host-local and static take addresses from `args.cni.ips`, bridge and tuning a MAC from
//! `args.cni.mac`. So `cni-args: {"ips": [...]}` is `ips` by another road, and is checked as `ips`
//! is (refused on a network whose plugins declare no `ips` capability, unless the admin's
//! `annotationIps` lets pods choose addresses there); keys the Go plugins read
//! without regard to case count in any case. A key naming a Multus option the selector does not
//! implement is refused as that option is (code 2), `portMappings` and `bandwidth` (capability
//! arguments, which no plugin reads from `args.cni`) with the element key to use instead, and a capability only the runtime gives
//! (`ipRanges`, `dns`, ...) is refused. Nesting is bounded, so that every configuration and record
//! that carries it still parses where its depth is added to (serde's limit is 128 levels).

use crate::platform::cni::{CniError, ConfList, code};
use crate::platform::netlink::MacAddr;
use crate::programs::selector::netconf::capabilities;
use crate::programs::selector::netconf::inline::go_fold;
use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

/// The deepest `cni-args` may nest (the object itself is level 1).
pub const MAX_DEPTH: usize = 32;

/// Multus keys the annotation refuses with code 2, as Go folds them (with `-` and `_` dropped).
const UNSUPPORTED: [&str; 2] = ["INFINIBANDGUID", "IPAMCLAIMREFERENCE"];
/// Element keys the selector hands to plugins as capability arguments (`runtimeConfig`), never in
/// `args.cni`: in `cni-args` no plugin would see them, so they are refused with the key to use.
const ELEMENT_CAPABILITIES: [(&str, &str); 2] = [("PORTMAPPINGS", "portMappings"), ("BANDWIDTH", "bandwidth")];
/// Capability arguments only the runtime gives.
const RUNTIME_ONLY: [&str; 4] = ["IPRANGES", "DNS", "ALIASES", "CGROUPPATH"];

/// Check a request's `cni-args` for network `network` (whose chain is `list`); `ips_open`: the
/// policy lets the pod choose its addresses on this network whatever its plugins declare. Errors say
/// which key and why; the caller names the annotation element.
pub fn check(cni_args: &Map<String, Value>, list: &ConfList, network: &str, ips_open: bool) -> Result<(), CniError> {
    let depth = depth(&Value::Object(cni_args.clone()));
    if depth > MAX_DEPTH {
        return Err(CniError::invalid_config(format!(
            "\"cni-args\" nests {depth} levels deep; at most {MAX_DEPTH} are allowed"
        )));
    }
    for (key, value) in cni_args {
        let plain: String = go_fold(key).chars().filter(|c| *c != '-' && *c != '_').collect();
        let bad = |why: String| CniError::invalid_config(format!("\"cni-args\" key {key:?}: {why}"));
        match plain.as_str() {
            "IPS" => {
                ips(value).map_err(bad)?;
                if !ips_open && !capabilities::declared_in(list, "ips") {
                    return Err(bad(format!(
                        "plugins read it as \"ips\", and no plugin of network {network} declares the \"ips\" capability \
                         (\"capabilities\": {{\"ips\": true}}), so \"ips\" is refused on it"
                    )));
                }
            }
            "MAC" => {
                let why = match value.as_str() {
                    Some(mac) => MacAddr::assignable(mac).err(),
                    None => Some(format!("{value} is not a MAC address")),
                };
                if let Some(why) = why {
                    return Err(bad(format!("plugins read it as \"mac\", and {why}")));
                }
            }
            p if ELEMENT_CAPABILITIES.iter().any(|(folded, _)| *folded == p) => {
                let (_, name) = ELEMENT_CAPABILITIES.iter().find(|(folded, _)| *folded == p).expect("matched");
                return Err(bad(format!(
                    "plugins take it from the runtime's capability arguments, not from cni-args: use the element's {name:?} key"
                )));
            }
            // A device plugin's device reaches the plugins from the element's own "deviceID",
            // once it is known to be the pod's; by this road it would reach them unchecked.
            "DEVICEID" | "PCIBUSID" => {
                return Err(bad(
                    "plugins read it as the device to take; name one of the pod's devices in the element's \"deviceID\" \
                     key instead"
                        .into(),
                ));
            }
            p if UNSUPPORTED.contains(&p) => {
                return Err(CniError::new(
                    code::UNSUPPORTED_FIELD,
                    format!("\"cni-args\" key {key:?}: plugins read it as a Multus option yh-genie does not support"),
                ));
            }
            p if RUNTIME_ONLY.contains(&p) || p.starts_with("IO.KUBERNETES") => {
                return Err(bad("it is a capability argument only the container runtime gives".into()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A list of addresses with their prefix lengths, as `ips` must be.
fn ips(value: &Value) -> Result<(), String> {
    let Value::Array(items) = value else {
        return Err(format!("plugins read it as \"ips\", which must be a list of addresses, not {value}"));
    };
    for item in items {
        let ok = item.as_str().is_some_and(|ip| ip.contains('/') && ip.parse::<IpNetwork>().is_ok());
        if !ok {
            return Err(format!("plugins read it as \"ips\", and {item} is not an address with a prefix length"));
        }
    }
    Ok(())
}

/// How deep `value` nests: a scalar is 0, `{}` and `[]` are 1.
pub fn depth(value: &Value) -> usize {
    match value {
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(capabilities: Value) -> ConfList {
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "macvlan", "capabilities": capabilities});
        ConfList::parse(conf.to_string().as_bytes(), false, "n").unwrap()
    }

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn ips_by_cni_args_only_where_ips_would_be_taken() {
        let none = list(json!({}));
        let with = list(json!({"ips": true}));
        for key in ["ips", "IPs", "IPS", "i_ps"] {
            let a = args(json!({ key: ["10.1.1.5/24"] }));
            let e = check(&a, &none, "n", false).unwrap_err();
            assert!(e.code == 7 && e.msg.contains("\"ips\" capability"), "{key}: {e}");
            assert!(check(&a, &with, "n", false).is_ok(), "{key}");
        }
        let e = check(&args(json!({"ips": ["10.1.1.5"]})), &with, "n", false).unwrap_err();
        assert!(e.msg.contains("not an address with a prefix length"), "{e}");
        assert!(check(&args(json!({"ips": "10.1.1.5/24"})), &with, "n", false).is_err());
    }

    #[test]
    fn ips_by_cni_args_are_taken_where_the_policy_lets_pods_choose_addresses() {
        let none = list(json!({}));
        assert!(check(&args(json!({"IPs": ["10.1.1.5/24"]})), &none, "n", true).is_ok());
        let e = check(&args(json!({"ips": ["10.1.1.5"]})), &none, "n", true).unwrap_err();
        assert!(e.msg.contains("not an address with a prefix length"), "{e}");
    }

    #[test]
    fn a_mac_in_cni_args_must_be_a_unicast_mac() {
        let l = list(json!({}));
        assert!(check(&args(json!({"MAC": "02:00:00:00:00:01", "vlan": 7})), &l, "n", false).is_ok());
        assert!(check(&args(json!({"mac": "nope"})), &l, "n", false).unwrap_err().msg.contains("not a MAC"));
        let e = check(&args(json!({"Mac": "ff:ff:ff:ff:ff:ff"})), &l, "n", false).unwrap_err();
        assert!(e.code == 7 && e.msg.contains("multicast"), "{e}");
    }

    #[test]
    fn cni_args_keys_the_element_has_a_key_for_are_refused_naming_that_key() {
        let l = list(json!({}));
        assert_eq!(check(&args(json!({"portMappings": []})), &l, "n", false).unwrap_err().code, 7);
        let device = check(&args(json!({"deviceid": "0000:00:01.0"})), &l, "n", false).unwrap_err();
        assert!(device.code == 7 && device.msg.contains("in the element's \"deviceID\" key"), "{device}");
        assert_eq!(check(&args(json!({"pci_bus_id": "0000:00:01.0"})), &l, "n", false).unwrap_err().code, 7);
        let e = check(&args(json!({"BANDWIDTH": {}})), &l, "n", false).unwrap_err();
        assert!(e.code == 7 && e.msg.contains("use the element's \"bandwidth\" key"), "{e}");
    }

    #[test]
    fn an_unsupported_cni_args_key_is_code_2() {
        let l = list(json!({}));
        assert_eq!(check(&args(json!({"infiniband-guid": "x"})), &l, "n", false).unwrap_err().code, 2);
    }

    #[test]
    fn cni_args_keys_only_the_runtime_may_set_are_refused() {
        let l = list(json!({}));
        for key in ["ipRanges", "dns", "io.kubernetes.cri.pod-annotations"] {
            let e = check(&args(json!({ key: [] })), &l, "n", false).unwrap_err();
            assert!(e.code == 7 && e.msg.contains("only the container runtime"), "{key}: {e}");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let nested = |levels: usize| {
            let mut v = json!(1);
            for _ in 0..levels {
                v = json!({ "a": v });
            }
            args(v)
        };
        let l = list(json!({}));
        assert!(check(&nested(MAX_DEPTH), &l, "n", false).is_ok());
        let e = check(&nested(MAX_DEPTH + 1), &l, "n", false).unwrap_err();
        assert!(e.code == 7 && e.msg.contains("33 levels"), "{e}");
        assert_eq!(depth(&json!([[], {"a": [1]}])), 3);
    }
}
