//! The Network Plumbing Working Group's `NetworkAttachmentDefinition` (`k8s.cni.cncf.io/v1`), the
//! one field the selector reads from it (`spec.config`), as a typed object the `kube` client can GET.
//! k8s-openapi has no type for it (it is a CRD), so the two trait impls that make it a Kubernetes
//! resource are written out here.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// The NetworkAttachmentDefinition annotation that makes it a device network: the name of the
/// resource (`intel.com/sriov_netdevice`) whose devices its attachments take.
pub const RESOURCE_NAME: &str = "k8s.v1.cni.cncf.io/resourceName";

/// A NetworkAttachmentDefinition. `spec.config` is a CNI configuration (a single plugin or a
/// conflist) as JSON text; empty or absent means "the network of the same name that the node has".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkAttachmentDefinition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<NetworkAttachmentDefinitionSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkAttachmentDefinitionSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

impl NetworkAttachmentDefinition {
    /// `spec.config` when it holds anything but white space.
    pub fn inline_config(&self) -> Option<&str> {
        self.spec.as_ref().and_then(|s| s.config.as_deref()).filter(|c| !c.trim().is_empty())
    }

    /// The resource whose devices its attachments take (`k8s.v1.cni.cncf.io/resourceName`), when it
    /// names one: a device network.
    pub fn resource_name(&self) -> Option<&str> {
        let annotations = self.metadata.annotations.as_ref()?;
        annotations.get(RESOURCE_NAME).map(|r| r.trim()).filter(|r| !r.is_empty())
    }
}

impl k8s_openapi::Resource for NetworkAttachmentDefinition {
    const API_VERSION: &'static str = "k8s.cni.cncf.io/v1";
    const GROUP: &'static str = "k8s.cni.cncf.io";
    const KIND: &'static str = "NetworkAttachmentDefinition";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "network-attachment-definitions";
    type Scope = NamespaceResourceScope;
}

impl k8s_openapi::Metadata for NetworkAttachmentDefinition {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_as_the_api_server_sends_it() {
        let nad: NetworkAttachmentDefinition = serde_json::from_value(serde_json::json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": "lan", "namespace": "web"},
            "spec": {"config": "{\"cniVersion\":\"1.0.0\",\"name\":\"lan\",\"type\":\"macvlan\"}"}
        }))
        .unwrap();
        assert!(nad.inline_config().unwrap().contains("macvlan"));
        let empty: NetworkAttachmentDefinition =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "lan"}, "spec": {"config": " \n"}}))
                .unwrap();
        assert_eq!(empty.inline_config(), None);
        let no_spec: NetworkAttachmentDefinition =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "lan"}})).unwrap();
        assert_eq!(no_spec.inline_config(), None);
    }

    #[test]
    fn its_url_is_namespaced_under_the_multus_api_group() {
        let url = <NetworkAttachmentDefinition as ::kube::Resource>::url_path(&(), Some("web"));
        assert_eq!(url, "/apis/k8s.cni.cncf.io/v1/namespaces/web/network-attachment-definitions");
    }
}
