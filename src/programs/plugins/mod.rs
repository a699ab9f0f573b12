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

pub use registry::{NAMES, Registry, builtin};

use crate::platform::cni::{CniError, CniResult, Command, Delegates, Invocation};

/// Run `command` of plugin `plugin_type` with config `stdin` for the call `inv`, as the registry
/// says. Returns the result for ADD, `None` otherwise. Must not be called inside an async runtime.
pub fn invoke(
    plugin_type: &str,
    command: Command,
    inv: &Invocation,
    stdin: &[u8],
) -> Result<Option<CniResult>, CniError> {
    registry::Registry.invoke(plugin_type, command, inv, stdin)
}
