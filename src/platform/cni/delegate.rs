//! How a plugin runs another plugin: a meta plugin's delegate (yonghui's), a chain's next plugin.
//! The runtime's way is exec from the CNI path, as libcni does, and that is what any plugin gets
//! (`ExecDelegates`); the program hosting the plugins may know a better way for some types (yh-genie
//! runs its own plugins in process) and hands it to the operation (`Operation::with_delegates`),
//! so that a plugin never has to know which program it runs in.

use super::config;
use super::env::{Command, Invocation};
use super::error::CniError;
use super::exec::{DEFAULT_TIMEOUT, exec_plugin, find_plugin};
use super::result::CniResult;

/// Runs delegates. Must not be called inside an async runtime.
pub trait Delegates: Sync {
    /// Run `command` of the plugin `plugin_type` with the configuration `stdin`, for the call
    /// `inv`: its result for ADD, `None` for the other commands.
    fn invoke(
        &self,
        plugin_type: &str,
        command: Command,
        inv: &Invocation,
        stdin: &[u8],
    ) -> Result<Option<CniResult>, CniError>;
}

/// Every delegate exec'd from the CNI path.
pub struct ExecDelegates;

impl Delegates for ExecDelegates {
    fn invoke(
        &self,
        plugin_type: &str,
        command: Command,
        inv: &Invocation,
        stdin: &[u8],
    ) -> Result<Option<CniResult>, CniError> {
        let inv = inv.with_command(command);
        let binary = find_plugin(plugin_type, &inv.path)?;
        let out =
            crate::platform::async_runtime::block_on(exec_plugin(&binary, command, &inv, stdin, DEFAULT_TIMEOUT))?;
        if command != Command::Add {
            return Ok(None);
        }
        // A result without a version is in the config's, as libcni reads it.
        CniResult::from_slice(&out, config::version_of(stdin))
            .map(Some)
            .map_err(|e| e.context(format!("result of plugin {plugin_type}")))
    }
}
