//! CNI 1.1 GC for the selector's attachment: the runtime lists the attachments it still has (its
//! `containerID` and `CNI_IFNAME`); every recorded attachment it no longer has is DELeted as the
//! runtime's DEL would (a pod's further networks with it) and its records removed. Then each network
//! gets its own GC, as libcni gives a runtime's network: its plugins learn exactly the attachments
//! that are still live on it (from the records, on their own interfaces), so a plugin that keeps
//! state per attachment (an IPAM's leases, the yonghui plugin's saved configurations) can free what
//! no attachment holds any more.
//!
//! Which networks: every network directory under `confDir`, and the networks of live attachments
//! that are not there (a NetworkAttachmentDefinition's inline configuration, as recorded). Plugins
//! keep their state by the chain's `name`, so the live attachments are grouped by it: two
//! directories whose chains share a name each hear of all the attachments of that name.
//!
//! The cluster's network in place (`defaultNetwork` naming its file) is GCed from its file as it is
//! now, with the runtime's list of valid attachments as received: every pod has that network on the
//! runtime's interface, those from before yh-genie was installed too, which have no record. A
//! network before 1.1.0 (kindnet's and flannel's 0.3.1) has no GC and is sent none (`chain::gc`).

use crate::node::paths::NodePaths;
use crate::platform::cni::attachment_lock;
use crate::platform::cni::{CniArgs, CniError, Command, ConfList, Invocation, PluginConf};
use crate::programs::selector::attach::{self, Record, RecordStore, Tombstones, chain, settle};
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::netconf::confdir::{self, NetworkName};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};

/// DEL every recorded attachment that the runtime no longer lists as valid, then GC each network
/// with its own live attachments.
pub fn gc(inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
    let config = SelectorConfig::from_plugin_conf(conf)?;
    let valid: HashSet<(String, String)> = valid_attachments(conf)?.into_iter().collect();
    let received = conf.raw.get(VALID_ATTACHMENTS).cloned().unwrap_or_default();
    collect(inv, &config, &valid, &received)
}

const VALID_ATTACHMENTS: &str = "cni.dev/valid-attachments";

/// The list of valid attachments a GC call carries, as (container id, interface) pairs.
pub fn valid_attachments(conf: &PluginConf) -> Result<Vec<(String, String)>, CniError> {
    const KEY: &str = VALID_ATTACHMENTS;
    #[derive(Deserialize)]
    struct Attachment {
        #[serde(rename = "containerID")]
        container_id: String,
        ifname: String,
    }
    // Without the list every record would look stale; refuse rather than delete them all.
    let value = conf.raw.get(KEY).filter(|v| !v.is_null()).ok_or_else(|| {
        CniError::invalid_config(format!("GC needs '{KEY}' in the configuration; nothing was collected"))
    })?;
    let list = Vec::<Attachment>::deserialize(value)
        .map_err(|e| CniError::invalid_config(format!("'{KEY}' is not a list of {{containerID, ifname}}: {e}")))?;
    Ok(list.into_iter().map(|a| (a.container_id, a.ifname)).collect())
}

/// DEL the stale attachments, then GC every network with its live ones. Every step is tried; the
/// first error is returned.
fn collect(
    inv: &Invocation,
    config: &SelectorConfig,
    valid: &HashSet<(String, String)>,
    received: &Value,
) -> Result<(), CniError> {
    let store = RecordStore::of_node(&config.data_dir);
    let (stale, live): (Vec<Record>, Vec<Record>) =
        store.list()?.into_iter().partition(|r| !valid.contains(&(r.container_id.clone(), r.owner().to_string())));
    let mut first_error = del_stale(inv, config, &store, stale).err();
    // The runtime has forgotten these attachments: their DELs will not come again.
    let tombstones = Tombstones::new(&config.data_dir);
    if let Err(e) = tombstones.retain(|cid, ifname| valid.contains(&(cid.to_string(), ifname.to_string()))) {
        tracing::warn!("GC of the tombstones of completed DELs: {e}");
    }
    // The temp files of record writes whose process was killed go too, whoever they were for.
    if let Err(e) = store.remove_abandoned() {
        tracing::warn!("GC: {e}");
    }
    let call = attach::gc_call(inv, config);
    for (list, attachments) in networks(config, &live, received) {
        if let Err(e) = chain::gc(&list, &call, &attachments) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// DEL each stale runtime attachment (every record on its interface) and remove its records. Also
/// `yh-genie cleanup`'s, for the pods that are gone from a node yh-genie was uninstalled from.
pub fn del_stale(
    inv: &Invocation,
    config: &SelectorConfig,
    store: &RecordStore,
    stale: Vec<Record>,
) -> Result<(), CniError> {
    let node = NodePaths::from_env();
    let mut by_owner: BTreeMap<(String, String), Vec<Record>> = BTreeMap::new();
    for record in stale {
        by_owner.entry((record.container_id.clone(), record.owner().to_string())).or_default().push(record);
    }
    let mut first_error = None;
    for ((container_id, owner), mut records) in by_owner {
        attach::in_order(&mut records, &owner);
        // A DEL like the runtime's: after the remains of any killed call on the attachment.
        let lock = attachment_lock::acquire(node.attachment_locks(), &container_id, &owner, attachment_lock::WAIT);
        let own = records.iter().find(|r| r.ifname == owner).unwrap_or(&records[0]);
        // The runtime has forgotten this container; if its netns still exists, clean inside it too.
        let runtime = Invocation {
            command: Command::Del,
            container_id: container_id.clone(),
            netns: own.netns.clone().filter(|p| crate::platform::netns::exists(p)),
            ifname: owner.clone(),
            args: CniArgs::parse(&own.cni_args).unwrap_or_default(),
            path: inv.path.clone(),
        };
        let (failed, _) = attach::del_records(&runtime, config, &records);
        let outcome = settle::settle(&records, runtime.netns.as_deref(), failed);
        // What cannot be used cannot be undone any more: the runtime has forgotten the pod.
        let ifnames: Vec<String> = records.iter().map(|r| r.ifname.clone()).collect();
        match outcome.and_then(|()| store.remove_all(&container_id, &ifnames)) {
            Ok(()) => {
                if let Some(lock) = lock {
                    lock.remove();
                }
            }
            Err(e) => {
                tracing::warn!("GC of container {container_id} interface {owner}: {e}");
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Every network to GC, each with the live attachments of its chain's name as GC lists them; the
/// cluster's network in place with the runtime's list as `received`.
fn networks(config: &SelectorConfig, live: &[Record], received: &Value) -> Vec<(ConfList, Value)> {
    let mut lists: BTreeMap<String, ConfList> = BTreeMap::new();
    for dir in std::fs::read_dir(&config.conf_dir).into_iter().flatten().filter_map(Result::ok) {
        let name = dir.file_name().to_string_lossy().into_owned();
        if !dir.path().is_dir() {
            continue;
        }
        // A directory that holds no usable network (the selector's own state) is not one.
        match confdir::resolve(&config.conf_dir, &NetworkName::Bare(name.clone())).and_then(|f| confdir::load(&f)) {
            Ok((_, list)) => {
                lists.insert(name, list);
            }
            Err(e) => tracing::debug!("GC: {} is not a network: {e}", dir.path().display()),
        }
    }
    let mut attachments: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for record in live {
        let Ok(list) = record.conf_list() else { continue };
        attachments
            .entry(list.name.clone())
            .or_default()
            .push(json!({"containerID": record.container_id, "ifname": record.ifname}));
        lists.entry(record.network.clone()).or_insert_with(|| without_runtime_config(list));
    }
    let in_place =
        config.default_network.as_deref().and_then(|value| confdir::resolve_in_place(&config.conf_dir, value));
    let in_place = match in_place.map(|file| file.and_then(|file| Ok((file.network.clone(), confdir::load(&file)?.1))))
    {
        Some(Ok((network, list))) => {
            lists.insert(network.clone(), list);
            Some(network)
        }
        Some(Err(e)) => {
            // Its recorded copies would hear of the recorded pods only, and free the others' state.
            tracing::warn!("GC: the cluster's network in place cannot be read ({e}); it is not collected");
            lists.retain(|network, _| {
                network.contains('/') || !confdir::has_conf_extension(std::path::Path::new(network))
            });
            None
        }
        None => None,
    };
    lists
        .into_iter()
        .map(|(network, list)| {
            let valid = if in_place.as_ref() == Some(&network) {
                received.clone()
            } else {
                Value::Array(attachments.get(&list.name).cloned().unwrap_or_default())
            };
            (list, valid)
        })
        .collect()
}

/// A recorded chain as GC hands it on: without the capability arguments of the pod it was made for
/// (libcni gives none at GC).
fn without_runtime_config(mut list: ConfList) -> ConfList {
    for plugin in &mut list.plugins {
        plugin.remove("runtimeConfig");
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs::selector::choose::chosen::{Attachment, Source};
    use crate::programs::selector::requests::annotation::Extras;

    fn record(cid: &str, network: &str, config: &str) -> Record {
        let mut runtime = crate::platform::cni::testing::invocation(Command::Add, std::path::Path::new("/nonexistent"));
        runtime.container_id = cid.into();
        let attachment = Attachment {
            ifname: "eth0".into(),
            network: network.into(),
            path: None,
            config: config.into(),
            source: Source::DefaultNetwork { element: network.into() },
            extras: Extras::default(),
            device: None,
        };
        Record::new(&runtime, &runtime, 0, &attachment, config.into(), None)
    }

    #[test]
    fn every_network_hears_of_exactly_the_live_attachments_of_its_chains_name() {
        let d = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        // Two directories whose chains share a name, one unused network, and the selector's state.
        write("a/a.conflist", r#"{"cniVersion":"1.1.0","name":"shared","plugins":[{"type":"pa"}]}"#);
        write("b/b.conflist", r#"{"cniVersion":"1.1.0","name":"shared","plugins":[{"type":"pb"}]}"#);
        write("c/c.conflist", r#"{"cniVersion":"1.1.0","name":"c","plugins":[{"type":"pc"}]}"#);
        write("yh-genie.d/yh-genie.kubeconfig", "");
        let conf = PluginConf::parse(format!(r#"{{"type":"yh-genie","confDir":{:?}}}"#, d.path()).as_bytes()).unwrap();
        let config = SelectorConfig::from_plugin_conf(&conf).unwrap();
        let inline = r#"{"cniVersion":"1.1.0","name":"x","type":"px","runtimeConfig":{"portMappings":[]}}"#;
        let live = [
            record("c1", "a", r#"{"cniVersion":"1.1.0","name":"shared","plugins":[{"type":"pa"}]}"#),
            record("c2", "ns/x", inline),
        ];
        let found: BTreeMap<String, (Value, bool)> = networks(&config, &live, &json!([]))
            .into_iter()
            .map(|(list, valid)| {
                let kept_runtime_config = list.plugins[0].contains_key("runtimeConfig");
                (list.plugin_type(0).to_string(), (valid, kept_runtime_config))
            })
            .collect();
        let c1 = json!([{"containerID": "c1", "ifname": "eth0"}]);
        assert_eq!(found["pa"], (c1.clone(), false));
        assert_eq!(found["pb"], (c1, false));
        assert_eq!(found["pc"], (json!([]), false));
        assert_eq!(found["px"], (json!([{"containerID": "c2", "ifname": "eth0"}]), false));
        assert_eq!(found.len(), 4);
    }

    #[test]
    fn the_cluster_network_in_place_hears_the_runtimes_list_as_received() {
        let d = tempfile::tempdir().unwrap();
        let kindnet = |subnet: &str| {
            format!(r#"{{"cniVersion":"1.1.0","name":"kindnet","plugins":[{{"type":"ptp","subnet":"{subnet}"}}]}}"#)
        };
        std::fs::write(d.path().join("10-kindnet.conflist"), kindnet("now")).unwrap();
        let conf = PluginConf::parse(
            format!(r#"{{"type":"yh-genie","confDir":{:?},"defaultNetwork":"10-kindnet.conflist"}}"#, d.path())
                .as_bytes(),
        )
        .unwrap();
        let config = SelectorConfig::from_plugin_conf(&conf).unwrap();
        // One pod yh-genie attached (its record holds the file as it was); the runtime lists it and
        // a pod the network attached before yh-genie was installed, which has no record.
        let live = [record("c1", "10-kindnet.conflist", &kindnet("then"))];
        let received = json!([{"containerID": "c0", "ifname": "eth0"}, {"containerID": "c1", "ifname": "eth0"}]);
        let found = networks(&config, &live, &received);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0.plugins[0]["subnet"], "now", "the file as it is now");
        assert_eq!(found[0].1, received);
        // Its file unreadable: not collected at all, rather than with the recorded pods alone.
        std::fs::write(d.path().join("10-kindnet.conflist"), "{").unwrap();
        assert!(networks(&config, &live, &received).is_empty());
    }

    #[test]
    fn gc_attachments() {
        let conf = PluginConf::parse(
            br#"{"cniVersion":"1.1.0","type":"yh-genie","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}"#,
        )
        .unwrap();
        assert_eq!(valid_attachments(&conf).unwrap(), vec![("c1".to_string(), "eth0".to_string())]);
        let none = PluginConf::parse(br#"{"cniVersion":"1.1.0","type":"yh-genie"}"#).unwrap();
        assert_eq!(valid_attachments(&none).unwrap_err().code, 7);
    }
}
