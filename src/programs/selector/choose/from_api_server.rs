//! Choosing from the API server: the pod object (checked to be the sandbox's), then `resolve` over
//! the objects it refers to, each fetched once (`Fetching`). A caller that is not a Kubernetes pod,
//! or a selector without a kubeconfig, gets `defaultNetwork`.

use super::by_value::default_plans;
use super::chosen::{Reason, Selection};
use super::from_objects::resolve;
use super::interfaces;
use super::objects::Objects;
use super::sandbox::check_uid;
use crate::platform::cni::{CniError, code};
use crate::platform::kube::{NetworkAttachmentDefinition, ObjectRef, PodSource};
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::requests::annotation;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use std::collections::BTreeMap;

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
    select_with_pod(config, runtime_ifname, pod, sandbox_uid, source).map(|(selection, _)| selection)
}

/// `select`, with the pod object it read (none when it read none): ADD's device step reads the
/// pod's DRA claims from it.
pub fn select_with_pod(
    config: &SelectorConfig,
    runtime_ifname: &str,
    pod: Option<(&str, &str)>,
    sandbox_uid: Option<&str>,
    source: Option<&dyn PodSource>,
) -> Result<(Selection, Option<Pod>), CniError> {
    let Some((namespace, name)) = pod else {
        let why = "the caller is not a Kubernetes pod";
        return Ok((default_selection(config, runtime_ifname, Reason::NotAPod, why)?, None));
    };
    let pod_ref = ObjectRef::pod(namespace, name);
    let Some(source) = source else {
        let why = format!("{pod_ref} cannot be looked up (no kubeconfig configured)");
        return Ok((default_selection(config, runtime_ifname, Reason::KubernetesNotConfigured, &why)?, None));
    };
    pod_arg("K8S_POD_NAMESPACE", namespace)?;
    pod_arg("K8S_POD_NAME", name)?;
    let pod =
        source.pod(namespace, name)?.ok_or_else(|| CniError::new(code::KUBE_API, format!("{pod_ref} not found")))?;
    check_uid(pod_ref, &pod, sandbox_uid)?;
    let selection = resolve(config, runtime_ifname, (namespace, name), &pod, &mut Fetching::new(source))?;
    Ok((selection, Some(pod)))
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
    let attachments = interfaces::name(default_plans(config, why)?, runtime_ifname, "defaultNetwork")?;
    Ok(Selection { pod: None, reason, attachments, notes: Vec::new() })
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
