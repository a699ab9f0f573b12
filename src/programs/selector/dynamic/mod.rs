//! Networks attached to and detached from running pods (`dynamicNetworks`,
//! docs/dynamic-networks.md): when a running pod's `k8s.v1.cni.cncf.io/networks` annotation gains
//! or loses networks, the node agent (which runs no plugin) asks the attach worker, the DaemonSet's
//! privileged container, to make the pod's attachments match it:
//!
//! - `plan`: what the edit changes, matched by network and interface against the records;
//! - `reconcile`: the attaches and detaches, as the runtime's calls make them (records, locks), and
//!   the pod's network-status and events that say what happened;
//! - `protocol`: what the agent and the worker say; `worker`: `yh-genie attach-worker`.

mod plan;
mod reconcile;
pub mod worker;

pub use reconcile::reconcile;
