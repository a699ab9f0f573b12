//! Which networks a pod gets, and why (SPEC §3, "Selecting a network for a pod").
//!
//! The rules: a caller that is not a Kubernetes pod gets `defaultNetwork`. A pod's containers may
//! carry the env var `CNI_NETWORK_CONFIG`, as a literal `value` or from `valueFrom.configMapKeyRef`
//! (a ConfigMap in the pod's namespace); its value names one network or a list (see `value`), the
//! first on the runtime's interface. Containers whose values differ are an error naming both; a pod
//! that names none gets `defaultNetwork` (which may be a list too). The pod's
//! `k8s.v1.cni.cncf.io/networks` annotation (see `annotation`) then adds its networks after those,
//! each through a NetworkAttachmentDefinition, as Multus adds them to the cluster's default network.
//! Init containers are not consulted: the network belongs to the pod's long-lived containers, and
//! init containers are often injected by tooling the pod's author does not control. `explain`
//! mentions an init container that carries the variable, so the choice is never silent.
//!
//! `resolve` decides from the pod object and the objects it refers to, which it asks of an
//! `Objects`; nothing else. `select` feeds it from the API server (`Fetching`: one GET per distinct
//! object); the node agent holds the objects already (`references` says which a pod needs,
//! `trimmed` is the pod reduced to what `resolve` reads), and the plugin resolves its answer.

use crate::cni::{CniError, code};
use crate::kube::{ObjectRef, PodSource};
use crate::selector::choose::selection::{
    self, Attachment, Choice, Planned, PodIdentity, Reason, Selection, Source, ValueSource,
};
use crate::selector::config::SelectorConfig;
use crate::selector::netconf::confdir;
use crate::selector::requests::annotation::{self, Extras, Request};
use crate::selector::requests::value::{self, Element};
use k8s_openapi::api::core::v1::{ConfigMapKeySelector, Container, EnvVar, Pod};
use std::collections::BTreeMap;

use crate::selector::choose::by_nad::{NadUse, nad_plan};
use crate::selector::choose::precedence::{self, First};
use crate::selector::choose::selection::ENV_VAR;

pub use crate::selector::choose::objects::{Fetching, Objects, references, trimmed, trimmed_meta};
pub use crate::selector::choose::sandbox::{CONFIG_MIRROR, check_uid, is_sandbox_pod};

/// Choose the networks for `pod` (namespace, name), asking `source` (None: no Kubernetes access).
/// `runtime_ifname` is the runtime's `CNI_IFNAME`, which the first network gets. `sandbox_uid` is
/// the uid of the pod the sandbox is for (`K8S_POD_UID`), when the runtime says: a pod object of
/// another uid under that name is refused (see `check_uid`).
pub fn select(
    config: &SelectorConfig,
    runtime_ifname: &str,
    pod: Option<(&str, &str)>,
    sandbox_uid: Option<&str>,
    source: Option<&dyn PodSource>,
) -> Result<Selection, CniError> {
    let Some((namespace, name)) = pod else {
        return default_selection(config, runtime_ifname, Reason::NotAPod, "the caller is not a Kubernetes pod");
    };
    let pod_ref = ObjectRef::pod(namespace, name);
    let Some(source) = source else {
        let why = format!("{pod_ref} cannot be looked up (no kubeconfig configured)");
        return default_selection(config, runtime_ifname, Reason::KubernetesNotConfigured, &why);
    };
    pod_arg("K8S_POD_NAMESPACE", namespace)?;
    pod_arg("K8S_POD_NAME", name)?;
    let pod =
        source.pod(namespace, name)?.ok_or_else(|| CniError::new(code::KUBE_API, format!("{pod_ref} not found")))?;
    check_uid(pod_ref, &pod, sandbox_uid)?;
    resolve(config, runtime_ifname, (namespace, name), &pod, &mut Fetching::new(source))
}

/// The networks of `pod` (whose namespace and name are `key`), decided from the pod object and the
/// ConfigMaps and NetworkAttachmentDefinitions it refers to, asked of `objects`.
pub fn resolve(
    config: &SelectorConfig,
    runtime_ifname: &str,
    key: (&str, &str),
    pod: &Pod,
    objects: &mut dyn Objects,
) -> Result<Selection, CniError> {
    let (namespace, name) = key;
    let pod_ref = ObjectRef::pod(namespace, name);
    let whose = pod_ref.to_string();
    let identity = PodIdentity { namespace: namespace.into(), name: name.into(), uid: pod.metadata.uid.clone() };
    let (_, init_containers) = containers(pod);
    let First { reason, mut plans, mut notes } = precedence::first_networks(config, pod_ref, pod, objects)?;
    notes.extend(
        init_containers
            .iter()
            .filter(|c| env_entry(c).is_some())
            .map(|c| format!("init container {:?} sets {ENV_VAR}; init containers are not consulted", c.name)),
    );
    // As Multus: a system namespace's pods do not get the admin's defaultNetworks (they run the
    // cluster's own components); what a pod asks for itself in its annotation it still gets.
    let system = config.defaults.is_system(namespace);
    let requests = annotation_requests(pod).map_err(|e| e.context(&whose))?;
    let defaults: &[Request] = if system { &[] } else { &config.defaults.default_networks };
    if system && !config.defaults.default_networks.is_empty() {
        notes.push(format!("namespace {namespace} is one of systemNamespaces: its pods do not get defaultNetworks"));
    }
    // Before anything is fetched for them.
    let elements = plans
        .iter()
        .map(|p| p.attachment.source.element())
        .chain(defaults.iter().chain(&requests).map(|r| r.text.as_str()));
    selection::check_count(plans.len() + defaults.len() + requests.len(), &whose, elements)?;
    for request in defaults {
        let from = format!("defaultNetworks element {:?}", request.text);
        let plan = nad_plan(config, namespace, request.clone(), NadUse::DefaultNetworks, objects);
        plans.push(plan.map_err(|e| e.context(&from))?);
    }
    for request in requests {
        let from = format!("{whose} annotation {} element {:?}", annotation::NETWORKS, request.text);
        plans.push(nad_plan(config, namespace, request, NadUse::Networks, objects).map_err(|e| e.context(&from))?);
    }
    let attachments = selection::name(plans, runtime_ifname, &whose)?;
    check_default_routes(&attachments, &whose)?;
    Ok(Selection { pod: Some(identity), reason, attachments, notes })
}

/// Check a name from `CNI_ARGS` before it goes into an API URL, which `kube` builds by pasting the
/// name into the path unescaped: `a?x` would fetch pod `a`, `..` another path. Kubernetes names are
/// DNS-1123 labels or subdomains: lowercase letters, digits, `-` and `.`, alphanumeric at both ends.
fn pod_arg(key: &str, value: &str) -> Result<(), CniError> {
    annotation::dns1123(value, 253, true).map(drop).map_err(|_| {
        CniError::invalid_env(format!(
            "CNI_ARGS: {key} {value:?} is not a Kubernetes name (lowercase letters, digits, '-' and '.')"
        ))
    })
}

fn default_selection(
    config: &SelectorConfig,
    runtime_ifname: &str,
    reason: Reason,
    why: &str,
) -> Result<Selection, CniError> {
    let attachments = selection::name(default_plans(config, why)?, runtime_ifname, "defaultNetwork")?;
    Ok(Selection { pod: None, reason, attachments, notes: Vec::new() })
}

/// `defaultNetwork`'s networks; `why` says why they are needed, for the error when there is none.
pub(super) fn default_plans(config: &SelectorConfig, why: &str) -> Result<Vec<Planned>, CniError> {
    let value = config
        .default_network
        .as_deref()
        .ok_or_else(|| CniError::invalid_config(format!("{why} and no defaultNetwork is configured")))?;
    let from = format!("defaultNetwork {value:?}");
    value_plans(config, value, &from, |element| Source::DefaultNetwork { element: element.text.clone() })
}

/// The plans of a value: its elements, each resolved to its file and loaded.
pub(super) fn value_plans(
    config: &SelectorConfig,
    value: &str,
    from: &str,
    source: impl Fn(&Element) -> Source,
) -> Result<Vec<Planned>, CniError> {
    let elements = match value::legacy_single(value) {
        // Before lists, `a,b` or `a@b` named one network directory; if it exists, it still does.
        Some(single) if confdir::resolve(&config.conf_dir, &single).is_ok() => {
            vec![Element { name: single, ifname: None, text: value.trim().to_string() }]
        }
        _ => value::parse(value)
            .map_err(|why| CniError::invalid_config(format!("{from}: cannot name a network: {why}")))?,
    };
    selection::check_count(elements.len(), from, elements.iter().map(|e| e.text.as_str()))?;
    elements
        .iter()
        .map(|element| {
            let file = confdir::resolve(&config.conf_dir, &element.name).map_err(|e| e.context(from))?;
            let (text, _) = confdir::load(&file).map_err(|e| e.context(from))?;
            Ok(Planned {
                identity: file.path.display().to_string(),
                ifname: element.ifname.clone(),
                attachment: Attachment {
                    ifname: String::new(),
                    network: file.network,
                    path: Some(file.path),
                    config: text,
                    source: source(element),
                    extras: Extras::default(),
                },
            })
        })
        .collect()
}

/// Each choosing container's value, and the plans of the value they agree on.
pub(super) type ContainersChoice = (Vec<Choice>, Vec<Planned>);

/// What the containers choose; `None` when no container chooses.
pub(super) fn containers_choice(
    config: &SelectorConfig,
    pod_ref: ObjectRef<'_>,
    containers: &[Container],
    objects: &mut dyn Objects,
) -> Result<Option<ContainersChoice>, CniError> {
    // The first choosing container, its value and that value's plans.
    let mut chosen: Option<(String, String, Vec<Planned>)> = None;
    let mut choices: Vec<Choice> = Vec::new();
    for container in containers {
        let whose = format!("{pod_ref} container {:?} env {ENV_VAR}", container.name);
        let Some((source, value)) =
            container_value(container, pod_ref.namespace, objects).map_err(|e| e.context(&whose))?
        else {
            continue;
        };
        // The same value as the first container's names the same networks: not read again.
        if chosen.as_ref().is_some_and(|(_, first_value, _)| *first_value == value) {
            choices.push(Choice { container: container.name.clone(), source, value });
            continue;
        }
        let from = match &source {
            ValueSource::Literal => whose.clone(),
            ValueSource::ConfigMap { name, key } => {
                format!("{whose} (ConfigMap {}/{name} key {key:?})", pod_ref.namespace)
            }
        };
        let plans = value_plans(config, &value, &from, |element| Source::Value {
            element: element.text.clone(),
            form: element.name.form().to_string(),
        })?;
        match &chosen {
            None => chosen = Some((container.name.clone(), value.clone(), plans)),
            Some((first, _, first_plans)) if !same_networks(first_plans, &plans) => {
                return Err(CniError::invalid_config(format!(
                    "{pod_ref}: containers {first:?} and {:?} choose different networks: {first:?} chooses {}, {:?} chooses {}",
                    container.name,
                    summary(first_plans),
                    container.name,
                    summary(&plans),
                )));
            }
            Some(_) => {}
        }
        choices.push(Choice { container: container.name.clone(), source, value });
    }
    Ok(chosen.map(|(_, _, plans)| (choices, plans)))
}

/// Containers agree when they name the same files, in the same order, on the same interfaces
/// (`b@net1` in second place is `b`).
fn same_networks(a: &[Planned], b: &[Planned]) -> bool {
    let ifname =
        |i: usize, p: &Planned| if i == 0 { None } else { Some(p.ifname.clone().unwrap_or(format!("net{i}"))) };
    a.len() == b.len()
        && a.iter().zip(b).enumerate().all(|(i, (a, b))| a.identity == b.identity && ifname(i, a) == ifname(i, b))
}

/// `blue (/etc/cni/net.d/blue/10-blue.conflist), red@net1 (...)`, for messages.
fn summary(plans: &[Planned]) -> String {
    let one = |p: &Planned| {
        let at = p.ifname.as_deref().map(|i| format!("@{i}")).unwrap_or_default();
        format!("{}{at} ({})", p.attachment.network, p.identity)
    };
    plans.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// At most one `default-route` gateway per address family: the pod has one default route.
fn check_default_routes(attachments: &[Attachment], whose: &str) -> Result<(), CniError> {
    let mut seen: BTreeMap<bool, (&str, std::net::IpAddr)> = BTreeMap::new();
    for attachment in attachments {
        for gw in &attachment.extras.default_route {
            if let Some((other, first)) = seen.insert(gw.is_ipv4(), (&attachment.ifname, *gw)) {
                return Err(CniError::invalid_config(format!(
                    "{whose}: default-route asks for two default routes of one family, via {first} on {other} and via \
                     {gw} on {}; a pod has one",
                    attachment.ifname
                )));
            }
        }
    }
    Ok(())
}

/// The pod's containers and init containers.
pub(super) fn containers(pod: &Pod) -> (&[Container], &[Container]) {
    match &pod.spec {
        Some(spec) => (spec.containers.as_slice(), spec.init_containers.as_deref().unwrap_or_default()),
        None => (&[], &[]),
    }
}

/// The container's `CNI_NETWORK_CONFIG` entry; the last one wins, as in Kubernetes.
pub(super) fn env_entry(container: &Container) -> Option<&EnvVar> {
    container.env.as_deref().unwrap_or_default().iter().rev().find(|e| e.name == ENV_VAR)
}

/// The ConfigMap key an env entry takes its value from, if that is where it takes it from.
pub(super) fn config_map_source(entry: &EnvVar) -> Option<&ConfigMapKeySelector> {
    entry.value_from.as_ref()?.config_map_key_ref.as_ref()
}

/// The elements of the pod's networks annotation; none without it.
pub(super) fn annotation_requests(pod: &Pod) -> Result<Vec<Request>, CniError> {
    match pod.metadata.annotations.as_ref().and_then(|a| a.get(annotation::NETWORKS)) {
        Some(value) => annotation::parse(value),
        None => Ok(Vec::new()),
    }
}

/// The value a container's `CNI_NETWORK_CONFIG` would have, and where it comes from. `None` when
/// the container has none, or takes it from an `optional` ConfigMap or key that is absent (as
/// Kubernetes leaves such a variable unset).
fn container_value(
    container: &Container,
    namespace: &str,
    objects: &mut dyn Objects,
) -> Result<Option<(ValueSource, String)>, CniError> {
    let Some(entry) = env_entry(container) else {
        return Ok(None);
    };
    if entry.value_from.is_none() {
        return Ok(Some((ValueSource::Literal, entry.value.clone().unwrap_or_default())));
    }
    let Some(selector) = config_map_source(entry) else {
        return Err(CniError::invalid_config(
            "only a literal value or valueFrom.configMapKeyRef can name a network".to_string(),
        ));
    };
    let optional = selector.optional.unwrap_or(false);
    let cm_ref = ObjectRef::config_map(namespace, &selector.name);
    let Some(cm) = objects.config_map(namespace, &selector.name)? else {
        return if optional { Ok(None) } else { Err(CniError::new(code::KUBE_API, format!("{cm_ref} not found"))) };
    };
    match cm.data.as_ref().and_then(|d| d.get(&selector.key)) {
        Some(value) => {
            Ok(Some((ValueSource::ConfigMap { name: selector.name.clone(), key: selector.key.clone() }, value.clone())))
        }
        None if optional => Ok(None),
        None => Err(CniError::new(code::KUBE_API, format!("{cm_ref} has no key {:?} in its data", selector.key))),
    }
}
