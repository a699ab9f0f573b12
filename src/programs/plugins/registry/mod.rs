//! How each plugin type runs, decided in one place (netavark's "drivers by name, plugins on
//! dirs"): one of this binary's plugins in process, called as a runtime would exec it; host-local
//! in process, on its own files under its own lock, when its configuration is one `ipam::host_local`
//! reads entirely; anything else exec'd from the CNI path, as libcni runs it. Delegate chains
//! (`invoke`) and IPAM (`ipam::Ipam`) both ask here; where the binary is looked for on the CNI path
//! stays with them, since that lookup is what a missing plugin's error says.

pub mod ipam;
pub mod runs;

pub use ipam::ipam;
pub use runs::Runs;

use super::ipam::cluster_wide::{self, YhIpam};
use super::{bridge, router, veth, yonghui};
use crate::platform::cni::delegate::ExecDelegates;
use crate::platform::cni::skel::{self, Plugin};
use crate::platform::cni::{CniError, CniResult, Command, Delegates, Invocation, Operation, PluginConf};

/// The plugins that are part of this binary, each by the name it is installed and chosen under
/// (`type` in a configuration, argv[0], its link in `binDir`): the one list of them. The selector is
/// not here: it is never a delegate. `yh-ipam` is, for the plugins that exec their IPAM; the
/// built-in plugins run it in process (`ipam`).
const BUILTIN: [(&str, &dyn Plugin); 5] = [
    (yonghui::NAME, &yonghui::Yonghui),
    (bridge::NAME, &bridge::Bridge),
    (veth::NAME, &veth::Veth),
    (router::NAME, &router::Router),
    (cluster_wide::TYPE, &YhIpam),
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

/// How a network's plugin of `plugin_type` runs (a chain's, or a meta plugin's delegate): a
/// built-in in process, anything else exec'd. Never `HostLocal`: host-local is an IPAM plugin.
pub fn delegate(plugin_type: &str) -> Runs {
    builtin(plugin_type).map_or(Runs::Exec, Runs::Builtin)
}

/// This binary's way of running delegates: its own plugins in process, each in an operation of its
/// own (what a built-in notes is not its caller's to log or report) that runs its delegates the
/// same way; everything else exec'd from the CNI path.
pub struct Registry;

impl Delegates for Registry {
    fn invoke(
        &self,
        plugin_type: &str,
        command: Command,
        inv: &Invocation,
        stdin: &[u8],
    ) -> Result<Option<CniResult>, CniError> {
        match delegate(plugin_type) {
            Runs::Builtin(plugin) => {
                let conf = PluginConf::parse(stdin)?;
                skel::dispatch(plugin, &inv.with_command(command), &conf, &Operation::with_delegates(&Registry))
            }
            Runs::HostLocal(_) | Runs::ClusterWide(_) | Runs::Exec => {
                ExecDelegates.invoke(plugin_type, command, inv, stdin)
            }
        }
    }
}
