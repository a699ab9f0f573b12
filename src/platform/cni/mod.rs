//! The CNI protocol, in one place: environment, arguments, configurations, results and their
//! version conversions, errors, exec of external plugins, the `Plugin` trait every plugin
//! implements, how a plugin runs its delegates (`delegate`), and the context of one operation
//! (`operation`).

pub mod args;
pub mod attachment_lock;
pub mod config;
pub mod delegate;
pub mod env;
pub mod error;
pub mod exec;
pub mod operation;
pub mod result;
pub mod skel;
#[cfg(test)]
pub mod testing;
pub mod version;

pub use args::CniArgs;
pub use config::{ConfList, PluginConf};
pub use delegate::Delegates;
pub use env::{Command, Invocation};
pub use error::{CniError, code};
pub use operation::Operation;
pub use result::CniResult;
pub use skel::Plugin;
pub use version::CniVersion;
