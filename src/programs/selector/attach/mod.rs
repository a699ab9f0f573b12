//! Attaching the chosen networks to the pod, and undoing them: every network's record first
//! (`record`), then its chain of plugins (`chain`) with the call it gets (`call`), all of them as
//! one (`networks`), each network attached an `Attached`; what a failed ADD made is undone in one
//! place (`undo`); the default route a pod asked for (`default_route`); what a DEL may let go of
//! (`settle`), the tombstone a completed DEL leaves (`tombstone`), the DEL of pods Multus
//! attached before the node moved to yh-genie (`multus`), and the DEL and CHECK of pods the
//! cluster's network attached before yh-genie was installed beside it (`before_install`). A device network's attachment is given
//! its device first, and its device-info handed to its CNI (`devices`).

mod attached;
pub mod before_install;
mod call;
pub mod chain;
pub mod default_route;
pub mod devices;
mod extras;
pub mod multus;
mod networks;
mod record;
pub mod settle;
mod tombstone;
mod undo;

pub use attached::Attached;
pub use call::{gc_call, plugins_call, recorded_call};
pub use networks::{add_all, check_records, del_records, in_order, plugins_exist, record_results, records_of, usable};
pub use record::{Found, Record, RecordStore};
pub use tombstone::Tombstones;
pub use undo::{FailedChain, UndoLog};
