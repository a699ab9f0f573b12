//! Where ADD's device step reads the pod's DRA claims and the node's ResourceSlices: where ADD
//! learned about the pod. On the agent's path, a claim or the node's slices its answer lacks (it may
//! not have known the pod needs them yet) are asked of the API server, as the rest of ADD does for
//! what the agent lacks; anything else its answer says is final. A pod ADD learned nothing about has
//! no DRA devices.

use super::api_server;
use super::learned::Learned;
use crate::platform::cni::{CniError, Invocation, Operation, code};
use crate::platform::kube::ApiClient;
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::devices::dra::{self, DraDevices};

/// The network devices of the pod's DRA claims (the pod is in `namespace`), read from what ADD
/// `learned`, or through `api`, the client that looked the pod up on the direct path.
pub fn dra_devices(
    config: &SelectorConfig,
    runtime: &Invocation,
    op: &Operation,
    namespace: &str,
    learned: &Learned,
    api: Option<&ApiClient>,
) -> Result<DraDevices, CniError> {
    match (learned, api) {
        (Learned::Agent(objects), _) => {
            let pod = &objects.pod;
            let uid = pod.metadata.uid.as_deref();
            let mut answered = dra::FromAgent::new(objects);
            let found = dra::allocated(namespace, pod, uid, &mut answered);
            let Some(lacking) = answered.lacking else { return found };
            tracing::info!("the agent's answer lacks {lacking}: the pod's DRA devices are read from the API server");
            let Some(api) = api_server::client(config, runtime, config.api, op)? else {
                return Err(CniError::new(
                    code::KUBE_API,
                    format!("the agent's answer lacks {lacking}, and there is no API server to ask"),
                ));
            };
            dra::allocated(namespace, pod, uid, &mut dra::FromApi(&api))
        }
        (Learned::ApiServer(pod), Some(api)) => {
            dra::allocated(namespace, pod, pod.metadata.uid.as_deref(), &mut dra::FromApi(api))
        }
        _ => Ok(DraDevices::default()),
    }
}
