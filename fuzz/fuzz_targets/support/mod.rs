//! What the selection targets share: a conf dir of networks made once per process, the selector's
//! configuration over it, and the API objects of one fuzzed pod, answered without an API server.
//! Each target is a program of its own that uses a part of it.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use yh_genie::platform::cni::{CniError, PluginConf};
use yh_genie::platform::kube::{NetworkAttachmentDefinition, NetworkAttachmentDefinitionSpec, PodSource};
use yh_genie::programs::selector::config::SelectorConfig;

/// The networks of the conf dir: bridge networks that declare the `ips` capability, so that a
/// pod's address requests for them are checked rather than refused outright.
pub const NETWORKS: [&str; 2] = ["blue", "lan"];

/// The conf dir, made on first use under the temp dir (one per fuzzing process): `<network>/
/// 1.conflist` for each of [`NETWORKS`], and `escape`, a link that leads outside it.
pub fn conf_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("yh-genie-fuzz-{}", std::process::id()));
        for name in NETWORKS {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            let conf = format!(
                r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[{{"type":"bridge","capabilities":{{"ips":true}}}}]}}"#
            );
            std::fs::write(dir.join(name).join("1.conflist"), conf).unwrap();
        }
        let _ = std::os::unix::fs::symlink("/etc", dir.join("escape"));
        dir
    })
}

/// The selector's configuration over [`conf_dir`], `blue` its default network, with `extra` keys
/// (a JSON object's members, `""` for none).
pub fn selector_config(extra: &str) -> SelectorConfig {
    let separator = if extra.is_empty() { "" } else { "," };
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"g","type":"yh-genie","confDir":{:?},"defaultNetwork":"blue"{separator}{extra}}}"#,
        conf_dir()
    );
    SelectorConfig::from_plugin_conf(&PluginConf::parse(conf.as_bytes()).unwrap()).unwrap()
}

/// What a NetworkAttachmentDefinition the pod names holds.
pub enum Nads {
    /// None exists.
    Absent,
    /// Each exists without a configuration: it names the conf dir's network of its own name.
    NamingTheirNetwork,
    /// Each holds this inline configuration, but `lan`, which names the conf dir's `lan`.
    Inline(String),
}

/// The API objects of one fuzzed pod.
pub struct Objects {
    pub pod: Pod,
    /// What every ConfigMap the pod names holds; none: no ConfigMap exists.
    pub config_map: Option<ConfigMap>,
    pub nads: Nads,
}

impl PodSource for Objects {
    fn pod(&self, _: &str, _: &str) -> Result<Option<Pod>, CniError> {
        Ok(Some(self.pod.clone()))
    }
    fn config_map(&self, _: &str, _: &str) -> Result<Option<ConfigMap>, CniError> {
        Ok(self.config_map.clone())
    }
    fn network_attachment(&self, _: &str, name: &str) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        let config = match &self.nads {
            Nads::Absent => return Ok(None),
            Nads::NamingTheirNetwork => None,
            Nads::Inline(config) => (name != "lan").then(|| config.clone()),
        };
        Ok(Some(NetworkAttachmentDefinition {
            spec: Some(NetworkAttachmentDefinitionSpec { config }),
            ..Default::default()
        }))
    }
    fn annotate_pod(&self, _: &str, _: &str, _: &str, _: &BTreeMap<String, String>) -> Result<bool, CniError> {
        Ok(true)
    }
    fn resource_claim(&self, _: &str, _: &str) -> Result<Option<ResourceClaim>, CniError> {
        Ok(None)
    }
    fn node_resource_slices(&self, _: &str) -> Result<Vec<ResourceSlice>, CniError> {
        Ok(Vec::new())
    }
}
