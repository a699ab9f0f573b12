//! What ADD reports about the pod once its networks are attached, never failing the ADD for it: the
//! network-status annotation (`network_status`) and the `AddedInterface` events (`events`), which
//! `lookup::deliver` hands to the node agent or writes to the API server; and what every ADD, DEL
//! and CHECK tells the agent's metrics about itself (`operation`).

pub mod events;
pub mod network_status;
mod operation;

pub use operation::operation;
