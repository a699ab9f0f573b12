//! The selector, `yh-genie`: the one plugin the kubelet's runtime calls. For each pod it asks the
//! Kubernetes API which networks the pod chose (`select`: a value list in `CNI_NETWORK_CONFIG`, the
//! networks annotation through NetworkAttachmentDefinitions, within the admin's `policy`), loads
//! their configurations from the node (`network`), records each choice durably (`record`) and runs
//! each network's chain on its interface (`attach`, `chain`). DEL, CHECK and GC work from the
//! records alone, never from the API server. With a node agent (`crate::agent`) ADD asks it first
//! and makes no API request at all (`from_agent`).

pub mod annotation;
mod attach;
pub mod capabilities;
mod chain;
pub mod config;
mod default_route;
pub mod explain;
mod extras;
mod from_agent;
mod gc;
pub mod network;
pub mod policy;
mod ready;
mod record;
pub mod select;
pub mod selection;
mod status;
pub mod value;

pub use status::NETWORK_STATUS;

use crate::cni::{CniError, CniResult, Invocation, Plugin, PluginConf, code};
use crate::kube::{ApiClient, ApiPolicy, PodSource};
use config::{NetworkStatus, SelectorConfig};
use record::{Found, RecordStore};
use selection::{PodIdentity, Selection};
use std::collections::HashSet;
use std::path::PathBuf;

pub const NAME: &str = "yh-genie";

pub struct Selector;

impl Plugin for Selector {
    fn name(&self) -> &'static str {
        NAME
    }

    fn add(&self, inv: &Invocation, conf: &PluginConf) -> Result<CniResult, CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let Chosen { selection, via, mut api } = choose(&config, inv)?;
        note_networks(selection.attachments.iter().map(|a| a.network.as_str()));
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
        let store = RecordStore::new(&config.data_dir);
        let mut attached = attach::add_all(inv, &config, &store, &selection.attachments, pod.clone())?;
        crate::crash_point::reached("selector.add.attached");
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
        if let Some(pod) = &pod
            && status_wanted
        {
            write_status(&config, &via, api, pod, &attached);
        }
        let primary = attached.into_iter().next().expect("a selection has at least one attachment");
        Ok(primary.result)
    }

    fn del(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let store = RecordStore::new(&config.data_dir);
        let (records, others) = attach::records_of(&store, inv)?;
        note_networks(records.iter().map(|r| r.network.as_str()));
        let unreadable: Vec<String> = others
            .iter()
            .filter_map(|f| match f {
                Found::Unreadable(ifname) => Some(ifname.clone()),
                _ => None,
            })
            .collect();
        let interrupted = others.iter().filter_map(|f| match f {
            Found::Interrupted(ifname) => Some(ifname.clone()),
            _ => None,
        });
        if records.is_empty() && unreadable.is_empty() {
            del_without_record(&config, inv, None)?;
            crate::crash_point::reached("selector.del.chain-done");
            let ifnames: Vec<String> = std::iter::once(inv.ifname.clone()).chain(interrupted).collect();
            return store.remove_all(&inv.container_id, &ifnames);
        }
        let (outcome, mut unusable) = attach::del_records(inv, &config, &records);
        unusable.extend(unreadable);
        if !unusable.is_empty() {
            del_without_record(&config, inv, Some(&unusable))?;
        }
        outcome?;
        let ifnames: Vec<String> =
            records.iter().map(|r| r.ifname.clone()).chain(unusable).chain(interrupted).collect();
        store.remove_all(&inv.container_id, &ifnames)
    }

    fn check(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let store = RecordStore::new(&config.data_dir);
        let (records, _) = attach::records_of(&store, inv)?;
        if !records.iter().any(|r| r.ifname == inv.ifname) {
            return Err(CniError::new(
                code::UNKNOWN_CONTAINER,
                format!("container {} interface {}: no attachment record", inv.container_id, inv.ifname),
            ));
        }
        note_networks(records.iter().map(|r| r.network.as_str()));
        attach::check_records(inv, &config, &records)
    }

    /// DEL every recorded attachment that the runtime no longer lists as valid, then GC each network
    /// with its own live attachments (`gc`).
    fn gc(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let valid: HashSet<(String, String)> = config::valid_attachments(conf)?.into_iter().collect();
        gc::collect(inv, &config, &valid)
    }

    /// Ready when the configuration directory can be read, the kubeconfig, if any, is there, and
    /// the default network's plugins say they are (`ready`).
    fn status(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        ready::status(inv, &config)
    }
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

/// Where ADD got the pod's selection from.
enum Via {
    /// The node agent listening on this socket.
    Agent(PathBuf),
    /// The API server (or nothing at all: not a pod, no kubeconfig).
    Direct,
}

/// A selection, where it came from, and the API client that got it, if any.
struct Chosen {
    selection: Selection,
    via: Via,
    api: Option<ApiClient>,
}

/// The pod's selection: from the node agent when there is one that knows the pod (no API request
/// at all), else from the API server exactly as without an agent. The operation's log line says
/// which (`selection="agent"`, or `"api: <why not the agent>"`). Without `K8S_POD_UID` the agent is
/// not asked: it could not tell the sandbox's pod from another of the same name.
fn choose(config: &SelectorConfig, inv: &Invocation) -> Result<Chosen, CniError> {
    if let (Some(_), Some(pod)) = (&config.kubeconfig, inv.args.pod()) {
        let why_not = match (&config.agent_socket, inv.args.pod_uid()) {
            (None, _) => None,
            (Some(_), None) => Some("no K8S_POD_UID in CNI_ARGS to ask the agent with".to_string()),
            (Some(socket), Some(uid)) => match from_agent::selection(config, &inv.ifname, pod, uid, socket) {
                Ok(selection) => {
                    crate::logging::note_selection("agent");
                    return Ok(Chosen { selection, via: Via::Agent(socket.clone()), api: None });
                }
                Err(why) => Some(why),
            },
        };
        crate::logging::note_selection(&why_not.map_or_else(|| "api".to_string(), |why| format!("api: {why}")));
    }
    let api = api_client(config, inv, config.api)?;
    let source = api.as_ref().map(|a| a as &dyn PodSource);
    let selection = select::select(config, &inv.ifname, inv.args.pod(), inv.args.pod_uid(), source)?;
    Ok(Chosen { selection, via: Via::Direct, api })
}

/// The network-status annotation of what ADD attached: handed to the agent when it gave the
/// selection (it writes it on its own time), else (or when it does not take it) written here in
/// one request with a budget of its own.
fn write_status(
    config: &SelectorConfig,
    via: &Via,
    api: Option<ApiClient>,
    pod: &PodIdentity,
    attached: &[attach::Attached],
) {
    let Some(uid) = pod.uid.as_deref() else {
        warn(format!("{pod} has no uid to make sure of; its {NETWORK_STATUS} annotation was not written"));
        return;
    };
    let entries: Vec<status::Entry> = attached
        .iter()
        .enumerate()
        .map(|(i, a)| status::entry(&a.record.network, a.record.source.as_ref(), &a.record.ifname, &a.result, i == 0))
        .collect();
    let annotations = status::annotations(&entries);
    if let Via::Agent(socket) = via {
        match from_agent::hand_over_annotations(socket, pod, uid, &annotations) {
            Ok(()) => return,
            Err(why) => {
                tracing::info!("the agent did not take {pod}'s {NETWORK_STATUS} annotation ({why}); writing it here")
            }
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
    status::write(&api, pod, uid, &annotations);
}

/// A client when there is a pod to look up and a kubeconfig to do it with.
fn api_client(config: &SelectorConfig, inv: &Invocation, policy: ApiPolicy) -> Result<Option<ApiClient>, CniError> {
    match (&config.kubeconfig, inv.args.pod()) {
        (Some(kubeconfig), Some(_)) => ApiClient::connect(kubeconfig, policy).map(Some),
        _ => Ok(None),
    }
}

/// DEL with no (usable) record: ADD never completed its records, or DEL already ran. Ask the API
/// server once, briefly, which networks the pod has and DEL them (those on `only`'s interfaces, if
/// given) in reverse, without `prevResult`; if that cannot be known, there is nothing this plugin
/// can undo, and DEL succeeds.
fn del_without_record(config: &SelectorConfig, inv: &Invocation, only: Option<&[String]>) -> Result<(), CniError> {
    let chosen = api_client(config, inv, ApiPolicy::single_attempt(config.api.attempt_timeout)).and_then(|api| {
        select::select(
            config,
            &inv.ifname,
            inv.args.pod(),
            inv.args.pod_uid(),
            api.as_ref().map(|a| a as &dyn PodSource),
        )
    });
    let selection = match chosen {
        Ok(selection) => selection,
        Err(e) => {
            warn(format!(
                "no usable attachment record for container {} interface {}, and its networks cannot be determined ({e}); nothing to delete",
                inv.container_id, inv.ifname
            ));
            return Ok(());
        }
    };
    let mut first_error = None;
    for (position, attachment) in selection.attachments.iter().enumerate().rev() {
        if only.is_some_and(|only| !only.contains(&attachment.ifname)) {
            continue;
        }
        let outcome = attach::plugins_call(inv, config, position, attachment)
            .and_then(|(_, list, call)| chain::del(&list, &call, None));
        if let Err(e) = outcome {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The networks of the operation, for its log line.
fn note_networks<'a>(names: impl Iterator<Item = &'a str>) {
    let names: Vec<&str> = names.collect();
    if !names.is_empty() {
        crate::logging::note_network(&names.join(","));
    }
}

/// A warning in the plugin's log (stderr or `logFile`); stdout is the CNI protocol's.
fn warn(msg: impl std::fmt::Display) {
    tracing::warn!("{msg}");
}
