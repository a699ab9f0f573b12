//! The pods the cluster's own network attached before yh-genie was installed, on a node whose
//! `defaultNetwork` names that network in place (`confdir::resolve_in_place`).
//!
//! Such a pod has no record of yh-genie's: the runtime ran the network's file directly, on its
//! interface, and that was all the pod had. Its DEL and CHECK, which now come to the selector, go
//! to that network as the runtime would have sent them: the file as it is now (the runtime loads it
//! on every call), the runtime's interface, netns and `CNI_ARGS`, and the runtime's capability
//! arguments (the installer's conflist declares the network's, so the runtime passes the same). The
//! result of the pod's ADD lives in the runtime's own cache, which a plugin cannot see: DEL goes
//! without `prevResult`, as libcni sends it to a network before 0.4.0; a CHECK of a network of 0.4.0
//! or later, which needs that result, cannot be made.

use super::call::plugins_call;
use super::{chain, settle};
use crate::platform::cni::{CniError, ConfList, Invocation, code};
use crate::programs::selector::choose::chosen::{Attachment, Source};
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::netconf::confdir;
use crate::programs::selector::requests::annotation::Extras;

/// DEL `runtime`'s attachment from the cluster's network in place, for a sandbox yh-genie has no
/// record of. `None` when `defaultNetwork` does not name a network in place. A network whose file is
/// gone or broken cannot be asked: logged, and the DEL succeeds, as a DEL with nothing it can undo.
pub fn del(runtime: &Invocation, config: &SelectorConfig) -> Option<Result<(), CniError>> {
    let (network, list, call) = match runtime_call(runtime, config)? {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(
                "container {} interface {} has no attachment record, and the cluster's network it would have been \
                 made by cannot be read ({e}); nothing to delete",
                runtime.container_id,
                runtime.ifname
            );
            return Some(Ok(()));
        }
    };
    let outcome = chain::del(&list, &call, None).map_err(|e| e.context(format!("network {network} (in place)")));
    Some(match outcome {
        Err(e) if settle::forgettable_without_record(runtime.netns.as_deref(), &runtime.ifname, &network, &e) => Ok(()),
        other => other,
    })
}

/// CHECK `runtime`'s attachment on the cluster's network in place, for a sandbox yh-genie has no
/// record of. `None` when `defaultNetwork` does not name a network in place. A network before 0.4.0
/// has no CHECK, as libcni knows (`chain::check`): nothing of its plugins to ask, as for a recorded
/// one. One of 0.4.0 or later needs the result of the ADD, which only the runtime's cache holds.
pub fn check(runtime: &Invocation, config: &SelectorConfig) -> Option<Result<(), CniError>> {
    let (network, list, _) = match runtime_call(runtime, config)? {
        Ok(found) => found,
        Err(e) => return Some(Err(e)),
    };
    if !list.cni_version.has_check() || list.disable_check {
        return Some(Ok(()));
    }
    Some(Err(CniError::new(
        code::UNKNOWN_CONTAINER,
        format!(
            "container {} interface {}: no attachment record; the cluster's network {network} (CNI {}) made it before \
             yh-genie was installed, and the result its CHECK needs is in the runtime's cache only",
            runtime.container_id, runtime.ifname, list.cni_version
        ),
    )))
}

/// The network in place, its chain with the runtime's capability arguments, and the call its
/// plugins get: as the pod's first network on the runtime's interface.
fn runtime_call(
    runtime: &Invocation,
    config: &SelectorConfig,
) -> Option<Result<(String, ConfList, Invocation), CniError>> {
    let value = config.default_network.as_deref()?;
    let file = confdir::resolve_in_place(&config.conf_dir, value)?;
    Some(file.and_then(|file| {
        let (text, _) = confdir::load(&file)?;
        let attachment = Attachment {
            ifname: runtime.ifname.clone(),
            network: file.network.clone(),
            path: Some(file.path),
            config: text,
            source: Source::DefaultNetwork { element: value.trim().to_string() },
            extras: Extras::default(),
            device: None,
        };
        let (_, list, call) = plugins_call(runtime, config, 0, &attachment)?;
        Ok((file.network, list, call))
    }))
}
