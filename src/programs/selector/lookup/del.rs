//! DEL's lookup, for an attachment without a usable record (`commands::del`): records are written
//! durably before any plugin runs, so without one ADD made nothing, unless records were lost. Then
//! the node agent, if it still holds the pod, says which networks it has (a local request that does
//! not wait for the pod). The API server is asked (once, one attempt) only for a record that exists
//! but cannot be used: something was made, and only the pod can say what. A pod teardown without a
//! record never waits on the API server.

use super::agent;
use super::api_server;
use crate::platform::cni::{Invocation, Operation};
use crate::platform::kube::{ApiPolicy, PodSource};
use crate::programs::selector::choose::from_agent_answer::NotUsed;
use crate::programs::selector::choose::{self, Selection};
use crate::programs::selector::config::SelectorConfig;
use std::time::Duration;

/// The pod's selection for a DEL without a usable record (`record_unusable`: one exists but cannot
/// be used); why its networks cannot be known.
pub fn for_del_without_record(
    config: &SelectorConfig,
    inv: &Invocation,
    op: &Operation,
    record_unusable: bool,
) -> Result<Selection, String> {
    let from_agent = match (&config.agent_socket, inv.args.pod(), inv.args.pod_uid()) {
        (Some(socket), Some(pod), Some(uid)) => {
            agent::selection(config, &inv.ifname, pod, uid, socket, Duration::ZERO).map(|(selection, _)| selection)
        }
        _ => Err(NotUsed::new("no agent to ask".to_string(), false)),
    };
    match (from_agent, record_unusable) {
        (Ok(selection), _) => Ok(selection),
        (Err(why), false) => Err(format!("{why}; the API server is not asked on DEL")),
        (Err(why), true) => api_server::client(config, inv, ApiPolicy::single_attempt(config.api.attempt_timeout), op)
            .and_then(|api| {
                let source = api.as_ref().map(|a| a as &dyn PodSource);
                choose::select(config, &inv.ifname, inv.args.pod(), inv.args.pod_uid(), source)
            })
            .map_err(|e| format!("{why}; {e}")),
    }
}
