//! How an IPAM plugin runs: host-local in process when its configuration is one
//! `ipam::host_local` reads entirely, yh-genie's own `yh-ipam` in process always, anything else
//! exec'd (this binary's plugins too: none is an IPAM plugin). Apart from the built-in plugins' list, so that IPAM's users (the built-in plugins)
//! need not import that list.

use super::runs::Runs;
use crate::platform::cni::{CniArgs, PluginConf};
use crate::programs::plugins::ipam::cluster_wide::{self, ClusterWide};
use crate::programs::plugins::ipam::host_local::HostLocal;

/// How the IPAM plugin of `plugin_type` that configuration `conf` names runs for a call with `args`.
pub fn ipam(plugin_type: &str, conf: &PluginConf, args: &CniArgs) -> Runs {
    match plugin_type {
        "host-local" => HostLocal::from_conf(conf, args).map_or(Runs::Exec, Runs::HostLocal),
        cluster_wide::TYPE => Runs::ClusterWide(ClusterWide::from_conf(conf)),
        _ => Runs::Exec,
    }
}
