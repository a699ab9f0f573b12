//! What ADD reports about the pod once its networks are attached: the network-status annotation
//! (`status`, when `networkStatus` asks for it) and, through the node agent, one `AddedInterface`
//! Event per interface, as Multus creates them (`Add eth0 [10.1.2.3/24] from default/lan`). Both are
//! handed to the agent when it is up (it gave the selection, or answered that its watch had not
//! delivered the pod yet): it writes them on its own time, so ADD makes no API request for them.
//! Without the agent (or when it does not take them) the status is written here, in one request
//! with a budget of its own; the events are not (they would cost every ADD a request). Neither
//! ever fails the ADD.

use crate::kube::{ApiClient, ApiPolicy};
use crate::selector::attach::networks::Attached;
use crate::selector::choose::from_agent;
use crate::selector::choose::selection::PodIdentity;
use crate::selector::config::SelectorConfig;
use crate::selector::report::network_status;
use crate::selector::{NETWORK_STATUS, warn};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where ADD got the pod's selection from.
pub enum Via {
    /// The node agent listening on this socket.
    Agent(PathBuf),
    /// The API server (or nothing at all: not a pod, no kubeconfig); `agent`: the socket of an
    /// agent that answered but did not have the pod yet, which takes the hand-over all the same.
    Direct { agent: Option<PathBuf> },
}

/// Report what ADD attached for `pod` (whose uid is the pod object's): the status if
/// `status_wanted`, the events if an agent is up and `addedInterfaceEvents` is on.
pub fn report(
    config: &SelectorConfig,
    via: &Via,
    api: Option<ApiClient>,
    pod: &PodIdentity,
    attached: &[Attached],
    status_wanted: bool,
) {
    let agent = match via {
        Via::Agent(socket) => Some(socket),
        Via::Direct { agent } => agent.as_ref(),
    };
    let events = match agent {
        Some(_) if config.added_interface_events => event_messages(attached),
        _ => Vec::new(),
    };
    if !status_wanted && events.is_empty() {
        return;
    }
    let Some(uid) = pod.uid.as_deref() else {
        warn(format!("{pod} has no uid to make sure of; its {NETWORK_STATUS} annotation was not written"));
        return;
    };
    let annotations = if status_wanted { status_annotations(attached) } else { BTreeMap::new() };
    if let Some(socket) = agent {
        match from_agent::hand_over(socket, pod, uid, &annotations, &events) {
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
        (None, Some(kubeconfig)) => match ApiClient::connect(kubeconfig, budget) {
            Ok(api) => api,
            Err(e) => return warn(format!("the {NETWORK_STATUS} annotation of {pod} was not written: {e}")),
        },
        (None, None) => return,
    };
    network_status::write(&api, pod, uid, &annotations);
}

fn status_annotations(attached: &[Attached]) -> BTreeMap<String, String> {
    let entries: Vec<network_status::Entry> = attached
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            network_status::entries(&a.record.network, a.record.source.as_ref(), &a.record.ifname, &a.result, i == 0)
        })
        .collect();
    network_status::annotations(&entries)
}

/// One message per network, as Multus words its `AddedInterface` events: the interface, the
/// addresses its result gave it (with prefix length), the network (a NAD's `namespace/name`).
fn event_messages(attached: &[Attached]) -> Vec<String> {
    attached
        .iter()
        .map(|a| added_interface(&a.record.network, a.record.source.as_ref(), &a.record.ifname, &a.result))
        .collect()
}

fn added_interface(
    network: &str,
    source: Option<&crate::selector::choose::selection::Source>,
    ifname: &str,
    result: &crate::cni::CniResult,
) -> String {
    let entry = network_status::entries(network, source, ifname, result, false).remove(0);
    let own = result.interfaces.iter().position(|i| i.name == ifname && i.sandbox.is_some());
    let ips: Vec<String> = result
        .ips
        .iter()
        .filter(|ip| ip.interface.is_none() || ip.interface == own)
        .map(|ip| ip.address.to_string())
        .collect();
    format!("Add {ifname} [{}] from {}", ips.join(" "), entry.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::{CniResult, CniVersion};
    use crate::selector::choose::selection::Source;
    use serde_json::json;

    #[test]
    fn added_interface_messages_read_as_multus_writes_them() {
        let result = CniResult::from_json(
            &json!({"interfaces": [{"name": "veth1"}, {"name": "net1", "sandbox": "/run/netns/p"}],
                    "ips": [{"address": "10.1.2.3/24", "interface": 1}, {"address": "fd00::3/64", "interface": 1},
                            {"address": "10.9.9.9/32", "interface": 0}]}),
            CniVersion::LATEST,
        )
        .unwrap();
        let source = Source::Annotation { element: "lan".into(), nad: "web/lan".into(), inline: false };
        assert_eq!(
            added_interface("lan", Some(&source), "net1", &result),
            "Add net1 [10.1.2.3/24 fd00::3/64] from web/lan"
        );
        let bare = CniResult::from_json(&json!({"ips": [{"address": "10.244.0.5/24"}]}), CniVersion::LATEST).unwrap();
        assert_eq!(added_interface("ptpnet", None, "eth0", &bare), "Add eth0 [10.244.0.5/24] from ptpnet");
    }
}
