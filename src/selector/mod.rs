//! The selector, `yh-genie`: asks Kubernetes which network a pod chose and runs it (placeholder).

use crate::cni::{CniError, CniResult, Invocation, Plugin, PluginConf};

pub const NAME: &str = "yh-genie";

pub struct Selector;

impl Plugin for Selector {
    fn name(&self) -> &'static str {
        NAME
    }
    fn add(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<CniResult, CniError> {
        Err(CniError::invalid_config("yh-genie is not implemented yet"))
    }
    fn del(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<(), CniError> {
        Ok(())
    }
    fn check(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<(), CniError> {
        Err(CniError::invalid_config("yh-genie is not implemented yet"))
    }
}
