//! The objects `resolve` reads: `Objects` asks for the ConfigMaps and NetworkAttachmentDefinitions
//! a pod refers to, wherever they come from (the API server, `from_api_server::Fetching`; the node
//! agent's answer, `from_agent_answer`).

use crate::platform::cni::CniError;
use crate::platform::kube::NetworkAttachmentDefinition;
use k8s_openapi::api::core::v1::ConfigMap;

/// The objects a pod refers to, by namespace and name. `Ok(None)`: it does not exist.
pub trait Objects {
    fn config_map(&mut self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, CniError>;
    fn network_attachment(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<NetworkAttachmentDefinition>, CniError>;
}
