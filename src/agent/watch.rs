//! The agent's watches (`kube::watching::list_watch`: streaming lists, resumes, relists spread in
//! time, backoff), all on the agent's one connection: one on its node's pods (field selector
//! `spec.nodeName`), one per ConfigMap those pods refer to (field selector `metadata.name` in its
//! namespace) and one per namespace whose NetworkAttachmentDefinitions they use, started and
//! stopped as the store says (`store::WatchKey` says why each kind is watched so). What each
//! delivers is trimmed as it arrives, and each reports whether it is current (`sync`).

use super::Shared;
use super::store::{ObjectState, WatchKey, trim_attachment, trim_config_map};
use super::sync::Watched;
use crate::kube::watching::list_watch::{Update, follow};
use crate::kube::{Kind, NetworkAttachmentDefinition, ObjectKey};
use ::kube::Api;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
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
    let selector = format!("spec.nodeName={node}");
    follow(api, Some(selector), &shared.streaming, |update| match update {
        Update::ListStarted { relist } => {
            if relist {
                shared.metrics.relisted(Kind::Pod);
            }
            listing.clear();
        }
        Update::Listed(pod) => {
            shared.pod_event(&pod, false);
            listing.push(crate::selector::choose::trimmed(&pod))
        }
        Update::ListDone => {
            let pods = std::mem::take(&mut listing);
            let count = pods.len();
            shared.update(|store| store.replace_all(pods));
            shared.sync.listed(&watched);
            info!("listed the {count} pods of node {node}");
        }
        Update::Applied(pod) => {
            shared.pod_event(&pod, false);
            shared.update(|store| store.apply(&pod));
            shared.sync.confirmed(&watched);
        }
        Update::Deleted(pod) => {
            shared.pod_event(&pod, true);
            shared.update(|store| store.delete(&pod));
            shared.sync.confirmed(&watched);
        }
        Update::Current => shared.sync.confirmed(&watched),
        Update::Expired { relist_in } => {
            shared.sync.lost(&watched);
            info!(
                "the watch of node {node}'s pods cannot resume (410 Gone); listing them again in {:.1}s",
                relist_in.as_secs_f64()
            );
        }
        Update::Failed { error, retry_in } => {
            shared.metrics.watch_error(Kind::Pod);
            shared.sync.lost(&watched);
            warn!("the watch of node {node}'s pods failed ({error}); trying again in {:.1}s", retry_in.as_secs_f64());
        }
    })
    .await;
    "the pod watch ended".into()
}

/// Start the watch of `key`; the store holds what it watches as pending until it has listed.
pub(super) fn start(shared: &Arc<Shared>, key: WatchKey) -> AbortHandle {
    shared.sync.started(Watched::Object(key.clone()));
    let task = match key {
        WatchKey::ConfigMap(object) => tokio::spawn(config_map(shared.clone(), object)),
        WatchKey::Attachments(namespace) => tokio::spawn(attachments(shared.clone(), namespace)),
    };
    task.abort_handle()
}

/// Keep one ConfigMap's state in the store, until aborted (the last pod referring to it is gone).
async fn config_map(shared: Arc<Shared>, key: ObjectKey) {
    let api: Api<ConfigMap> = Api::namespaced(shared.client.clone(), &key.namespace);
    let watched = Watched::Object(WatchKey::ConfigMap(key.clone()));
    // What a list in progress found; absent if it ends without it.
    let mut found: Option<ConfigMap> = None;
    let selector = format!("metadata.name={}", key.name);
    follow(api, Some(selector), &shared.streaming, |update| {
        let state = match update {
            Update::ListStarted { relist } => {
                if relist {
                    shared.metrics.relisted(Kind::ConfigMap);
                }
                found = None;
                return;
            }
            Update::Listed(cm) => {
                found = Some(trim_config_map(cm));
                return;
            }
            Update::ListDone => {
                shared.sync.listed(&watched);
                found.take().map_or(ObjectState::Absent, |cm| ObjectState::ConfigMap(Box::new(cm)))
            }
            Update::Applied(cm) => {
                shared.sync.confirmed(&watched);
                ObjectState::ConfigMap(Box::new(trim_config_map(cm)))
            }
            Update::Deleted(_) => {
                shared.sync.confirmed(&watched);
                ObjectState::Absent
            }
            Update::Current => return shared.sync.confirmed(&watched),
            Update::Expired { .. } => return shared.sync.lost(&watched),
            Update::Failed { error, retry_in } => {
                shared.metrics.watch_error(Kind::ConfigMap);
                shared.sync.lost(&watched);
                debug!("the watch of {key} failed ({error}); trying again in {:.1}s", retry_in.as_secs_f64());
                return;
            }
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
            shared.sync.listed(&watched);
        }
        Update::Applied(nad) => {
            shared.update(|store| {
                store.apply_attachment(nad);
                Default::default()
            });
            shared.sync.confirmed(&watched);
        }
        Update::Deleted(nad) => {
            shared.update(|store| {
                store.delete_attachment(&nad);
                Default::default()
            });
            shared.sync.confirmed(&watched);
        }
        Update::Current => shared.sync.confirmed(&watched),
        Update::Expired { .. } => shared.sync.lost(&watched),
        Update::Failed { error, retry_in } => {
            shared.metrics.watch_error(kind);
            shared.sync.lost(&watched);
            debug!(
                "the watch of the NetworkAttachmentDefinitions of namespace {namespace} failed ({error}); trying again in {:.1}s",
                retry_in.as_secs_f64()
            );
        }
    })
    .await;
}
