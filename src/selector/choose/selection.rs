//! What a pod gets: the ordered attachments of a `Selection`, each with its interface, its network's
//! configuration (the exact bytes), where the choice came from, and what the pod asked for beyond
//! the network. A `Selection` is plain data (serializable): `select` makes it from the API server's
//! objects, and a node agent could make it ahead of time from cached ones and hand it over.
//!
//! Naming and limits (`name`): the first attachment is on the runtime's interface (`CNI_IFNAME`, the
//! one whose address the runtime takes as the pod's IP); each later one on the name it asks for, or
//! `net<position>` (the second is `net1`). A name given twice, a network given twice and more than
//! `MAX_ATTACHMENTS` networks are code 7 naming them.

use crate::cni::{CniError, ConfList};
use crate::kube::ObjectRef;
use crate::selector::netconf::confdir;
use crate::selector::requests::annotation::Extras;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// The most networks one pod may have.
pub const MAX_ATTACHMENTS: usize = 16;

/// The env var through which a pod's container names its networks (the seed's name).
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

    /// Where the element was written, for messages.
    fn origin(&self) -> String {
        match self {
            Source::DefaultNetwork { .. } => "defaultNetwork".to_string(),
            Source::Value { .. } => ENV_VAR.to_string(),
            Source::Annotation { .. } => format!("annotation {}", crate::selector::requests::annotation::NETWORKS),
            Source::MultusDefault { .. } => {
                format!("annotation {}", crate::selector::requests::annotation::MULTUS_DEFAULT_NETWORK)
            }
            Source::DefaultNetworks { .. } => "defaultNetworks".to_string(),
            Source::Genie { .. } => format!("annotation {}", crate::selector::requests::annotation::GENIE_CNI),
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
                write!(f, "annotation {} = {value:?}", crate::selector::requests::annotation::MULTUS_DEFAULT_NETWORK)
            }
            Reason::GenieAnnotation { value } => {
                write!(f, "annotation {} = {value:?}", crate::selector::requests::annotation::GENIE_CNI)
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

/// An attachment before it has its interface name.
#[derive(Debug, Clone)]
pub struct Planned {
    pub attachment: Attachment,
    /// The interface the element asked for, if any.
    pub ifname: Option<String>,
    /// Two plans for the same identity are the same network (a file, or a NAD's inline config).
    pub identity: String,
}

/// Give each plan its interface and check the whole: at most `MAX_ATTACHMENTS`, no network twice,
/// no interface twice. `runtime_ifname` is the runtime's `CNI_IFNAME`; `whose` names the pod in
/// errors.
pub fn name(plans: Vec<Planned>, runtime_ifname: &str, whose: &str) -> Result<Vec<Attachment>, CniError> {
    let bad = |msg: String| CniError::invalid_config(format!("{whose}: {msg}"));
    check_count(plans.len(), whose, plans.iter().map(|p| p.attachment.source.element()))?;
    let mut networks: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, plan) in plans.iter().enumerate() {
        if let Some(first) = networks.insert(&plan.identity, i) {
            return Err(bad(format!(
                "network {} is chosen twice, by {} and by {}; each network may attach once (its plugins keep \
                 their state per container and network)",
                plan.attachment.network,
                describe(first, &plans[first]),
                describe(i, plan)
            )));
        }
    }
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    let mut attachments = Vec::with_capacity(plans.len());
    for (i, plan) in plans.iter().enumerate() {
        let ifname = match (i, &plan.ifname) {
            (0, Some(asked)) if asked != runtime_ifname => {
                return Err(bad(format!(
                    "{} asks for interface {asked}, but the first network is on the runtime's interface {runtime_ifname} \
                     (CNI_IFNAME)",
                    describe(0, plan)
                )));
            }
            (0, _) => runtime_ifname.to_string(),
            (_, Some(asked)) => asked.clone(),
            (_, None) => format!("net{i}"),
        };
        if let Some(first) = taken.insert(ifname.clone(), i) {
            return Err(bad(format!(
                "interface {ifname} is given twice: to {} and to {}",
                describe(first, &plans[first]),
                describe(i, plan)
            )));
        }
        attachments.push(Attachment { ifname, ..plan.attachment.clone() });
    }
    Ok(attachments)
}

/// More than `MAX_ATTACHMENTS` is refused before anything is fetched for them.
pub fn check_count<'a>(count: usize, whose: &str, elements: impl Iterator<Item = &'a str>) -> Result<(), CniError> {
    if count <= MAX_ATTACHMENTS {
        return Ok(());
    }
    let all: Vec<&str> = elements.collect();
    Err(CniError::invalid_config(format!(
        "{whose}: {count} networks are chosen ({}); at most {MAX_ATTACHMENTS} are allowed",
        all.join(", ")
    )))
}

/// `network 2 ("b@net1", from CNI_NETWORK_CONFIG)`.
fn describe(i: usize, plan: &Planned) -> String {
    let source = &plan.attachment.source;
    format!("network {} ({:?}, from {})", i + 1, source.element(), source.origin())
}

impl fmt::Display for PodIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", ObjectRef::pod(&self.namespace, &self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(element: &str, network: &str, ifname: Option<&str>) -> Planned {
        Planned {
            attachment: Attachment {
                ifname: String::new(),
                network: network.into(),
                path: Some(format!("/n/{network}/a.conflist").into()),
                config: "{}".into(),
                source: Source::Value { element: element.into(), form: "network name".into() },
                extras: Extras::default(),
            },
            ifname: ifname.map(String::from),
            identity: format!("/n/{network}/a.conflist"),
        }
    }

    fn ifnames(plans: Vec<Planned>) -> Result<Vec<String>, CniError> {
        name(plans, "eth0", "pod default/p").map(|a| a.into_iter().map(|a| a.ifname).collect())
    }

    #[test]
    fn the_first_gets_cni_ifname_and_the_others_net_by_position_unless_named() {
        assert_eq!(ifnames(vec![plan("a", "a", None)]).unwrap(), ["eth0"]);
        assert_eq!(
            ifnames(vec![
                plan("a", "a", None),
                plan("b", "b", None),
                plan("c@lan0", "c", Some("lan0")),
                plan("d", "d", None)
            ])
            .unwrap(),
            ["eth0", "net1", "lan0", "net3"]
        );
        assert_eq!(ifnames(vec![plan("a@eth0", "a", Some("eth0")), plan("b", "b", None)]).unwrap(), ["eth0", "net1"]);
    }

    #[test]
    fn names_taken_twice_and_a_renamed_first_are_refused_naming_both() {
        let e =
            ifnames(vec![plan("a", "a", None), plan("b", "b", None), plan("c@net1", "c", Some("net1"))]).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(
            e.msg.contains("interface net1 is given twice") && e.msg.contains("\"b\"") && e.msg.contains("\"c@net1\""),
            "{e}"
        );
        let e = ifnames(vec![plan("a", "a", None), plan("b@eth0", "b", Some("eth0"))]).unwrap_err();
        assert!(e.msg.contains("interface eth0 is given twice"), "{e}");
        let e = ifnames(vec![plan("a@lan0", "a", Some("lan0"))]).unwrap_err();
        assert!(e.msg.contains("runtime's interface eth0") && e.msg.contains("pod default/p"), "{e}");
    }

    #[test]
    fn a_network_twice_is_refused_naming_both_elements() {
        let e =
            ifnames(vec![plan("a", "a", None), plan("b", "b", None), plan("a@net5", "a", Some("net5"))]).unwrap_err();
        assert!(
            e.msg.contains("network a is chosen twice")
                && e.msg.contains("network 1 (\"a\"")
                && e.msg.contains("network 3"),
            "{e}"
        );
    }

    #[test]
    fn at_most_sixteen() {
        let plans = |n: usize| (0..n).map(|i| plan(&format!("n{i}"), &format!("n{i}"), None)).collect::<Vec<_>>();
        assert_eq!(ifnames(plans(16)).unwrap().last().unwrap(), "net15");
        let e = ifnames(plans(17)).unwrap_err();
        assert!(e.msg.contains("17 networks") && e.msg.contains("n16") && e.msg.contains("at most 16"), "{e}");
    }

    #[test]
    fn a_selection_round_trips_through_json() {
        let attachments = name(vec![plan("a", "a", None), plan("b@lan0", "b", Some("lan0"))], "eth0", "p").unwrap();
        let s = Selection {
            pod: Some(PodIdentity { namespace: "default".into(), name: "p".into(), uid: Some("u1".into()) }),
            reason: Reason::Chosen {
                choices: vec![Choice {
                    container: "app".into(),
                    source: ValueSource::ConfigMap { name: "cm".into(), key: "k".into() },
                    value: "a,b@lan0".into(),
                }],
            },
            attachments,
            notes: vec![],
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Selection>(&json).unwrap(), s);
    }
}
