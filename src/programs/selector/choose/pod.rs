//! What choosing reads of the pod object: its containers, the `CNI_NETWORK_CONFIG` entry that
//! counts, and the networks annotation. `resolve`, the agent's `references` and `trimmed` read the
//! pod through these alone, so what the agent holds is what `resolve` asks for.

use super::chosen::ENV_VAR;
use crate::platform::cni::CniError;
use crate::programs::selector::requests::annotation::{self, Request};
use k8s_openapi::api::core::v1::{ConfigMapKeySelector, Container, EnvVar, Pod, ResourceRequirements};

/// The pod's containers and init containers.
pub fn containers(pod: &Pod) -> (&[Container], &[Container]) {
    match &pod.spec {
        Some(spec) => (spec.containers.as_slice(), spec.init_containers.as_deref().unwrap_or_default()),
        None => (&[], &[]),
    }
}

/// The container's `CNI_NETWORK_CONFIG` entry; the last one wins, as in Kubernetes.
pub fn env_entry(container: &Container) -> Option<&EnvVar> {
    container.env.as_deref().unwrap_or_default().iter().rev().find(|e| e.name == ENV_VAR)
}

/// The ConfigMap key an env entry takes its value from, if that is where it takes it from.
pub fn config_map_source(entry: &EnvVar) -> Option<&ConfigMapKeySelector> {
    entry.value_from.as_ref()?.config_map_key_ref.as_ref()
}

/// The container's extended resources (those whose names hold a `/`, as device plugins' do), from
/// its limits and requests: what a device network's attachment may take devices of.
pub fn extended_resources(container: &Container) -> Option<ResourceRequirements> {
    let resources = container.resources.as_ref()?;
    let extended = |list: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        let kept: std::collections::BTreeMap<_, _> =
            list.iter().flatten().filter(|(name, _)| name.contains('/')).map(|(n, q)| (n.clone(), q.clone())).collect();
        (!kept.is_empty()).then_some(kept)
    };
    let (limits, requests) = (extended(&resources.limits), extended(&resources.requests));
    (limits.is_some() || requests.is_some()).then(|| ResourceRequirements { limits, requests, ..Default::default() })
}

/// Whether a container or init container of the pod asks for `resource` (in its limits or requests).
pub fn requests_resource(pod: &Pod, resource: &str) -> bool {
    let (containers, init_containers) = containers(pod);
    containers
        .iter()
        .chain(init_containers)
        .filter_map(extended_resources)
        .any(|r| r.limits.iter().chain(r.requests.iter()).any(|list| list.contains_key(resource)))
}

/// The elements of the pod's networks annotation; none without it.
pub fn annotation_requests(pod: &Pod) -> Result<Vec<Request>, CniError> {
    match pod.metadata.annotations.as_ref().and_then(|a| a.get(annotation::NETWORKS)) {
        Some(value) => annotation::parse(value),
        None => Ok(Vec::new()),
    }
}
