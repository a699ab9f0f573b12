//! What the API server sends and what ConfigMaps hold: a pod object (as JSON) whose containers'
//! `CNI_NETWORK_CONFIG` names a network literally or through a ConfigMap, and the ConfigMap values
//! themselves, resolved against a real conf dir. Must never panic, whatever the objects hold.
#![no_main]
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use yh_genie::cni::{CniError, PluginConf};
use yh_genie::kube::{NetworkAttachmentDefinition, PodSource};
use yh_genie::selector::choose;
use yh_genie::selector::config::SelectorConfig;
use yh_genie::selector::netconf::confdir::{self, NetworkName};

/// A conf dir with one network, `blue`, and a link that leads outside it.
fn conf_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("yh-genie-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("blue")).unwrap();
        std::fs::write(
            dir.join("blue/blue.conflist"),
            r#"{"cniVersion":"1.0.0","name":"blue","plugins":[{"type":"bridge"}]}"#,
        )
        .unwrap();
        let _ = std::os::unix::fs::symlink("/etc", dir.join("escape"));
        dir
    })
}

struct Fixed {
    pod: Pod,
    config_map: ConfigMap,
}

impl PodSource for Fixed {
    fn pod(&self, _: &str, _: &str) -> Result<Option<Pod>, CniError> {
        Ok(Some(self.pod.clone()))
    }
    fn config_map(&self, _: &str, _: &str) -> Result<Option<ConfigMap>, CniError> {
        Ok(Some(self.config_map.clone()))
    }
    fn network_attachment(&self, _: &str, _: &str) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        Ok(None)
    }
    fn annotate_pod(&self, _: &str, _: &str, _: &str, _: &BTreeMap<String, String>) -> Result<bool, CniError> {
        Ok(true)
    }
    fn resource_claim(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<k8s_openapi::api::resource::v1::ResourceClaim>, CniError> {
        Ok(None)
    }
    fn node_resource_slices(&self, _: &str) -> Result<Vec<k8s_openapi::api::resource::v1::ResourceSlice>, CniError> {
        Ok(Vec::new())
    }
}

fuzz_target!(|data: &[u8]| {
    let dir = conf_dir();
    if let Ok(value) = std::str::from_utf8(data)
        && let Ok(name) = NetworkName::parse(value)
    {
        let _ = confdir::resolve(dir, &name);
    }
    let Ok(pod) = serde_json::from_slice::<Pod>(data) else { return };
    let config_map = ConfigMap {
        data: Some([("net".to_string(), String::from_utf8_lossy(data).into_owned())].into()),
        ..Default::default()
    };
    let conf = PluginConf::parse(
        format!(r#"{{"cniVersion":"1.0.0","name":"g","type":"yh-genie","confDir":{:?},"defaultNetwork":"blue"}}"#, dir)
            .as_bytes(),
    )
    .unwrap();
    let config = SelectorConfig::from_plugin_conf(&conf).unwrap();
    let _ = choose::select(&config, "eth0", Some(("default", "web-0")), None, Some(&Fixed { pod, config_map }));
});
