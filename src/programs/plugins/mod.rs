//! The built-in plugins, chosen by name, and `invoke`, which runs any plugin type: built-ins in
//! process, everything else by exec from the CNI path (netavark's "drivers by name, plugins on dirs").

pub mod bridge;
pub mod firewall;
pub mod ipam;
pub mod router;
pub mod veth;
pub mod via_node;
pub mod yonghui;

use crate::platform::cni::exec::{self, DEFAULT_TIMEOUT};
use crate::platform::cni::skel::{self, Plugin};
use crate::platform::cni::{CniError, CniResult, Command, Invocation, PluginConf, config};

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

/// Run `command` of plugin `plugin_type` with config `stdin` for the call `inv`.
/// Returns the result for ADD, `None` otherwise. Must not be called inside an async runtime.
pub fn invoke(
    plugin_type: &str,
    command: Command,
    inv: &Invocation,
    stdin: &[u8],
) -> Result<Option<CniResult>, CniError> {
    let inv = inv.with_command(command);
    if let Some(plugin) = builtin(plugin_type) {
        let conf = PluginConf::parse(stdin)?;
        return skel::dispatch(plugin, &inv, &conf);
    }
    let binary = exec::find_plugin(plugin_type, &inv.path)?;
    let out =
        crate::platform::async_runtime::block_on(exec::exec_plugin(&binary, command, &inv, stdin, DEFAULT_TIMEOUT))?;
    if command == Command::Add {
        // A result without a version is in the config's, as libcni reads it.
        return CniResult::from_slice(&out, config::version_of(stdin))
            .map(Some)
            .map_err(|e| e.context(format!("result of plugin {plugin_type}")));
    }
    Ok(None)
}
