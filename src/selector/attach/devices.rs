//! The devices of a pod's device networks (`devices`): before anything is recorded, every
//! attachment through a NetworkAttachmentDefinition with a `resourceName` is given one of the
//! devices the kubelet allocated to the pod (asked of its PodResources socket, on this node: no
//! API-server request), with its device-info file named; a pod without device networks asks
//! nothing. Any error is returned before anything is made, naming what is missing.

use crate::cni::{CniError, Invocation, code};
use crate::devices::{self, DeviceError, DeviceWant, handoff, podresources};
use crate::selector::choose::Attachment;
use crate::selector::config::SelectorConfig;

/// Gives each device network's attachment of `attachments` its device.
pub fn give(runtime: &Invocation, config: &SelectorConfig, attachments: &mut [Attachment]) -> Result<(), CniError> {
    if attachments.iter().all(|a| a.device.is_none()) {
        return Ok(());
    }
    let (namespace, name) = runtime.args.pod().ok_or_else(|| {
        CniError::invalid_config("a device network's attachment needs the pod's K8S_POD_NAMESPACE and K8S_POD_NAME")
    })?;
    let refused = |e: DeviceError| {
        let code = if e.is_transient() { code::TRY_AGAIN_LATER } else { code::INVALID_CONFIG };
        CniError::new(code, format!("pod {namespace}/{name}: {e}"))
    };
    let allocated = podresources::pod_devices(&config.pod_resources_socket, namespace, name).map_err(refused)?;
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
