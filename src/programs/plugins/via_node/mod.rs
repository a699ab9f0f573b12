//! Via the node: what the `veth` and `router` plugins share (docs/veth-router.md). Both take some of
//! a pod's traffic away from the NIC that macvlan or SR-IOV gave it (the "hijacked" subnets of their
//! configuration): traffic to the node and to the overlay and service subnets goes by a path through
//! the node's own network stack (a veth pair for `veth`, the overlay NIC for `router`), because a
//! macvlan child can never talk to its parent.
//!
//! Both work the same way: look at the host and the pod, compute a plan ([`model::Change`]s, in
//! [`plan`]), record it ([`record`]), carry it out ([`kernel`]). DEL and CHECK are the same for both:
//! undo or verify the record.

pub mod config;
pub mod kernel;
pub mod model;
pub mod plan;
pub mod record;

use crate::platform::cni::{CniError, CniResult, Invocation, PluginConf, code};
use crate::platform::logging::LogConfig;
use config::HijackConfig;
use kernel::Namespaces;
use model::Change;
use record::Record;
use std::path::Path;

/// Where and how much these plugins log: the original plugins' `log_options`, not the keys the
/// other plugins read, leniently (a bad value is the default; ADD checks them in `HijackConfig`).
pub fn log_config(plugin: &str, conf: &PluginConf) -> LogConfig {
    LogConfig::from_log_options_or_defaults(plugin, &conf.raw)
}

/// `prevResult`, which these plugins require: they only ever run chained after the plugin that
/// made the pod's NIC, and pass its result on.
pub fn chained_result(plugin: &str, conf: &PluginConf) -> Result<CniResult, CniError> {
    conf.prev_result()?.ok_or_else(|| {
        CniError::invalid_config(format!(
            "{plugin} is a chained plugin: it must follow the plugin that creates the interface (no prevResult)"
        ))
    })
}

/// The first step of ADD: undo what an earlier ADD of the same attachment made, if its record is
/// still there (a runtime may repeat ADD without DEL), so that the plan starts from a clean pod.
pub async fn undo_earlier(inv: &Invocation, data_dir: &Path, ns: &Namespaces) -> Result<(), CniError> {
    if let Some(earlier) = Record::load(data_dir, &inv.container_id, &inv.ifname)? {
        tracing::info!("undoing the earlier ADD of {} {}", inv.container_id, inv.ifname);
        ns.undo(&earlier.changes).await?;
        Record::remove(data_dir, &inv.container_id, &inv.ifname)?;
    }
    Ok(())
}

/// The last step of ADD: write the plan as the record, make the changes, and record what was really
/// made. On failure nothing of this ADD is left, neither in the kernel nor on disk.
pub async fn execute(
    plugin: &str,
    inv: &Invocation,
    data_dir: &Path,
    ns: &Namespaces,
    changes: Vec<Change>,
) -> Result<(), CniError> {
    let mut record = Record {
        plugin: plugin.into(),
        container_id: inv.container_id.clone(),
        ifname: inv.ifname.clone(),
        netns: ns.pod_path.display().to_string(),
        changes,
    };
    record.save(data_dir)?;
    match ns.apply(&record.changes).await {
        Ok(made) => {
            record.changes = made;
            if let Err(e) = record.save(data_dir) {
                // The plan on disk still names everything made, so a failed undo is left to DEL.
                if let Err(undo) = ns.undo(&record.changes).await {
                    tracing::error!("undo after failing to record the ADD: {undo}");
                } else if let Err(rm) = Record::remove(data_dir, &inv.container_id, &inv.ifname) {
                    tracing::error!("{rm}");
                }
                return Err(e);
            }
            tracing::info!("ADD {} {}: {} changes made", inv.container_id, inv.ifname, record.changes.len());
            Ok(())
        }
        Err(e) => {
            if let Err(rm) = Record::remove(data_dir, &inv.container_id, &inv.ifname) {
                tracing::error!("{rm}");
            }
            Err(e)
        }
    }
}

/// DEL for both plugins: undo the record of this attachment. It needs nothing from the configuration
/// but where the record and the log are, so a configuration that has become invalid cannot block it;
/// no record, or a netns already gone, is success.
pub fn del(plugin: &str, inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
    let (data_dir, log) = HijackConfig::for_del(plugin, &conf.raw);
    log.scope(|| {
        let record = match Record::load(&data_dir, &inv.container_id, &inv.ifname) {
            Ok(Some(r)) => r,
            Ok(None) => {
                tracing::debug!("DEL {} {}: no record, nothing to undo", inv.container_id, inv.ifname);
                // But perhaps the temp file of a record write whose process was killed.
                return Record::remove(&data_dir, &inv.container_id, &inv.ifname);
            }
            Err(e) => {
                // Unreadable: there is nothing DEL could ever do with it, and failing would block the pod's removal.
                tracing::error!("DEL {} {}: {e}; removing it", inv.container_id, inv.ifname);
                return Record::remove(&data_dir, &inv.container_id, &inv.ifname);
            }
        };
        let pod_path = inv.netns.clone().unwrap_or_else(|| record.netns.clone().into());
        crate::platform::async_runtime::block_on(async {
            let ns = Namespaces::open_if_present(&pod_path)?;
            ns.undo(&record.changes).await
        })?;
        tracing::info!("DEL {} {}: undid {} changes", inv.container_id, inv.ifname, record.changes.len());
        Record::remove(&data_dir, &inv.container_id, &inv.ifname)
    })
}

/// CHECK for both plugins: every change the ADD recorded is still in place.
pub fn check(inv: &Invocation, config: &HijackConfig) -> Result<(), CniError> {
    config.log.scope(|| {
        if config.skip_call {
            return Ok(());
        }
        let pod_path = inv.container_netns()?;
        let record = Record::load(&config.data_dir, &inv.container_id, &inv.ifname)?.ok_or_else(|| {
            CniError::new(
                code::UNKNOWN_CONTAINER,
                format!(
                    "no ADD recorded for container {} interface {} in {}",
                    inv.container_id,
                    inv.ifname,
                    config.data_dir.display()
                ),
            )
        })?;
        crate::platform::async_runtime::block_on(async { Namespaces::open(pod_path)?.verify(&record.changes).await })
    })
}
