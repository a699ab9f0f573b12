//! What was chosen, what a pod gets: the ordered attachments of a `Selection`, each with its interface, its network's
//! configuration (the exact bytes), where the choice came from, and what the pod asked for beyond
//! the network. A `Selection` is plain data (serializable): `resolve` makes it from the pod's
//! objects, the API server's or the node agent's, and it is what `attach` records and runs.
//!
//! Each attachment gets its interface in `interfaces`.

use crate::platform::cni::{CniError, ConfList};
use crate::platform::kube::ObjectRef;
use crate::programs::selector::netconf::confdir;
use crate::programs::selector::requests::annotation::Extras;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// The env var through which a pod's containers name their networks.
pub const ENV_VAR: &str = "CNI_NETWORK_CONFIG";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Selection {
    /// The pod as the API server described it, when it was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodIdentity>,
    /// How the first attachment (and the secondaries listed with it) was chosen.
    pub reason: Reason,
    /// In order: the first on the runtime's interface.
    pub attachments: Vec<Attachment>,
    /// Facts that did not decide anything but a person should know (ignored init containers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodIdentity {
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// One network on one interface of the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    pub ifname: String,
    /// The network's name: its directory under `confDir`, or `namespace/name` of the
    /// NetworkAttachmentDefinition whose `spec.config` holds it.
    pub network: String,
    /// The configuration file (symlinks resolved); `None` for a NAD's inline configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The configuration, exactly as read.
    pub config: String,
    pub source: Source,
    #[serde(default, skip_serializing_if = "Extras::is_empty")]
    pub extras: Extras,
    /// A device network's (its NetworkAttachmentDefinition names a `resourceName`): the resource,
    /// and once ADD has given it, the device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceUse>,
}

/// The device of a device network's attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceUse {
    /// The resource of its NetworkAttachmentDefinition's `k8s.v1.cni.cncf.io/resourceName`.
    pub resource: String,
    /// The device ADD gave it, of the pod's allocated devices of `resource`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given: Option<crate::programs::selector::devices::Device>,
}

impl Attachment {
    /// The configuration as a chain, parsed as it was when selected.
    pub fn conf_list(&self) -> Result<ConfList, CniError> {
        parse_config(&self.network, self.path.as_deref(), &self.config)
    }
}

/// Parse a network's configuration: a file's by its name (`.conflist` is a chain), a NAD's inline
/// one by its shape.
pub fn parse_config(network: &str, path: Option<&std::path::Path>, config: &str) -> Result<ConfList, CniError> {
    match path {
        Some(path) => confdir::parse_conf(config.as_bytes(), path),
        None => confdir::parse_inline(config.as_bytes(), &format!("NetworkAttachmentDefinition {network} spec.config")),
    }
}

/// Where an attachment came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "camelCase")]
pub enum Source {
    /// An element of `defaultNetwork` (the selection's reason says why the default).
    DefaultNetwork { element: String },
    /// An element of the pod's `CNI_NETWORK_CONFIG` (the reason says which containers, which
    /// ConfigMap); `form` is how the element names its network.
    Value { element: String, form: String },
    /// An element of the pod's `k8s.v1.cni.cncf.io/networks` annotation, resolved through the
    /// NetworkAttachmentDefinition `nad` (`namespace/name`): to its inline configuration, or to the
    /// network of its name under `confDir`.
    Annotation { element: String, nad: String, inline: bool },
    /// Multus's `v1.multus-cni.io/default-network` pod annotation: the NetworkAttachmentDefinition
    /// `nad` in place of the first network.
    MultusDefault { element: String, nad: String, inline: bool },
    /// An element of the admin's `defaultNetworks`: a NetworkAttachmentDefinition every pod gets.
    DefaultNetworks { element: String, nad: String, inline: bool },
    /// An element of CNI-Genie's `cni` pod annotation, naming a `confDir` network.
    Genie { element: String, form: String },
}

impl Source {
    /// The element of the value or annotation that asked for the network, as written.
    pub fn element(&self) -> &str {
        match self {
            Source::DefaultNetwork { element }
            | Source::Value { element, .. }
            | Source::Annotation { element, .. }
            | Source::MultusDefault { element, .. }
            | Source::DefaultNetworks { element, .. }
            | Source::Genie { element, .. } => element,
        }
    }

    /// The NetworkAttachmentDefinition (`namespace/name`) the network came through, if any.
    pub fn nad(&self) -> Option<&str> {
        match self {
            Source::Annotation { nad, .. }
            | Source::MultusDefault { nad, .. }
            | Source::DefaultNetworks { nad, .. } => Some(nad),
            Source::DefaultNetwork { .. } | Source::Value { .. } | Source::Genie { .. } => None,
        }
    }

    /// Whether the network is a NetworkAttachmentDefinition's inline configuration (whose writer
    /// is no admin).
    pub fn inline(&self) -> bool {
        match self {
            Source::Annotation { inline, .. }
            | Source::MultusDefault { inline, .. }
            | Source::DefaultNetworks { inline, .. } => *inline,
            Source::DefaultNetwork { .. } | Source::Value { .. } | Source::Genie { .. } => false,
        }
    }

    /// Where the element was written, for messages.
    pub fn origin(&self) -> String {
        match self {
            Source::DefaultNetwork { .. } => "defaultNetwork".to_string(),
            Source::Value { .. } => ENV_VAR.to_string(),
            Source::Annotation { .. } => {
                format!("annotation {}", crate::programs::selector::requests::annotation::NETWORKS)
            }
            Source::MultusDefault { .. } => {
                format!("annotation {}", crate::programs::selector::requests::annotation::MULTUS_DEFAULT_NETWORK)
            }
            Source::DefaultNetworks { .. } => "defaultNetworks".to_string(),
            Source::Genie { .. } => {
                format!("annotation {}", crate::programs::selector::requests::annotation::GENIE_CNI)
            }
        }
    }
}

/// `NetworkAttachmentDefinition web/lan, its inline spec.config`, for `Display`.
fn through(nad: &str, inline: bool) -> String {
    let config = if inline { "its inline spec.config" } else { "the confDir network of its name" };
    format!("NetworkAttachmentDefinition {nad}, {config}")
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::DefaultNetwork { element } => write!(f, "defaultNetwork ({element:?})"),
            Source::Value { element, form } => {
                write!(f, "env {} element {element:?}, read as a {form}", ENV_VAR)
            }
            Source::Annotation { element, nad, inline }
            | Source::MultusDefault { element, nad, inline }
            | Source::DefaultNetworks { element, nad, inline } => {
                write!(f, "{} element {element:?}: {}", self.origin(), through(nad, *inline))
            }
            Source::Genie { element, form } => write!(f, "{} element {element:?}, read as a {form}", self.origin()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Reason {
    /// No `K8S_POD_NAMESPACE`/`K8S_POD_NAME` in `CNI_ARGS`: `defaultNetwork`.
    NotAPod,
    /// The selector has no kubeconfig, so it cannot ask: `defaultNetwork`.
    KubernetesNotConfigured,
    /// The pod names no network in `CNI_NETWORK_CONFIG`: `defaultNetwork`.
    PodChoseNothing,
    /// The pod's containers name these networks (all that name any agree).
    Chosen { choices: Vec<Choice> },
    /// Multus's `v1.multus-cni.io/default-network` pod annotation names the first network.
    MultusDefaultNetwork { value: String },
    /// CNI-Genie's `cni` pod annotation names the networks.
    GenieAnnotation { value: String },
}

/// One container's choice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    pub container: String,
    pub source: ValueSource,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ValueSource {
    Literal,
    ConfigMap { name: String, key: String },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env = ENV_VAR;
        match self {
            Reason::NotAPod => f.write_str("defaultNetwork: the caller is not a Kubernetes pod"),
            Reason::KubernetesNotConfigured => {
                f.write_str("defaultNetwork: no kubeconfig is configured, so the pod was not looked up")
            }
            Reason::PodChoseNothing => write!(f, "defaultNetwork: no container of the pod sets {env}"),
            Reason::MultusDefaultNetwork { value } => {
                write!(
                    f,
                    "annotation {} = {value:?}",
                    crate::programs::selector::requests::annotation::MULTUS_DEFAULT_NETWORK
                )
            }
            Reason::GenieAnnotation { value } => {
                write!(f, "annotation {} = {value:?}", crate::programs::selector::requests::annotation::GENIE_CNI)
            }
            Reason::Chosen { choices } => {
                for (i, c) in choices.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "container {:?}: env {env} ", c.container)?;
                    match &c.source {
                        ValueSource::Literal => f.write_str("(literal value)")?,
                        ValueSource::ConfigMap { name, key } => write!(f, "from ConfigMap {name} key {key:?}")?,
                    }
                    write!(f, " = {:?}", c.value)?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for PodIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", ObjectRef::pod(&self.namespace, &self.name))
    }
}
