//! The CNI verbs of the selector, one file each. GC's DEL of forgotten attachments serves
//! `cleanup` too.

mod add;
mod check;
mod del;
mod gc;
mod status;

pub use add::add;
pub use check::check;
pub use del::del;
pub use gc::{del_stale, gc};
pub use status::status;
