//! The delegate's network configuration: yonghui's `delegate` section completed from subnet.env.
//! A pure function of the config and the subnet file, so every rule is unit-tested without a kernel.
//!
//! Common to every platform: `name` is yonghui's, `cniVersion` is yonghui's when it has one (a
//! missing one stays missing, as in flannel, so the delegate reads 0.1.0 too), `runtimeConfig` is
//! handed on, `type` defaults per platform, and keys yonghui does not know pass through unchanged.
//! The Linux rules are here; the Windows ones are in [`super::windows`].

use super::config::NetConf;
use super::subnet_env::{SubnetEnv, parse_cidr};
use super::windows;
use crate::platform::cni::CniError;
use crate::programs::plugins::bridge;
use ipnetwork::IpNetwork;
use serde_json::{Map, Value, json};

/// The delegate on Linux when the config names none: the built-in bridge.
pub const LINUX_DEFAULT_TYPE: &str = bridge::NAME;

/// Linux bridge plugins: the pod's gateway is the bridge, so `isGateway` defaults to true for them.
const BRIDGE_TYPES: [&str; 2] = [bridge::NAME, "bridge"];

const DEFAULT_IPAM_TYPE: &str = "host-local";

/// Keys of an `ipam` base that describe an address range. They are replaced by the yonghui
/// subnet(s): kept beside them, host-local would read a second range set and give the pod a second
/// address (`subnet`, `ranges`), or apply one node's range or gateway to every node's subnet
/// (`rangeStart`, `rangeEnd`, `gateway`), which fails or misroutes on all nodes but one.
const IPAM_RANGE_KEYS: [&str; 5] = ["subnet", "ranges", "rangeStart", "rangeEnd", "gateway"];

/// Which delegate shape to build: the platforms differ in default type, NAT and gateway rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Linux,
    Windows,
}

impl Platform {
    /// The platform this binary runs on.
    pub const HOST: Platform = if cfg!(windows) { Platform::Windows } else { Platform::Linux };
}

/// A generated delegate: the plugin to run and the configuration to give it.
#[derive(Debug, Clone, PartialEq)]
pub struct Delegate {
    pub plugin_type: String,
    pub config: Map<String, Value>,
}

impl Delegate {
    /// Compact JSON with sorted keys: byte for byte what flannel saves, so its saved files and
    /// ours are interchangeable.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.config).expect("a JSON map always serializes")
    }
}

/// Build the delegate for `conf` on this node (`env`). Errors are code 7.
pub fn generate(conf: &NetConf, env: &SubnetEnv, platform: Platform) -> Result<Delegate, CniError> {
    let default_type = match platform {
        Platform::Linux => LINUX_DEFAULT_TYPE,
        Platform::Windows => windows::DEFAULT_TYPE,
    };
    let plugin_type = conf.delegate_type().unwrap_or(default_type).to_string();
    let mut config = conf.delegate.clone();
    config.insert("name".into(), conf.name.clone().into());
    config.insert("type".into(), plugin_type.clone().into());
    // As flannel: yonghui's version when it has one; else the delegate's own, if it names one.
    if let Some(version) = conf.cni_version {
        config.insert("cniVersion".into(), version.as_str().into());
    }
    if let Some(runtime_config) = &conf.runtime_config {
        config.insert("runtimeConfig".into(), runtime_config.clone());
    }
    match platform {
        Platform::Linux => complete_for_linux(&mut config, &plugin_type, conf.ipam.as_ref(), env)?,
        Platform::Windows => windows::complete(&mut config, &plugin_type, env)?,
    }
    Ok(Delegate { plugin_type, config })
}

/// On Linux the daemon's masquerade and the delegate's are alternatives (`ipMasq` defaults to the
/// inverse of `FLANNEL_IPMASQ`), the fabric's MTU is the default, and bridges are the pod's gateway.
/// What the delegate config sets itself is kept.
fn complete_for_linux(
    config: &mut Map<String, Value>,
    plugin_type: &str,
    ipam_base: Option<&Map<String, Value>>,
    env: &SubnetEnv,
) -> Result<(), CniError> {
    config.entry("ipMasq").or_insert(Value::Bool(!env.ipmasq));
    config.entry("mtu").or_insert(env.mtu.into());
    if BRIDGE_TYPES.contains(&plugin_type) {
        config.entry("isGateway").or_insert(Value::Bool(true));
    }
    config.insert("ipam".into(), Value::Object(linux_ipam(ipam_base, env)?));
    Ok(())
}

/// The delegate's ipam: the `ipam` base (other keys kept), type defaulting to host-local, the
/// node's subnet(s) as the only range(s), and routes = the base's routes, then one per yonghui
/// network that the base does not already route (a duplicate route would fail the delegate).
///
/// One subnet is written as `"subnet"`, as flannel's README documents; two
/// (dual stack) need `"ranges"`, one range set each, so the pod gets one address per family.
/// host-local reads both forms the same way.
pub fn linux_ipam(base: Option<&Map<String, Value>>, env: &SubnetEnv) -> Result<Map<String, Value>, CniError> {
    let mut ipam = base.cloned().unwrap_or_default();
    for key in IPAM_RANGE_KEYS {
        ipam.remove(key);
    }
    ipam.entry("type").or_insert(DEFAULT_IPAM_TYPE.into());
    let subnets: Vec<IpNetwork> = env.subnets().collect();
    match subnets.as_slice() {
        [subnet] => ipam.insert("subnet".into(), subnet.to_string().into()),
        several => ipam
            .insert("ranges".into(), several.iter().map(|subnet| json!([{ "subnet": subnet.to_string() }])).collect()),
    };
    let mut routes = base_routes(ipam.remove("routes"))?;
    for network in env.networks() {
        if !routes.iter().any(|(dst, _)| *dst == network) {
            routes.push((network, json!({ "dst": network.to_string() })));
        }
    }
    ipam.insert("routes".into(), routes.into_iter().map(|(_, route)| route).collect());
    Ok(ipam)
}

/// The base's `routes`, each with its parsed destination; the route objects are kept as given.
fn base_routes(routes: Option<Value>) -> Result<Vec<(IpNetwork, Value)>, CniError> {
    let invalid = |what: String| CniError::invalid_config(format!("yonghui configuration: 'ipam.routes' {what}"));
    let routes = match routes {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(routes)) => routes,
        Some(other) => return Err(invalid(format!("must be a list of routes, not {other}"))),
    };
    routes
        .into_iter()
        .enumerate()
        .map(|(i, route)| {
            let dst = match route.get("dst") {
                Some(Value::String(dst)) => {
                    parse_cidr(dst).map_err(|why| invalid(format!("[{i}].dst: {dst:?}: {why}")))?
                }
                _ => return Err(invalid(format!("[{i}] must be an object with a 'dst' CIDR, not {route}"))),
            };
            Ok((dst, route))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::PluginConf;
    use crate::platform::cni::version::SUPPORTED;

    /// A flannel node's subnet.env, masquerading on.
    const NODE_ENV: &str =
        "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n";
    /// Another node's subnet.env: other networks, MTU 1450, masquerading off.
    const OTHER_NODE_ENV: &str =
        "FLANNEL_NETWORK=192.169.0.0/16\nFLANNEL_SUBNET=192.169.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n";
    const DUAL_STACK_ENV: &str = "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\n\
        FLANNEL_IPV6_NETWORK=fd00:1::/56\nFLANNEL_IPV6_SUBNET=fd00:1:0:11::/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n";

    fn env(text: &str) -> SubnetEnv {
        SubnetEnv::parse(text, "subnet.env").unwrap()
    }

    /// `conf` (a netconf written without cniVersion) as the runtime passes it: with `version`.
    fn netconf(conf: &str, version: &str) -> NetConf {
        let mut v: Value = serde_json::from_str(conf).unwrap();
        v["cniVersion"] = version.into();
        NetConf::from_plugin_conf(&PluginConf::from_value(v).unwrap()).unwrap()
    }

    fn linux(conf: &str, version: &str, env_text: &str) -> Result<Delegate, CniError> {
        generate(&netconf(conf, version), &env(env_text), Platform::Linux)
    }

    fn config(conf: &str, env_text: &str) -> Value {
        Value::Object(linux(conf, "1.0.0", env_text).unwrap().config)
    }

    /// `expected` plus the cniVersion the generator copies in.
    fn with_version(mut expected: Value, version: &str) -> Value {
        expected["cniVersion"] = version.into();
        expected
    }

    #[test]
    fn default_config_in_every_version() {
        for version in SUPPORTED {
            for conf in [r#"{"name": "mynet", "type": "yonghui"}"#, r#"{"name": "mynet", "type": "flannel"}"#] {
                let d = linux(conf, version, NODE_ENV).unwrap();
                assert_eq!(d.plugin_type, "yh-bridge");
                let want = json!({
                    "name": "mynet",
                    "type": "yh-bridge",
                    "mtu": 1472,
                    "ipMasq": false,
                    "isGateway": true,
                    "ipam": {"type": "host-local", "subnet": "10.1.17.0/24", "routes": [{"dst": "10.1.0.0/16"}]}
                });
                assert_eq!(Value::Object(d.config), with_version(want, version), "{version}");
            }
        }
    }

    #[test]
    fn a_delegates_own_mtu_is_kept_over_the_subnet_env() {
        for version in SUPPORTED {
            let d = linux(
                r#"{"name": "mynet", "type": "yonghui", "delegate": {"bridge": "mynet0", "mtu": 1400}}"#,
                version,
                NODE_ENV,
            )
            .unwrap();
            let want = json!({
                "name": "mynet",
                "type": "yh-bridge",
                "bridge": "mynet0",
                "mtu": 1400,
                "ipMasq": false,
                "isGateway": true,
                "ipam": {"type": "host-local", "subnet": "10.1.17.0/24", "routes": [{"dst": "10.1.0.0/16"}]}
            });
            assert_eq!(Value::Object(d.config), with_version(want, version));
        }
    }

    #[test]
    fn ipvlan_delegate_gets_no_is_gateway() {
        for version in SUPPORTED {
            let d = linux(
                r#"{"name": "mynet", "type": "yonghui", "delegate": {"type": "ipvlan", "master": "eth0"}}"#,
                version,
                NODE_ENV,
            )
            .unwrap();
            assert_eq!(d.plugin_type, "ipvlan");
            let want = json!({
                "name": "mynet",
                "type": "ipvlan",
                "master": "eth0",
                "ipMasq": false,
                "mtu": 1472,
                "ipam": {"type": "host-local", "subnet": "10.1.17.0/24", "routes": [{"dst": "10.1.0.0/16"}]}
            });
            assert_eq!(Value::Object(d.config), with_version(want, version));
        }
    }

    #[test]
    fn masquerading_off_configs_in_every_version() {
        let ipam = json!({"type": "host-local", "subnet": "192.169.1.0/24", "routes": [{"dst": "192.169.0.0/16"}]});
        for version in SUPPORTED {
            let d = linux(r#"{"name": "mynet", "type": "flannel"}"#, version, OTHER_NODE_ENV).unwrap();
            let want = json!({"name": "mynet", "type": "yh-bridge", "ipMasq": true, "mtu": 1450, "isGateway": true, "ipam": ipam});
            assert_eq!(Value::Object(d.config), with_version(want, version));

            let d = linux(
                r#"{"name": "mynet", "type": "flannel", "delegate": {"bridge": "mynet0"}}"#,
                version,
                OTHER_NODE_ENV,
            )
            .unwrap();
            let want = json!({"name": "mynet", "type": "yh-bridge", "bridge": "mynet0", "ipMasq": true, "mtu": 1450, "isGateway": true, "ipam": ipam});
            assert_eq!(Value::Object(d.config), with_version(want, version));
        }
    }

    #[test]
    fn kubernetes_style_conflist_entry_saves_flannel_compatible_bytes() {
        let d = linux(
            r#"{"name": "cbr0", "type": "yonghui", "delegate": {"type": "bridge", "hairpinMode": true, "isDefaultGateway": true}}"#,
            "0.3.1",
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
        )
        .unwrap();
        // Sorted keys, compact: what flannel writes for the same input, except for `subnet`
        // (flannel writes `ranges` with one range set, which host-local reads the same).
        assert_eq!(
            String::from_utf8(d.to_bytes()).unwrap(),
            r#"{"cniVersion":"0.3.1","hairpinMode":true,"ipMasq":false,"ipam":{"routes":[{"dst":"10.244.0.0/16"}],"subnet":"10.244.1.0/24","type":"host-local"},"isDefaultGateway":true,"isGateway":true,"mtu":1450,"name":"cbr0","type":"bridge"}"#
        );
    }

    #[test]
    fn dual_stack_gets_a_range_set_with_a_route_per_family() {
        let c = config(r#"{"name": "n", "type": "yonghui"}"#, DUAL_STACK_ENV);
        assert_eq!(
            c["ipam"],
            json!({
                "type": "host-local",
                "ranges": [[{"subnet": "10.1.17.0/24"}], [{"subnet": "fd00:1:0:11::/64"}]],
                "routes": [{"dst": "10.1.0.0/16"}, {"dst": "fd00:1::/56"}]
            })
        );
        assert!(c["ipam"].get("subnet").is_none());
    }

    #[test]
    fn ipv6_only_uses_subnet() {
        let c = config(
            r#"{"name": "n", "type": "yonghui"}"#,
            "FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:5::1/64\nFLANNEL_MTU=1400\nFLANNEL_IPMASQ=false\n",
        );
        assert_eq!(
            c["ipam"],
            json!({"type": "host-local", "subnet": "fd00:0:0:5::/64", "routes": [{"dst": "fd00::/48"}]})
        );
        assert_eq!((c["mtu"].as_u64(), c["ipMasq"].as_bool()), (Some(1400), Some(true)));
    }

    #[test]
    fn several_networks_get_a_route_each() {
        let c = config(
            r#"{"name": "n", "type": "yonghui"}"#,
            "FLANNEL_NETWORK=10.1.0.0/16,10.2.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\n\
             FLANNEL_IPV6_NETWORK=fd00:1::/56,fd00:2::/56\nFLANNEL_IPV6_SUBNET=fd00:1:0:11::/64\n\
             FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
        );
        assert_eq!(
            c["ipam"]["routes"],
            json!([{"dst": "10.1.0.0/16"}, {"dst": "10.2.0.0/16"}, {"dst": "fd00:1::/56"}, {"dst": "fd00:2::/56"}])
        );
    }

    #[test]
    fn an_ipam_base_keeps_its_keys_with_its_routes_first_but_not_its_ranges() {
        let c = config(
            r#"{"name": "n", "type": "yonghui", "ipam": {
                "type": "host-local",
                "dataDir": "/var/lib/cni/networks-yh",
                "resolvConf": "/etc/resolv.conf",
                "routes": [{"dst": "10.96.0.0/12"}, {"dst": "0.0.0.0/0", "gw": "10.1.17.254"}, {"dst": "10.1.0.0/16"}],
                "subnet": "192.168.0.0/24",
                "ranges": [[{"subnet": "192.168.1.0/24"}]],
                "rangeStart": "192.168.0.10",
                "rangeEnd": "192.168.0.20",
                "gateway": "192.168.0.1"
            }}"#,
            NODE_ENV,
        );
        assert_eq!(
            c["ipam"],
            json!({
                "type": "host-local",
                "dataDir": "/var/lib/cni/networks-yh",
                "resolvConf": "/etc/resolv.conf",
                "subnet": "10.1.17.0/24",
                // The base already routes the yonghui network: not added twice.
                "routes": [{"dst": "10.96.0.0/12"}, {"dst": "0.0.0.0/0", "gw": "10.1.17.254"}, {"dst": "10.1.0.0/16"}]
            })
        );
    }

    #[test]
    fn an_ipam_base_keeps_its_type() {
        let c = config(r#"{"name": "n", "type": "yonghui", "ipam": {"type": "static-ish", "x": 1}}"#, NODE_ENV);
        assert_eq!((c["ipam"]["type"].as_str(), c["ipam"]["x"].as_i64()), (Some("static-ish"), Some(1)));
    }

    #[test]
    fn an_ipam_base_without_a_type_is_host_local() {
        let c = config(r#"{"name": "n", "type": "yonghui", "ipam": {"routes": [{"dst": "10.96.0.0/12"}]}}"#, NODE_ENV);
        assert_eq!(c["ipam"]["type"], "host-local");
        assert_eq!(c["ipam"]["routes"], json!([{"dst": "10.96.0.0/12"}, {"dst": "10.1.0.0/16"}]));
    }

    #[test]
    fn a_bad_ipam_route_is_code_7_saying_which() {
        for (routes, want) in [
            (r#"{"dst": "10.0.0.0/8"}"#, "'ipam.routes' must be a list of routes"),
            (r#"[{"dst": "10.0.0.0/8"}, {"gw": "10.0.0.1"}]"#, "'ipam.routes' [1] must be an object with a 'dst'"),
            (r#"["10.0.0.0/8"]"#, "[0] must be an object"),
            (r#"[{"dst": "10.0.0.0"}]"#, "[0].dst: \"10.0.0.0\": the value is not a CIDR"),
        ] {
            let e = linux(
                &format!(r#"{{"name": "n", "type": "yonghui", "ipam": {{"routes": {routes}}}}}"#),
                "1.0.0",
                NODE_ENV,
            )
            .unwrap_err();
            assert_eq!(e.code, 7);
            assert!(e.msg.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn runtime_config_is_handed_on() {
        let c = config(
            r#"{"name": "n", "type": "yonghui", "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
                "delegate": {"runtimeConfig": {"stale": true}}}"#,
            NODE_ENV,
        );
        assert_eq!(
            c["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
        );
        let c = config(r#"{"name": "n", "type": "yonghui"}"#, NODE_ENV);
        assert!(c.get("runtimeConfig").is_none());
    }

    /// `conf` exactly as given: no cniVersion added.
    fn linux_as_given(conf: Value) -> Delegate {
        let conf = NetConf::from_plugin_conf(&PluginConf::from_value(conf).unwrap()).unwrap();
        generate(&conf, &env(NODE_ENV), Platform::Linux).unwrap()
    }

    #[test]
    fn without_a_version_hands_the_delegate_none_as_flannel_does() {
        // Missing, or empty as libcni injects it for a list without one: the same to flannel.
        for conf in
            [json!({"name": "mynet", "type": "yonghui"}), json!({"name": "mynet", "type": "yonghui", "cniVersion": ""})]
        {
            let d = linux_as_given(conf);
            assert_eq!(
                String::from_utf8(d.to_bytes()).unwrap(),
                r#"{"ipMasq":false,"ipam":{"routes":[{"dst":"10.1.0.0/16"}],"subnet":"10.1.17.0/24","type":"host-local"},"isGateway":true,"mtu":1472,"name":"mynet","type":"yh-bridge"}"#
            );
        }
        // With none of its own, yonghui leaves the delegate's; with one, its own wins.
        let d = linux_as_given(json!({"name": "n", "type": "yonghui", "delegate": {"cniVersion": "0.2.0"}}));
        assert_eq!(d.config["cniVersion"], "0.2.0");
        let d = linux_as_given(
            json!({"name": "n", "type": "yonghui", "cniVersion": "0.1.0", "delegate": {"cniVersion": "1.0.0"}}),
        );
        assert_eq!(d.config["cniVersion"], "0.1.0");
    }

    #[test]
    fn explicit_delegate_flags_win_over_defaults() {
        let c = config(
            r#"{"name": "n", "type": "yonghui", "delegate": {"type": "bridge", "mtu": 9000, "ipMasq": true, "isGateway": false}}"#,
            NODE_ENV,
        );
        assert_eq!(
            (c["mtu"].as_u64(), c["ipMasq"].as_bool(), c["isGateway"].as_bool()),
            (Some(9000), Some(true), Some(false))
        );
        // The reference bridge is a bridge too: it gets isGateway by default.
        let c = config(r#"{"name": "n", "type": "yonghui", "delegate": {"type": "bridge"}}"#, NODE_ENV);
        assert_eq!(c["isGateway"], true);
    }

    /// A delegate section with a key yonghui does not know, one it does, and a cniVersion of its own.
    const DELEGATE_WITH_KEYS_OF_ITS_OWN: &str = r#"{"name": "n", "type": "yonghui", "delegate": {"futureKey": {"deep": [1, 2]}, "hairpinMode": true, "cniVersion": "0.3.0"}}"#;

    #[test]
    fn the_delegates_other_keys_pass_through() {
        let c = config(DELEGATE_WITH_KEYS_OF_ITS_OWN, NODE_ENV);
        assert_eq!(c["futureKey"], json!({"deep": [1, 2]}));
        assert_eq!(c["hairpinMode"], true);
    }

    #[test]
    fn yonghui_sets_the_delegates_name_type_with_version() {
        let c = config(DELEGATE_WITH_KEYS_OF_ITS_OWN, NODE_ENV);
        assert_eq!(c["cniVersion"], "1.0.0");
        assert_eq!((c["name"].as_str(), c["type"].as_str()), (Some("n"), Some("yh-bridge")));
    }
}
