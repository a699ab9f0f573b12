//! What `veth` and `router` share (seed 004). Both "hijack" some of a pod's traffic away from the NIC
//! that macvlan or SR-IOV gave it: traffic to the node and to the overlay and service subnets goes by
//! a path through the node's own network stack (a veth pair for `veth`, the overlay NIC for `router`),
//! because a macvlan child can never talk to its parent. This module holds their common configuration
//! keys and logging.

pub mod config;
pub mod logging;
pub mod model;
pub mod plan;
