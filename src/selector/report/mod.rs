//! What ADD reports about the pod once its networks are attached, never failing the ADD for it: the
//! network-status annotation (`network_status`) and the `AddedInterface` events (`events`), handed
//! to the node agent or written here (`deliver`).

mod deliver;
mod events;
pub mod network_status;

pub use deliver::{Via, report};
