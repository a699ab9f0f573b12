//! The delegate shape for Windows' HNS plugins (`win-l2bridge`, the default there, and
//! `win-overlay`), as flannel's CNI plugin shapes them (docs/yonghui.md, "Windows"). Pure and
//! tested on Linux; the binary is Linux-only today.
//!
//! Windows differs from Linux in three ways:
//! - NAT: the yonghui daemon does no masquerading on Windows, the delegate does it through an HNS
//!   `OutBoundNAT` endpoint policy. So `ipMasq` defaults to `FLANNEL_IPMASQ` itself, not its
//!   inverse as on Linux (the daemon masquerades there), and when it is on, the node's
//!   subnet and the cluster networks are added to the policy's `ExceptionList`: traffic between
//!   pods keeps its source address, traffic leaving the cluster is NATed.
//! - Gateway: the pod's gateway is an address of the node's HNS network, `.2` for L2Bridge (the
//!   host's bridge endpoint) and `.1` for Overlay.
//! - IPv4 only, and no `ipam` base, `mtu` or `isGateway` (the HNS plugins have no such keys).

use super::subnet_env::SubnetEnv;
use crate::platform::cni::CniError;
use ipnetwork::Ipv4Network;
use serde_json::{Map, Value, json};
use std::net::Ipv4Addr;

/// The delegate on Windows when the config names none (host-gw backend, an HNS L2Bridge network).
pub const DEFAULT_TYPE: &str = "win-l2bridge";
/// The vxlan backend's HNS Overlay network.
pub const OVERLAY_TYPE: &str = "win-overlay";

/// Where the Windows plugins read extra HNS policies from (their Go decoders match keys
/// case-insensitively, so `additionalArgs` means the same).
const POLICIES_KEY: &str = "AdditionalArgs";

/// Complete `config` for a Windows delegate of `plugin_type` on this node.
pub fn complete(config: &mut Map<String, Value>, plugin_type: &str, env: &SubnetEnv) -> Result<(), CniError> {
    let (Some(subnet), Some(&network)) = (env.ipv4_subnet, env.ipv4_networks.first()) else {
        return Err(CniError::invalid_config(format!(
            "yonghui: the Windows delegate {plugin_type} needs IPv4 (FLANNEL_NETWORK and FLANNEL_SUBNET); HNS networks are IPv4"
        )));
    };
    let ip_masq = match config.entry("ipMasq").or_insert(Value::Bool(env.ipmasq)) {
        Value::Bool(on) => *on,
        other => {
            return Err(CniError::invalid_config(format!(
                "yonghui configuration: 'delegate.ipMasq' must be true or false, not {other}"
            )));
        }
    };
    let mut ipam = json!({ "type": "host-local", "subnet": subnet.to_string() });
    if let Some(gateway) = gateway(plugin_type, subnet)? {
        ipam["gateway"] = gateway.to_string().into();
    }
    config.insert("ipam".into(), ipam);
    if plugin_type == DEFAULT_TYPE {
        // win-l2bridge NATs for `clusterNetworkPrefix`; the cluster network is the sensible default.
        config.entry("clusterNetworkPrefix").or_insert(network.to_string().into());
    }
    if ip_masq {
        let mut exceptions = vec![subnet.to_string()];
        exceptions.extend(env.ipv4_networks.iter().map(|n| n.to_string()));
        add_outbound_nat_exceptions(config, &exceptions)?;
    }
    Ok(())
}

/// The pod gateway for the HNS network types yonghui knows; other Windows plugins choose their own.
///
/// flannel's Windows setup is often worded as "the .2 (or .1) address in $FLANNEL_NETWORK". Read
/// literally that is an address of another node's subnet (10.244.0.2 for a node with 10.244.1.0/24), off-link for the
/// pod. The HNS network yonghui's daemon makes on this node is FLANNEL_SUBNET, with the host's
/// endpoint at .2 (L2Bridge) or the network gateway at .1 (Overlay), so that is what is used.
fn gateway(plugin_type: &str, subnet: Ipv4Network) -> Result<Option<Ipv4Addr>, CniError> {
    let host_number = match plugin_type {
        DEFAULT_TYPE => 2,
        OVERLAY_TYPE => 1,
        _ => return Ok(None),
    };
    // .1 or .2 must be a host address, below the broadcast address: a /30 at least.
    match subnet.nth(host_number).filter(|ip| *ip != subnet.broadcast()) {
        Some(ip) => Ok(Some(ip)),
        None => Err(CniError::invalid_config(format!(
            "yonghui: FLANNEL_SUBNET {subnet} is too small for a {plugin_type} gateway at .{host_number}"
        ))),
    }
}

/// Make sure an `OutBoundNAT` endpoint policy exists in `AdditionalArgs` and its `ExceptionList`
/// holds `exceptions`: the first such policy is extended (entries already there are kept, none is
/// repeated); if there is none, one is added after the existing policies.
fn add_outbound_nat_exceptions(config: &mut Map<String, Value>, exceptions: &[String]) -> Result<(), CniError> {
    let invalid = |what: String| CniError::invalid_config(format!("yonghui configuration: 'delegate.{what}"));
    let key = key_ignoring_case(config, POLICIES_KEY).unwrap_or(POLICIES_KEY).to_string();
    let policies = match config.entry(key.clone()).or_insert_with(|| Value::Array(Vec::new())) {
        Value::Array(policies) => policies,
        other => return Err(invalid(format!("{key}' must be a list of policies, not {other}"))),
    };
    let Some(nat) = policies.iter_mut().find_map(outbound_nat_value) else {
        policies.push(json!({
            "Name": "EndpointPolicy",
            "Value": { "Type": "OutBoundNAT", "ExceptionList": exceptions },
        }));
        return Ok(());
    };
    let list_key = key_ignoring_case(nat, "ExceptionList").unwrap_or("ExceptionList").to_string();
    let list = match nat.entry(list_key.clone()).or_insert_with(|| Value::Array(Vec::new())) {
        Value::Array(list) => list,
        other => return Err(invalid(format!("{key}' OutBoundNAT '{list_key}' must be a list, not {other}"))),
    };
    for exception in exceptions {
        if !list.iter().any(|e| e.as_str() == Some(exception)) {
            list.push(exception.clone().into());
        }
    }
    Ok(())
}

/// The `Value` object of `policy` if it is an `EndpointPolicy` of type `OutBoundNAT`.
fn outbound_nat_value(policy: &mut Value) -> Option<&mut Map<String, Value>> {
    let policy = policy.as_object_mut()?;
    let name_key = key_ignoring_case(policy, "Name")?;
    if !policy[name_key].as_str()?.eq_ignore_ascii_case("EndpointPolicy") {
        return None;
    }
    let value_key = key_ignoring_case(policy, "Value")?.to_string();
    let value = policy.get_mut(&value_key)?.as_object_mut()?;
    let type_key = key_ignoring_case(value, "Type")?;
    value[type_key].as_str()?.eq_ignore_ascii_case("OutBoundNAT").then_some(value)
}

fn key_ignoring_case<'m>(map: &'m Map<String, Value>, key: &str) -> Option<&'m str> {
    map.keys().find(|k| k.eq_ignore_ascii_case(key)).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::super::config::NetConf;
    use super::super::delegate::{Delegate, Platform, generate};
    use super::*;
    use crate::platform::cni::PluginConf;
    use crate::platform::cni::version::SUPPORTED;

    /// A Windows node's subnet.env (with the MTU a subnet file always has).
    const WINDOWS_ENV: &str =
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.0/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n";

    fn windows(conf: &str, version: &str, env_text: &str) -> Result<Delegate, CniError> {
        let mut v: Value = serde_json::from_str(conf).unwrap();
        v["cniVersion"] = version.into();
        let conf = NetConf::from_plugin_conf(&PluginConf::from_value(v).unwrap()).unwrap();
        generate(&conf, &SubnetEnv::parse(env_text, "subnet.env").unwrap(), Platform::Windows)
    }

    fn config(conf: &str, env_text: &str) -> Value {
        Value::Object(windows(conf, "1.0.0", env_text).unwrap().config)
    }

    fn outbound_nat(exceptions: &[&str]) -> Value {
        json!({"Name": "EndpointPolicy", "Value": {"Type": "OutBoundNAT", "ExceptionList": exceptions}})
    }

    #[test]
    fn overlay_delegate_in_every_version() {
        for version in SUPPORTED {
            let d = windows(
                r#"{"name": "mynet", "type": "yonghui", "delegate": {"type": "win-overlay", "endpointMacPrefix": "0E-2A"}}"#,
                version,
                WINDOWS_ENV,
            )
            .unwrap();
            assert_eq!(d.plugin_type, "win-overlay");
            // The whole delegate: the gateway and the NAT policy included.
            assert_eq!(
                Value::Object(d.config),
                json!({
                    "cniVersion": version,
                    "name": "mynet",
                    "type": "win-overlay",
                    "endpointMacPrefix": "0E-2A",
                    "ipMasq": true,
                    "ipam": {"subnet": "10.244.1.0/24", "type": "host-local", "gateway": "10.244.1.1"},
                    "AdditionalArgs": [outbound_nat(&["10.244.1.0/24", "10.244.0.0/16"])]
                })
            );
        }
    }

    #[test]
    fn the_default_delegate_is_win_l2bridge_as_flannel_configures_it() {
        let c = config(r#"{"name": "mynet", "type": "yonghui"}"#, WINDOWS_ENV);
        assert_eq!(
            c,
            json!({
                "cniVersion": "1.0.0",
                "name": "mynet",
                "type": "win-l2bridge",
                "ipMasq": true,
                "clusterNetworkPrefix": "10.244.0.0/16",
                "ipam": {"type": "host-local", "subnet": "10.244.1.0/24", "gateway": "10.244.1.2"},
                "AdditionalArgs": [outbound_nat(&["10.244.1.0/24", "10.244.0.0/16"])]
            })
        );
    }

    #[test]
    fn ip_masq_is_flannel_ipmasq_not_its_inverse() {
        let env = WINDOWS_ENV.replace("IPMASQ=true", "IPMASQ=false");
        let c = config(r#"{"name": "n", "type": "yonghui", "delegate": {"type": "win-overlay"}}"#, &env);
        assert_eq!(c["ipMasq"], false);
    }

    #[test]
    fn only_ip_masq_brings_the_nat_policy() {
        let env = WINDOWS_ENV.replace("IPMASQ=true", "IPMASQ=false");
        let c = config(r#"{"name": "n", "type": "yonghui", "delegate": {"type": "win-overlay"}}"#, &env);
        assert!(c.get("AdditionalArgs").is_none());
        // An explicit choice in the delegate is kept and decides the NAT policy.
        let c = config(r#"{"name": "n", "type": "yonghui", "delegate": {"ipMasq": true}}"#, &env);
        assert_eq!(c["AdditionalArgs"], json!([outbound_nat(&["10.244.1.0/24", "10.244.0.0/16"])]));
        let c = config(r#"{"name": "n", "type": "yonghui", "delegate": {"ipMasq": false}}"#, WINDOWS_ENV);
        assert!(c.get("AdditionalArgs").is_none());
    }

    #[test]
    fn existing_policies_are_kept_with_their_nat_exclusions_completed() {
        let c = config(
            r#"{"name": "n", "type": "yonghui", "delegate": {"type": "win-overlay", "AdditionalArgs": [
                {"Name": "EndpointPolicy", "Value": {"Type": "ROUTE", "DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}},
                {"name": "endpointpolicy", "value": {"type": "outboundnat", "exceptionList": ["10.96.0.0/12", "10.244.0.0/16"]}}
            ]}}"#,
            WINDOWS_ENV,
        );
        assert_eq!(
            c["AdditionalArgs"],
            json!([
                {"Name": "EndpointPolicy", "Value": {"Type": "ROUTE", "DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}},
                {"name": "endpointpolicy", "value": {"type": "outboundnat", "exceptionList": ["10.96.0.0/12", "10.244.0.0/16", "10.244.1.0/24"]}}
            ])
        );
    }

    #[test]
    fn a_nat_policy_without_an_exception_list_gets_one() {
        let c = config(
            r#"{"name": "n", "type": "yonghui", "delegate": {"additionalArgs": [{"Name": "EndpointPolicy", "Value": {"Type": "OutBoundNAT"}}]}}"#,
            WINDOWS_ENV,
        );
        assert_eq!(c["additionalArgs"], json!([outbound_nat(&["10.244.1.0/24", "10.244.0.0/16"])]));
        assert!(c.get("AdditionalArgs").is_none());
    }

    #[test]
    fn a_missing_nat_policy_is_appended() {
        let c = config(
            r#"{"name": "n", "type": "yonghui", "delegate": {"AdditionalArgs": [{"Name": "EndpointPolicy", "Value": {"Type": "ROUTE"}}]}}"#,
            WINDOWS_ENV,
        );
        assert_eq!(
            c["AdditionalArgs"],
            json!([{"Name": "EndpointPolicy", "Value": {"Type": "ROUTE"}}, outbound_nat(&["10.244.1.0/24", "10.244.0.0/16"])])
        );
    }

    /// A custom delegate type on a node of two cluster networks.
    fn sdnbridge_on_two_networks() -> Value {
        let env = WINDOWS_ENV.replace("10.244.0.0/16", "10.244.0.0/16,10.245.0.0/16");
        config(r#"{"name": "n", "type": "yonghui", "delegate": {"type": "sdnbridge"}}"#, &env)
    }

    #[test]
    fn every_cluster_network_is_excepted_from_nat() {
        let c = sdnbridge_on_two_networks();
        assert_eq!(c["AdditionalArgs"], json!([outbound_nat(&["10.244.1.0/24", "10.244.0.0/16", "10.245.0.0/16"])]));
    }

    #[test]
    fn a_custom_delegate_type_gets_no_gateway() {
        let c = sdnbridge_on_two_networks();
        assert_eq!(c["ipam"], json!({"type": "host-local", "subnet": "10.244.1.0/24"}));
        assert!(c.get("clusterNetworkPrefix").is_none());
    }

    /// A configuration with runtimeConfig and the user's own cluster prefix.
    fn with_a_prefix_of_the_users() -> Value {
        config(
            r#"{"name": "n", "type": "yonghui", "runtimeConfig": {"dns": {"servers": ["10.96.0.10"]}},
                "delegate": {"clusterNetworkPrefix": "10.0.0.0/8"}}"#,
            WINDOWS_ENV,
        )
    }

    #[test]
    fn the_users_cluster_prefix_is_kept() {
        assert_eq!(with_a_prefix_of_the_users()["clusterNetworkPrefix"], "10.0.0.0/8");
    }

    #[test]
    fn runtime_config_is_kept() {
        assert_eq!(with_a_prefix_of_the_users()["runtimeConfig"], json!({"dns": {"servers": ["10.96.0.10"]}}));
    }

    #[test]
    fn a_windows_configuration_error_is_code_7_saying_what() {
        let ipv6_only =
            "FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00::/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n";
        let tiny = WINDOWS_ENV.replace("10.244.1.0/24", "10.244.1.0/31");
        for (conf, env, want) in [
            (r#"{"name": "n", "type": "yonghui"}"#, ipv6_only, "needs IPv4"),
            (r#"{"name": "n", "type": "yonghui"}"#, tiny.as_str(), "too small for a win-l2bridge gateway at .2"),
            (
                r#"{"name": "n", "type": "yonghui", "delegate": {"ipMasq": "yes"}}"#,
                WINDOWS_ENV,
                "'delegate.ipMasq' must be true or false",
            ),
            (
                r#"{"name": "n", "type": "yonghui", "delegate": {"AdditionalArgs": {}}}"#,
                WINDOWS_ENV,
                "'delegate.AdditionalArgs' must be a list",
            ),
            (
                r#"{"name": "n", "type": "yonghui", "delegate": {"AdditionalArgs": [{"Name": "EndpointPolicy", "Value": {"Type": "OutBoundNAT", "ExceptionList": "10.0.0.0/8"}}]}}"#,
                WINDOWS_ENV,
                "OutBoundNAT 'ExceptionList' must be a list",
            ),
        ] {
            let e = windows(conf, "1.0.0", env).unwrap_err();
            assert_eq!(e.code, 7);
            assert!(e.msg.contains(want), "{want}: {e}");
        }
    }
}
