//! The attach worker's lookup (`dynamic`): a running pod's networks, from the node agent alone, as
//! it holds them after an edit of the networks annotation, waiting as long as the agent waits for
//! anything (a NetworkAttachmentDefinition namespace the edit just named is being listed). Resolved
//! as at ADD: the same policy, the same limits.

use super::agent;
use crate::node::agent_socket::protocol::{Answer, MAX_WAIT_MS};
use crate::node::worker_protocol::Request;
use crate::programs::selector::choose::{Selection, from_agent_answer};
use crate::programs::selector::config::SelectorConfig;
use std::time::{Duration, Instant};

/// How long the worker waits for the agent's answer about the pod.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// The selection of the pod `request` names, whose runtime attachment is on `owner`; why not.
pub fn for_hotplug(config: &SelectorConfig, request: &Request, owner: &str) -> Result<Selection, String> {
    let socket = config.agent_socket.as_ref().ok_or("the selector has no agentSocket")?;
    let pod = (request.namespace.as_str(), request.name.as_str());
    let wait = Duration::from_millis(MAX_WAIT_MS);
    let objects = match agent::ask(socket, pod, Some(&request.uid), wait, Instant::now() + ANSWER_WAIT)? {
        Answer::Objects(objects) => objects,
        other => return Err(format!("the node agent does not have the pod: {other:?}")),
    };
    from_agent_answer::resolve(config, owner, pod, &request.uid, &objects).map_err(|not_used| not_used.why)
}
