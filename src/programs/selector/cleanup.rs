//! `yh-genie cleanup`: what yh-genie's pods left on a node it was uninstalled from.
//!
//! Once `00-yh-genie.conflist` is gone, the runtime loads the next file in the conf dir (the
//! cluster's own network) and sends a pod's DEL there alone: the pod's further networks are never
//! DELeted, so their addresses (host-local's leases), host state (NAT rules, routes) and
//! yh-genie's records stay. This command DELs them from the records, as the runtime's DEL through
//! yh-genie would have (the chain, interface and `CNI_ARGS` each network's ADD got), for every pod
//! that is gone: its recorded netns no longer exists. A pod that still runs keeps its networks, and
//! is listed; the command is run again once it is deleted. It refuses while yh-genie is installed:
//! then the runtime's DEL and GC do this.

use super::attach::RecordStore;
use super::commands;
use super::config::SelectorConfig;
use crate::platform::cni::{CniArgs, Command, Invocation, PluginConf};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the node keeps what the command reads: as the installer's defaults, or its flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub conf_dir: PathBuf,
    pub data_dir: PathBuf,
    pub bin_dir: PathBuf,
}

/// Exit status when every pod is cleaned up.
pub const DONE: i32 = 0;
/// Exit status when something could not be read or DELeted: the message says what.
pub const FAILED: i32 = 1;
/// Exit status when pods that still run keep their networks: run the command again later.
pub const PODS_STILL_RUNNING: i32 = 3;

/// Run `yh-genie cleanup`, printing what it released and what it kept; returns the exit status.
pub fn run(opts: &Options) -> i32 {
    let own = Path::new(crate::node::paths::CONFLIST).file_name().expect("a file name");
    let conflist = opts.conf_dir.join(own);
    if conflist.exists() {
        eprintln!(
            "yh-genie cleanup: yh-genie is still installed on this node ({} exists): the runtime's DEL of each pod \
             releases its networks. Uninstall first (kubectl delete -f manifests/yh-genie.yaml), then run this again",
            conflist.display()
        );
        return FAILED;
    }
    match clean(opts) {
        Ok(0) => {
            println!(
                "nothing of yh-genie's pods is left in {}; it and the node's volatile state ({}) may be removed",
                opts.data_dir.display(),
                crate::node::paths::NodePaths::from_env().volatile().display()
            );
            DONE
        }
        Ok(kept) => {
            println!(
                "{kept} attachment(s) of pods that still run were kept: delete those pods, then run yh-genie cleanup again"
            );
            PODS_STILL_RUNNING
        }
        Err(e) => {
            eprintln!("yh-genie cleanup: {e}");
            FAILED
        }
    }
}

/// DEL every gone pod's attachments and remove their records; the number of runtime attachments
/// kept because their pod still runs.
fn clean(opts: &Options) -> Result<usize, String> {
    let conf = PluginConf::from_value(json!({
        "cniVersion": "1.1.0", "name": "yh-genie", "type": "yh-genie",
        "confDir": opts.conf_dir, "dataDir": opts.data_dir, "binDir": opts.bin_dir,
    }))
    .map_err(|e| e.msg)?;
    let config = SelectorConfig::from_plugin_conf(&conf).map_err(|e| e.msg)?;
    let store = RecordStore::of_node(&config.data_dir);
    let records = store.list().map_err(|e| e.msg)?;
    let mut by_attachment: BTreeMap<(String, String), Vec<_>> = BTreeMap::new();
    for record in records {
        by_attachment.entry((record.container_id.clone(), record.owner().to_string())).or_default().push(record);
    }
    let mut gone = Vec::new();
    let mut released = Vec::new();
    let mut kept = 0;
    for ((container_id, owner), records) in by_attachment {
        let own = records.iter().find(|r| r.ifname == owner).unwrap_or(&records[0]);
        let pod = pod_of(&own.cni_args);
        let networks: Vec<&str> = records.iter().map(|r| r.network.as_str()).collect();
        // Without a netns to look at, whether the pod runs cannot be told: nothing is taken from it.
        match &own.netns {
            Some(netns) if !crate::platform::netns::exists(netns) => {
                released.push(format!(
                    "released container {container_id}{pod} interface {owner}: networks {}",
                    networks.join(", ")
                ));
                gone.extend(records);
            }
            netns => {
                let why = match netns {
                    Some(netns) => format!("its netns {} still exists", netns.display()),
                    None => "no netns was recorded".to_string(),
                };
                println!(
                    "kept container {container_id}{pod} interface {owner}: networks {}; {why}",
                    networks.join(", ")
                );
                kept += 1;
            }
        }
    }
    let runtime = Invocation {
        command: Command::Del,
        container_id: String::new(),
        netns: None,
        ifname: String::new(),
        args: CniArgs::default(),
        path: vec![opts.bin_dir.clone()],
    };
    commands::del_stale(&runtime, &config, &store, gone).map_err(|e| e.msg)?;
    for line in released {
        println!("{line}");
    }
    Ok(kept)
}

/// ` (pod NS/NAME)` from the runtime's `CNI_ARGS`, or nothing.
fn pod_of(cni_args: &str) -> String {
    let args = CniArgs::parse(cni_args).unwrap_or_default();
    match (args.get("K8S_POD_NAMESPACE"), args.get("K8S_POD_NAME")) {
        (Some(ns), Some(name)) => format!(" (pod {ns}/{name})"),
        _ => String::new(),
    }
}
