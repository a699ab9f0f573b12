//! How each plugin type runs, decided in one place (netavark's "drivers by name, plugins on
//! dirs"): one of this binary's plugins in process, called as a runtime would exec it; host-local
//! in process, on its own files under its own lock, when its configuration is one `ipam::host_local`
//! reads entirely; anything else exec'd from the CNI path, as libcni runs it. Delegate chains
//! (`invoke`) and IPAM (`ipam::Ipam`) both ask here; where the binary is looked for on the CNI path
//! stays with them, since that lookup is what a missing plugin's error says.

use super::ipam::host_local::HostLocal;
use super::{bridge, router, veth, yonghui};
use crate::platform::cni::skel::Plugin;
use crate::platform::cni::{CniArgs, PluginConf};

/// The plugins that are part of this binary, each by the name it is installed and chosen under
/// (`type` in a configuration, argv[0], its link in `binDir`): the one list of them. The selector is
/// not here: it is never a delegate.
const BUILTIN: [(&str, &dyn Plugin); 4] = [
    (yonghui::NAME, &yonghui::Yonghui),
    (bridge::NAME, &bridge::Bridge),
    (veth::NAME, &veth::Veth),
    (router::NAME, &router::Router),
];

/// The built-in plugins' names, in `BUILTIN`'s order.
pub const NAMES: [&str; BUILTIN.len()] = {
    let mut names = [""; BUILTIN.len()];
    let mut i = 0;
    while i < BUILTIN.len() {
        names[i] = BUILTIN[i].0;
        i += 1;
    }
    names
};

/// The built-in plugin of this type, if it is one.
pub fn builtin(plugin_type: &str) -> Option<&'static dyn Plugin> {
    BUILTIN.iter().find(|(name, _)| *name == plugin_type).map(|&(_, plugin)| plugin)
}

/// How a plugin runs.
pub enum Runs {
    /// One of this binary's plugins, called in process.
    Builtin(&'static dyn Plugin),
    /// host-local's ADD and DEL in process (its CHECK and GC are exec'd: `HostLocal::run`).
    HostLocal(HostLocal),
    /// Exec'd from the CNI path.
    Exec,
}

/// How a network's plugin of `plugin_type` runs (a chain's, or a meta plugin's delegate): a
/// built-in in process, anything else exec'd. Never `HostLocal`: host-local is an IPAM plugin.
pub fn delegate(plugin_type: &str) -> Runs {
    builtin(plugin_type).map_or(Runs::Exec, Runs::Builtin)
}

/// How the IPAM plugin of `plugin_type` that configuration `conf` names runs for a call with
/// `args`: host-local in process when `conf` is one `ipam::host_local` reads entirely, anything else
/// exec'd (this binary's plugins too: none is an IPAM plugin).
pub fn ipam(plugin_type: &str, conf: &PluginConf, args: &CniArgs) -> Runs {
    match plugin_type {
        "host-local" => HostLocal::from_conf(conf, args).map_or(Runs::Exec, Runs::HostLocal),
        _ => Runs::Exec,
    }
}
