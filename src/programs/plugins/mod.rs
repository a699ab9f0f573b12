//! The built-in plugins, and how any plugin type runs (`registry`: built-ins and host-local in
//! process, everything else exec'd from the CNI path); `invoke` runs a network's plugin as the
//! registry says.

pub mod bridge;
pub mod firewall;
pub mod ipam;
pub mod registry;
pub mod router;
pub mod veth;
pub mod via_node;
pub mod yonghui;

pub use registry::{NAMES, builtin};

use crate::platform::cni::exec::{self, DEFAULT_TIMEOUT};
use crate::platform::cni::skel;
use crate::platform::cni::{CniError, CniResult, Command, Invocation, Operation, PluginConf, config};
use registry::Runs;

/// Run `command` of plugin `plugin_type` with config `stdin` for the call `inv`.
/// Returns the result for ADD, `None` otherwise. Must not be called inside an async runtime.
pub fn invoke(
    plugin_type: &str,
    command: Command,
    inv: &Invocation,
    stdin: &[u8],
) -> Result<Option<CniResult>, CniError> {
    let inv = inv.with_command(command);
    if let Runs::Builtin(plugin) = registry::delegate(plugin_type) {
        let conf = PluginConf::parse(stdin)?;
        // An operation of its own: what a built-in notes is not its caller's to log or report.
        return skel::dispatch(plugin, &inv, &conf, &Operation::default());
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
