//! The objects `resolve` reads, and where they come from: `Objects` asks for the ConfigMaps and
//! NetworkAttachmentDefinitions a pod refers to; `Fetching` asks the API server, the node agent's
//! answer is another (`from_agent`).

use crate::platform::cni::CniError;
use crate::platform::kube::{NetworkAttachmentDefinition, PodSource};
use k8s_openapi::api::core::v1::ConfigMap;
use std::collections::BTreeMap;

/// The objects a pod refers to, by namespace and name. `Ok(None)`: it does not exist.
pub trait Objects {
    fn config_map(&mut self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, CniError>;
    fn network_attachment(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<NetworkAttachmentDefinition>, CniError>;
}

/// `Objects` from the API server, each fetched once however often it is referred to.
pub struct Fetching<'a> {
    source: &'a dyn PodSource,
    config_maps: BTreeMap<(String, String), Option<ConfigMap>>,
    attachments: BTreeMap<(String, String), Option<NetworkAttachmentDefinition>>,
}

impl<'a> Fetching<'a> {
    pub fn new(source: &'a dyn PodSource) -> Self {
        Fetching { source, config_maps: BTreeMap::new(), attachments: BTreeMap::new() }
    }
}

impl Objects for Fetching<'_> {
    fn config_map(&mut self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, CniError> {
        let key = (namespace.to_string(), name.to_string());
        if !self.config_maps.contains_key(&key) {
            let fetched = self.source.config_map(namespace, name)?;
            self.config_maps.insert(key.clone(), fetched);
        }
        Ok(self.config_maps[&key].clone())
    }
    fn network_attachment(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        let key = (namespace.to_string(), name.to_string());
        if !self.attachments.contains_key(&key) {
            let fetched = self.source.network_attachment(namespace, name)?;
            self.attachments.insert(key.clone(), fetched);
        }
        Ok(self.attachments[&key].clone())
    }
}
