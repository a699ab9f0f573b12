//! The node agent's socket, as both ends see it: the node-local way to the Kubernetes objects a
//! pod's ADD needs, which the agent (`crate::programs::agent`) holds from its watches. `protocol` is what is
//! said over it; `client` is the plugin's side; `report` is the datagram each plugin operation
//! sends the agent when it is done, for its metrics. Both sit here, below the selector and the agent
//! alike, so that neither has to reach up into the other for their shared wire. `addresses` is what
//! they say of `yh-ipam`'s addresses, and `pool_definition` how both read a pool an admin defines.

pub mod addresses;
pub mod client;
pub mod pool_definition;
pub mod protocol;
