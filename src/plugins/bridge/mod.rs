//! The `yh-bridge` plugin (placeholder until implemented).

use crate::cni::{CniError, CniResult, Invocation, Plugin, PluginConf};

pub const NAME: &str = "yh-bridge";

pub struct Bridge;

impl Plugin for Bridge {
    fn name(&self) -> &'static str {
        NAME
    }
    fn add(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<CniResult, CniError> {
        Err(CniError::invalid_config("yh-bridge is not implemented yet"))
    }
    fn del(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<(), CniError> {
        Ok(())
    }
    fn check(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<(), CniError> {
        Err(CniError::invalid_config("yh-bridge is not implemented yet"))
    }
}
