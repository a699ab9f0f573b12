//! The selector, `yh-genie`: the one plugin the kubelet's runtime calls. For each pod it asks the
//! Kubernetes API which networks the pod chose (`select`: a value list in `CNI_NETWORK_CONFIG`, the
//! networks annotation through NetworkAttachmentDefinitions, within the admin's `policy`), loads
//! their configurations from the node (`network`), records each choice durably (`record`) and runs
//! each network's chain on its interface (`attach`, `chain`). DEL, CHECK and GC work from the
//! records alone, never from the API server; a completed DEL leaves a `tombstone` so that the
//! runtime's repeated DELs of the same sandbox cost nothing. With a node agent (`crate::agent`) ADD asks it first
//! and makes no API request at all (`from_agent`).

mod attach;
pub mod choose;
mod commands;
pub mod config;
pub mod explain;
pub mod netconf;
mod report;
pub mod requests;

pub use report::network_status::NETWORK_STATUS;

use crate::cni::{CniError, CniResult, Invocation, Plugin, PluginConf, code};
use crate::kube::{ApiClient, ApiPolicy, PodSource};
use attach::networks as attach_networks;
use attach::record::{Found, RecordStore};
use attach::tombstone::Tombstones;
use attach::{chain, default_route, settle};
use choose::selection::{PodIdentity, Selection};
use choose::{from_agent, select};
use config::{NetworkStatus, SelectorConfig};
use report::deliver::Via;
use std::collections::HashSet;

pub const NAME: &str = "yh-genie";

pub struct Selector;

impl Plugin for Selector {
    fn name(&self) -> &'static str {
        NAME
    }

    fn add(&self, inv: &Invocation, conf: &PluginConf) -> Result<CniResult, CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        readiness_indicator(&config, code::TRY_AGAIN_LATER)?;
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
        // A DEL of this attachment that completed before no longer holds once this ADD makes it.
        Tombstones::new(&config.data_dir).remove(&inv.container_id, &inv.ifname);
        let mut attached = attach_networks::add_all(inv, &config, &store, &selection.attachments, pod.clone())?;
        crate::crash_point::reached("selector.add.attached");
        let requests = default_route::requested_by(&selection.attachments);
        let finished = default_route::apply(inv, &requests).and_then(|()| {
            let mut results: Vec<(&str, &mut CniResult)> =
                attached.iter_mut().map(|a| (a.record.ifname.as_str(), &mut a.result)).collect();
            default_route::adjust(&mut results, &requests);
            attach_networks::record_results(&store, &mut attached)
        });
        if let Err(e) = finished {
            attach_networks::abandon(&store, inv, &mut attached);
            return Err(e);
        }
        if let Some(pod) = &pod {
            // The status goes on the pod object the API server holds: a static pod's mirror has a
            // uid of its own, not the sandbox's K8S_POD_UID.
            let object_uid = selection.pod.as_ref().and_then(|p| p.uid.clone());
            let object = PodIdentity { uid: object_uid.or(pod.uid.clone()), ..pod.clone() };
            report::deliver::report(&config, &via, api, &object, &attached, status_wanted);
        }
        let primary = attached.into_iter().next().expect("a selection has at least one attachment");
        Ok(primary.result)
    }

    fn del(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let store = RecordStore::new(&config.data_dir);
        let tombstones = Tombstones::new(&config.data_dir);
        let (records, others) = attach_networks::records_of(&store, inv)?;
        note_networks(records.iter().map(|r| r.network.as_str()));
        let unreadable: Vec<String> = others
            .iter()
            .filter_map(|f| match f {
                Found::Unreadable(ifname) => Some(ifname.clone()),
                _ => None,
            })
            .collect();
        let interrupted: Vec<String> = others
            .iter()
            .filter_map(|f| match f {
                Found::Interrupted(ifname) => Some(ifname.clone()),
                _ => None,
            })
            .collect();
        if records.is_empty() && unreadable.is_empty() {
            let completed = tombstones.contains(&inv.container_id, &inv.ifname);
            if completed && interrupted.is_empty() {
                // The runtime's DEL again, after one that completed: nothing to do or ask.
                return Ok(());
            }
            if !completed {
                del_without_record(&config, inv, None)?;
                crate::crash_point::reached("selector.del.chain-done");
            }
            leave_tombstone(&tombstones, inv);
            let ifnames: Vec<String> = std::iter::once(inv.ifname.clone()).chain(interrupted).collect();
            return store.remove_all(&inv.container_id, &ifnames);
        }
        let (failed, mut unusable) = attach_networks::del_records(inv, &config, &records);
        let outcome = settle::settle(&records, inv.netns.as_deref(), failed);
        unusable.extend(unreadable);
        if !unusable.is_empty() {
            del_without_record(&config, inv, Some(&unusable))?;
        }
        outcome?;
        // Before the records go: a crash between the two leaves records, which the next DEL takes
        // as ever (records count before a tombstone).
        leave_tombstone(&tombstones, inv);
        crate::crash_point::reached("selector.del.tombstoned");
        let ifnames: Vec<String> =
            records.iter().map(|r| r.ifname.clone()).chain(unusable).chain(interrupted).collect();
        store.remove_all(&inv.container_id, &ifnames)
    }

    fn check(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let store = RecordStore::new(&config.data_dir);
        let (records, _) = attach_networks::records_of(&store, inv)?;
        if !records.iter().any(|r| r.ifname == inv.ifname) {
            return Err(CniError::new(
                code::UNKNOWN_CONTAINER,
                format!("container {} interface {}: no attachment record", inv.container_id, inv.ifname),
            ));
        }
        note_networks(records.iter().map(|r| r.network.as_str()));
        attach_networks::check_records(inv, &config, &records)
    }

    /// DEL every recorded attachment that the runtime no longer lists as valid, then GC each network
    /// with its own live attachments (`gc`).
    fn gc(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let valid: HashSet<(String, String)> = config::valid_attachments(conf)?.into_iter().collect();
        commands::gc::collect(inv, &config, &valid)
    }

    /// Ready when the configuration directory can be read, the kubeconfig, if any, is there, and
    /// the default network's plugins say they are (`ready`).
    fn status(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        readiness_indicator(&config, code::PLUGIN_NOT_AVAILABLE)?;
        commands::status::status(inv, &config)
    }
}

/// Multus's `readinessindicatorfile`: while it is missing (the cluster's default network is not up
/// on this node yet), ADD and STATUS fail with `code` before anything is made. DEL, CHECK and GC
/// are not held back: undoing must never wait for the network to come up.
fn readiness_indicator(config: &SelectorConfig, code: u32) -> Result<(), CniError> {
    let Some(file) = &config.readiness_indicator_file else { return Ok(()) };
    match std::fs::metadata(file) {
        Ok(_) => Ok(()),
        Err(e) => Err(CniError::new(
            code,
            format!(
                "readinessindicatorfile {} is not there ({e}): this node's default network is not ready yet; \
                 nothing was set up",
                file.display()
            ),
        )),
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
    let mut agent = None;
    if let (Some(_), Some(pod)) = (&config.kubeconfig, inv.args.pod()) {
        let why_not = match (&config.agent_socket, inv.args.pod_uid()) {
            (None, _) => None,
            (Some(_), None) => Some("no K8S_POD_UID in CNI_ARGS to ask the agent with".to_string()),
            (Some(socket), Some(uid)) => {
                match from_agent::selection(config, &inv.ifname, pod, uid, socket, from_agent::AGENT_WAIT) {
                    Ok(selection) => {
                        crate::logging::note_selection("agent");
                        return Ok(Chosen { selection, via: Via::Agent(socket.clone()), api: None });
                    }
                    Err(not_used) => {
                        // Up, but without the pod yet: it still takes the status and the events.
                        agent = not_used.answered.then(|| socket.clone());
                        Some(not_used.why)
                    }
                }
            }
        };
        crate::logging::note_selection(&why_not.map_or_else(|| "api".to_string(), |why| format!("api: {why}")));
    }
    let api = api_client(config, inv, config.api)?;
    let source = api.as_ref().map(|a| a as &dyn PodSource);
    let selection = select::select(config, &inv.ifname, inv.args.pod(), inv.args.pod_uid(), source)?;
    Ok(Chosen { selection, via: Via::Direct { agent }, api })
}

/// A client when there is a pod to look up and a kubeconfig to do it with.
fn api_client(config: &SelectorConfig, inv: &Invocation, policy: ApiPolicy) -> Result<Option<ApiClient>, CniError> {
    match (&config.kubeconfig, inv.args.pod()) {
        (Some(kubeconfig), Some(_)) => ApiClient::connect(kubeconfig, policy).map(Some),
        _ => Ok(None),
    }
}

/// DEL with no (usable) record and no tombstone. Records are written durably before any plugin
/// runs, so without one this version made nothing, unless records were lost: then the node agent,
/// if it still holds the pod, says which networks it has (a local request that does not wait for
/// the pod), and they are DELeted (those on `only`'s interfaces, if given) in reverse, without
/// `prevResult`. The API server is asked (once, one attempt) only for a record that exists but
/// cannot be used (`only`): something was made, and only the pod can say what. A pod teardown
/// without a record never waits on the API server. If the networks cannot be known, there is
/// nothing this plugin can undo, and DEL succeeds.
/// A network whose DEL fails and of which nothing is in the pod's netns is let go (`settle`):
/// without a record, its ADD never got as far as one.
fn del_without_record(config: &SelectorConfig, inv: &Invocation, only: Option<&[String]>) -> Result<(), CniError> {
    let from_agent = match (&config.agent_socket, inv.args.pod(), inv.args.pod_uid()) {
        (Some(socket), Some(pod), Some(uid)) => {
            from_agent::selection(config, &inv.ifname, pod, uid, socket, std::time::Duration::ZERO)
        }
        _ => Err(from_agent::NotUsed { why: "no agent to ask".to_string(), answered: false }),
    };
    let chosen = match (from_agent, only) {
        (Ok(selection), _) => Ok(selection),
        (Err(why), None) => Err(format!("{why}; the API server is not asked on DEL")),
        (Err(why), Some(_)) => api_client(config, inv, ApiPolicy::single_attempt(config.api.attempt_timeout))
            .and_then(|api| {
                let source = api.as_ref().map(|a| a as &dyn PodSource);
                select::select(config, &inv.ifname, inv.args.pod(), inv.args.pod_uid(), source)
            })
            .map_err(|e| format!("{why}; {e}")),
    };
    let selection = match chosen {
        Ok(selection) => selection,
        Err(why) => {
            tracing::info!(
                "no usable attachment record for container {} interface {}, and its networks cannot be determined ({why}); nothing to delete",
                inv.container_id,
                inv.ifname
            );
            return Ok(());
        }
    };
    let mut first_error = None;
    for (position, attachment) in selection.attachments.iter().enumerate().rev() {
        if only.is_some_and(|only| !only.contains(&attachment.ifname)) {
            continue;
        }
        let outcome = attach_networks::plugins_call(inv, config, position, attachment)
            .and_then(|(_, list, call)| chain::del(&list, &call, None));
        if let Err(e) = outcome
            && !settle::forgettable_without_record(inv.netns.as_deref(), &attachment.ifname, &attachment.network, &e)
        {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The tombstone of a completed DEL; one that cannot be written costs the next DEL a look, no more.
fn leave_tombstone(tombstones: &Tombstones, inv: &Invocation) {
    if let Err(e) = tombstones.write(&inv.container_id, &inv.ifname) {
        warn(format!("cannot leave the tombstone of container {} interface {}: {e}", inv.container_id, inv.ifname));
    }
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
