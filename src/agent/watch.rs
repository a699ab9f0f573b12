//! The agent's watches, with kube-runtime's `watcher`: one on its node's pods (field selector
//! `spec.nodeName`), and one per object those pods refer to (field selector `metadata.name` in its
//! namespace), started and stopped as the store says. Each is listed with `resourceVersion=0`
//! (`any_semantic`: the API server answers from its watch cache, not from etcd), resumes from its
//! last resourceVersion when a watch ends or breaks, lists anew only on 410 Gone, and after a
//! failure waits kube-runtime's default backoff: 0.8 s doubling to 30 s, each pause stretched by a
//! random part of itself (jitter), reset after two minutes of health. So a thousand agents losing
//! the API server together come back spread out, and from its cache.

use super::Shared;
use super::store::{ObjectState, trim_attachment, trim_config_map};
use crate::kube::{Kind, NetworkAttachmentDefinition, ObjectKey};
use ::kube::runtime::WatchStreamExt;
use ::kube::runtime::watcher::{self, Event, watcher};
use ::kube::{Api, Resource};
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::task::AbortHandle;
use tracing::{debug, info, warn};

/// Keep the store equal to the node's pods, for as long as the agent runs.
pub(super) async fn pods(shared: Arc<Shared>, node: String) -> String {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let config = cached(watcher::Config::default().fields(&format!("spec.nodeName={node}")));
    let mut events = watcher(api, config).default_backoff().boxed();
    // The pods of a list in progress, trimmed as they come; they replace the store's at its end.
    let mut listing: Option<Vec<Pod>> = None;
    let mut listed = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => {
                if listed {
                    shared.metrics.relisted(Kind::Pod);
                }
                listing = Some(Vec::new());
            }
            Ok(Event::InitApply(pod)) => {
                listing.get_or_insert_with(Vec::new).push(crate::selector::choose::trimmed(&pod))
            }
            Ok(Event::InitDone) => {
                let pods = listing.take().unwrap_or_default();
                let count = pods.len();
                listed = true;
                shared.update(|store| store.replace_all(pods));
                info!("listed the {count} pods of node {node}");
            }
            Ok(Event::Apply(pod)) => shared.update(|store| store.apply(&pod)),
            Ok(Event::Delete(pod)) => shared.update(|store| store.delete(&pod)),
            Err(e) => {
                shared.metrics.watch_error(Kind::Pod);
                warn!("the watch of node {node}'s pods failed ({e}); it is re-established after a backoff");
            }
        }
    }
    "the pod watch ended".into()
}

/// Lists with `resourceVersion=0`, which the API server answers from its watch cache. Unpaged: kube
/// leaves `resourceVersion=0` out of a paged list (the API server would ignore the page size there
/// anyway), and one node's pods or one object are a small list.
fn cached(mut config: watcher::Config) -> watcher::Config {
    config.page_size = None;
    config.any_semantic()
}

/// Start the watch of one referenced object; the store holds it as pending until it is listed.
pub(super) fn start(shared: &Arc<Shared>, key: ObjectKey) -> AbortHandle {
    let task = match key.kind {
        Kind::ConfigMap => {
            tokio::spawn(object::<ConfigMap>(shared.clone(), key, |cm| ObjectState::ConfigMap(trim_config_map(cm))))
        }
        Kind::NetworkAttachmentDefinition => {
            tokio::spawn(object::<NetworkAttachmentDefinition>(shared.clone(), key, |nad| {
                ObjectState::Attachment(trim_attachment(nad))
            }))
        }
        Kind::Pod => unreachable!("pods are watched by node, not by name"),
    };
    task.abort_handle()
}

/// Keep one object's state in the store, until aborted (the last pod referring to it is gone).
async fn object<K>(shared: Arc<Shared>, key: ObjectKey, hold: fn(K) -> ObjectState)
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let api: Api<K> = Api::namespaced(shared.client.clone(), &key.namespace);
    let config = cached(watcher::Config::default().fields(&format!("metadata.name={}", key.name)));
    let mut events = watcher(api, config).default_backoff().boxed();
    // What a list in progress found; absent if it ends without it.
    let mut found: Option<K> = None;
    let mut listed = false;
    while let Some(event) = events.next().await {
        let state = match event {
            Ok(Event::Init) => {
                if listed {
                    shared.metrics.relisted(key.kind);
                }
                found = None;
                continue;
            }
            Ok(Event::InitApply(object)) => {
                found = Some(object);
                continue;
            }
            Ok(Event::InitDone) => {
                listed = true;
                found.take().map_or(ObjectState::Absent, hold)
            }
            Ok(Event::Apply(object)) => hold(object),
            Ok(Event::Delete(_)) => ObjectState::Absent,
            Err(e) => {
                shared.metrics.watch_error(key.kind);
                debug!("the watch of {key} failed ({e}); it is re-established after a backoff");
                continue;
            }
        };
        shared.update(|store| {
            store.set_object(&key, state);
            Default::default()
        });
    }
}
