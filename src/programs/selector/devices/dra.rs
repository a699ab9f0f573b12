//! Devices allocated through DRA (resource.k8s.io/v1, Kubernetes >= 1.34): from a pod's resource
//! claims to the device IDs of the network devices they were allocated, by the resource name a
//! NetworkAttachmentDefinition's `k8s.v1.cni.cncf.io/resourceName` annotation names. The contract
//! is Multus's, which networking DRA drivers (dra-driver-sriov in its Multus mode) already speak:
//!
//! - the pod's claims: each `spec.resourceClaims` entry that names a ResourceClaim, and the claim
//!   made for each entry from a ResourceClaimTemplate (`status.resourceClaimStatuses`); an entry
//!   whose claim the controller found unneeded (no claim name in its status) has no devices;
//! - each claim's allocated devices (`status.allocation.devices.results`: driver, pool, device),
//!   looked up in the ResourceSlices of the pod's node: a device published with the attributes
//!   `k8s.cni.cncf.io/resourceName` and `k8s.cni.cncf.io/deviceID` gives its resource one device
//!   ID. Devices without them (a GPU in the same claim) are passed over, as Multus passes them over;
//! - the claim of the pod's extended resources (`status.extendedResourceClaimStatus`, the
//!   `DRAExtendedResource` feature): each request mapping's resource name (what the container asked
//!   for in `resources.limits`) is the NAD's; there every device of the request must carry both
//!   attributes, with that resource name.
//!
//! Device IDs are sorted per resource (Multus sorts these too), so a retried ADD hands each
//! attachment the same device. Where Multus stops short, this is stricter, each time saying why:
//! a claim the pod names directly (`resourceClaimName`, a claim shared by several pods) counts too
//! (Multus reads only the claims made from templates); a claim reserved for other consumers but not
//! this pod is refused; of a pool published in several generations only the newest counts
//! (the scheduler allocates from it); and a NAD whose resource no allocated device carries is an
//! error naming the devices found and why each was passed over (Multus hands the plugin no device
//! ID and lets it fail).
//!
//! `allocated` reads its objects through `DraObjects`: the API server on the direct path (GET each
//! claim, one LIST of the node's slices, only for a pod that has claims), the node agent's answer
//! on the agent's.

use crate::node::agent_socket::protocol::{PodObjects, PublishedDevice};
use crate::platform::cni::{CniError, code};
use crate::platform::kube::{ObjectRef, PodSource};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The device attribute a NetworkAttachmentDefinition's `k8s.v1.cni.cncf.io/resourceName` must equal.
pub const RESOURCE_NAME_ATTRIBUTE: &str = "k8s.cni.cncf.io/resourceName";
/// The device attribute handed to the attachment's plugins as `deviceID`.
pub const DEVICE_ID_ATTRIBUTE: &str = "k8s.cni.cncf.io/deviceID";

/// A device as an allocation names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeviceKey {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

impl fmt::Display for DeviceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {} of pool {} (driver {})", self.device, self.pool, self.driver)
    }
}

/// What a ResourceSlice publishes of a device that this reads: its two CNI attributes (string
/// values only, as Multus reads them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Published {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
}

/// The devices the ResourceSlices of one node publish, by driver, pool and name. Of a pool whose
/// slices carry several generations (a driver republishing it), only the newest counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeDevices {
    devices: BTreeMap<DeviceKey, Published>,
}

impl NodeDevices {
    pub fn from_slices<'a>(slices: impl IntoIterator<Item = &'a ResourceSlice>) -> Self {
        let slices: Vec<&ResourceSlice> = slices.into_iter().collect();
        let mut newest: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for slice in &slices {
            let pool = (slice.spec.driver.as_str(), slice.spec.pool.name.as_str());
            let generation = newest.entry(pool).or_insert(slice.spec.pool.generation);
            *generation = (*generation).max(slice.spec.pool.generation);
        }
        let mut devices = BTreeMap::new();
        for slice in slices {
            let (driver, pool) = (&slice.spec.driver, &slice.spec.pool.name);
            if newest.get(&(driver.as_str(), pool.as_str())) != Some(&slice.spec.pool.generation) {
                continue;
            }
            for device in slice.spec.devices.iter().flatten() {
                let string = |name: &str| device.attributes.as_ref()?.get(name)?.string.clone();
                let key = DeviceKey { driver: driver.clone(), pool: pool.clone(), device: device.name.clone() };
                let published = Published {
                    device_id: string(DEVICE_ID_ATTRIBUTE),
                    resource_name: string(RESOURCE_NAME_ATTRIBUTE),
                };
                devices.insert(key, published);
            }
        }
        NodeDevices { devices }
    }

    /// Only the devices of `keys`, as the node agent hands them to the plugin for one pod.
    pub fn only<'a>(&self, keys: impl IntoIterator<Item = &'a DeviceKey>) -> Vec<PublishedDevice> {
        let published = |key: &DeviceKey| {
            let found = self.devices.get(key)?;
            Some(PublishedDevice {
                driver: key.driver.clone(),
                pool: key.pool.clone(),
                device: key.device.clone(),
                device_id: found.device_id.clone(),
                resource_name: found.resource_name.clone(),
            })
        };
        keys.into_iter().filter_map(published).collect()
    }

    /// The devices as the node agent handed them over.
    pub fn from_published<'a>(devices: impl IntoIterator<Item = &'a PublishedDevice>) -> Self {
        let entry = |d: &PublishedDevice| {
            let key = DeviceKey { driver: d.driver.clone(), pool: d.pool.clone(), device: d.device.clone() };
            (key, Published { device_id: d.device_id.clone(), resource_name: d.resource_name.clone() })
        };
        NodeDevices { devices: devices.into_iter().map(entry).collect() }
    }

    pub fn get(&self, key: &DeviceKey) -> Option<&Published> {
        self.devices.get(key)
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

/// Where `allocated` reads the claims and the node's devices. `Ok(None)`: no such claim.
pub trait DraObjects {
    fn resource_claim(&mut self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, CniError>;
    /// The devices the ResourceSlices of `node` publish.
    fn node_devices(&mut self, node: &str) -> Result<NodeDevices, CniError>;
}

/// The direct path: the API server.
pub struct FromApi<'a>(pub &'a dyn PodSource);

impl DraObjects for FromApi<'_> {
    fn resource_claim(&mut self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, CniError> {
        self.0.resource_claim(namespace, name)
    }
    fn node_devices(&mut self, node: &str) -> Result<NodeDevices, CniError> {
        Ok(NodeDevices::from_slices(&self.0.node_resource_slices(node)?))
    }
}

/// The node agent's answer. A claim or the node's devices it does not hold make it unusable
/// (`lacking` says which): the agent may not have known the pod needs them, so the caller asks the
/// API server instead.
pub struct FromAgent<'a> {
    pub objects: &'a PodObjects,
    pub lacking: Option<String>,
}

impl<'a> FromAgent<'a> {
    pub fn new(objects: &'a PodObjects) -> Self {
        FromAgent { objects, lacking: None }
    }

    fn lacks(&mut self, what: String) -> CniError {
        let e = CniError::new(code::KUBE_API, format!("{what} is not in the agent's answer"));
        self.lacking = Some(what);
        e
    }
}

impl DraObjects for FromAgent<'_> {
    fn resource_claim(&mut self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, CniError> {
        match self.objects.resource_claims.iter().find(|held| held.is(namespace, name)) {
            Some(held) => Ok(held.object.clone()),
            None => Err(self.lacks(ObjectRef::resource_claim(namespace, name).to_string())),
        }
    }
    fn node_devices(&mut self, node: &str) -> Result<NodeDevices, CniError> {
        match &self.objects.node_devices {
            Some(devices) => Ok(NodeDevices::from_published(devices)),
            None => Err(self.lacks(format!("the ResourceSlices of node {node}"))),
        }
    }
}

/// The network devices DRA allocated to a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraDevices {
    /// Device IDs by resource name, each list sorted: what the attachments using that resource
    /// take, in order.
    pub device_ids: BTreeMap<String, Vec<String>>,
    /// Allocated devices that gave no device ID, and why (said when a NAD's resource has none).
    pub passed_over: Vec<String>,
    /// The claims read, by name (said when a NAD's resource has none).
    pub claims: Vec<String>,
}

impl DraDevices {
    /// Add these devices to those the pod has by other paths (the kubelet's device plugins).
    pub fn add_to(&self, devices: &mut super::PodDevices) {
        for (resource, ids) in &self.device_ids {
            devices.add(resource, ids.iter().cloned());
        }
    }

    /// Why no device of `resource_name` was found, naming what was: for the error of an attachment
    /// whose NetworkAttachmentDefinition asks for that resource.
    pub fn missing(&self, resource_name: &str) -> String {
        let mut why = if self.claims.is_empty() {
            "the pod has no DRA resource claims".to_string()
        } else {
            let found: Vec<String> = self.device_ids.keys().map(|r| format!("{r:?}")).collect();
            format!(
                "no device allocated to the pod's resource claims ({}) carries {RESOURCE_NAME_ATTRIBUTE} {resource_name:?}{}",
                self.claims.join(", "),
                if found.is_empty() { String::new() } else { format!(" (they carry {})", found.join(", ")) }
            )
        };
        if !self.passed_over.is_empty() {
            why.push_str(&format!("; passed over: {}", self.passed_over.join("; ")));
        }
        why
    }
}

/// One claim of the pod's, as the pod names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimUse {
    /// The ResourceClaim object's name.
    pub claim: String,
    /// For the claim of the pod's extended resources: its request mappings (request name, the
    /// resource name the container asked for).
    pub extended: Option<Vec<(String, String)>>,
}

/// The ResourceClaims `pod` uses, in its order, without repeats: the ones its `spec.resourceClaims`
/// name, the ones made from its templates (`status.resourceClaimStatuses`), and the claim of its
/// extended resources. An entry from a template whose claim is not made yet is an error (try again
/// later): the kubelet has not prepared the pod's devices, so the runtime should not be here yet.
pub fn claims_of(pod: &Pod) -> Result<Vec<ClaimUse>, CniError> {
    let spec_claims = pod.spec.as_ref().and_then(|s| s.resource_claims.as_deref()).unwrap_or_default();
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_deref()).unwrap_or_default();
    let mut claims: Vec<ClaimUse> = Vec::new();
    let add = |claims: &mut Vec<ClaimUse>, claim: &str| {
        if !claims.iter().any(|c| c.claim == claim && c.extended.is_none()) {
            claims.push(ClaimUse { claim: claim.to_string(), extended: None });
        }
    };
    for entry in spec_claims {
        if let Some(claim) = &entry.resource_claim_name {
            add(&mut claims, claim);
            continue;
        }
        let Some(template) = &entry.resource_claim_template_name else { continue };
        match statuses.iter().find(|s| s.name == entry.name) {
            Some(status) => {
                if let Some(claim) = &status.resource_claim_name {
                    add(&mut claims, claim);
                }
            }
            None => {
                return Err(CniError::try_again(format!(
                    "the pod's resource claim {:?} (from ResourceClaimTemplate {template}) has no ResourceClaim yet \
                     (pod.status.resourceClaimStatuses has no entry for it): the resourceclaim controller of the \
                     kube-controller-manager makes it",
                    entry.name
                )));
            }
        }
    }
    // Statuses of entries the spec does not hold (none, from a valid API server) count all the same.
    for status in statuses {
        if let Some(claim) = &status.resource_claim_name {
            add(&mut claims, claim);
        }
    }
    if let Some(extended) = pod.status.as_ref().and_then(|s| s.extended_resource_claim_status.as_ref()) {
        let mappings = extended.request_mappings.iter().map(|m| (m.request_name.clone(), m.resource_name.clone()));
        claims.push(ClaimUse { claim: extended.resource_claim_name.clone(), extended: Some(mappings.collect()) });
    }
    Ok(claims)
}

/// The names of the ResourceClaims `pod` uses, as far as its object says (what the node agent
/// watches for it): `claims_of` without its errors.
pub fn claim_names(pod: &Pod) -> Vec<String> {
    let spec_claims = pod.spec.as_ref().and_then(|s| s.resource_claims.as_deref()).unwrap_or_default();
    let status = pod.status.as_ref();
    let statuses = status.and_then(|s| s.resource_claim_statuses.as_deref()).unwrap_or_default();
    let extended = status.and_then(|s| s.extended_resource_claim_status.as_ref()).map(|e| &e.resource_claim_name);
    let mut names: Vec<String> = Vec::new();
    let named = spec_claims.iter().filter_map(|c| c.resource_claim_name.as_ref());
    for name in named.chain(statuses.iter().filter_map(|s| s.resource_claim_name.as_ref())).chain(extended) {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

/// The allocated devices of one claim, as `allocated` reads them.
fn allocation_results<'a>(
    claim_ref: &str,
    claim: &'a ResourceClaim,
) -> Result<&'a [DeviceRequestAllocationResult], CniError> {
    let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
    let Some(allocation) = allocation else {
        return Err(CniError::try_again(format!(
            "{claim_ref} is not allocated yet (its status.allocation is empty): the scheduler allocates it \
             before the pod runs; if it stays so, kubectl describe the claim and check the DRA driver's \
             ResourceSlices and the DeviceClass"
        )));
    };
    Ok(allocation.devices.as_ref().and_then(|d| d.results.as_deref()).unwrap_or_default())
}

/// The network devices DRA allocated to `pod` (in `namespace`, with `uid`), read through `objects`.
/// A pod without resource claims costs no request.
pub fn allocated(
    namespace: &str,
    pod: &Pod,
    uid: Option<&str>,
    objects: &mut dyn DraObjects,
) -> Result<DraDevices, CniError> {
    let claims = claims_of(pod)?;
    let mut found = DraDevices::default();
    if claims.is_empty() {
        return Ok(found);
    }
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default();
    let mut node_devices: Option<NodeDevices> = None;
    for used in &claims {
        let claim_ref = format!("ResourceClaim {namespace}/{}", used.claim);
        let claim = objects.resource_claim(namespace, &used.claim)?.ok_or_else(|| {
            CniError::try_again(format!("{claim_ref}, a resource claim of the pod, does not exist (yet)"))
        })?;
        found.claims.push(used.claim.clone());
        let results = allocation_results(&claim_ref, &claim)?;
        if let Some(uid) = uid
            && !reserved_for(&claim, uid)
        {
            return Err(CniError::new(
                code::KUBE_API,
                format!(
                    "{claim_ref} is not reserved for this pod (uid {uid}; status.reservedFor names other consumers): \
                     its devices are not the pod's"
                ),
            ));
        }
        if results.is_empty() {
            continue;
        }
        let devices = match &node_devices {
            Some(devices) => devices,
            None => node_devices.insert(objects.node_devices(node)?),
        };
        match &used.extended {
            None => {
                for result in results {
                    let key = DeviceKey {
                        driver: result.driver.clone(),
                        pool: result.pool.clone(),
                        device: result.device.clone(),
                    };
                    match network_device(devices, &key) {
                        Ok((resource, id)) => found.device_ids.entry(resource).or_default().push(id),
                        Err(why) => found.passed_over.push(format!("{key} of {claim_ref}: {why}")),
                    }
                }
            }
            Some(mappings) => {
                for (request, resource_name) in mappings {
                    let of_request: Vec<_> = results.iter().filter(|r| &r.request == request).collect();
                    if of_request.is_empty() {
                        return Err(CniError::new(
                            code::KUBE_API,
                            format!(
                                "{claim_ref}, the claim of the pod's extended resources, has no device allocated \
                                 for its request {request:?} (extended resource {resource_name:?})"
                            ),
                        ));
                    }
                    for result in of_request {
                        let key = DeviceKey {
                            driver: result.driver.clone(),
                            pool: result.pool.clone(),
                            device: result.device.clone(),
                        };
                        let (resource, id) = network_device(devices, &key)
                            .map_err(|why| CniError::new(code::KUBE_API, format!("{key} of {claim_ref}: {why}")))?;
                        if &resource != resource_name {
                            return Err(CniError::new(
                                code::KUBE_API,
                                format!(
                                    "{key} of {claim_ref}: its {RESOURCE_NAME_ATTRIBUTE} is {resource:?}, but it was \
                                     allocated for the extended resource {resource_name:?} (request {request:?}): \
                                     the DRA driver must publish the resource name the pod asks for"
                                ),
                            ));
                        }
                        found.device_ids.entry(resource).or_default().push(id);
                    }
                }
            }
        }
    }
    for ids in found.device_ids.values_mut() {
        ids.sort();
        ids.dedup();
    }
    Ok(found)
}

/// The resource name and device ID `key` is published with on the node; why it gives none.
fn network_device(devices: &NodeDevices, key: &DeviceKey) -> Result<(String, String), String> {
    let Some(published) = devices.get(key) else {
        return Err("no ResourceSlice of the pod's node publishes it".into());
    };
    let resource = published.resource_name.as_deref().filter(|s| !s.is_empty());
    let id = published.device_id.as_deref().filter(|s| !s.is_empty());
    match (resource, id) {
        (Some(resource), Some(id)) => Ok((resource.to_string(), id.to_string())),
        (None, None) => {
            Err(format!("its ResourceSlice gives it neither {RESOURCE_NAME_ATTRIBUTE} nor {DEVICE_ID_ATTRIBUTE}"))
        }
        (Some(resource), None) => Err(format!(
            "its ResourceSlice gives it {RESOURCE_NAME_ATTRIBUTE} {resource:?} but no {DEVICE_ID_ATTRIBUTE}"
        )),
        (None, Some(id)) => {
            Err(format!("its ResourceSlice gives it {DEVICE_ID_ATTRIBUTE} {id:?} but no {RESOURCE_NAME_ATTRIBUTE}"))
        }
    }
}

/// Whether `claim` is reserved for the pod with `uid`.
fn reserved_for(claim: &ResourceClaim, uid: &str) -> bool {
    let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_deref()).unwrap_or_default();
    reserved.iter().any(|consumer| consumer.resource == "pods" && consumer.uid == uid)
}

/// A ResourceClaim with only what `allocated` reads: its name, uid and resourceVersion, the
/// allocated devices, and its consumers (what the node agent holds).
pub fn trim_claim(claim: ResourceClaim) -> ResourceClaim {
    use k8s_openapi::api::resource::v1::{AllocationResult, DeviceAllocationResult, ResourceClaimStatus};
    let status = claim.status.map(|status| ResourceClaimStatus {
        allocation: status.allocation.map(|allocation| AllocationResult {
            devices: allocation
                .devices
                .map(|devices| DeviceAllocationResult { results: devices.results, config: None }),
            ..Default::default()
        }),
        reserved_for: status.reserved_for,
        ..Default::default()
    });
    ResourceClaim {
        metadata: ObjectMeta {
            name: claim.metadata.name,
            namespace: claim.metadata.namespace,
            uid: claim.metadata.uid,
            resource_version: claim.metadata.resource_version,
            ..Default::default()
        },
        spec: Default::default(),
        status,
    }
}

#[cfg(test)]
mod tests;
