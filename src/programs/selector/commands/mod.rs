//! The CNI verbs of the selector, one file each.

mod add;
mod check;
mod del;
mod gc;
mod status;

pub use add::add;
pub use check::check;
pub use del::del;
pub use gc::gc;
pub use status::status;
