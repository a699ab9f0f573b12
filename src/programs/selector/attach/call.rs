//! The call a network's plugins get, as libcni would make it for a runtime that ran that network
//! alone: its interface, its configuration with the runtime's capability arguments when it is the
//! pod's first network and what the pod asked for beyond the network (`extras`), and the runtime's
//! args; external plugins looked up in `binDir` first, then in the runtime's `CNI_PATH`.

use super::extras;
use super::record::Record;
use crate::platform::cni::{CniArgs, CniError, ConfList, Invocation};
use crate::programs::selector::choose::Attachment;
use crate::programs::selector::choose::chosen;
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::netconf::capabilities;

/// The call as an attachment's plugins get it: its interface, the runtime's args plus what the pod
/// asked for, external plugins looked up in `binDir` first, then in the runtime's `CNI_PATH`.
pub(super) fn delegate_call(runtime: &Invocation, config: &SelectorConfig, ifname: &str, args: CniArgs) -> Invocation {
    let mut path = vec![config.bin_dir.clone()];
    path.extend(runtime.path.iter().filter(|dir| **dir != config.bin_dir).cloned());
    Invocation { path, ifname: ifname.to_string(), args, ..runtime.clone() }
}

/// The call a network's plugins get for the runtime's GC or STATUS: no container, the plugins
/// looked up as for ADD.
pub fn gc_call(runtime: &Invocation, config: &SelectorConfig) -> Invocation {
    delegate_call(runtime, config, &runtime.ifname, CniArgs::default())
}

/// The call of an attachment's plugins: the runtime's args with what the pod asked for, its `ips`
/// among them where the policy lets the pod choose addresses on the network as Multus does.
fn call_of(runtime: &Invocation, config: &SelectorConfig, attachment: &Attachment) -> Invocation {
    let ips_as_args = config.policy.annotation_ips.as_multus(attachment.source.inline());
    let args = extras::apply_to_args(&runtime.args, &attachment.extras, ips_as_args);
    delegate_call(runtime, config, &attachment.ifname, args)
}

/// What an attachment's plugins get for `runtime`'s call: its configuration with the runtime's
/// capability arguments when it is the pod's first network (`position` 0, the runtime's interface)
/// and the pod's extras (as text, for the record, and parsed), and their call.
pub fn plugins_call(
    runtime: &Invocation,
    config: &SelectorConfig,
    position: usize,
    attachment: &Attachment,
) -> Result<(String, ConfList, Invocation), CniError> {
    let conf = if position == 0 {
        capabilities::inject(&attachment.config, &config.capability_args)
    } else {
        attachment.config.clone()
    };
    let conf = extras::apply_to_config(&conf, &attachment.extras);
    let conf = match attachment.device.as_ref().and_then(|d| d.given.as_ref()) {
        Some(device) => crate::programs::selector::devices::handoff::apply_to_config(&conf, device),
        None => conf,
    };
    let list = chosen::parse_config(&attachment.network, attachment.path.as_deref(), &conf)?;
    Ok((conf, list, call_of(runtime, config, attachment)))
}

/// The call a record's plugins got (their args as recorded), for `runtime`'s command.
pub fn recorded_call(runtime: &Invocation, config: &SelectorConfig, record: &Record) -> Invocation {
    let args = CniArgs::parse(&record.cni_args).unwrap_or_else(|_| runtime.args.clone());
    delegate_call(runtime, config, &record.ifname, args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::{Command, PluginConf};
    use serde_json::{Value, json};

    fn attachment(ifname: &str, extras: Value) -> Attachment {
        let config = json!({"cniVersion": "1.0.0", "name": "blue", "plugins": [
            {"type": "bridge"},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}]});
        Attachment {
            ifname: ifname.into(),
            network: "blue".into(),
            path: None,
            config: config.to_string(),
            source: chosen::Source::DefaultNetwork { element: "blue".into() },
            extras: serde_json::from_value(extras).unwrap(),
            device: None,
        }
    }

    /// A selector given the runtime's port mappings and bandwidth, and the invocation of an ADD.
    fn selector_with_runtime_capabilities() -> (SelectorConfig, Invocation) {
        let selector = PluginConf::from_value(json!({"cniVersion": "1.1.0", "name": "yh-genie", "type": "yh-genie",
            "runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "tcp"}],
                              "bandwidth": {"egressRate": 8000, "egressBurst": 800}}}))
        .unwrap();
        let config = SelectorConfig::from_plugin_conf(&selector).unwrap();
        let runtime = crate::platform::cni::testing::invocation(Command::Add, std::path::Path::new("/nonexistent"));
        (config, runtime)
    }

    /// The runtimeConfig of plugin `i` of the configuration list `conf`.
    fn runtime_config(conf: &str, i: usize) -> Value {
        serde_json::from_str::<Value>(conf).unwrap()["plugins"][i].get("runtimeConfig").cloned().unwrap_or_default()
    }

    #[test]
    fn the_runtimes_capabilities_go_to_the_first_network_only() {
        let (config, runtime) = selector_with_runtime_capabilities();
        let (first, ..) = plugins_call(&runtime, &config, 0, &attachment("eth0", json!({}))).unwrap();
        assert_eq!(runtime_config(&first, 0), Value::Null);
        assert_eq!(
            runtime_config(&first, 1),
            json!({"portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "tcp"}]})
        );
        assert_eq!(runtime_config(&first, 2), json!({"bandwidth": {"egressRate": 8000, "egressBurst": 800}}));
        // A further network gets none of the runtime's.
        let (further, ..) = plugins_call(&runtime, &config, 1, &attachment("net1", json!({}))).unwrap();
        assert_eq!(further, attachment("net1", json!({})).config);
    }

    /// An attachment of `blue` asking for an address, through a NAD's inline configuration or not.
    fn asking_for_an_address(inline: bool) -> Attachment {
        let mut a = attachment("net1", json!({"ips": ["10.1.1.21/24"]}));
        a.source = chosen::Source::Annotation { element: "blue".into(), nad: "default/blue".into(), inline };
        a
    }

    /// The selector with `annotationIps` set to `value`, and the invocation of an ADD.
    fn selector_with_annotation_ips(value: &str) -> (SelectorConfig, Invocation) {
        let selector =
            PluginConf::from_value(json!({"cniVersion": "1.0.0", "type": "yh-genie", "annotationIps": value}));
        let config = SelectorConfig::from_plugin_conf(&selector.unwrap()).unwrap();
        (config, crate::platform::cni::testing::invocation(Command::Add, std::path::Path::new("/nonexistent")))
    }

    #[test]
    fn an_inline_networks_plugins_get_the_pods_ips_as_cni_args_under_annotation_ips_inline() {
        let (config, runtime) = selector_with_annotation_ips("inline");
        let (_, _, call) = plugins_call(&runtime, &config, 1, &asking_for_an_address(true)).unwrap();
        assert_eq!(call.args.get("IP"), Some("10.1.1.21/24"));
        let (_, _, call) = plugins_call(&runtime, &config, 1, &asking_for_an_address(false)).unwrap();
        assert_eq!(call.args.get("IP"), None, "a confDir network keeps the default");
    }

    #[test]
    fn no_plugin_gets_the_pods_ips_as_cni_args_by_default() {
        let (config, runtime) = selector_with_annotation_ips("declared");
        let (_, _, call) = plugins_call(&runtime, &config, 1, &asking_for_an_address(true)).unwrap();
        assert_eq!(call.args.get("IP"), None);
    }

    #[test]
    fn a_further_network_gets_the_capabilities_the_pod_asked_for_it() {
        let (config, runtime) = selector_with_runtime_capabilities();
        let asked = json!({"portMappings": [{"hostPort": 81, "containerPort": 80}]});
        let (further, ..) = plugins_call(&runtime, &config, 1, &attachment("net1", asked.clone())).unwrap();
        assert_eq!(runtime_config(&further, 1), asked);
        assert_eq!(runtime_config(&further, 2), Value::Null);
    }
}
