//! What ADD reports about the pod.

pub mod deliver;
pub mod network_status;
