//! Device networks: which device the kubelet gave the pod, and handing it to the device CNI.
//!
//! A NetworkAttachmentDefinition annotated `k8s.v1.cni.cncf.io/resourceName` is a device network:
//! each attachment through it needs one device of that resource, allocated to the pod by the
//! kubelet before the sandbox was made. Two paths find what was allocated, and both produce a
//! `PodDevices` (the device IDs allocated to one pod, by resource name, each list sorted):
//! device plugins through the kubelet's PodResources API (`podresources`), and DRA resource claims
//! (`dra`: the allocated devices' `k8s.cni.cncf.io/deviceID` by `k8s.cni.cncf.io/resourceName`).
//! `assign` then gives each device attachment its device: the one the pod's networks annotation
//! names (`deviceID`), which must be among the pod's own, else the first of the sorted list not yet
//! given, so that a retried ADD gets the very same devices.
//!
//! What the device CNI gets (`deviceID`, `pciBusID`, the `CNIDeviceInfoFile` capability) and the
//! device-info files are written by `handoff`.

pub mod dra;
pub mod handoff;
pub mod podresources;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub use crate::platform::kube::RESOURCE_NAME;

/// The device IDs allocated to one pod, by resource name; each list sorted, without repeats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDevices {
    by_resource: BTreeMap<String, Vec<String>>,
}

impl PodDevices {
    /// Adds devices of `resource` (of one container, say) to those already known.
    pub fn add(&mut self, resource: &str, ids: impl IntoIterator<Item = String>) {
        let list = self.by_resource.entry(resource.to_string()).or_default();
        list.extend(ids);
        list.sort();
        list.dedup();
    }

    /// The devices of `resource`, sorted; none when the pod has none of it.
    pub fn of(&self, resource: &str) -> &[String] {
        self.by_resource.get(resource).map(Vec::as_slice).unwrap_or_default()
    }

    /// Every resource of which the pod has devices, with its devices.
    pub fn resources(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.by_resource.iter().map(|(resource, ids)| (resource.as_str(), ids.as_slice()))
    }
}

/// What one attachment asks for: a device of `resource` (its NetworkAttachmentDefinition's
/// `resourceName`), the particular one `device_id` when the pod's networks annotation names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceWant {
    /// The network, for messages.
    pub network: String,
    pub resource: String,
    pub device_id: Option<String>,
}

/// The device an attachment was given: recorded with the attachment, so that CHECK and DEL hand
/// the device CNI the device ADD handed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    pub resource: String,
    /// As the kubelet names it (for SR-IOV VFs, the PCI address).
    pub id: String,
    /// The device-info file the CNI reads and writes (the `CNIDeviceInfoFile` capability), and
    /// that ADD reads for the network-status annotation's `device-info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_file: Option<PathBuf>,
}

/// Why an attachment gets no device: each names the missing piece and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error(
        "network {network} is a device network of resource {resource:?}, but no container of the pod \
         requests that resource, and the pod has no DRA resource claims: add it to a container's \
         resources.limits (\"{resource}\": \"1\"), or claim a device whose ResourceSlice carries \
         k8s.cni.cncf.io/resourceName {resource:?}"
    )]
    NotRequested { network: String, resource: String },
    #[error(
        "network {network} needs a device of resource {resource:?}, but the kubelet allocated none to the pod \
         (allocated: {allocated}); check that the device plugin of {resource:?} runs on this node and advertises devices"
    )]
    NoneAllocated { network: String, resource: String, allocated: String },
    #[error(
        "the pod's networks need {wanted} devices of resource {resource:?}, but the kubelet allocated {} ({}): \
         request {wanted} in the containers' resources.limits",
        allocated.len(), allocated.join(", ")
    )]
    TooFew { resource: String, wanted: usize, allocated: Vec<String> },
    #[error(
        "network {network}: deviceID {device_id:?} is not one of the pod's devices of resource {resource:?} \
         ({}); name one of them, or leave deviceID out", allocated.join(", ")
    )]
    NotThePods { network: String, resource: String, device_id: String, allocated: Vec<String> },
    #[error("network {network}: deviceID {device_id:?} is given to two attachments; each needs a device of its own")]
    TakenTwice { network: String, device_id: String },
    #[error(
        "network {network}: deviceID {device_id:?} names a device, but its NetworkAttachmentDefinition has no \
         {RESOURCE_NAME} annotation, so the pod has no device of it to name"
    )]
    NotADeviceNetwork { network: String, device_id: String },
    #[error(
        "the kubelet's PodResources socket {} is absent, so the device the kubelet gave the pod cannot be known: \
         is the kubelet running on this node (the socket is its), and is the selector's podResourcesSocket right?",
        socket.display()
    )]
    SocketAbsent { socket: PathBuf },
    #[error("the kubelet's PodResources API at {} did not answer: {reason}", socket.display())]
    Unanswered { socket: PathBuf, reason: String },
}

impl DeviceError {
    /// Whether the same call may succeed later without anyone changing anything (the kubelet
    /// restarting), as opposed to a pod or NAD to fix.
    pub fn is_transient(&self) -> bool {
        matches!(self, DeviceError::SocketAbsent { .. } | DeviceError::Unanswered { .. })
    }
}

/// Each want's device, in order (`None` for an attachment that wants none): first the devices
/// the wants name, each checked to be the pod's and named once; then, for the others, the pod's
/// devices of their resource in sorted order, skipping those already given. Sorted, so that an
/// ADD retried after a failure gives every attachment the device it was given the first time.
pub fn assign(devices: &PodDevices, wants: &[Option<DeviceWant>]) -> Result<Vec<Option<Device>>, DeviceError> {
    let device =
        |resource: &str, id: &str| Some(Device { resource: resource.to_string(), id: id.to_string(), info_file: None });
    let mut given: Vec<Option<Device>> = vec![None; wants.len()];
    let mut taken: BTreeMap<(&str, &str), &str> = BTreeMap::new();
    for (i, want) in wants.iter().enumerate() {
        let Some(want @ DeviceWant { device_id: Some(id), .. }) = want else { continue };
        let allocated = devices.of(&want.resource);
        if !allocated.contains(id) {
            return Err(DeviceError::NotThePods {
                network: want.network.clone(),
                resource: want.resource.clone(),
                device_id: id.clone(),
                allocated: allocated.to_vec(),
            });
        }
        if taken.insert((&want.resource, id), &want.network).is_some() {
            return Err(DeviceError::TakenTwice { network: want.network.clone(), device_id: id.clone() });
        }
        given[i] = device(&want.resource, id);
    }
    for (i, want) in wants.iter().enumerate() {
        let Some(want @ DeviceWant { device_id: None, .. }) = want else { continue };
        let allocated = devices.of(&want.resource);
        if allocated.is_empty() {
            let allocated = devices.resources().map(|(r, ids)| format!("{r}: {}", ids.join(" "))).collect::<Vec<_>>();
            let allocated = if allocated.is_empty() { "nothing".to_string() } else { allocated.join("; ") };
            return Err(DeviceError::NoneAllocated {
                network: want.network.clone(),
                resource: want.resource.clone(),
                allocated,
            });
        }
        let Some(free) = allocated.iter().find(|id| !taken.contains_key(&(want.resource.as_str(), id.as_str()))) else {
            let wanted = wants.iter().flatten().filter(|w| w.resource == want.resource).count();
            return Err(DeviceError::TooFew { resource: want.resource.clone(), wanted, allocated: allocated.to_vec() });
        };
        taken.insert((&want.resource, free), &want.network);
        given[i] = device(&want.resource, free);
    }
    Ok(given)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices(list: &[(&str, &[&str])]) -> PodDevices {
        let mut devices = PodDevices::default();
        for (resource, ids) in list {
            devices.add(resource, ids.iter().map(|s| s.to_string()));
        }
        devices
    }

    fn want(network: &str, resource: &str, device_id: Option<&str>) -> Option<DeviceWant> {
        Some(DeviceWant { network: network.into(), resource: resource.into(), device_id: device_id.map(String::from) })
    }

    fn ids(given: Vec<Option<Device>>) -> Vec<Option<String>> {
        given.into_iter().map(|g| g.map(|d| d.id)).collect()
    }

    const VF: &str = "example.com/vf";

    #[test]
    fn devices_of_a_resource_are_handed_out_in_sorted_order() {
        // The kubelet's order, split over two containers, is not what counts.
        let pod = devices(&[(VF, &["0000:03:00.4", "0000:03:00.2"]), (VF, &["0000:03:00.3"])]);
        assert_eq!(pod.of(VF), ["0000:03:00.2", "0000:03:00.3", "0000:03:00.4"]);
        let wants = [None, want("a", VF, None), want("b", VF, None)];
        let given = assign(&pod, &wants).unwrap();
        assert_eq!(ids(given.clone()), [None, Some("0000:03:00.2".into()), Some("0000:03:00.3".into())]);
        // A retry gets the same devices.
        assert_eq!(assign(&pod, &wants).unwrap(), given);
    }

    #[test]
    fn the_other_networks_fill_in_around_a_named_device() {
        let pod = devices(&[(VF, &["vf0", "vf1", "vf2"]), ("example.com/other", &["o1"])]);
        let wants = [want("a", VF, None), want("b", VF, Some("vf0")), want("c", "example.com/other", None)];
        assert_eq!(ids(assign(&pod, &wants).unwrap()), [Some("vf1".into()), Some("vf0".into()), Some("o1".into())]);
    }

    #[test]
    fn each_missing_piece_is_named() {
        let pod = devices(&[(VF, &["vf0"])]);
        let err = assign(&pod, &[want("a", "example.com/other", None)]).unwrap_err();
        assert!(matches!(err, DeviceError::NoneAllocated { .. }), "{err}");
        assert!(err.to_string().contains("example.com/vf: vf0"), "{err}");
        let err = assign(&pod, &[want("a", VF, None), want("b", VF, None)]).unwrap_err();
        assert_eq!(err, DeviceError::TooFew { resource: VF.into(), wanted: 2, allocated: vec!["vf0".into()] });
        // A pod author must not pick a host device that is not the pod's.
        let err = assign(&pod, &[want("a", VF, Some("0000:81:00.1"))]).unwrap_err();
        assert!(matches!(err, DeviceError::NotThePods { .. }), "{err}");
        assert!(err.to_string().contains("\"0000:81:00.1\" is not one of the pod's devices"), "{err}");
        let err = assign(&pod, &[want("a", VF, Some("vf0")), want("b", VF, Some("vf0"))]).unwrap_err();
        assert!(matches!(err, DeviceError::TakenTwice { .. }), "{err}");
        // A named device is counted against the others of its resource.
        let err = assign(&pod, &[want("a", VF, None), want("b", VF, Some("vf0"))]).unwrap_err();
        assert!(matches!(err, DeviceError::TooFew { wanted: 2, .. }), "{err}");
    }
}
