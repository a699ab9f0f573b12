//! One network attached to the pod: `Attached`.

use super::record::Record;
use crate::platform::cni::{CniResult, ConfList, Invocation};

/// One network attached: its record, chain, call and result (recorded by `record_results`).
pub struct Attached {
    pub record: Record,
    pub list: ConfList,
    pub call: Invocation,
    pub result: CniResult,
}
