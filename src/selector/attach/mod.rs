//! Attaching the chosen networks to the pod.

pub mod chain;
pub mod default_route;
pub mod extras;
pub mod networks;
pub mod record;
pub mod settle;
pub mod tombstone;
