//! What ADD reports about the pod once its networks are attached, never failing the ADD for it: the
//! network-status annotation (`network_status`) and the `AddedInterface` events (`events`), handed
//! to the node agent or written here (`deliver`); and what every ADD, DEL and CHECK tells the
//! agent's metrics about itself (`operation`).

mod deliver;
mod events;
pub mod network_status;
mod operation;

pub use deliver::{Via, report};
pub use operation::operation;
