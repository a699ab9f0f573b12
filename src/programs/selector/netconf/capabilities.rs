//! Runtime capabilities: what the container runtime hands its CNI besides the pod's identity
//! (`portMappings` for hostPorts, `bandwidth` from the pod's bandwidth annotations, `dns`, `ips`,
//! `mac`, ...), and the two per-attachment ones a pod may ask for in the networks annotation
//! (`portMappings`, `bandwidth`).
//!
//! The runtime gives them to the selector as libcni gives any plugin: `runtimeConfig`, holding the
//! capabilities the selector's conflist declares (`DECLARED`) that the runtime has values for. The
//! selector hands them to the plugins of the pod's first network (the runtime's interface) exactly
//! as libcni would have, had that network been the runtime's only one (`inject`, libcni's
//! `injectRuntimeConfig`): a plugin gets `runtimeConfig` holding the capabilities it declares
//! `true` that have values, in place of any it had; a plugin that declares none is unchanged. The
//! configuration so made is what the attachment record keeps, so DEL, CHECK and GC hand the
//! plugins the same values (portmap removes its rules by them).

use crate::platform::cni::{CniError, ConfList, PluginConf};
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The capabilities the installed `00-yh-genie.conflist` declares: every well-known one (CNI's
/// CONVENTIONS) and containerd's pod annotations. Declaring one that no network uses costs nothing:
/// a network's plugins get only those they declare themselves.
pub const DECLARED: [&str; 11] = [
    "portMappings",
    "bandwidth",
    "ipRanges",
    "dns",
    "ips",
    "mac",
    "aliases",
    "cgroupPath",
    "infinibandGUID",
    "deviceID",
    "io.kubernetes.cri.pod-annotations",
];

/// The runtime's capability arguments: the selector's own `runtimeConfig`, empty when there is none.
/// Not an object is code 7: libcni never sends one, so something else wrote it.
pub fn runtime_args(conf: &PluginConf) -> Result<Map<String, Value>, CniError> {
    match conf.raw.get("runtimeConfig") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(args)) => Ok(args.clone()),
        Some(other) => {
            Err(CniError::invalid_config(format!("yh-genie: 'runtimeConfig' must be an object, not {other}")))
        }
    }
}

/// Whether some plugin of `list` declares capability `name`.
pub fn declared_in(list: &ConfList, name: &str) -> bool {
    list.plugins.iter().any(|p| declared_by(p, name))
}

/// The `ipam.type` of yh-genie's cluster-wide IPAM (`plugins::ipam::cluster_wide::TYPE`): the
/// one that reads a pod's `ipam-claim-reference` (as `runtimeConfig.ipamClaimReference`).
pub const YH_IPAM: &str = "yh-ipam";

/// Whether `plugin`'s IPAM is `yh-ipam`.
pub fn ipam_is_yh_ipam(plugin: &Map<String, Value>) -> bool {
    plugin.get("ipam").and_then(|i| i.get("type")).and_then(Value::as_str) == Some(YH_IPAM)
}

/// Whether a plugin of `list` has `yh-ipam` as its IPAM.
pub fn uses_yh_ipam(list: &ConfList) -> bool {
    list.plugins.iter().any(ipam_is_yh_ipam)
}

/// Whether `plugin` declares capability `name` (`"capabilities": {"<name>": true}`).
pub fn declared_by(plugin: &Map<String, Value>, name: &str) -> bool {
    plugin.get("capabilities").and_then(|c| c.get(name)).and_then(Value::as_bool) == Some(true)
}

/// `config` (a network's configuration text, already parsed once, so a JSON object) with the
/// runtime's capability arguments `args` given to its plugins as libcni gives them. The same text
/// when no plugin gets any.
pub fn inject(config: &str, args: &Map<String, Value>) -> String {
    if args.is_empty() {
        return config.to_string();
    }
    let Ok(Value::Object(mut top)) = serde_json::from_str::<Value>(config) else {
        return config.to_string();
    };
    let mut changed = false;
    match top.get_mut("plugins") {
        Some(Value::Array(plugins)) => {
            for plugin in plugins.iter_mut().filter_map(Value::as_object_mut) {
                changed |= inject_one(plugin, args);
            }
        }
        _ => changed = inject_one(&mut top, args),
    }
    if changed { Value::Object(top).to_string() } else { config.to_string() }
}

fn inject_one(plugin: &mut Map<String, Value>, args: &Map<String, Value>) -> bool {
    let runtime: Map<String, Value> =
        args.iter().filter(|(name, _)| declared_by(plugin, name)).map(|(k, v)| (k.clone(), v.clone())).collect();
    if runtime.is_empty() {
        return false;
    }
    plugin.insert("runtimeConfig".into(), Value::Object(runtime));
    true
}

/// One port mapping a pod asks for on a further network, as Multus reads the annotation's
/// `portMappings` (and portmap reads `runtimeConfig.portMappings`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(default, rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
}

/// The shaping a pod asks for on a further network (bits per second, burst in bits), as the
/// bandwidth plugin reads `runtimeConfig.bandwidth`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Bandwidth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_rate: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_burst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_rate: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_burst: Option<u64>,
}

/// The annotation's `portMappings`: a list of `{hostPort, containerPort, protocol?, hostIP?}`,
/// ports 1 to 65535, protocol tcp (when not given, as in a pod's ports), udp or sctp (any case, as
/// portmap reads it), hostIP an address.
pub fn port_mappings(value: &Value) -> Result<Vec<PortMapping>, String> {
    let mut list = Vec::<PortMapping>::deserialize(value)
        .map_err(|e| format!("must be a list of {{\"hostPort\", \"containerPort\", \"protocol\", \"hostIP\"}}: {e}"))?;
    for (i, m) in list.iter_mut().enumerate() {
        let at = |why: String| format!("element {}: {why}", i + 1);
        // portmap needs a protocol; Kubernetes' default for a port is TCP.
        m.protocol.get_or_insert_with(|| "tcp".to_string());
        if m.host_port == 0 || m.container_port == 0 {
            return Err(at("ports are 1 to 65535".into()));
        }
        if let Some(p) = &m.protocol
            && !["tcp", "udp", "sctp"].contains(&p.to_ascii_lowercase().as_str())
        {
            return Err(at(format!("protocol {p:?} is not tcp, udp or sctp")));
        }
        if let Some(ip) = &m.host_ip
            && ip.parse::<std::net::IpAddr>().is_err()
        {
            return Err(at(format!("hostIP {ip:?} is not an IP address")));
        }
    }
    Ok(list)
}

/// The annotation's `bandwidth`: `{ingressRate, ingressBurst, egressRate, egressBurst}`, each a
/// number of bits (per second) if given, a rate with its burst.
pub fn bandwidth(value: &Value) -> Result<Bandwidth, String> {
    let b = Bandwidth::deserialize(value).map_err(|e| {
        format!("must be an object of \"ingressRate\", \"ingressBurst\", \"egressRate\", \"egressBurst\" (bits): {e}")
    })?;
    for (dir, rate, burst) in [("ingress", b.ingress_rate, b.ingress_burst), ("egress", b.egress_rate, b.egress_burst)]
    {
        if rate.is_some() != burst.is_some() {
            return Err(format!("{dir}Rate and {dir}Burst go together"));
        }
        if rate == Some(0) || burst == Some(0) {
            return Err(format!("{dir}Rate and {dir}Burst must be above 0"));
        }
    }
    if b == Bandwidth::default() {
        return Err("it asks for nothing".into());
    }
    Ok(b)
}

/// The pod author's values of the capabilities a further network's plugins get (`ips`, `mac`,
/// `portMappings`, `bandwidth`), as `runtimeConfig` entries; only those asked for.
pub fn asked(
    ips: &[IpNetwork],
    mac: Option<&str>,
    ports: &[PortMapping],
    bw: Option<&Bandwidth>,
) -> Map<String, Value> {
    let mut args = Map::new();
    if !ips.is_empty() {
        args.insert("ips".into(), ips.iter().map(|ip| Value::String(ip.to_string())).collect());
    }
    if let Some(mac) = mac {
        args.insert("mac".into(), Value::String(mac.to_string()));
    }
    if !ports.is_empty() {
        args.insert("portMappings".into(), serde_json::to_value(ports).expect("port mappings serialize"));
    }
    if let Some(bw) = bw {
        args.insert("bandwidth".into(), serde_json::to_value(bw).expect("bandwidth serializes"));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn runtime_config_is_set_only_for_declared_capabilities_with_a_value() {
        let conf = json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "bridge", "runtimeConfig": {"stale": 1}},
            {"type": "portmap", "capabilities": {"portMappings": true, "io.kubernetes.cri.pod-annotations": true},
             "runtimeConfig": {"stale": 1}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true, "dns": false}},
            {"type": "tuning", "capabilities": {"mac": true}}]});
        let ports = json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]);
        let args = map(json!({"portMappings": ports, "bandwidth": {"egressRate": 1000, "egressBurst": 100},
                              "dns": {"servers": ["10.96.0.10"]}, "cgroupPath": "/kubepods/x"}));
        let out: Value = serde_json::from_str(&inject(&conf.to_string(), &args)).unwrap();
        // A plugin that declares nothing keeps what it had, as libcni leaves it.
        assert_eq!(out["plugins"][0]["runtimeConfig"], json!({"stale": 1}));
        assert_eq!(out["plugins"][1]["runtimeConfig"], json!({"portMappings": ports}));
        assert_eq!(out["plugins"][2]["runtimeConfig"], json!({"bandwidth": {"egressRate": 1000, "egressBurst": 100}}));
        // Declared, but the runtime has no value: nothing, not an empty runtimeConfig.
        assert!(out["plugins"][3].get("runtimeConfig").is_none());
    }

    #[test]
    fn nothing_to_give_leaves_the_text_as_it_is() {
        let text = "{ \"cniVersion\": \"1.0.0\", \"name\": \"n\", \"type\": \"bridge\" }";
        assert_eq!(inject(text, &Map::new()), text);
        assert_eq!(inject(text, &map(json!({"portMappings": []}))), text);
        let single = r#"{"cniVersion":"1.0.0","name":"n","type":"portmap","capabilities":{"portMappings":true}}"#;
        let out: Value = serde_json::from_str(&inject(single, &map(json!({"portMappings": []})))).unwrap();
        assert_eq!(out["runtimeConfig"], json!({"portMappings": []}));
    }

    #[test]
    fn the_selectors_runtime_config() {
        let conf = |v: Value| PluginConf::from_value(v).unwrap();
        assert!(runtime_args(&conf(json!({"type": "yh-genie"}))).unwrap().is_empty());
        let args = runtime_args(&conf(json!({"type": "yh-genie", "runtimeConfig": {"dns": {}}}))).unwrap();
        assert_eq!(Value::Object(args), json!({"dns": {}}));
        assert_eq!(runtime_args(&conf(json!({"type": "yh-genie", "runtimeConfig": [1]}))).unwrap_err().code, 7);
    }

    #[test]
    fn annotation_port_mappings_are_checked() {
        let ok =
            port_mappings(&json!([{"hostPort": 8080, "containerPort": 80, "protocol": "UDP", "hostIP": "10.0.0.1"}]));
        assert_eq!(ok.unwrap()[0].host_ip.as_deref(), Some("10.0.0.1"));
        let tcp = port_mappings(&json!([{"hostPort": 8080, "containerPort": 80}])).unwrap();
        assert_eq!(tcp[0].protocol.as_deref(), Some("tcp"));
        for (bad, why) in [
            (json!({"hostPort": 1}), "must be a list"),
            (json!([{"hostPort": 0, "containerPort": 80}]), "1 to 65535"),
            (json!([{"hostPort": 70000, "containerPort": 80}]), "must be a list"),
            (json!([{"hostPort": 1, "containerPort": 80, "protocol": "icmp"}]), "\"icmp\""),
            (json!([{"hostPort": 1, "containerPort": 80, "hostIP": "x"}]), "\"x\" is not an IP"),
            (json!([{"hostPort": 1, "containerPort": 80, "hostIp": "10.0.0.1"}]), "unknown field"),
        ] {
            let e = port_mappings(&bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn annotation_bandwidth_is_checked() {
        assert_eq!(bandwidth(&json!({"egressRate": 8, "egressBurst": 9})).unwrap().egress_rate, Some(8));
        for (bad, why) in [
            (json!({"egressRate": 8}), "go together"),
            (json!({}), "asks for nothing"),
            (json!({"ingressRate": 0, "ingressBurst": 1}), "above 0"),
            (json!({"egressRate": -1, "egressBurst": 1}), "must be an object"),
        ] {
            let e = bandwidth(&bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn capabilities_are_found_in_any_plugin() {
        let list = ConfList::parse(
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"a"},{"type":"b","capabilities":{"ips":true}}]}"#,
            true,
            "n",
        )
        .unwrap();
        assert!(declared_in(&list, "ips"));
        assert!(!declared_in(&list, "mac"));
    }
}
