//! The agent's watches (`programs::agent::watching::list_watch`: streaming lists, resumes, relists spread in
//! time, backoff), all on the agent's one connection: one on its node's pods (field selector
//! `spec.nodeName`), one per ConfigMap and per DRA ResourceClaim those pods refer to (field selector
//! `metadata.name` in its namespace), one per namespace whose NetworkAttachmentDefinitions they
//! use, and one on the node's ResourceSlices (field selector `spec.nodeName`) while a pod has
//! resource claims, started and stopped as the store says (`store::WatchKey` says why each kind is watched so). What each
//! delivers is trimmed as it arrives, and each reports whether it is current (`sync`).

use super::Shared;
use super::reclaim;
use super::store::{ObjectState, WatchKey};
use super::sync::{Failure, Watched};
use crate::platform::kube::fixed_address::FixedOwner;
use crate::platform::kube::{Kind, NetworkAttachmentDefinition, ObjectKey};
use crate::programs::agent::watching::list_watch::{Update, follow};
use crate::programs::selector::agent_face::{trim_attachment, trim_claim, trim_config_map, trim_pod, trim_slice};
use ::kube::Api;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use std::sync::Arc;
use tokio::task::AbortHandle;
use tracing::{debug, info, warn};

/// Keep the store equal to the node's pods, for as long as the agent runs.
pub(super) async fn pods(shared: Arc<Shared>, node: String) -> String {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let watched = Watched::Pods;
    shared.sync.started(watched.clone());
    // The pods of a list in progress, trimmed as they come; they replace the store's at its end.
    let mut listing: Vec<Pod> = Vec::new();
    // What trimming drops that yh-ipam's fixed addresses need: which StatefulSet ordinal each is.
    let mut members: Vec<(String, FixedOwner)> = Vec::new();
    let selector = format!("spec.nodeName={node}");
    follow(api, Some(selector), &shared.streaming, |update| match update {
        Update::ListStarted { relist } => {
            if relist {
                shared.metrics.relisted(Kind::Pod);
            }
            listing.clear();
            members.clear();
        }
        Update::Listed(pod) => {
            shared.pod_event(&pod, false);
            if let (Some(uid), Some(member)) = (pod.metadata.uid.clone(), FixedOwner::of(&pod)) {
                members.push((uid, member));
            }
            listing.push(trim_pod(&pod))
        }
        Update::ListDone => {
            let pods = std::mem::take(&mut listing);
            let listed_members = std::mem::take(&mut members);
            let count = pods.len();
            shared.update(|store| {
                let watches = store.replace_all(pods);
                store.add_members(listed_members);
                watches
            });
            mark_listed(&shared, &watched);
            drop(tokio::spawn(reclaim::absent_pods(shared.clone())));
            info!("listed the {count} pods of node {node}");
        }
        Update::Applied(pod) => {
            shared.pod_event(&pod, false);
            shared.update(|store| store.apply(&pod));
            mark_confirmed(&shared, &watched);
        }
        Update::Deleted(pod) => {
            shared.pod_event(&pod, true);
            shared.update(|store| store.delete(&pod));
            if let Some(uid) = pod.metadata.uid.clone() {
                reclaim::when_gone(&shared, uid);
            }
            mark_confirmed(&shared, &watched);
        }
        Update::Current => mark_confirmed(&shared, &watched),
        Update::Expired { relist_in } => {
            shared.sync.lost(&watched);
            info!(
                "the watch of node {node}'s pods cannot resume (410 Gone); listing them again in {:.1}s",
                relist_in.as_secs_f64()
            );
        }
        Update::Failed { error, code, retry_in } => mark_failed(&shared, &watched, error, code, retry_in),
    })
    .await;
    "the pod watch ended".into()
}

/// Start the watch of `key`; the store holds what it watches as pending until it has listed.
pub(super) fn start(shared: &Arc<Shared>, key: WatchKey) -> AbortHandle {
    shared.sync.started(Watched::Object(key.clone()));
    let task = match key {
        WatchKey::Object(object) if object.kind == Kind::ResourceClaim => {
            let state = |claim| ObjectState::ResourceClaim(Box::new(trim_claim(claim)));
            tokio::spawn(by_name::<ResourceClaim>(shared.clone(), object, state))
        }
        WatchKey::Object(object) => {
            let state = |cm| ObjectState::ConfigMap(Box::new(trim_config_map(cm)));
            tokio::spawn(by_name::<ConfigMap>(shared.clone(), object, state))
        }
        WatchKey::Attachments(namespace) => tokio::spawn(attachments(shared.clone(), namespace)),
        WatchKey::NodeDevices => tokio::spawn(node_slices(shared.clone())),
    };
    task.abort_handle()
}

/// Keep one ConfigMap's or ResourceClaim's state in the store (`state` trims it), until aborted
/// (the last pod referring to it is gone).
async fn by_name<K>(shared: Arc<Shared>, key: ObjectKey, state: fn(K) -> ObjectState)
where
    K: ::kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::namespaced(shared.client.clone(), &key.namespace);
    let watched = Watched::Object(WatchKey::Object(key.clone()));
    // What a list in progress found; absent if it ends without it.
    let mut found: Option<ObjectState> = None;
    let selector = format!("metadata.name={}", key.name);
    follow(api, Some(selector), &shared.streaming, |update| {
        let state = match update {
            Update::ListStarted { relist } => {
                if relist {
                    shared.metrics.relisted(key.kind);
                }
                found = None;
                return;
            }
            Update::Listed(object) => {
                found = Some(state(object));
                return;
            }
            Update::ListDone => {
                mark_listed(&shared, &watched);
                found.take().unwrap_or(ObjectState::Absent)
            }
            Update::Applied(object) => {
                mark_confirmed(&shared, &watched);
                state(object)
            }
            Update::Deleted(_) => {
                mark_confirmed(&shared, &watched);
                ObjectState::Absent
            }
            Update::Current => return mark_confirmed(&shared, &watched),
            Update::Expired { .. } => return shared.sync.lost(&watched),
            // A 404: the API server does not serve resource.k8s.io/v1 (a cluster before 1.34, or one
            // that turned DRA off). Its pods' claims are then of an older API the device lookup
            // does not read: the watch counts as listed with nothing, so that the lookup answers at
            // once (and keeps asking, in case the API server is upgraded).
            Update::Failed { code: Some(404), .. } if key.kind == Kind::ResourceClaim => {
                mark_listed(&shared, &watched);
                ObjectState::Absent
            }
            Update::Failed { error, code, retry_in } => return mark_failed(&shared, &watched, error, code, retry_in),
        };
        shared.update(|store| {
            store.set_object(&key, state);
            Default::default()
        });
    })
    .await;
}

/// Keep the NetworkAttachmentDefinitions of `namespace` in the store, until aborted (no pod of the
/// node uses one of them any more).
async fn attachments(shared: Arc<Shared>, namespace: String) {
    let api: Api<NetworkAttachmentDefinition> = Api::namespaced(shared.client.clone(), &namespace);
    let watched = Watched::Object(WatchKey::Attachments(namespace.clone()));
    let mut listing: Vec<NetworkAttachmentDefinition> = Vec::new();
    let kind = Kind::NetworkAttachmentDefinition;
    follow(api, None, &shared.streaming, |update| match update {
        Update::ListStarted { relist } => {
            if relist {
                shared.metrics.relisted(kind);
            }
            listing.clear();
        }
        Update::Listed(nad) => listing.push(trim_attachment(nad)),
        Update::ListDone => {
            let listed = std::mem::take(&mut listing);
            shared.update(|store| {
                store.replace_attachments(&namespace, listed);
                Default::default()
            });
            mark_listed(&shared, &watched);
        }
        Update::Applied(nad) => {
            shared.update(|store| {
                store.apply_attachment(nad);
                Default::default()
            });
            mark_confirmed(&shared, &watched);
        }
        Update::Deleted(nad) => {
            shared.update(|store| {
                store.delete_attachment(&nad);
                Default::default()
            });
            mark_confirmed(&shared, &watched);
        }
        Update::Current => mark_confirmed(&shared, &watched),
        Update::Expired { .. } => shared.sync.lost(&watched),
        Update::Failed { error, code, retry_in } => mark_failed(&shared, &watched, error, code, retry_in),
    })
    .await;
}

/// Keep the node's ResourceSlices in the store, until aborted (no pod of the node has resource
/// claims any more).
async fn node_slices(shared: Arc<Shared>) {
    let api: Api<ResourceSlice> = Api::all(shared.client.clone());
    let watched = Watched::Object(WatchKey::NodeDevices);
    let mut listing: Vec<ResourceSlice> = Vec::new();
    let kind = Kind::ResourceSlice;
    let node = shared.node.clone();
    let name = |slice: &ResourceSlice| slice.metadata.name.clone().unwrap_or_default();
    follow(api, Some(format!("spec.nodeName={node}")), &shared.streaming, |update| match update {
        Update::ListStarted { relist } => {
            if relist {
                shared.metrics.relisted(kind);
            }
            listing.clear();
        }
        Update::Listed(slice) => listing.push(trim_slice(slice)),
        Update::ListDone => {
            let listed = std::mem::take(&mut listing);
            shared.update(|store| {
                store.replace_slices(listed);
                Default::default()
            });
            mark_listed(&shared, &watched);
        }
        Update::Applied(slice) => {
            shared.update(|store| {
                store.apply_slice(&name(&slice), Some(trim_slice(slice)));
                Default::default()
            });
            mark_confirmed(&shared, &watched);
        }
        Update::Deleted(slice) => {
            shared.update(|store| {
                store.apply_slice(&name(&slice), None);
                Default::default()
            });
            mark_confirmed(&shared, &watched);
        }
        Update::Current => mark_confirmed(&shared, &watched),
        Update::Expired { .. } => shared.sync.lost(&watched),
        // resource.k8s.io/v1 not served: as for `by_name`'s ResourceClaims.
        Update::Failed { code: Some(404), .. } => {
            shared.update(|store| {
                store.replace_slices(Vec::new());
                Default::default()
            });
            mark_listed(&shared, &watched);
        }
        Update::Failed { error, code, retry_in } => mark_failed(&shared, &watched, error, code, retry_in),
    })
    .await;
}

/// `watched` listed: what it holds is current; said once if it was failing.
fn mark_listed(shared: &Shared, watched: &Watched) {
    if shared.sync.listed(watched) {
        info!("{watched} is current again");
    }
}

/// `watched` is established, resumed, or sent an event or a bookmark.
fn mark_confirmed(shared: &Shared, watched: &Watched) {
    if shared.sync.confirmed(watched) {
        info!("{watched} is current again");
    }
}

/// `watched` failed: counted, kept for `/readyz` and the metrics (which say which watch fails and
/// why), and logged when that is news (the first failure, or another code). The pods that need
/// what it watches are answered at once that the agent cannot help (the plugin asks the API
/// server); the rest are served as before.
fn mark_failed(shared: &Shared, watched: &Watched, error: String, code: Option<u16>, retry_in: std::time::Duration) {
    shared.metrics.watch_error(watched.kind());
    let retry = format!("trying again in {:.1}s", retry_in.as_secs_f64());
    if shared.sync.failed(watched, Failure { code, error: error.clone() }) {
        warn!("{watched} failed ({error}); {retry}");
    } else {
        debug!("{watched} failed again ({error}); {retry}");
    }
    // Lookups waiting for what it would deliver look again, and answer at once.
    shared.changes.send_modify(|n| *n += 1);
}
