//! Which networks a pod gets, and why.

pub mod by_nad;
pub mod from_agent;
pub mod objects;
pub mod precedence;
pub mod sandbox;
pub mod select;
pub mod selection;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_compat;

pub use objects::{Fetching, Objects, references, trimmed, trimmed_meta};
pub use sandbox::{CONFIG_MIRROR, check_uid, is_sandbox_pod};
pub use select::{resolve, select};
