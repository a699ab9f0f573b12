//! The pod annotation `k8s.v1.cni.cncf.io/networks` (text and JSON forms) and what a
//! NetworkAttachmentDefinition's `spec.config` holds: parsed, then a whole selection made from a pod
//! carrying the annotation, every NAD answering with the same bytes as its inline configuration
//! (inline configurations allowed, so that they are parsed and checked). Must never panic.
#![no_main]
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use yh_genie::cni::env::validate_ifname;
use yh_genie::cni::{CniError, PluginConf};
use yh_genie::kube::{NetworkAttachmentDefinition, NetworkAttachmentDefinitionSpec, PodSource};
use yh_genie::selector::choose;
use yh_genie::selector::config::SelectorConfig;
use yh_genie::selector::requests::annotation::{self, NETWORKS};

/// A conf dir with two networks, `blue` and `lan`.
fn conf_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("yh-genie-fuzz-annotation-{}", std::process::id()));
        for name in ["blue", "lan"] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            let conf = format!(r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[{{"type":"bridge","capabilities":{{"ips":true}}}}]}}"#);
            std::fs::write(dir.join(name).join("1.conflist"), conf).unwrap();
        }
        dir
    })
}

struct Fixed {
    pod: Pod,
    config: String,
}

impl PodSource for Fixed {
    fn pod(&self, _: &str, _: &str) -> Result<Option<Pod>, CniError> {
        Ok(Some(self.pod.clone()))
    }
    fn config_map(&self, _: &str, _: &str) -> Result<Option<ConfigMap>, CniError> {
        Ok(None)
    }
    fn network_attachment(&self, _: &str, name: &str) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        // `lan` names the conf dir's network; any other name holds the fuzzed bytes.
        let config = (name != "lan").then(|| self.config.clone());
        Ok(Some(NetworkAttachmentDefinition {
            spec: Some(NetworkAttachmentDefinitionSpec { config }),
            ..Default::default()
        }))
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
    let text = String::from_utf8_lossy(data).into_owned();
    if let Ok(requests) = annotation::parse(&text) {
        for request in &requests {
            assert!(!request.name.is_empty());
            if let Some(ifname) = &request.ifname {
                assert!(validate_ifname(ifname).is_ok(), "{ifname:?}");
            }
        }
    }
    let mut pod = Pod::default();
    pod.metadata.annotations = Some(BTreeMap::from([(NETWORKS.to_string(), text.clone())]));
    let conf = PluginConf::parse(
        format!(
            r#"{{"cniVersion":"1.0.0","name":"g","type":"yh-genie","confDir":{:?},"defaultNetwork":"blue","allowInlineConfig":true}}"#,
            conf_dir()
        )
        .as_bytes(),
    )
    .unwrap();
    let config = SelectorConfig::from_plugin_conf(&conf).unwrap();
    let _ = choose::select(&config, "eth0", Some(("default", "web-0")), None, Some(&Fixed { pod, config: text }));
});
