//! CNI 1.1 STATUS for the selector: whether the node can network a pod now. The selector's own
//! needs (its configuration directory, its kubeconfig), then the default network's: STATUS of its
//! chain, as libcni asks a runtime's network (only a 1.1.0 chain has STATUS; an older one is ready),
//! so a yonghui default network answers "not ready" until its subnet file is there, and the runtime
//! reports the node's network not ready instead of failing every pod's ADD.

use crate::cni::{CniError, Invocation, code};
use crate::selector::attach::{chain, networks};
use crate::selector::choose::select;
use crate::selector::config::SelectorConfig;

pub fn status(inv: &Invocation, config: &SelectorConfig) -> Result<(), CniError> {
    let unavailable = |msg: String| CniError::new(code::PLUGIN_NOT_AVAILABLE, msg);
    std::fs::read_dir(&config.conf_dir)
        .map_err(|e| unavailable(format!("confDir {} is not readable: {e}", config.conf_dir.display())))?;
    if let Some(kubeconfig) = &config.kubeconfig {
        std::fs::File::open(kubeconfig)
            .map_err(|e| unavailable(format!("kubeconfig {} is not readable: {e}", kubeconfig.display())))?;
    }
    if config.default_network.is_none() {
        return Ok(());
    }
    // What a pod that chooses nothing gets: every network of defaultNetwork.
    // (STATUS names no interface: any name would do to resolve it.)
    let selection = select::select(config, "eth0", None, None, None)
        .map_err(|e| unavailable(format!("the default network cannot be used: {}", e.msg)))?;
    for attachment in &selection.attachments {
        let list = attachment.conf_list().map_err(|e| unavailable(e.msg))?;
        chain::status(&list, &networks::gc_call(inv, config))
            .map_err(|e| e.context(format!("default network {}", attachment.network)))?;
    }
    Ok(())
}
