//! The selector, `yh-genie`: the one plugin the kubelet's runtime calls. For each pod it asks the
//! Kubernetes API which network the pod chose (`select`), loads that network's configuration from
//! the node (`network`), records the choice durably (`record`) and runs the network's chain
//! (`chain`). DEL, CHECK and GC work from the record alone, never from the API server.

mod chain;
pub mod config;
pub mod explain;
pub mod network;
mod record;
pub mod select;

use crate::cni::attachment_lock;
use crate::cni::{CniArgs, CniError, CniResult, Command, Invocation, Plugin, PluginConf, code};
use crate::kube::{ApiClient, ApiPolicy, PodSource};
use config::SelectorConfig;
use record::{PodIdentity, Record, RecordStore};
use std::collections::HashSet;

pub const NAME: &str = "yh-genie";

pub struct Selector;

impl Plugin for Selector {
    fn name(&self) -> &'static str {
        NAME
    }

    fn add(&self, inv: &Invocation, conf: &PluginConf) -> Result<CniResult, CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        // The API client lives only for the selection: no plugin runs while it exists.
        let selection = {
            let api = api_client(&config, inv, config.api)?;
            select::select(&config, inv.args.pod(), api.as_ref().map(|a| a as &dyn PodSource))?
        };
        crate::logging::note_network(&selection.file.network);
        let (conf, list) = network::load(&selection.file)?;
        let pod = inv.args.pod().map(|(namespace, name)| PodIdentity {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: inv.args.pod_uid().map(String::from).or(selection.pod_uid.clone()),
        });
        let store = RecordStore::new(&config.data_dir);
        let mut record = Record::new(inv, &selection.file.network, &selection.file.path, conf, pod);
        if store.read(&inv.container_id, &inv.ifname).is_some() {
            warn(format!(
                "ADD of container {} interface {} replaces an attachment record that was never DELeted",
                inv.container_id, inv.ifname
            ));
        }
        store.write(&record)?;
        let delegates = delegate_invocation(inv, &config);
        let result = match chain::add(&list, &delegates) {
            Ok(result) => {
                crate::crash_point::reached("selector.add.chain-done");
                result
            }
            Err(failed) => {
                // When undoing failed, the record stays so that the runtime's DEL can finish the job.
                if failed.undone {
                    remove_logged(&store, inv);
                }
                return Err(failed.error);
            }
        };
        record.set_result(&result);
        if let Err(e) = store.write(&record) {
            // Without its result on disk the attachment could not be CHECKed or DELeted properly.
            if chain::del(&list, &delegates, Some(&result)).is_ok() {
                remove_logged(&store, inv);
            }
            return Err(e);
        }
        Ok(result)
    }

    fn del(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let store = RecordStore::new(&config.data_dir);
        let delegates = delegate_invocation(inv, &config);
        let record = store.read(&inv.container_id, &inv.ifname);
        if let Some(r) = &record {
            crate::logging::note_network(&r.network);
        }
        match record.and_then(|r| usable(&r)) {
            Some((list, result)) => chain::del(&list, &delegates, result.as_ref())?,
            None => del_without_record(&config, inv, &delegates)?,
        }
        crate::crash_point::reached("selector.del.chain-done");
        store.remove(&inv.container_id, &inv.ifname)
    }

    fn check(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let store = RecordStore::new(&config.data_dir);
        let unknown = |why: &str| {
            CniError::new(
                code::UNKNOWN_CONTAINER,
                format!("container {} interface {}: {why}", inv.container_id, inv.ifname),
            )
        };
        let record = store.read(&inv.container_id, &inv.ifname).ok_or_else(|| unknown("no attachment record"))?;
        crate::logging::note_network(&record.network);
        let list = record.conf_list()?;
        let result = record.result()?.ok_or_else(|| unknown("its ADD did not complete"))?;
        chain::check(&list, &delegate_invocation(inv, &config), &result)
    }

    /// DEL every recorded attachment that the runtime no longer lists as valid.
    fn gc(&self, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let valid: HashSet<(String, String)> = config::valid_attachments(conf)?.into_iter().collect();
        let store = RecordStore::new(&config.data_dir);
        let locks = attachment_lock::dir(std::env::var(attachment_lock::DIR_VAR).ok());
        let mut first_error = None;
        for record in store.list()? {
            if valid.contains(&(record.container_id.clone(), record.ifname.clone())) {
                continue;
            }
            // A DEL like the runtime's: after the remains of any killed call on the attachment.
            let lock = attachment_lock::acquire(&locks, &record.container_id, &record.ifname, attachment_lock::WAIT);
            // The runtime has forgotten this container; if its netns still exists, clean inside it too.
            let stale = Invocation {
                command: Command::Del,
                container_id: record.container_id.clone(),
                netns: record.netns.clone().filter(|p| crate::netns::exists(p)),
                ifname: record.ifname.clone(),
                args: CniArgs::parse(&record.cni_args).unwrap_or_default(),
                path: inv.path.clone(),
            };
            let outcome = match usable(&record) {
                Some((list, result)) => chain::del(&list, &delegate_invocation(&stale, &config), result.as_ref()),
                None => Ok(()),
            }
            .and_then(|()| store.remove(&record.container_id, &record.ifname));
            match outcome {
                Ok(()) => {
                    if let Some(lock) = lock {
                        lock.remove();
                    }
                }
                Err(e) => {
                    warn(format!("GC of container {} interface {}: {e}", record.container_id, record.ifname));
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Ready when the configuration directory can be read and the kubeconfig, if any, is there.
    fn status(&self, _inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
        let config = SelectorConfig::from_plugin_conf(conf)?;
        let unavailable = |msg: String| CniError::new(code::PLUGIN_NOT_AVAILABLE, msg);
        std::fs::read_dir(&config.conf_dir)
            .map_err(|e| unavailable(format!("confDir {} is not readable: {e}", config.conf_dir.display())))?;
        if let Some(kubeconfig) = &config.kubeconfig {
            std::fs::File::open(kubeconfig)
                .map_err(|e| unavailable(format!("kubeconfig {} is not readable: {e}", kubeconfig.display())))?;
        }
        Ok(())
    }
}

/// A client when there is a pod to look up and a kubeconfig to do it with.
fn api_client(config: &SelectorConfig, inv: &Invocation, policy: ApiPolicy) -> Result<Option<ApiClient>, CniError> {
    match (&config.kubeconfig, inv.args.pod()) {
        (Some(kubeconfig), Some(_)) => ApiClient::connect(kubeconfig, policy).map(Some),
        _ => Ok(None),
    }
}

/// DEL with no (usable) record: ADD never completed its record, or DEL already ran. Ask the API
/// server once, briefly, which network the pod has and DEL it without `prevResult`; if that cannot
/// be known, there is nothing this plugin can undo, and DEL succeeds.
fn del_without_record(config: &SelectorConfig, inv: &Invocation, delegates: &Invocation) -> Result<(), CniError> {
    let chosen = api_client(config, inv, ApiPolicy::single_attempt(config.api.attempt_timeout))
        .and_then(|api| select::select(config, inv.args.pod(), api.as_ref().map(|a| a as &dyn PodSource)))
        .and_then(|selection| network::load(&selection.file));
    match chosen {
        Ok((_, list)) => chain::del(&list, delegates, None),
        Err(e) => {
            warn(format!(
                "no attachment record for container {} interface {}, and its network cannot be determined ({e}); nothing to delete",
                inv.container_id, inv.ifname
            ));
            Ok(())
        }
    }
}

/// A record's chain and result, or `None` (logged) if the record cannot be used.
fn usable(record: &Record) -> Option<(crate::cni::ConfList, Option<CniResult>)> {
    match record.conf_list().and_then(|list| Ok((list, record.result()?))) {
        Ok(parts) => Some(parts),
        Err(e) => {
            warn(format!(
                "attachment record of container {} interface {} is unusable ({e}); treating it as absent",
                record.container_id, record.ifname
            ));
            None
        }
    }
}

/// The runtime's call as the network's plugins get it: external plugins are looked up in `binDir`
/// first, then in the runtime's `CNI_PATH`.
fn delegate_invocation(inv: &Invocation, config: &SelectorConfig) -> Invocation {
    let mut path = vec![config.bin_dir.clone()];
    path.extend(inv.path.iter().filter(|dir| **dir != config.bin_dir).cloned());
    Invocation { path, ..inv.clone() }
}

fn remove_logged(store: &RecordStore, inv: &Invocation) {
    if let Err(e) = store.remove(&inv.container_id, &inv.ifname) {
        warn(e);
    }
}

/// A warning in the plugin's log (stderr or `logFile`); stdout is the CNI protocol's.
fn warn(msg: impl std::fmt::Display) {
    tracing::warn!("{msg}");
}
