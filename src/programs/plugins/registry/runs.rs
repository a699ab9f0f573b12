//! How one plugin runs: the registry's answer, for a delegate and for IPAM alike.

use crate::platform::cni::skel::Plugin;
use crate::programs::plugins::ipam::cluster_wide::ClusterWide;
use crate::programs::plugins::ipam::host_local::HostLocal;

/// How a plugin runs.
pub enum Runs {
    /// One of this binary's plugins, called in process.
    Builtin(&'static dyn Plugin),
    /// host-local's ADD and DEL in process (its CHECK and GC are exec'd: `HostLocal::run`).
    HostLocal(HostLocal),
    /// yh-genie's `yh-ipam`, in process only: its addresses come from the node agent.
    ClusterWide(ClusterWide),
    /// Exec'd from the CNI path.
    Exec,
}
