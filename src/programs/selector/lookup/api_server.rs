//! Asking the API server about a pod: a client, made only when there is a pod to look up and a
//! kubeconfig to do it with, bounded by the policy the verb gives it.

use crate::platform::cni::{CniError, Invocation, Operation};
use crate::platform::kube::{ApiClient, ApiPolicy};
use crate::programs::selector::config::SelectorConfig;

/// A client when there is a pod to look up and a kubeconfig to do it with, its requests counted
/// among `op`'s.
pub fn client(
    config: &SelectorConfig,
    inv: &Invocation,
    policy: ApiPolicy,
    op: &Operation,
) -> Result<Option<ApiClient>, CniError> {
    match (&config.kubeconfig, inv.args.pod()) {
        (Some(kubeconfig), Some(_)) => ApiClient::connect(kubeconfig, policy, op).map(Some),
        _ => Ok(None),
    }
}
