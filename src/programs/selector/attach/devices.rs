//! The devices of a pod's device networks (`devices`): before anything is recorded, every
//! attachment through a NetworkAttachmentDefinition with a `resourceName` is given one of the
//! devices allocated to the pod, with its device-info file named. A pod without device networks
//! asks nothing. Two paths allocate devices, and both are read:
//!
//! - DRA: the devices of the pod's resource claims whose ResourceSlice attributes carry a resource
//!   name (`programs::selector::devices::dra`), read where ADD learned about the pod
//!   (`lookup::AddLookup::dra_devices`, handed in); a pod without resource claims costs no request;
//! - device plugins: the kubelet's PodResources socket, on this node (no API-server request), asked
//!   only when DRA gave no device of some resource an attachment wants.
//!
//! Any error is returned before anything is made, naming what is missing. Once recorded, each
//! device network's attachment hands its device plugin's device-info to its CNI before its chain
//! runs (`hand_over_info`), and the attachment's file goes once its plugins have let the device go
//! (`forget_info`).

use super::record::Record;
use crate::platform::cni::{CniError, Invocation, code};
use crate::programs::selector::choose::Attachment;
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::devices::dra::DraDevices;
use crate::programs::selector::devices::{self, DeviceError, DeviceWant, PodDevices, handoff, podresources};

/// Whether any attachment is a device network's: only then does ADD read devices at all.
pub fn wanted(attachments: &[Attachment]) -> bool {
    attachments.iter().any(|a| a.device.is_some())
}

/// Gives each device network's attachment of `attachments` its device, of those allocated to the
/// pod through its DRA claims (`dra_devices`, given the pod's namespace) and by the kubelet's
/// device plugins.
pub fn give(
    runtime: &Invocation,
    config: &SelectorConfig,
    attachments: &mut [Attachment],
    dra_devices: impl FnOnce(&str) -> Result<DraDevices, CniError>,
) -> Result<(), CniError> {
    if !wanted(attachments) {
        return Ok(());
    }
    let (namespace, name) = runtime.args.pod().ok_or_else(|| {
        CniError::invalid_config("a device network's attachment needs the pod's K8S_POD_NAMESPACE and K8S_POD_NAME")
    })?;
    let dra = dra_devices(namespace).map_err(|e| {
        CniError::new(e.code, format!("pod {namespace}/{name}: the devices of its DRA claims: {}", e.msg))
    })?;
    let refused = |e: DeviceError| {
        let code = if e.is_transient() { code::TRY_AGAIN_LATER } else { code::INVALID_CONFIG };
        let dra_why = match &e {
            DeviceError::NoneAllocated { resource, .. } if !dra.claims.is_empty() => {
                format!("; DRA: {}", dra.missing(resource))
            }
            _ => String::new(),
        };
        CniError::new(code, format!("pod {namespace}/{name}: {e}{dra_why}"))
    };
    let wants: Vec<Option<DeviceWant>> = attachments
        .iter()
        .map(|a| {
            a.device.as_ref().map(|d| DeviceWant {
                network: a.network.clone(),
                resource: d.resource.clone(),
                device_id: a.extras.device_id.clone(),
            })
        })
        .collect();
    let mut allocated = PodDevices::default();
    dra.add_to(&mut allocated);
    // The kubelet is asked only for what DRA did not give: a pod whose device networks all take
    // DRA devices does not depend on the PodResources socket.
    // Without its socket, a pod with DRA claims is told what its claims lack rather than that the
    // kubelet's socket is absent.
    if wants.iter().flatten().any(|want| allocated.of(&want.resource).is_empty()) {
        match podresources::pod_devices(&config.pod_resources_socket, namespace, name) {
            Ok(by_plugins) => {
                for (resource, ids) in by_plugins.resources() {
                    allocated.add(resource, ids.iter().cloned());
                }
            }
            Err(DeviceError::SocketAbsent { .. }) if !dra.claims.is_empty() => {}
            Err(e) => return Err(refused(e)),
        }
    }
    let given = devices::assign(&allocated, &wants).map_err(refused)?;
    for (attachment, device) in attachments.iter_mut().zip(given) {
        let Some(mut device) = device else { continue };
        let network = attachment_network_name(attachment)?;
        device.info_file = Some(handoff::attachment_info_file(
            &config.device_info_dir,
            &network,
            &runtime.container_id,
            &attachment.ifname,
        ));
        if let Some(used) = attachment.device.as_mut() {
            used.given = Some(device);
        }
    }
    Ok(())
}

/// The network's name as its configuration says it (what Multus names the device-info file by).
fn attachment_network_name(attachment: &Attachment) -> Result<String, CniError> {
    Ok(attachment.conf_list()?.name)
}

/// A device network's attachment: the device plugin's device-info copied to the attachment's
/// file, for its CNI. A device plugin that writes none, or a copy that fails, leaves the CNI
/// without it, as under Multus: logged, never a failed ADD.
pub fn hand_over_info(config: &SelectorConfig, record: &Record) {
    if let Some(device) = &record.device
        && let Err(e) = handoff::copy_plugin_info(&config.device_info_dir, device)
    {
        tracing::warn!("the device-info of device {} ({}) was not handed to its CNI: {e}", device.id, device.resource);
    }
}

/// The attachment's device-info file, once its plugins have let the device go.
pub fn forget_info(record: &Record) {
    if let Some(device) = &record.device
        && let Err(e) = handoff::remove_info(device)
    {
        tracing::warn!("the device-info file of interface {} was not removed: {e}", record.ifname);
    }
}
