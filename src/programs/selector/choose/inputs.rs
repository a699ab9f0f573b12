//! The inputs of a pod's choice, for the node agent to hold so that `resolve` decides for a pod from
//! its answer exactly as from the API server: `references` says which objects a pod's choice reads,
//! `trimmed` keeps of a pod only what `resolve` reads. Both read the pod as `resolve` does (`pod`), so what the agent holds is what
//! `resolve` asks for.

use super::by_nad::NadUse;
use super::interfaces::MAX_ATTACHMENTS;
use super::pod::{annotation_requests, config_map_source, containers, env_entry, extended_resources};
use super::sandbox::CONFIG_MIRROR;
use crate::platform::kube::{Kind, ObjectKey};
use crate::programs::selector::config::defaults::PodDefaults;
use crate::programs::selector::config::policy::AttachmentPolicy;
use crate::programs::selector::requests::annotation::{self, GENIE_CNI, MULTUS_DEFAULT_NETWORK, NETWORKS};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::{BTreeMap, BTreeSet};

/// The objects `resolve` may ask for when it decides for `pod` (in `namespace`): the ConfigMap of
/// each container's `CNI_NETWORK_CONFIG` that takes its value from one, the NetworkAttachmentDefinition
/// of Multus's default-network annotation and each one the networks annotation names, that `policy`
/// lets the pod use, and the admin's `defaultNetworks` (`defaults`) outside `systemNamespaces`. A
/// superset of what one `resolve` asks for (it stops at its first error, and asks for the
/// ConfigMaps only when no default-network annotation decides first); nothing for an annotation
/// `resolve` refuses before asking for any NAD (unparsable, more than `MAX_ATTACHMENTS`), and no
/// object whose name is not a Kubernetes name (it could not exist). In order, without repeats.
pub fn references(policy: &AttachmentPolicy, defaults: &PodDefaults, namespace: &str, pod: &Pod) -> Vec<ObjectKey> {
    let valid = |name: &str| annotation::dns1123(name, 253, true).is_ok();
    let mut refs = BTreeSet::new();
    let (containers, _) = containers(pod);
    for selector in containers.iter().filter_map(env_entry).filter_map(config_map_source) {
        if valid(&selector.name) {
            refs.insert(ObjectKey::new(Kind::ConfigMap, namespace, &selector.name));
        }
    }
    let annotation = |key: &str| pod.metadata.annotations.as_ref().and_then(|a| a.get(key));
    let multus_default = annotation(MULTUS_DEFAULT_NETWORK)
        .and_then(|value| annotation::parse_as(MULTUS_DEFAULT_NETWORK, value).ok())
        .filter(|requests| requests.len() == 1)
        .unwrap_or_default();
    let networks = annotation_requests(pod).unwrap_or_default();
    let networks = if networks.len() <= MAX_ATTACHMENTS { networks } else { Vec::new() };
    let defaults_used = if defaults.is_system(namespace) { &[][..] } else { &defaults.default_networks[..] };
    let uses = [
        (NadUse::MultusDefault, &multus_default[..]),
        (NadUse::DefaultNetworks, defaults_used),
        (NadUse::Networks, &networks[..]),
    ];
    for (used, requests) in uses {
        for request in requests {
            if let Ok(nad_namespace) = used.namespace(request, namespace, policy, defaults) {
                refs.insert(ObjectKey::new(Kind::NetworkAttachmentDefinition, &nad_namespace, &request.name));
            }
        }
    }
    refs.into_iter().collect()
}

/// The pod annotations `resolve` and the uid check read; `trimmed` keeps these.
const READ_ANNOTATIONS: [&str; 4] = [NETWORKS, MULTUS_DEFAULT_NETWORK, GENIE_CNI, CONFIG_MIRROR];

/// `pod` with only what `resolve` reads, so that `resolve` decides for it exactly as for `pod`:
/// name, namespace, uid and resourceVersion; the annotations it reads (`READ_ANNOTATIONS`); of the containers and
/// init containers that set `CNI_NETWORK_CONFIG` or ask for extended resources (a device network's
/// devices), their name, that one entry (the one that counts) and those resources; and what the
/// DRA device lookup reads (the node's name, the resource claims and their statuses). Everything
/// else (the rest of the status, managed fields, images, probes, volumes) is dropped: the agent
/// holds every pod of its node this way, and hands it to the plugin.
pub fn trimmed(pod: &Pod) -> Pod {
    let keep = |c: &Container| {
        let entry = env_entry(c);
        let resources = extended_resources(c);
        (entry.is_some() || resources.is_some()).then(|| Container {
            name: c.name.clone(),
            env: entry.map(|entry| vec![entry.clone()]),
            resources,
            ..Default::default()
        })
    };
    let (containers, init_containers) = containers(pod);
    let init_containers: Vec<Container> = init_containers.iter().filter_map(keep).collect();
    let meta = &pod.metadata;
    let annotations: BTreeMap<String, String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(key, _)| READ_ANNOTATIONS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let annotations = (!annotations.is_empty()).then_some(annotations);
    // The node and the DRA resource claims, which the device lookup reads.
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let claim_statuses = status.and_then(|s| s.resource_claim_statuses.clone());
    let extended_claim = status.and_then(|s| s.extended_resource_claim_status.clone());
    let status = (claim_statuses.is_some() || extended_claim.is_some()).then(|| PodStatus {
        resource_claim_statuses: claim_statuses,
        extended_resource_claim_status: extended_claim,
        ..Default::default()
    });
    Pod {
        metadata: ObjectMeta { annotations, ..trimmed_meta(meta) },
        spec: Some(PodSpec {
            containers: containers.iter().filter_map(keep).collect(),
            init_containers: (!init_containers.is_empty()).then_some(init_containers),
            node_name: spec.and_then(|s| s.node_name.clone()),
            resource_claims: spec.and_then(|s| s.resource_claims.clone()),
            ..Default::default()
        }),
        status,
    }
}

/// An object's metadata trimmed to what tells it apart: name, namespace, uid and resourceVersion.
pub fn trimmed_meta(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}
