//! The `yonghui` plugin (placeholder until implemented).

use crate::cni::{CniError, CniResult, Invocation, Plugin, PluginConf};

pub const NAME: &str = "yonghui";

pub struct Yonghui;

impl Plugin for Yonghui {
    fn name(&self) -> &'static str {
        NAME
    }
    fn add(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<CniResult, CniError> {
        Err(CniError::invalid_config("yonghui is not implemented yet"))
    }
    fn del(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<(), CniError> {
        Ok(())
    }
    fn check(&self, _inv: &Invocation, _conf: &PluginConf) -> Result<(), CniError> {
        Err(CniError::invalid_config("yonghui is not implemented yet"))
    }
}
