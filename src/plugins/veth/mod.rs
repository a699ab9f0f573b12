//! The `veth` plugin (placeholder until implemented).

use crate::cni::{CniError, CniResult, Invocation, Plugin, PluginConf};

pub const NAME: &str = "veth";

pub struct Veth;

impl Plugin for Veth {
    fn name(&self) -> &'static str {
        NAME
    }
    fn add(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<CniResult, CniError> {
        Err(CniError::invalid_config("veth is not implemented yet"))
    }
    fn del(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<(), CniError> {
        Ok(())
    }
    fn check(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<(), CniError> {
        Err(CniError::invalid_config("veth is not implemented yet"))
    }
}
