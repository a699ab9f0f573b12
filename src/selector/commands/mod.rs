//! The CNI verbs.

pub mod gc;
pub mod status;
