//! The `yonghui` plugin: a meta plugin in the manner of flannel's. It reads the node's subnet.env,
//! writes the configuration for a real plugin (by default the built-in `yh-bridge`) with this
//! node's subnet, MTU and NAT choice in it, and runs that delegate.
//!
//! The generated configuration is saved as `<dataDir>/<containerID>:<ifname>` before the delegate
//! runs. DEL replays exactly those bytes and CHECK adds the runtime's `prevResult` to them, so tearing
//! a pod down does not depend on subnet.env or the network config still being what they were at ADD.
//! The save is atomic but not fsync'd (as flannel's), and by default on tmpfs
//! (`/run/yh-genie/yonghui`): a crash of the process leaves it whole, and what a reboot or a power
//! loss takes, a DEL makes again from subnet.env. That DEL releases the same address (host-local
//! releases by container and interface, whatever the range), and the pod's interfaces and its NAT
//! rules did not survive either. Keeping it on disk would cost every ADD a file made there, and
//! waiting on the disk for it two fsyncs. DEL and CHECK also look where 0.1.0 saved by default
//! (`/var/lib/cni/yonghui`).
//!
//! - [`subnet_env`]: the daemon's subnet.env.
//! - [`config`]: yonghui's own keys.
//! - [`delegate`]: the generated delegate configuration (Linux); [`windows`]: the Windows shape.

pub mod config;
pub mod delegate;
pub mod subnet_env;
pub mod windows;

use self::config::NetConf;
use self::delegate::{Delegate, Platform};
use self::subnet_env::SubnetEnv;
use crate::platform::cni::{CniError, CniResult, Command, Delegates, Invocation, Operation, Plugin, PluginConf, code};
use crate::platform::durable;
use std::path::{Path, PathBuf};

pub const NAME: &str = "yonghui";

pub struct Yonghui;

impl Plugin for Yonghui {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Generate, save, delegate. If the delegate fails, what it may have made is deleted with the
    /// same configuration and the saved file goes, so a failed ADD leaves nothing behind.
    fn add(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<CniResult, CniError> {
        let conf = NetConf::from_plugin_conf(conf)?;
        let delegate = generate(&conf)?;
        let saved = SavedDelegate::new(&conf.data_dir, &inv.container_id, &inv.ifname);
        let bytes = delegate.to_bytes();
        saved.save(&bytes)?;
        run_delegate(op.delegates(), &delegate.plugin_type, Command::Add, inv, &bytes)
            .and_then(|result| {
                result.ok_or_else(|| CniError::new(code::DELEGATE_FAILED, "the delegate's ADD returned no result"))
            })
            .inspect_err(|_| undo_add(op.delegates(), &delegate, inv, &bytes, &saved))
    }

    /// Replay the saved configuration to the delegate's DEL, then forget it. Nothing saved (already
    /// deleted, ADD never got that far, or the save lost to a power loss): the delegate's DEL with
    /// the configuration made again from subnet.env, which undoes nothing that is not there, and
    /// the temp file of a save whose process was killed goes. If the delegate's DEL fails the file
    /// stays, so the runtime's retry can finish the job. A file saved per container
    /// (`<dataDir>/<containerID>`, as flannel saves it) is replayed too when it is this network's.
    /// Without `dataDir`, both the default and 0.1.0's default are looked in.
    fn del(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<(), CniError> {
        del_from(op.delegates(), &config::data_dirs(conf)?, inv, conf)
    }

    /// Forward CHECK to the delegate with the saved configuration and the runtime's `prevResult`.
    fn check(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<(), CniError> {
        check_from(op.delegates(), &config::data_dirs(conf)?, inv, conf)
    }

    /// GC (1.1.0), forwarded to the delegate with the runtime's valid attachments, so its IPAM can
    /// release leaked addresses. Saved configurations are not collected here: `dataDir` may be
    /// shared by several networks, and the valid attachments name the runtime's interfaces, not a
    /// pod's further ones, so this network's list cannot tell which of them are stale.
    fn gc(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<(), CniError> {
        let mut delegate = generate(&NetConf::from_plugin_conf(conf)?)?;
        if let Some(valid) = conf.raw.get(VALID_ATTACHMENTS) {
            delegate.config.insert(VALID_ATTACHMENTS.into(), valid.clone());
        }
        run_delegate(op.delegates(), &delegate.plugin_type, Command::Gc, inv, &delegate.to_bytes()).map(drop)
    }

    /// STATUS (1.1.0): ready when the daemon has written a usable subnet.env (code 50 until then,
    /// so the runtime reports the network as not ready instead of failing pods) and the delegate is.
    fn status(&self, inv: &Invocation, conf: &PluginConf, op: &Operation) -> Result<(), CniError> {
        let conf = NetConf::from_plugin_conf(conf)?;
        let env = SubnetEnv::load(&conf.subnet_file)
            .map_err(|e| CniError::new(code::PLUGIN_NOT_AVAILABLE, e.msg).with_details(e.details))?;
        let delegate = delegate::generate(&conf, &env, Platform::HOST)?;
        run_delegate(op.delegates(), &delegate.plugin_type, Command::Status, inv, &delegate.to_bytes()).map(drop)
    }
}

/// The GC key listing the attachments the runtime still has.
const VALID_ATTACHMENTS: &str = "cni.dev/valid-attachments";

/// The delegate for `conf` on this node, from the node's subnet.env.
fn generate(conf: &NetConf) -> Result<Delegate, CniError> {
    let env = SubnetEnv::load(&conf.subnet_file)?;
    delegate::generate(conf, &env, Platform::HOST)
}

/// Run the delegate; its errors keep their code and say which delegate and command failed.
fn run_delegate(
    delegates: &dyn Delegates,
    plugin_type: &str,
    command: Command,
    inv: &Invocation,
    stdin: &[u8],
) -> Result<Option<CniResult>, CniError> {
    delegates
        .invoke(plugin_type, command, inv, stdin)
        .map_err(|e| e.context(format!("delegate {plugin_type} {}", command.as_str())))
}

/// After a failed delegate ADD: its DEL (best effort: ADD's error is the one to report) and the
/// saved file's removal.
fn undo_add(delegates: &dyn Delegates, delegate: &Delegate, inv: &Invocation, bytes: &[u8], saved: &SavedDelegate) {
    if let Err(e) = run_delegate(delegates, &delegate.plugin_type, Command::Del, inv, bytes) {
        tracing::warn!("cleaning up after the failed ADD: {e}");
    }
    if let Err(e) = saved.remove() {
        tracing::warn!("{e}");
    }
}

/// The delegate's DEL with the configuration generated from subnet.env now, for an attachment with
/// nothing saved. Without a usable subnet.env or network configuration nothing is known to undo:
/// success, as a DEL must not block a pod's removal on what cannot be repaired.
fn del_regenerated(delegates: &dyn Delegates, conf: &PluginConf, inv: &Invocation) -> Result<(), CniError> {
    match NetConf::from_plugin_conf(conf).and_then(|conf| generate(&conf)) {
        Ok(delegate) => {
            run_delegate(delegates, &delegate.plugin_type, Command::Del, inv, &delegate.to_bytes()).map(drop)
        }
        Err(e) => {
            tracing::info!("DEL of container {} interface {}: nothing saved, and {e}", inv.container_id, inv.ifname);
            Ok(())
        }
    }
}

/// Replay `bytes` (a saved delegate configuration) to its delegate's DEL, then remove `saved`.
fn replay_del(
    delegates: &dyn Delegates,
    saved: &SavedDelegate,
    bytes: &[u8],
    inv: &Invocation,
) -> Result<(), CniError> {
    let delegate = match PluginConf::parse(bytes) {
        Ok(delegate) => delegate,
        Err(e) => {
            // Nothing can be replayed from it, and failing would block the pod's deletion forever.
            tracing::warn!("ignoring unreadable saved delegate configuration {}: {e}", saved.path.display());
            if let Err(e) = saved.remove() {
                tracing::warn!("{e}");
            }
            return Ok(());
        }
    };
    run_delegate(delegates, &delegate.plugin_type, Command::Del, inv, bytes)?;
    crate::platform::crash_point::reached("yonghui.del.delegate-done");
    saved.remove()
}

/// DEL with each of `data_dirs`' saved configuration of this attachment, and each file saved per
/// container there for this network (as flannel saves them); with none saved anywhere, the
/// delegate's DEL with the configuration made again from subnet.env.
fn del_from(
    delegates: &dyn Delegates,
    data_dirs: &[PathBuf],
    inv: &Invocation,
    conf: &PluginConf,
) -> Result<(), CniError> {
    let mut replayed = false;
    for data_dir in data_dirs {
        let saved = SavedDelegate::new(data_dir, &inv.container_id, &inv.ifname);
        match saved.read()? {
            Some(bytes) => {
                replay_del(delegates, &saved, &bytes, inv)?;
                replayed = true;
            }
            None => saved.remove()?,
        }
        let legacy = SavedDelegate::legacy(data_dir, &inv.container_id);
        if let Some(bytes) = legacy.read()?.filter(|bytes| legacy.is_of(bytes, &conf.name)) {
            replay_del(delegates, &legacy, &bytes, inv)?;
            replayed = true;
        }
    }
    if !replayed {
        del_regenerated(delegates, conf, inv)?;
    }
    Ok(())
}

/// CHECK with the first saved configuration of this attachment in `data_dirs`.
fn check_from(
    delegates: &dyn Delegates,
    data_dirs: &[PathBuf],
    inv: &Invocation,
    conf: &PluginConf,
) -> Result<(), CniError> {
    let Some((saved, bytes)) = find_saved(data_dirs, inv, &conf.name)? else {
        let dirs: Vec<String> = data_dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(CniError::new(
            code::UNKNOWN_CONTAINER,
            format!(
                "no saved delegate configuration for container {} interface {} in {}",
                inv.container_id,
                inv.ifname,
                dirs.join(" or ")
            ),
        ));
    };
    let mut delegate = PluginConf::parse(&bytes)
        .map_err(|e| e.context(format!("saved delegate configuration {}", saved.path.display())))?;
    if let Some(prev) = conf.prev_result()? {
        delegate
            .raw
            .insert("prevResult".into(), prev.to_json(delegate.cni_version).map_err(|e| e.context("prevResult"))?);
    }
    run_delegate(delegates, &delegate.plugin_type, Command::Check, inv, &delegate.to_bytes()).map(drop)
}

/// The first saved configuration of this attachment in `data_dirs`: its own file, or one saved
/// per container (as flannel saves it) that is this network's.
fn find_saved(
    data_dirs: &[PathBuf],
    inv: &Invocation,
    network: &str,
) -> Result<Option<(SavedDelegate, Vec<u8>)>, CniError> {
    for data_dir in data_dirs {
        let saved = SavedDelegate::new(data_dir, &inv.container_id, &inv.ifname);
        if let Some(bytes) = saved.read()? {
            return Ok(Some((saved, bytes)));
        }
        let legacy = SavedDelegate::legacy(data_dir, &inv.container_id);
        if let Some(bytes) = legacy.read()?.filter(|bytes| legacy.is_of(bytes, network)) {
            return Ok(Some((legacy, bytes)));
        }
    }
    Ok(None)
}

/// `<dataDir>/<containerID>:<ifname>`: the delegate configuration one attachment's ADD used, so a
/// pod on two yonghui networks, or on one by another interface than the runtime's, keeps one file
/// each. Both parts are safe in a file name: the runtime's environment is validated (container ids
/// are letters, digits, `_`, `.` and `-`; interface names have no `/`), and no container id
/// contains `:`.
struct SavedDelegate {
    path: PathBuf,
}

impl SavedDelegate {
    fn new(data_dir: &Path, container_id: &str, ifname: &str) -> Self {
        SavedDelegate { path: data_dir.join(format!("{container_id}:{ifname}")) }
    }

    /// `<dataDir>/<containerID>`, where flannel's plugin saves it, one per container and data
    /// dir.
    fn legacy(data_dir: &Path, container_id: &str) -> Self {
        SavedDelegate { path: data_dir.join(container_id) }
    }

    /// Whether saved `bytes` are network `network`'s: the generated delegate carries yonghui's
    /// network name. A legacy file is one per container, and a pod's networks are distinct, so this
    /// tells the attachment it belongs to from the pod's other yonghui networks. One that does not
    /// parse belongs to no one in particular: any DEL of the container may drop it.
    fn is_of(&self, bytes: &[u8], network: &str) -> bool {
        match PluginConf::parse(bytes) {
            Ok(delegate) => delegate.name == network,
            Err(_) => true,
        }
    }

    /// Written whole or not at all (not fsync'd: the module's comment says why), readable by root
    /// only (it may carry runtimeConfig secrets).
    fn save(&self, bytes: &[u8]) -> Result<(), CniError> {
        durable::write_volatile(&self.path, bytes, 0o600).map_err(|e| {
            CniError::io(format!("cannot save the delegate configuration to {}: {e}", self.path.display()))
        })
    }

    /// The saved bytes, or None if there is no file.
    fn read(&self) -> Result<Option<Vec<u8>>, CniError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => {
                Err(CniError::io(format!("cannot read saved delegate configuration {}: {e}", self.path.display())))
            }
        }
    }

    fn remove(&self) -> Result<(), CniError> {
        durable::remove_durably(&self.path).map_err(|e| {
            CniError::io(format!("cannot remove saved delegate configuration {}: {e}", self.path.display()))
        })
    }
}

#[cfg(test)]
mod tests;
