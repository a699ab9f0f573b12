//! The choice itself, `resolve`: the networks of a pod, decided from the pod object and the objects
//! it refers to, which it asks of an `Objects` (the API server's, or the node agent's answer);
//! nothing else. In one pass:
//! the first networks by the precedence rule (`precedence`), then the admin's `defaultNetworks`, then
//! the networks annotation's, each through its NetworkAttachmentDefinition (`by_nad`); then every
//! attachment gets its interface (`interfaces`).

use super::by_nad::{NadUse, nad_plan};
use super::chosen::{Attachment, ENV_VAR, PodIdentity, Selection};
use super::interfaces;
use super::objects::Objects;
use super::pod::{annotation_requests, containers, env_entry, requests_resource};
use super::precedence::{self, First};
use crate::platform::cni::CniError;
use crate::platform::kube::ObjectRef;
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::devices::DeviceError;
use crate::programs::selector::requests::annotation::{self, Request};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;

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
    interfaces::check_count(plans.len() + defaults.len() + requests.len(), &whose, elements)?;
    for request in defaults {
        let from = format!("defaultNetworks element {:?}", request.text);
        let plan = nad_plan(config, namespace, request.clone(), NadUse::DefaultNetworks, objects);
        plans.push(plan.map_err(|e| e.context(&from))?);
    }
    for request in requests {
        let from = format!("{whose} annotation {} element {:?}", annotation::NETWORKS, request.text);
        plans.push(nad_plan(config, namespace, request, NadUse::Networks, objects).map_err(|e| e.context(&from))?);
    }
    let attachments = interfaces::name(plans, runtime_ifname, &whose)?;
    check_default_routes(&attachments, &whose)?;
    check_device_requests(&attachments, pod, &whose)?;
    Ok(Selection { pod: Some(identity), reason, attachments, notes })
}

/// A device network's attachment takes a device allocated to the pod: by a device plugin, only for
/// a resource a container asks for; through DRA, only to a pod with resource claims (which of
/// their devices carries the resource is known once they are read, in ADD's device step). A
/// `deviceID` names a device of a device network.
fn check_device_requests(attachments: &[Attachment], pod: &Pod, whose: &str) -> Result<(), CniError> {
    for attachment in attachments {
        let refused = match (&attachment.device, &attachment.extras.device_id) {
            (Some(device), _) if !requests_resource(pod, &device.resource) && !has_resource_claims(pod) => {
                DeviceError::NotRequested { network: attachment.network.clone(), resource: device.resource.clone() }
            }
            (None, Some(device_id)) => {
                DeviceError::NotADeviceNetwork { network: attachment.network.clone(), device_id: device_id.clone() }
            }
            _ => continue,
        };
        return Err(CniError::invalid_config(format!("{whose}: {refused}")));
    }
    Ok(())
}

/// Whether the pod has DRA resource claims.
fn has_resource_claims(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()).is_some_and(|claims| !claims.is_empty())
        || pod.status.as_ref().is_some_and(|s| s.extended_resource_claim_status.is_some())
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
