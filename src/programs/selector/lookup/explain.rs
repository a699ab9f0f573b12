//! `yh-genie explain`'s lookup: the API server, asked as a runtime's ADD without an agent asks it
//! (explain has no sandbox, so no `K8S_POD_UID` to hold the pod to), and beside it what the node
//! agent holds of the pod, asked without waiting, for explain to say what ADD would do with it.

use super::agent::{self, ANSWER_WAIT};
use crate::node::agent_socket::protocol::Answer;
use crate::platform::cni::{CniError, Operation};
use crate::platform::kube::{ApiClient, PodSource};
use crate::programs::selector::choose::{self, Selection};
use crate::programs::selector::config::SelectorConfig;
use std::path::Path;
use std::time::{Duration, Instant};

/// The selection of `pod` (namespace, name) from the API server, with the client that made it
/// (none without a kubeconfig), for the pod's DRA devices.
pub fn from_api_server(config: &SelectorConfig, pod: (&str, &str)) -> Result<(Selection, Option<ApiClient>), CniError> {
    let api = match &config.kubeconfig {
        // Not a CNI operation: its requests are counted nowhere anyone reads.
        Some(kubeconfig) => Some(ApiClient::connect(kubeconfig, config.api, &Operation::default())?),
        None => None,
    };
    // The runtimes the selector serves name the pod's first interface eth0.
    let selection = choose::select(config, "eth0", Some(pod), None, api.as_ref().map(|a| a as &dyn PodSource))?;
    Ok((selection, api))
}

/// What the agent at `socket` holds of `pod` (namespace, name), whatever its uid, asked without
/// waiting for it; why it did not answer.
pub fn from_agent(socket: &Path, pod: (&str, &str)) -> Result<Answer, String> {
    agent::ask(socket, pod, None, Duration::ZERO, Instant::now() + ANSWER_WAIT)
}
