//! What the `yh-ipam` plugin and the node agent say about cluster-wide addresses
//! (docs/ipam.md): the pool an ADD allocates from, as the network's configuration defines it, and
//! who an address belongs to. The plugin reads the admin's configuration into a `PoolSpec`; the
//! agent carves it into blocks and hands out addresses from its node's blocks.

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// A pool as one ADD's configuration defines it: its name, its range sets (one address from each,
/// as host-local's `ranges`), the addresses never handed out, and how many addresses a node claims
/// at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolSpec {
    pub name: String,
    pub range_sets: Vec<Vec<PoolRange>>,
    #[serde(default)]
    pub exclude: Vec<IpNetwork>,
    /// Addresses per block: a power of two.
    pub block_size: u32,
}

/// One range: the addresses `start..=end` of `subnet`, but its `gateway`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRange {
    pub subnet: IpNetwork,
    pub start: IpAddr,
    pub end: IpAddr,
    pub gateway: IpAddr,
}

/// Who an address belongs to: a pod by its uid (never its name, which a StatefulSet gives the next
/// pod), the sandbox's container id and the interface. The pod's namespace and name are only told,
/// for operators reading the records.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressOwner {
    pub uid: String,
    pub container_id: String,
    pub ifname: String,
    #[serde(default)]
    pub pod: String,
}

impl AddressOwner {
    /// Whether a release for (`container_id`, `ifname`), from the pod `uid` when the DEL knows it,
    /// is this owner's.
    pub fn released_by(&self, container_id: &str, ifname: &str, uid: Option<&str>) -> bool {
        self.container_id == container_id && self.ifname == ifname && uid.is_none_or(|u| u == self.uid)
    }
}

/// One address handed out: the address and the block it came from; `fixed` when the block is a
/// fixed block (held by no node) and the address kept in a `FixedAddress` object, so that the node
/// never takes the block for its own; `shared` when that object is this pod's alone (an address of
/// a node's block shared when the pool ran low), deleted by the pod's DEL, unlike one kept for an
/// identity beyond the pod (a StatefulSet's ordinal, an IPAMClaim).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocated {
    pub address: IpAddr,
    pub block: IpNetwork,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}
