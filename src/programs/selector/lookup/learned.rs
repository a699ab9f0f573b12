//! What a verb learned about the pod, and from whom: `Learned`.

use crate::node::agent_socket::protocol::PodObjects;
use k8s_openapi::api::core::v1::Pod;

/// What a verb learned about the pod: the node agent's answer, the API server's pod object, or
/// nothing.
pub enum Learned {
    /// The node agent's answer: the pod and the objects it refers to, as the agent holds them.
    Agent(Box<PodObjects>),
    /// The API server's pod object.
    ApiServer(Box<Pod>),
    /// Nothing: the caller is not a Kubernetes pod, or there is no kubeconfig to look it up with.
    Nothing,
}
