//! CNI ADD for the selector: choose the pod's networks (from the node agent when it knows the pod,
//! else from the API server), give its device networks their devices, record and attach them all,
//! give the pod the default route it asked for, record the results, and report what was attached
//! (the network-status annotation, the `AddedInterface` events). The runtime gets the result of the first network, on its interface.

use super::status::readiness_indicator;
use crate::node::agent_socket::protocol::PodObjects;
use crate::node::reports as to_agent;
use crate::platform::cni::{CniError, CniResult, Invocation, PluginConf, code};
use crate::platform::kube::{ApiClient, PodSource};
use crate::programs::selector::attach::devices::PodView;
use crate::programs::selector::attach::{self, RecordStore, Tombstones, default_route};
use crate::programs::selector::choose::from_agent::{self, NotUsed};
use crate::programs::selector::choose::{self, PodIdentity, Selection};
use crate::programs::selector::config::{NetworkStatus, SelectorConfig};
use crate::programs::selector::report::{self, Via};
use k8s_openapi::api::core::v1::Pod;

pub fn add(inv: &Invocation, conf: &PluginConf) -> Result<CniResult, CniError> {
    let config = SelectorConfig::from_plugin_conf(conf)?;
    readiness_indicator(&config, code::TRY_AGAIN_LATER)?;
    to_agent::note_stage(to_agent::Stage::Selecting);
    let Chosen { mut selection, via, mut api, seen } = choose(&config, inv)?;
    if attach::devices::wanted(&selection.attachments) {
        let view = match (&seen, &api) {
            (Seen::Agent(objects), _) => PodView::Agent(objects),
            (Seen::Api(pod), Some(api)) => PodView::Api(pod, api),
            _ => PodView::Unseen,
        };
        attach::devices::give(inv, &config, &mut selection.attachments, view)?;
    }
    // The pod's objects are not kept while the plugins run.
    drop(seen);
    crate::platform::logging::note_networks(selection.attachments.iter().map(|a| a.network.as_str()));
    let status_wanted = wants_status(&config, &selection);
    if !status_wanted {
        // A pod that gets no status write keeps no client while its plugins run.
        api = None;
    }
    let pod = inv.args.pod().map(|(namespace, name)| PodIdentity {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: inv.args.pod_uid().map(String::from).or(selection.pod.as_ref().and_then(|p| p.uid.clone())),
    });
    let store = RecordStore::of_node(&config.data_dir);
    // A DEL of this attachment that completed before no longer holds once this ADD makes it.
    Tombstones::new(&config.data_dir).remove(&inv.container_id, &inv.ifname);
    to_agent::note_stage(to_agent::Stage::Attaching);
    let mut attached = attach::add_all(inv, &config, &store, &selection.attachments, pod.clone())?;
    to_agent::note_stage(to_agent::Stage::Finishing);
    crate::platform::crash_point::reached("selector.add.attached");
    let requests = default_route::requested_by(&selection.attachments);
    let finished = default_route::apply(inv, &requests).and_then(|()| {
        let mut results: Vec<(&str, &mut CniResult)> =
            attached.iter_mut().map(|a| (a.record.ifname.as_str(), &mut a.result)).collect();
        default_route::adjust(&mut results, &requests);
        attach::record_results(&store, &mut attached)
    });
    if let Err(e) = finished {
        attach::abandon(&store, inv, &mut attached);
        return Err(e);
    }
    if let Some(pod) = &pod {
        // The status goes on the pod object the API server holds: a static pod's mirror has a
        // uid of its own, not the sandbox's K8S_POD_UID.
        let object_uid = selection.pod.as_ref().and_then(|p| p.uid.clone());
        let object = PodIdentity { uid: object_uid.or(pod.uid.clone()), ..pod.clone() };
        report::report(&config, &via, api, &object, &attached, status_wanted);
    }
    let primary = attached.into_iter().next().expect("a selection has at least one attachment");
    Ok(primary.result)
}

/// Whether ADD writes the pod's network-status annotation (`networkStatus`).
fn wants_status(config: &SelectorConfig, selection: &Selection) -> bool {
    let looked_up = selection.pod.is_some();
    match config.network_status {
        NetworkStatus::Never => false,
        NetworkStatus::Always => looked_up,
        NetworkStatus::Auto => looked_up && selection.attachments.len() > 1,
    }
}

/// A selection, where it came from, the API client that got it, if any, and the pod object it was
/// made from.
struct Chosen {
    selection: Selection,
    via: Via,
    api: Option<ApiClient>,
    seen: Seen,
}

/// The pod object a selection was made from: the agent's answer, or the API server's object.
enum Seen {
    Agent(Box<PodObjects>),
    Api(Box<Pod>),
    Nothing,
}

/// The pod's selection: from the node agent when there is one that knows the pod (no API request
/// at all), else from the API server exactly as without an agent. A refusal the agent's objects
/// decide is the ADD's error, without asking the API server (see `from_agent`). The operation's
/// log line says which (`selection="agent"`, or `"api: <why not the agent>"`). Without `K8S_POD_UID` the agent is
/// not asked: it could not tell the sandbox's pod from another of the same name.
fn choose(config: &SelectorConfig, inv: &Invocation) -> Result<Chosen, CniError> {
    let mut agent = None;
    if let (Some(_), Some(pod)) = (&config.kubeconfig, inv.args.pod()) {
        let why_not = match (&config.agent_socket, inv.args.pod_uid()) {
            (None, _) => None,
            (Some(_), None) => Some("no K8S_POD_UID in CNI_ARGS to ask the agent with".to_string()),
            (Some(socket), Some(uid)) => {
                match from_agent::selection(config, &inv.ifname, pod, uid, socket, from_agent::AGENT_WAIT) {
                    Ok((selection, objects)) => {
                        crate::platform::logging::note_selection("agent");
                        let seen = Seen::Agent(objects);
                        return Ok(Chosen { selection, via: Via::Agent(socket.clone()), api: None, seen });
                    }
                    Err(NotUsed { refusal: Some(refusal), .. }) => {
                        crate::platform::logging::note_selection("agent");
                        return Err(refusal);
                    }
                    Err(not_used) => {
                        // Up, but without the pod yet: it still takes the status and the events.
                        agent = not_used.answered.then(|| socket.clone());
                        Some(not_used.why)
                    }
                }
            }
        };
        crate::platform::logging::note_selection(
            &why_not.map_or_else(|| "api".to_string(), |why| format!("api: {why}")),
        );
    }
    let api = choose::api_client(config, inv, config.api)?;
    let source = api.as_ref().map(|a| a as &dyn PodSource);
    let (selection, pod) = choose::select_with_pod(config, &inv.ifname, inv.args.pod(), inv.args.pod_uid(), source)?;
    let seen = pod.map_or(Seen::Nothing, |pod| Seen::Api(Box::new(pod)));
    Ok(Chosen { selection, via: Via::Direct { agent }, api, seen })
}
