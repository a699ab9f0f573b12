//! Who hears what ADD reports: the network-status annotation (`report::network_status`, when
//! `networkStatus` asks for it) and, through the node agent, one `AddedInterface` Event per
//! interface (`report::events`). Both are handed to the agent when it is up (it gave the selection,
//! or answered that its watch had not delivered the pod yet): it writes them on its own time, so ADD
//! makes no API request for them. Without the agent (or when it does not take them) the status is
//! written to the API server, in one request with a budget of its own; the events are not (they
//! would cost every ADD a request). So only a status waits for the agent's answer: events alone (a
//! pod of one network, the common case) are sent without waiting for it. Neither ever fails the ADD.

use crate::node::agent_socket::client::{exchange, send_without_answer};
use crate::node::agent_socket::protocol::{Answer, Ask, Request};
use crate::platform::cni::Operation;
use crate::platform::kube::{ApiClient, ApiPolicy};
use crate::programs::selector::attach::Attached;
use crate::programs::selector::choose::PodIdentity;
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::report::events;
use crate::programs::selector::report::network_status::{self, NETWORK_STATUS};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Who hears what ADD reports, as ADD's lookup found them (`lookup::for_add`).
pub struct Audience {
    /// The socket of the node agent when it is up: it gave the selection, or answered but did not
    /// have the pod yet, and takes the hand-over all the same.
    pub(super) agent: Option<PathBuf>,
    /// The client that looked the pod up on the direct path, kept only for a status to write.
    pub(super) api: Option<ApiClient>,
}

/// Tell `audience` what ADD (the operation `op`) attached for `pod` (whose uid is the pod object's): the status if
/// `status_wanted`, the events if an agent is up and `addedInterfaceEvents` is on.
pub fn deliver(
    config: &SelectorConfig,
    audience: Audience,
    op: &Operation,
    pod: &PodIdentity,
    attached: &[Attached],
    status_wanted: bool,
) {
    let Audience { agent, api } = audience;
    let agent = agent.as_ref();
    let events = match agent {
        Some(_) if config.added_interface_events => events::messages(attached),
        _ => Vec::new(),
    };
    if !status_wanted && events.is_empty() {
        return;
    }
    let Some(uid) = pod.uid.as_deref() else {
        tracing::warn!("{pod} has no uid to make sure of; its {NETWORK_STATUS} annotation was not written");
        return;
    };
    let annotations = if status_wanted { network_status::of_attached(attached) } else { BTreeMap::new() };
    if let Some(socket) = agent {
        match hand_over(socket, pod, uid, &annotations, &events) {
            Ok(()) => return,
            Err(why) if status_wanted => {
                tracing::info!("the agent did not take {pod}'s {NETWORK_STATUS} annotation ({why}); writing it here")
            }
            Err(why) => return tracing::info!("the agent did not take {pod}'s AddedInterface events ({why})"),
        }
    }
    let budget = ApiPolicy::retrying(config.api.attempt_timeout, config.api.attempt_timeout);
    let api = match (api, &config.kubeconfig) {
        (Some(mut api), _) => {
            api.renew_budget(config.api.attempt_timeout);
            api
        }
        (None, Some(kubeconfig)) => match ApiClient::connect(kubeconfig, budget, op) {
            Ok(api) => api,
            Err(e) => return tracing::warn!("the {NETWORK_STATUS} annotation of {pod} was not written: {e}"),
        },
        (None, None) => return,
    };
    network_status::write(&api, pod, uid, &annotations);
}

/// Handing the network-status annotation over: the agent only queues it.
const HAND_OVER: Duration = Duration::from_millis(250);

/// Hand the pod's annotations (none: no status to write) and the messages of its `AddedInterface`
/// events to the agent, which writes them (with the uid guard) on its own time. Without a status,
/// the agent's answer would change nothing here (events the agent does not take are not created by
/// the plugin either), so it is not waited for.
fn hand_over(
    socket: &Path,
    pod: &PodIdentity,
    uid: &str,
    annotations: &BTreeMap<String, String>,
    events: &[String],
) -> Result<(), String> {
    let no_answer = annotations.is_empty();
    let ask = Ask::Annotate {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: uid.into(),
        annotations: annotations.clone(),
        events: events.to_vec(),
        no_answer,
    };
    let deadline = Instant::now() + HAND_OVER;
    if no_answer {
        return send_without_answer(socket, &Request::new(ask), deadline);
    }
    match exchange(socket, &Request::new(ask), deadline)? {
        Answer::Accepted => Ok(()),
        Answer::Refused { why } => Err(why),
        other => Err(format!("unexpected answer {other:?}")),
    }
}
