//! The selector's one face for the node agent (`programs::agent`): exactly what the agent must hold
//! so that the selector decides from its answer as from the API server, and nothing of how the
//! selector decides.
//!
//! - Which objects a pod's choice reads, under the admin's policy (`AttachmentPolicy`, and
//!   `PodDefaults` for the admin's `defaultNetworks`, both read from the selector's keys):
//!   `references`; and the DRA resource claims of its device networks: `claim_names`.
//! - Each held trimmed to what the selector reads of it: `trim_pod`, `trim_config_map`,
//!   `trim_attachment`, `trim_claim`, `trim_slice`; of the node's ResourceSlices, only the devices
//!   allocated to a pod's claims are handed over (`published_devices`).
//! - Whether a pod held under a name is the one a sandbox is for (`is_sandbox_pod`).
//! - The names the agent reads and writes under: the networks annotation whose edits it applies
//!   (`NETWORKS`), the network-status annotation it writes (`NETWORK_STATUS`), and the component of
//!   the events it creates (`NAME`).
//!
//! The wire between them is `node::agent_socket`, and the attach worker's `node::worker_protocol`.

use super::choose;
use super::devices::dra::{self, DeviceKey, NodeDevices};
use crate::node::agent_socket::protocol::{Held, PublishedDevice};
use crate::platform::kube::{NetworkAttachmentDefinition, RESOURCE_NAME};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::resource::v1::{Device, ResourceClaim, ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use super::choose::{is_sandbox_pod, references, trimmed as trim_pod};
pub use super::config::defaults::PodDefaults;
pub use super::config::policy::AttachmentPolicy;
pub use super::devices::dra::{claim_names, trim_claim};
pub use super::name::NAME;
pub use super::report::network_status::NETWORK_STATUS;
pub use super::requests::annotation::NETWORKS;

/// A ConfigMap with only what selection reads: its `data` (and its name and version).
pub fn trim_config_map(cm: ConfigMap) -> ConfigMap {
    ConfigMap { metadata: choose::trimmed_meta(&cm.metadata), data: cm.data, ..Default::default() }
}

/// A NetworkAttachmentDefinition with only its `spec` and its `resourceName` annotation (and its
/// name and version).
pub fn trim_attachment(nad: NetworkAttachmentDefinition) -> NetworkAttachmentDefinition {
    let resource = nad.resource_name().map(|r| (RESOURCE_NAME.to_string(), r.to_string()));
    let metadata = ObjectMeta { annotations: resource.map(|r| [r].into()), ..choose::trimmed_meta(&nad.metadata) };
    NetworkAttachmentDefinition { metadata, spec: nad.spec, ..Default::default() }
}

/// A ResourceSlice with only what the plugin reads: its driver, pool and node, and each device's
/// name and CNI attributes.
pub fn trim_slice(slice: ResourceSlice) -> ResourceSlice {
    let keep = |name: &String| name == dra::RESOURCE_NAME_ATTRIBUTE || name == dra::DEVICE_ID_ATTRIBUTE;
    let devices = slice.spec.devices.map(|devices| {
        devices
            .into_iter()
            .map(|device| Device {
                name: device.name,
                attributes: device.attributes.map(|a| a.into_iter().filter(|(name, _)| keep(name)).collect()),
                ..Default::default()
            })
            .collect()
    });
    let spec = ResourceSliceSpec {
        driver: slice.spec.driver,
        pool: slice.spec.pool,
        node_name: slice.spec.node_name,
        devices,
        ..Default::default()
    };
    ResourceSlice { metadata: choose::trimmed_meta(&slice.metadata), spec }
}

/// What the node's `slices` publish of the devices allocated to `claims` (a pod's, as held).
pub fn published_devices<'a>(
    slices: impl IntoIterator<Item = &'a ResourceSlice>,
    claims: &[Held<ResourceClaim>],
) -> Vec<PublishedDevice> {
    let devices = NodeDevices::from_slices(slices);
    let allocated: Vec<DeviceKey> = claims
        .iter()
        .filter_map(|held| {
            held.object.as_ref()?.status.as_ref()?.allocation.as_ref()?.devices.as_ref()?.results.as_ref()
        })
        .flatten()
        .map(|r| DeviceKey { driver: r.driver.clone(), pool: r.pool.clone(), device: r.device.clone() })
        .collect();
    devices.only(&allocated)
}
