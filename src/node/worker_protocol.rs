//! What the node agent and the attach worker say to each other over the worker's unix socket: one
//! JSON line each way per connection. The agent names a running pod; the worker makes its
//! attachments match its networks annotation and answers with the pod's network-status and the
//! events to create. Both sides refuse another `version`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const VERSION: u32 = 1;

/// The longest line either side reads.
pub const MAX_LINE: usize = 1 << 20;

/// Make the attachments of the pod match its networks annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub version: u32,
    pub namespace: String,
    pub name: String,
    /// The pod's uid: the sandbox's `K8S_POD_UID`, which its records hold.
    pub uid: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum Answer {
    /// The pod's attachments are what its annotation asks for, as far as each could be made:
    /// `annotations` says so (the whole network-status, from the records), `events` what changed
    /// and what failed. No change: both empty.
    #[serde(rename_all = "camelCase")]
    Reconciled { annotations: BTreeMap<String, String>, events: Vec<Notice> },
    /// The pod has no completed attachment on this node (not started yet, being deleted, not
    /// attached by yh-genie): nothing was done; ask again once it runs.
    NotAttached { why: String },
    /// The worker does not do this (`dynamicNetworks` is off, another version): nothing was done.
    Refused { why: String },
}

/// One event about the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    pub reason: String,
    pub message: String,
    /// A `Warning` event; else `Normal`.
    #[serde(default)]
    pub warning: bool,
}

/// The reasons of the events: Multus's `AddedInterface`, its counterpart, and a failure.
pub const ADDED_INTERFACE: &str = "AddedInterface";
pub const REMOVED_INTERFACE: &str = "RemovedInterface";
pub const NETWORK_CHANGE_FAILED: &str = "NetworkChangeFailed";

impl Notice {
    pub fn normal(reason: &str, message: String) -> Self {
        Notice { reason: reason.into(), message, warning: false }
    }
    pub fn failed(message: String) -> Self {
        Notice { reason: NETWORK_CHANGE_FAILED.into(), message, warning: true }
    }
}

/// A message as one line.
pub fn to_line<T: Serialize>(message: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).expect("protocol messages serialize");
    line.push(b'\n');
    line
}
