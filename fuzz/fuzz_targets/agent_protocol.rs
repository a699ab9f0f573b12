//! What crosses the node agent's socket and what its watches deliver: a request line (the agent
//! parses it), a reply line (the plugin parses it), and a pod object, of which the agent keeps
//! `choose::trimmed` and watches `choose::references`. Must never panic; and a trimmed pod must
//! resolve exactly as the whole pod (the plugin resolves what the agent kept), and trimming twice
//! must change nothing.
#![no_main]
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;
use yh_genie::platform::cni::{CniError, PluginConf};
use yh_genie::platform::kube::NetworkAttachmentDefinition;
use yh_genie::node::agent_socket::protocol::{Reply, Request};
use yh_genie::programs::selector::choose::{self, Objects};
use yh_genie::programs::selector::config::SelectorConfig;
use yh_genie::programs::selector::config::policy::AttachmentPolicy;

/// A conf dir with networks `blue` and `red`.
fn config() -> &'static SelectorConfig {
    static CONFIG: OnceLock<SelectorConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let dir: PathBuf = std::env::temp_dir().join(format!("yh-genie-fuzz-agent-{}", std::process::id()));
        for name in ["blue", "red"] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            let conf = format!(r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[{{"type":"bridge"}}]}}"#);
            std::fs::write(dir.join(name).join(format!("{name}.conflist")), conf).unwrap();
        }
        let conf = format!(
            r#"{{"cniVersion":"1.0.0","name":"g","type":"yh-genie","confDir":{:?},"defaultNetwork":"blue","allowInlineConfig":true}}"#,
            dir
        );
        SelectorConfig::from_plugin_conf(&PluginConf::parse(conf.as_bytes()).unwrap()).unwrap()
    })
}

/// Every ConfigMap holds `k: red`; every NAD names the confDir network of its name.
struct Held;

impl Objects for Held {
    fn config_map(&mut self, _: &str, name: &str) -> Result<Option<ConfigMap>, CniError> {
        let data = [("k".to_string(), "red".to_string())].into();
        Ok((name != "absent").then(|| ConfigMap { data: Some(data), ..Default::default() }))
    }
    fn network_attachment(&mut self, _: &str, _: &str) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        Ok(Some(NetworkAttachmentDefinition::default()))
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = Request::parse(data);
    if let Ok(reply) = Reply::parse(data) {
        // What the plugin would send on has to survive its own round trip.
        assert_eq!(Reply::parse(&reply.line()[..reply.line().len() - 1]).unwrap(), reply);
    }
    let Ok(pod) = serde_json::from_slice::<Pod>(data) else { return };
    for policy in [AttachmentPolicy::default(), AttachmentPolicy { namespace_isolation: false, ..Default::default() }] {
        let _ = choose::references(&policy, &Default::default(), "default", &pod);
    }
    let small = choose::trimmed(&pod);
    assert_eq!(choose::trimmed(&small), small);
    let resolved = |pod: &Pod| choose::resolve(config(), "eth0", ("default", "web-0"), pod, &mut Held);
    assert_eq!(resolved(&small), resolved(&pod));
});
