//! `yh-ipam`'s `AddressPool` objects (docs/ipam.md, "Pool objects"), as the agent holds them: the
//! pool of a network that names one and gives no `ranges` is read from here, and turned into the
//! `PoolSpec` the allocation takes before `addresses` is asked, so that allocating knows nothing of
//! where a pool was defined.
//!
//! The objects are listed, then watched (`list_watch::follow`), from the node's first `yh-ipam`
//! request on, for as long as the agent runs: an ADD must make no API request while its node's
//! block has room, and pools are few, made by the admin and seldom changed, so one watch of them
//! all costs less than any read on an ADD, and sees a changed pool at once where a cache read on
//! first use would hand out the old one until it is refreshed. A node that never uses `yh-ipam`
//! watches none. The first request waits up to `FIRST_LIST_WAIT` for the first list; after that the
//! last list and the changes since answer, also while the watch is failing.
//!
//! One pool, one definition: a network that gives `ranges` for a pool an `AddressPool` defines is
//! refused (code 7, naming both), so that a NetworkAttachmentDefinition's author cannot hand out an
//! admin's pool with other ranges. While the objects cannot be read at all (the CRD not applied,
//! the agent not allowed to read them, the API server not answering since the agent started), a
//! network giving its own `ranges` is served as it would be without pool objects, and one naming a
//! pool object is refused with code 11, saying why.

use super::Shared;
use crate::node::agent_socket::pool_definition::{self, PoolDefinition};
use crate::node::agent_socket::protocol::Answer;
use crate::platform::kube::address_pool::{self, KIND};
use crate::programs::agent::watching::list_watch::{Update, follow};
use ::kube::Api;
use ::kube::api::DynamicObject;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{info, warn};

/// How long the node's first `yh-ipam` request waits for the first list of the pool objects.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(5);

/// The pool objects as last listed and watched, and whether the watch runs.
pub(super) struct AddressPools {
    held: Mutex<Held>,
    /// Bumped after every change of `held`: a request waiting for the first list looks again.
    changes: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct Held {
    started: bool,
    /// A list has completed: `pools` is what the API server held then, with the changes since.
    listed: bool,
    /// Each object's `spec`, by name.
    pools: BTreeMap<String, Map<String, Value>>,
    /// Why the last list or watch failed, until one succeeds.
    failure: Option<Failure>,
}

#[derive(Clone)]
struct Failure {
    error: String,
    code: Option<u16>,
}

/// What the agent knows of one pool's object.
enum Known {
    Defined(Map<String, Value>),
    Absent,
    /// The objects cannot be read: why.
    Unknown(String),
}

impl AddressPools {
    pub(super) fn new() -> Self {
        AddressPools { held: Mutex::default(), changes: tokio::sync::watch::channel(0).0 }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }
}

/// The pool `name` as its `AddressPool` defines it; the answer to give the plugin when there is
/// none to allocate from: the object absent or unreadable (code 11: it may be created, or become
/// readable), or invalid (code 7, naming what is wrong), before anything is allocated.
pub(super) async fn definition(shared: &Arc<Shared>, name: &str) -> Result<PoolDefinition, Answer> {
    let refused = |why: String, invalid: bool| Answer::NoAddress { why, retry: !invalid, invalid };
    match known(shared, name).await {
        Known::Defined(spec) => pool_definition::read(name, &spec).map_err(|why| {
            refused(
                format!(
                    "{KIND} {name:?} is invalid: {why}; nothing was allocated from it: correct it (kubectl edit \
                     addresspool {name})"
                ),
                true,
            )
        }),
        Known::Absent => Err(refused(
            format!(
                "pool {name:?} is defined by no {KIND}: the network's yh-ipam gives no 'ranges', so it takes the pool \
                 from the cluster-scoped {KIND} {name:?} (ipam.yh-genie.io/v1alpha1), which does not exist; create \
                 it (docs/ipam.md, \"Pool objects\"), or give the network's ipam its 'ranges'"
            ),
            false,
        )),
        Known::Unknown(why) => {
            Err(refused(format!("pool {name:?} is the {KIND} of that name, which the agent cannot read: {why}"), false))
        }
    }
}

/// `Ok` unless an `AddressPool` defines the pool `name`, which a network gives its own ranges for:
/// then the answer refusing it (code 7). Objects that cannot be read refuse nothing.
pub(super) async fn check_inline(shared: &Arc<Shared>, name: &str) -> Result<(), Answer> {
    match known(shared, name).await {
        Known::Defined(_) => Err(Answer::NoAddress {
            why: format!(
                "the network's yh-ipam gives 'ranges' for pool {name:?}, and the {KIND} {name:?} defines that pool \
                 too: a pool has one definition; remove 'ranges' (and 'exclude', 'blockSize') from the network's \
                 ipam to take the {KIND}'s, or name another pool in 'pool'"
            ),
            retry: false,
            invalid: true,
        }),
        Known::Absent | Known::Unknown(_) => Ok(()),
    }
}

/// What the objects say of `name`, the watch started and its first list waited for when need be.
async fn known(shared: &Arc<Shared>, name: &str) -> Known {
    let pools = &shared.address_pools;
    let start = !std::mem::replace(&mut pools.held().started, true);
    if start {
        drop(tokio::spawn(watch(shared.clone())));
    }
    let deadline = tokio::time::Instant::now() + FIRST_LIST_WAIT;
    // Subscribed before the first look, so that no change between a look and the wait is missed.
    let mut changes = pools.changes.subscribe();
    loop {
        {
            let held = pools.held();
            if held.listed {
                return match held.pools.get(name) {
                    Some(spec) => Known::Defined(spec.clone()),
                    None => Known::Absent,
                };
            }
            if let Some(failure) = &held.failure {
                return Known::Unknown(explain(failure));
            }
        }
        if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
            return Known::Unknown(format!(
                "the {KIND} objects are not listed yet ({}s after the first yh-ipam request)",
                FIRST_LIST_WAIT.as_secs()
            ));
        }
    }
}

/// A failure of the watch, with what to do about it.
fn explain(failure: &Failure) -> String {
    let what = match failure.code {
        Some(403) => {
            "; the agent's ClusterRole must allow list and watch on addresspools.ipam.yh-genie.io \
             (manifests/yh-genie.yaml)"
        }
        Some(404) => "; the AddressPool CRD is not installed: apply manifests/ipam-crd.yaml",
        _ => "",
    };
    format!("listing the {KIND} objects: {}{what}", failure.error)
}

/// Keep the objects, for as long as the agent runs.
async fn watch(shared: Arc<Shared>) {
    let api: Api<DynamicObject> = Api::all_with(shared.client.clone(), &address_pool::resource());
    let pools = &shared.address_pools;
    let mut listing: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let spec = |object: &DynamicObject| object.data.get("spec").and_then(Value::as_object).cloned().unwrap_or_default();
    follow(api, None, &shared.streaming, |update| {
        let mut held = pools.held();
        match update {
            Update::ListStarted { .. } => listing.clear(),
            Update::Listed(object) => {
                listing.insert(object.metadata.name.clone().unwrap_or_default(), spec(&object));
                return;
            }
            Update::ListDone => {
                held.pools = std::mem::take(&mut listing);
                if !held.listed || held.failure.is_some() {
                    info!("listed {} {KIND} objects for yh-ipam", held.pools.len());
                }
                held.listed = true;
                held.failure = None;
            }
            Update::Applied(object) => {
                held.pools.insert(object.metadata.name.clone().unwrap_or_default(), spec(&object));
            }
            Update::Deleted(object) => {
                held.pools.remove(object.metadata.name.as_deref().unwrap_or_default());
            }
            Update::Current => held.failure = None,
            Update::Expired { .. } => return,
            Update::Failed { error, code, retry_in } => {
                let failure = Failure { error, code };
                if held.failure.as_ref().is_none_or(|f| f.error != failure.error) {
                    let kept = if held.listed { "the objects as last listed answer" } else { "none is known" };
                    warn!("{} (again in {:.1}s); {kept}", explain(&failure), retry_in.as_secs_f64());
                }
                held.failure = Some(failure);
            }
        }
        drop(held);
        pools.changed();
    })
    .await;
}
