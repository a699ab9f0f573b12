//! What a pod asks for beyond a network (`ips`, `mac`, `cni-args` of the networks annotation),
//! handed to the network's plugins the way the reference plugins read it.
//!
//! - `ips`: `runtimeConfig.ips` of every plugin that declares the `ips` capability, as libcni gives
//!   a runtime's capability arguments (host-local and static read it, the IPAM plugin through its
//!   main plugin's configuration). Where the admin's `annotationIps` lets pods choose addresses as
//!   Multus does, also `CNI_ARGS` `IP=` with the addresses joined by `,` (static and whereabouts
//!   read that list; host-local reads one bare address there, under Multus as here), to every
//!   plugin whatever it declares. Elsewhere a pod asking for ips on a network whose plugins declare
//!   no `ips` capability is refused at selection rather than given another address.
//! - `mac`: `CNI_ARGS` `MAC=` (bridge, macvlan and the others read it in that one form), and
//!   `runtimeConfig.mac` for plugins that declare the `mac` capability.
//!
//! `CNI_ARGS` that gain a key get `IgnoreUnknown=1` too, so that plugins that do not know the key
//! accept it (Go plugins refuse a key they lack a field for, read by its exact name). The values are
//! parsed addresses, never the pod's text, so nothing a pod writes can add a key of its own.
//! - `portMappings`, `bandwidth`: `runtimeConfig.portMappings` and `runtimeConfig.bandwidth` of every
//!   plugin that declares the capability (portmap, bandwidth), as Multus gives them; a pod asking for
//!   them on a network whose plugins do not declare them is refused at selection, as for `ips`.
//! - `cni-args`: merged into every plugin's `args.cni`, as Multus gives it.
//! - `ipam-claim-reference`: `runtimeConfig.ipamClaimReference` of every plugin whose `ipam.type` is
//!   `yh-ipam` (which reads it there, run in process or exec'd by its plugin with its plugin's
//!   configuration); selection refuses it on a network without one (`capabilities::uses_yh_ipam`).

use crate::platform::cni::CniArgs;
use crate::programs::selector::netconf::capabilities;
use crate::programs::selector::requests::annotation::Extras;
use serde_json::{Map, Value};

/// The configuration `config` with `extras` given to its plugins. Unchanged (the same text) when
/// there is nothing to give. `config` has been parsed before, so it is a JSON object.
pub fn apply_to_config(config: &str, extras: &Extras) -> String {
    if extras.ips.is_empty()
        && extras.mac.is_none()
        && extras.cni_args.is_none()
        && extras.port_mappings.is_empty()
        && extras.bandwidth.is_none()
        && extras.ipam_claim.is_none()
    {
        return config.to_string();
    }
    let Ok(Value::Object(mut top)) = serde_json::from_str::<Value>(config) else {
        return config.to_string();
    };
    match top.get_mut("plugins") {
        Some(Value::Array(plugins)) => {
            for plugin in plugins.iter_mut().filter_map(Value::as_object_mut) {
                apply_to_plugin(plugin, extras);
            }
        }
        _ => apply_to_plugin(&mut top, extras),
    }
    Value::Object(top).to_string()
}

fn apply_to_plugin(plugin: &mut Map<String, Value>, extras: &Extras) {
    let asked =
        capabilities::asked(&extras.ips, extras.mac.as_deref(), &extras.port_mappings, extras.bandwidth.as_ref());
    let runtime: Map<String, Value> =
        asked.into_iter().filter(|(name, _)| capabilities::declared_by(plugin, name)).collect();
    if !runtime.is_empty() {
        let entry = plugin.entry("runtimeConfig").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(existing) = entry {
            existing.extend(runtime);
        }
    }
    if let Some(claim) = &extras.ipam_claim
        && capabilities::ipam_is_yh_ipam(plugin)
    {
        let entry = plugin.entry("runtimeConfig").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(existing) = entry {
            existing.insert("ipamClaimReference".into(), Value::String(claim.clone()));
        }
    }
    if let Some(cni_args) = &extras.cni_args {
        let args = plugin.entry("args").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(args) = args {
            let cni = args.entry("cni").or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(cni) = cni {
                cni.extend(cni_args.clone());
            }
        }
    }
}

/// The runtime's `CNI_ARGS` as an attachment's plugins get them: with `MAC=` when the pod asks for
/// a MAC, `IP=` (its addresses joined by `,`) when it asks for addresses and `ips_as_args` (the
/// policy lets it choose them as Multus does), and `IgnoreUnknown=1` with either, so that a plugin
/// that does not know the key accepts it.
pub fn apply_to_args(args: &CniArgs, extras: &Extras, ips_as_args: bool) -> CniArgs {
    let ips = (ips_as_args && !extras.ips.is_empty())
        .then(|| extras.ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(","));
    if extras.mac.is_none() && ips.is_none() {
        return args.clone();
    }
    let mut args = args.clone();
    if args.get("IgnoreUnknown").is_none() {
        args.set("IgnoreUnknown", "1");
    }
    if let Some(ips) = &ips {
        args.set("IP", ips);
    }
    if let Some(mac) = &extras.mac {
        args.set("MAC", mac);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn extras(value: Value) -> Extras {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn nothing_asked_leaves_the_text_as_it_is() {
        let text = "{ \"cniVersion\": \"1.0.0\",  \"name\": \"n\", \"type\": \"bridge\" }";
        assert_eq!(apply_to_config(text, &Extras::default()), text);
        let args = CniArgs::parse("K8S_POD_NAME=a").unwrap();
        assert_eq!(apply_to_args(&args, &Extras::default(), true), args);
    }

    /// A list of five plugins declaring different capabilities, and the configuration with every
    /// extra a pod can ask for applied to it.
    fn five_plugins_given_every_extra() -> (Value, Value) {
        let conf = json!({"cniVersion": "1.0.0", "name": "lan", "plugins": [
            {"type": "macvlan", "capabilities": {"ips": true, "mac": true}, "runtimeConfig": {"keep": 1}},
            {"type": "tuning", "capabilities": {"ips": false}},
            {"type": "router"},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}]});
        let out = serde_json::from_str(&apply_to_config(&conf.to_string(), &every_extra())).unwrap();
        (conf, out)
    }

    fn every_extra() -> Extras {
        extras(json!({"ips": ["10.1.1.5/24"], "mac": "02:00:00:00:00:01", "cniArgs": {"vlan": 7},
            "portMappings": [{"hostPort": 8080, "containerPort": 80}], "bandwidth": {"egressRate": 8, "egressBurst": 9}}))
    }

    #[test]
    fn runtime_config_goes_only_to_plugins_declaring_the_capability() {
        let (_, out) = five_plugins_given_every_extra();
        assert_eq!(
            out["plugins"][0]["runtimeConfig"],
            json!({"keep": 1, "ips": ["10.1.1.5/24"], "mac": "02:00:00:00:00:01"})
        );
        assert!(out["plugins"][1].get("runtimeConfig").is_none());
        assert!(out["plugins"][2].get("runtimeConfig").is_none());
        assert_eq!(
            out["plugins"][3]["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80}]})
        );
        assert_eq!(out["plugins"][4]["runtimeConfig"], json!({"bandwidth": {"egressRate": 8, "egressBurst": 9}}));
        let single = json!({"cniVersion": "1.0.0", "name": "s", "type": "bridge", "capabilities": {"mac": true}});
        let out: Value = serde_json::from_str(&apply_to_config(&single.to_string(), &every_extra())).unwrap();
        assert_eq!(out["runtimeConfig"], json!({"mac": "02:00:00:00:00:01"}));
    }

    #[test]
    fn cni_args_go_to_every_plugin() {
        let (_, out) = five_plugins_given_every_extra();
        for i in 0..5 {
            assert_eq!(out["plugins"][i]["args"]["cni"]["vlan"], 7, "plugin {i}");
        }
    }

    #[test]
    fn a_mac_goes_into_cni_args_with_ignore_unknown() {
        let e = extras(json!({"mac": "02:00:00:00:00:01"}));
        let args = apply_to_args(&CniArgs::parse("K8S_POD_NAME=a").unwrap(), &e, true);
        assert_eq!(args.to_env_string(), "K8S_POD_NAME=a;IgnoreUnknown=1;MAC=02:00:00:00:00:01");
        let args = apply_to_args(&CniArgs::parse("IgnoreUnknown=1;MAC=x").unwrap(), &e, true);
        assert_eq!(args.to_env_string(), "IgnoreUnknown=1;MAC=02:00:00:00:00:01");
    }

    #[test]
    fn ips_go_into_cni_args_comma_joined_where_the_policy_says() {
        let e = extras(json!({"ips": ["10.1.1.21/24", "fd00::21/64"], "mac": "02:00:00:00:00:01"}));
        let runtime = CniArgs::parse("IgnoreUnknown=true;K8S_POD_NAME=a").unwrap();
        assert_eq!(
            apply_to_args(&runtime, &e, true).to_env_string(),
            "IgnoreUnknown=true;K8S_POD_NAME=a;IP=10.1.1.21/24,fd00::21/64;MAC=02:00:00:00:00:01"
        );
    }

    #[test]
    fn ips_stay_out_of_cni_args_where_the_policy_does_not_say() {
        let e = extras(json!({"ips": ["10.1.1.21/24"]}));
        let runtime = CniArgs::parse("K8S_POD_NAME=a").unwrap();
        assert_eq!(apply_to_args(&runtime, &e, false), runtime);
    }

    #[test]
    fn an_ipam_claim_reaches_the_plugins_whose_ipam_is_yh_ipam_only() {
        let conf = json!({"cniVersion": "1.0.0", "name": "lan", "plugins": [
            {"type": "macvlan", "ipam": {"type": "yh-ipam", "pool": "lan"}},
            {"type": "macvlan", "ipam": {"type": "host-local"}},
            {"type": "tuning"}]});
        let extras = extras(json!({"ipamClaimReference": "vm-a.net1"}));
        let got: Value = serde_json::from_str(&apply_to_config(&conf.to_string(), &extras)).unwrap();
        assert_eq!(got["plugins"][0]["runtimeConfig"], json!({"ipamClaimReference": "vm-a.net1"}));
        assert!(got["plugins"][1].get("runtimeConfig").is_none(), "{got}");
        assert!(got["plugins"][2].get("runtimeConfig").is_none(), "{got}");
    }
}
