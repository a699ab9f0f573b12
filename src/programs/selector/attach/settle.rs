//! What a DEL does about records whose DEL fails: a DEL must not fail for ever on what a pod author
//! wrote. A record whose ADD never completed (no result: a plugin refused its configuration, and
//! undoing it failed too) and of which nothing is left in the kernel (the pod's netns is gone, or
//! has no interface of the record's name) is forgotten, with a warning naming it and its error; its
//! configuration never ran to the end and has nothing left to undo where DEL can see. Every other
//! failure fails the DEL, which the runtime retries: a record whose ADD completed, or whose
//! interface is still there, may hold what only its DEL releases.

use super::record::Record;
use crate::platform::cni::CniError;
use std::path::Path;

/// The outcome of the DEL of `records` in the netns `netns` (`None`: there is none) whose DELs
/// failed with `failed` (by interface): the first error that stands, after the records that can be
/// forgotten are (logged).
pub fn settle(records: &[Record], netns: Option<&Path>, failed: Vec<(String, CniError)>) -> Result<(), CniError> {
    let mut first_error = None;
    for (ifname, error) in failed {
        let record = records.iter().find(|r| r.ifname == ifname);
        match record.filter(|r| r.result.is_none() && !in_kernel(netns, &r.ifname)) {
            Some(r) => tracing::warn!(
                "attachment record of container {} interface {} (network {}) is forgotten: its ADD never completed, \
                 its DEL fails ({error}), and nothing of it is in the pod's netns",
                r.container_id,
                r.ifname,
                r.network
            ),
            None => {
                first_error.get_or_insert(error);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Whether the failed DEL (`error`) of a network found without a record (DEL asked the API server
/// which networks the pod has) can be let go: nothing of it is in the kernel (logged, as above).
pub fn forgettable_without_record(netns: Option<&Path>, ifname: &str, network: &str, error: &CniError) -> bool {
    if in_kernel(netns, ifname) {
        return false;
    }
    tracing::warn!(
        "the DEL of network {network} on interface {ifname}, which has no record, fails ({error}), and nothing of it \
         is in the pod's netns; nothing to delete"
    );
    true
}

/// Whether the netns at `netns` has an interface `ifname`. No netns (or one that is gone) has none;
/// one that cannot be entered is assumed to have it (nothing is forgotten on a guess).
fn in_kernel(netns: Option<&Path>, ifname: &str) -> bool {
    let Some(netns) = netns.filter(|p| crate::platform::netns::exists(p)) else {
        return false;
    };
    let link = crate::platform::async_runtime::block_on(async {
        crate::platform::netlink::Netlink::in_netns(netns)?.link_by_name(ifname).await.map(|link| link.is_some())
    });
    link.unwrap_or(true)
}
