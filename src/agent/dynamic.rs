//! Networks attached and detached on running pods (`--dynamic-networks`, docs/dynamic-networks.md):
//! the pod watch tells this task every running pod's `k8s.v1.cni.cncf.io/networks` annotation, and
//! when it differs from the one last applied (or none was applied yet: a new pod, or this agent
//! just started) the attach worker is asked to make the pod's attachments match it
//! (`selector::dynamic`). The agent runs no plugin: the worker does, with the records and locks of
//! the runtime's calls. Then the agent writes what the worker answered: the pod's whole
//! network-status (guarded by the pod's uid and the resourceVersion its watch holds, retried with
//! the newer one after a conflict: it comes from the records, so no retry loses an entry) and the events.
//!
//! One pod at a time, the changes that came meanwhile folded into one: an edit made while another
//! is applied is applied next, from the annotation as it is then.

use super::Shared;
use super::annotate::retried;
use crate::kube::watching::{Annotated, EventPod, Reporter, annotate_at_version, create_event_of_type};
use crate::selector::dynamic::protocol::{self, Answer, MAX_LINE, Request, VERSION};
use crate::selector::requests::annotation::NETWORKS;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tracing::{info, warn};

/// An attach or detach waits at most this long for the runtime's call on the pod (the attachment
/// lock's wait), then runs its plugins.
const WORKER_TIMEOUT: Duration = Duration::from_secs(180);
/// After the worker could not be reached, its pods are tried again this much later.
const RETRY: Duration = Duration::from_secs(5);
/// How many times a pod without a completed attachment is asked about before its next event.
const NOT_ATTACHED_TRIES: u32 = 3;
/// How long the status and the events are retried.
const WRITE_BUDGET: Duration = Duration::from_secs(60);

/// What the pod watch tells.
#[derive(Debug)]
pub(super) enum Change {
    Seen(Seen),
    Deleted { uid: String },
}

#[derive(Debug, Clone)]
pub(super) struct Seen {
    namespace: String,
    name: String,
    uid: String,
    /// The annotation's value, as written.
    networks: Option<String>,
}

/// What a pod event tells this task: a running pod on the pod network, or a pod gone (`None`:
/// nothing to tell).
pub(super) fn change(pod: &Pod, deleted: bool) -> Option<Change> {
    let uid = pod.metadata.uid.clone()?;
    if deleted {
        return Some(Change::Deleted { uid });
    }
    let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
    if !running || host_network {
        return None;
    }
    Some(Change::Seen(Seen {
        namespace: pod.metadata.namespace.clone()?,
        name: pod.metadata.name.clone()?,
        uid,
        networks: pod.metadata.annotations.as_ref().and_then(|a| a.get(NETWORKS)).cloned(),
    }))
}

/// Apply the pods' annotations for as long as the agent runs.
pub(super) async fn run(shared: Arc<Shared>, worker: PathBuf, mut changes: mpsc::UnboundedReceiver<Change>) -> String {
    // By uid: the annotation last applied, and the pods whose annotation is yet to be.
    let mut applied: HashMap<String, Option<String>> = HashMap::new();
    let mut due: BTreeMap<String, Seen> = BTreeMap::new();
    let mut retry_at: Option<Instant> = None;
    // By uid: how many times the worker found no completed attachment of the pod.
    let mut not_attached: HashMap<String, u32> = HashMap::new();
    loop {
        let first = match retry_at {
            Some(at) => match tokio::time::timeout_at(at.into(), changes.recv()).await {
                Ok(change) => change,
                Err(_) => {
                    retry_at = None;
                    None
                }
            },
            None => changes.recv().await,
        };
        if first.is_none() && changes.is_closed() {
            return "the pod watch stopped telling the dynamic networks' task".into();
        }
        let mut pending: Vec<Change> = first.into_iter().collect();
        while let Ok(change) = changes.try_recv() {
            pending.push(change);
        }
        for change in pending {
            match change {
                Change::Seen(seen) if applied.get(&seen.uid) != Some(&seen.networks) => {
                    due.insert(seen.uid.clone(), seen);
                }
                Change::Seen(seen) => drop(due.remove(&seen.uid)),
                Change::Deleted { uid } => {
                    applied.remove(&uid);
                    not_attached.remove(&uid);
                    due.remove(&uid);
                }
            }
        }
        if retry_at.is_some() {
            continue;
        }
        let Some(uid) = due.keys().next().cloned() else { continue };
        let seen = due.remove(&uid).expect("a key of due");
        match ask(&worker, &seen).await {
            Ok(Answer::Reconciled { annotations, events }) => {
                not_attached.remove(&uid);
                applied.insert(uid, seen.networks.clone());
                report(&shared, &seen, annotations, events).await;
            }
            Ok(Answer::NotAttached { why }) => {
                // Asked again at its next event, and a few times meanwhile: the runtime's ADD or
                // DEL of the pod may be in its last steps.
                tracing::debug!("pod {}/{}: {why}", seen.namespace, seen.name);
                let tried = not_attached.entry(uid.clone()).or_insert(0);
                *tried += 1;
                if *tried < NOT_ATTACHED_TRIES {
                    due.insert(uid, seen);
                    retry_at = Some(Instant::now() + RETRY);
                }
            }
            Ok(Answer::Refused { why }) => {
                applied.insert(uid, seen.networks.clone());
                warn!("the attach worker did not apply pod {}/{}'s networks: {why}", seen.namespace, seen.name);
            }
            Err(why) => {
                warn!("cannot ask the attach worker about pod {}/{}: {why}", seen.namespace, seen.name);
                due.insert(uid, seen);
                retry_at = Some(Instant::now() + RETRY);
            }
        }
        // Whatever is still due is taken at the next turn.
        if !due.is_empty() && retry_at.is_none() {
            retry_at = Some(Instant::now());
        }
    }
}

/// One exchange with the worker.
async fn ask(worker: &Path, seen: &Seen) -> Result<Answer, String> {
    let request =
        Request { version: VERSION, namespace: seen.namespace.clone(), name: seen.name.clone(), uid: seen.uid.clone() };
    let exchange = async {
        let mut stream =
            tokio::net::UnixStream::connect(worker).await.map_err(|e| format!("{}: {e}", worker.display()))?;
        stream.write_all(&protocol::to_line(&request)).await.map_err(|e| e.to_string())?;
        let mut line = Vec::new();
        BufReader::new(stream.take(MAX_LINE as u64)).read_until(b'\n', &mut line).await.map_err(|e| e.to_string())?;
        serde_json::from_slice::<Answer>(&line).map_err(|e| format!("the worker's answer does not parse: {e}"))
    };
    tokio::time::timeout(WORKER_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {}s", WORKER_TIMEOUT.as_secs()))?
}

/// Write the pod's network-status, then its events.
async fn report(shared: &Shared, seen: &Seen, annotations: BTreeMap<String, String>, events: Vec<protocol::Notice>) {
    let pod = format!("pod {}/{}", seen.namespace, seen.name);
    let deadline = Instant::now() + WRITE_BUDGET;
    if !annotations.is_empty() {
        let outcome = retried(deadline, || async {
            // The version the watch holds now: after a conflict, the newer one it delivered.
            let held = {
                let store = shared.store.lock().unwrap_or_else(|e| e.into_inner());
                store.resource_version(&seen.namespace, &seen.name, &seen.uid)
            };
            let Some(version) = held else { return Annotated::PodGone };
            annotate_at_version(&shared.client, &seen.namespace, &seen.name, &seen.uid, &version, &annotations).await
        })
        .await;
        match outcome {
            Annotated::Written => {}
            Annotated::PodGone => return info!("{pod} is gone; its network-status and events are not written"),
            other => warn!("the network-status of {pod} was not written: {other:?}"),
        }
    }
    let about = EventPod { namespace: &seen.namespace, name: &seen.name, uid: &seen.uid };
    let reporter = Reporter { component: crate::selector::NAME, node: &shared.node };
    for event in &events {
        let outcome = retried(deadline, || {
            create_event_of_type(
                &shared.client,
                &about,
                &reporter,
                &event.reason,
                &event.message,
                event.warning,
                std::time::SystemTime::now(),
            )
        })
        .await;
        if outcome != Annotated::Written {
            warn!("the {} event \"{}\" of {pod} was not created: {outcome:?}", event.reason, event.message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(phase: &str, host_network: bool, networks: Option<&str>) -> Pod {
        let annotations = networks.map_or(json!({}), |n| json!({ NETWORKS: n }));
        serde_json::from_value(json!({
            "metadata": {"namespace": "web", "name": "p", "uid": "u1", "annotations": annotations},
            "spec": {"hostNetwork": host_network, "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn only_running_pods_on_the_pod_network_are_told_and_deletions_always() {
        assert!(change(&pod("Pending", false, Some("lan")), false).is_none(), "not started: its ADD decides");
        assert!(change(&pod("Running", true, Some("lan")), false).is_none(), "the host's network: no attachment");
        let Some(Change::Seen(seen)) = change(&pod("Running", false, Some("lan@net1")), false) else { panic!() };
        assert_eq!((seen.uid.as_str(), seen.networks.as_deref()), ("u1", Some("lan@net1")));
        let Some(Change::Seen(seen)) = change(&pod("Running", false, None), false) else { panic!() };
        assert_eq!(seen.networks, None, "an annotation removed is a change too");
        assert!(matches!(change(&pod("Pending", false, None), true), Some(Change::Deleted { uid }) if uid == "u1"));
    }
}
