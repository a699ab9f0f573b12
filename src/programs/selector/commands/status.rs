//! CNI 1.1 STATUS for the selector: whether the node can network a pod now. The selector's own
//! needs (its configuration directory, its kubeconfig), then the default network's: STATUS of its
//! chain, as libcni asks a runtime's network (only a 1.1.0 chain has STATUS; an older one is ready),
//! so a yonghui default network answers "not ready" until its subnet file is there, and the runtime
//! reports the node's network not ready instead of failing every pod's ADD. The cluster's network
//! read in place (0.3.1, no STATUS) is ready when its file parses and its plugins are installed.

use crate::platform::cni::exec::find_plugin;
use crate::platform::cni::{CniError, ConfList, Invocation, PluginConf, code};
use crate::programs::selector::attach::{self, chain};
use crate::programs::selector::choose;
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::netconf::confdir;

/// Ready when the configuration directory can be read, the kubeconfig, if any, is there, the
/// readiness indicator file, if any, is there, and the default network's plugins say they are.
pub fn status(inv: &Invocation, conf: &PluginConf) -> Result<(), CniError> {
    let config = SelectorConfig::from_plugin_conf(conf)?;
    readiness_indicator(&config, code::PLUGIN_NOT_AVAILABLE)?;
    ready(inv, &config)
}

/// Multus's `readinessindicatorfile`: while it is missing (the cluster's default network is not up
/// on this node yet), ADD and STATUS fail with `code` before anything is made. DEL, CHECK and GC
/// are not held back: undoing must never wait for the network to come up.
pub fn readiness_indicator(config: &SelectorConfig, code: u32) -> Result<(), CniError> {
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

/// The selector's own needs, then the default network's.
fn ready(inv: &Invocation, config: &SelectorConfig) -> Result<(), CniError> {
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
    let selection = choose::select(config, "eth0", None, None, None)
        .map_err(|e| unavailable(format!("the default network cannot be used: {}", e.msg)))?;
    let in_place =
        config.default_network.as_deref().is_some_and(|v| confdir::resolve_in_place(&config.conf_dir, v).is_some());
    for attachment in &selection.attachments {
        let list = attachment.conf_list().map_err(|e| unavailable(e.msg))?;
        if in_place && !list.cni_version.has_gc_and_status() {
            plugins_installed(&list, config)
                .map_err(|e| e.context(format!("default network {}", attachment.network)))?;
        }
        chain::status(&list, &attach::gc_call(inv, config))
            .map_err(|e| e.context(format!("default network {}", attachment.network)))?;
    }
    Ok(())
}

/// The cluster's network read in place declares a version without STATUS (0.3.1, as Calico,
/// flannel and kindnet write it): it is ready when its file parses (selecting it did that) and every
/// plugin it names is in `binDir`, which its owner installs when it starts on the node.
fn plugins_installed(list: &ConfList, config: &SelectorConfig) -> Result<(), CniError> {
    let bin_dir = [config.bin_dir.clone()];
    let missing: Vec<String> = confdir::plugin_types(list)
        .into_iter()
        .filter(|(_, plugin)| find_plugin(plugin, &bin_dir).is_err())
        .map(|(at, plugin)| format!("{plugin} ({at})"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(CniError::new(
        code::PLUGIN_NOT_AVAILABLE,
        format!("plugins not in binDir {} yet: {}", config.bin_dir.display(), missing.join(", ")),
    ))
}
