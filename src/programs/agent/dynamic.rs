//! Networks attached and detached on running pods (`--dynamic-networks`, docs/dynamic-networks.md):
//! the pod watch tells this task every running pod's `k8s.v1.cni.cncf.io/networks` annotation, and
//! when it differs from the one last applied (or none was applied yet: a new pod, or this agent
//! just started) the attach worker is asked to make the pod's attachments match it
//! (`programs::selector::dynamic`). The agent runs no plugin: the worker does, with the records and locks of
//! the runtime's calls. Then the agent writes what the worker answered: the pod's whole
//! network-status where the pod's differs (guarded by the pod's uid and the resourceVersion its
//! watch holds, retried with the newer one after a conflict: it comes from the records, so no retry
//! loses an entry) and the events. A status that could not be written is not given up: the pod is
//! asked about again until it is, and so is a pod the worker refused (its `dynamicNetworks` may be
//! switched on since).
//!
//! One pod at a time, the changes that came meanwhile folded into one: an edit made while another
//! is applied is applied next, from the annotation as it is then.

use super::Shared;
use super::annotate::retried;
use crate::node::worker_protocol::{self as protocol, Answer, MAX_LINE, Request, VERSION};
use crate::programs::agent::watching::{Annotated, EventPod, Reporter, annotate_at_version, create_event_of_type};
use crate::programs::selector::agent_face::{self, NETWORK_STATUS, NETWORKS};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tracing::{info, warn};

/// An attach or detach waits at most this long for the runtime's call on the pod (the attachment
/// lock's wait), then runs its plugins.
const WORKER_TIMEOUT: Duration = Duration::from_secs(180);
/// After the worker could not be reached or the status not written, a pod is tried again this
/// much later.
const RETRY: Duration = Duration::from_secs(5);
/// After the worker refused (`dynamicNetworks` off in its configuration), a pod is asked about
/// again this much later.
const REFUSED_RETRY: Duration = Duration::from_secs(30);
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
    // By uid: the annotation last applied (and its network-status written), and the pods whose
    // annotation is yet to be, each with when it may be asked about next.
    let mut applied: HashMap<String, Option<String>> = HashMap::new();
    let mut due: BTreeMap<String, (Seen, Instant)> = BTreeMap::new();
    // By uid: how many times the worker found no completed attachment of the pod.
    let mut not_attached: HashMap<String, u32> = HashMap::new();
    // By uid: the pods whose refusal is logged (once each, not every time they are asked again).
    let mut refused: HashSet<String> = HashSet::new();
    loop {
        let next = due.values().map(|(_, at)| *at).min();
        let first = match next {
            Some(at) => tokio::time::timeout_at(at.into(), changes.recv()).await.ok().flatten(),
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
                    // A new edit is asked about now, even if the one before it waits for a retry.
                    due.insert(seen.uid.clone(), (seen, Instant::now()));
                }
                Change::Seen(seen) => drop(due.remove(&seen.uid)),
                Change::Deleted { uid } => {
                    applied.remove(&uid);
                    not_attached.remove(&uid);
                    refused.remove(&uid);
                    due.remove(&uid);
                }
            }
        }
        let now = Instant::now();
        let Some(uid) =
            due.iter().filter(|(_, (_, at))| *at <= now).min_by_key(|(_, (_, at))| *at).map(|(u, _)| u.clone())
        else {
            continue;
        };
        let (seen, _) = due.remove(&uid).expect("a key of due");
        match ask(&worker, &seen).await {
            Ok(Answer::Reconciled { annotations, events }) => {
                not_attached.remove(&uid);
                refused.remove(&uid);
                if report(&shared, &seen, annotations, events).await {
                    applied.insert(uid, seen.networks.clone());
                } else {
                    // The worker is asked again: what it made stays, and it answers the status
                    // from its records, so the retry writes every entry.
                    due.insert(uid, (seen, Instant::now() + RETRY));
                }
            }
            Ok(Answer::NotAttached { why }) => {
                // Asked again at its next event, and a few times meanwhile: the runtime's ADD or
                // DEL of the pod may be in its last steps.
                tracing::debug!("pod {}/{}: {why}", seen.namespace, seen.name);
                let tried = not_attached.entry(uid.clone()).or_insert(0);
                *tried += 1;
                if *tried < NOT_ATTACHED_TRIES {
                    due.insert(uid, (seen, Instant::now() + RETRY));
                }
            }
            Ok(Answer::Refused { why }) => {
                // The worker's configuration may change (dynamicNetworks switched on, the
                // installer's conflist rewritten): asked again, seldom.
                let pod = format!("{}/{}", seen.namespace, seen.name);
                let again = REFUSED_RETRY.as_secs();
                if refused.insert(uid.clone()) {
                    warn!("the attach worker did not apply pod {pod}'s networks: {why}; asking again every {again}s");
                } else {
                    tracing::debug!("the attach worker did not apply pod {pod}'s networks: {why}");
                }
                due.insert(uid, (seen, Instant::now() + REFUSED_RETRY));
            }
            Err(why) => {
                warn!("cannot ask the attach worker about pod {}/{}: {why}", seen.namespace, seen.name);
                due.insert(uid, (seen, Instant::now() + RETRY));
            }
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

/// Write the pod's network-status where it differs from the pod's, then the events; whether the
/// pod's status is now the worker's (or the pod is gone).
async fn report(
    shared: &Shared,
    seen: &Seen,
    annotations: BTreeMap<String, String>,
    events: Vec<protocol::Notice>,
) -> bool {
    let pod = format!("pod {}/{}", seen.namespace, seen.name);
    let deadline = Instant::now() + WRITE_BUDGET;
    let changed = events.iter().any(|e| !e.warning);
    let held = |shared: &Shared| {
        let store = shared.store.lock().unwrap_or_else(|e| e.into_inner());
        let held = store.network_status_and_version(&seen.namespace, &seen.name, &seen.uid);
        held.map(|(status, version)| (status.map(String::from), version))
    };
    let outcome = match held(shared) {
        None => Annotated::PodGone,
        Some((current, _)) if !status_to_write(current.as_deref(), seen, changed, &annotations) => Annotated::Written,
        Some(_) => {
            retried(deadline, || async {
                // The version the watch holds now: after a conflict, the newer one it delivered.
                let Some((_, version)) = held(shared) else { return Annotated::PodGone };
                annotate_at_version(&shared.client, &seen.namespace, &seen.name, &seen.uid, &version, &annotations)
                    .await
            })
            .await
        }
    };
    let settled = match outcome {
        Annotated::Written => true,
        Annotated::PodGone => {
            info!("{pod} is gone; its network-status and events are not written");
            return true;
        }
        other => {
            warn!("the network-status of {pod} was not written: {other:?}; asking again in {}s", RETRY.as_secs());
            false
        }
    };
    let about = EventPod { namespace: &seen.namespace, name: &seen.name, uid: &seen.uid };
    let reporter = Reporter { component: agent_face::NAME, node: &shared.node };
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
    settled
}

/// Whether the worker's `wanted` network-status is to be written on the pod whose network-status is
/// `current`: they differ (compared as JSON), and the worker `changed` the pod's networks or the
/// pod has a network-status or the networks annotation (a pod with one network that never had
/// either gets no write more than at its ADD).
fn status_to_write(current: Option<&str>, seen: &Seen, changed: bool, wanted: &BTreeMap<String, String>) -> bool {
    let Some(wanted) = wanted.get(NETWORK_STATUS) else { return false };
    let parsed = |text: &str| serde_json::from_str::<serde_json::Value>(text).ok();
    let same =
        current.is_some_and(|have| have == wanted || parsed(have).is_some_and(|have| Some(have) == parsed(wanted)));
    let concerned = changed || seen.networks.is_some() || current.is_some();
    !same && concerned
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
    fn only_running_pods_on_the_pod_network_are_told() {
        assert!(change(&pod("Pending", false, Some("lan")), false).is_none(), "not started: its ADD decides");
        assert!(change(&pod("Running", true, Some("lan")), false).is_none(), "the host's network: no attachment");
        let Some(Change::Seen(seen)) = change(&pod("Running", false, Some("lan@net1")), false) else { panic!() };
        assert_eq!((seen.uid.as_str(), seen.networks.as_deref()), ("u1", Some("lan@net1")));
        let Some(Change::Seen(seen)) = change(&pod("Running", false, None), false) else { panic!() };
        assert_eq!(seen.networks, None, "an annotation removed is a change too");
    }

    #[test]
    fn a_deletion_is_always_told() {
        assert!(matches!(change(&pod("Pending", false, None), true), Some(Change::Deleted { uid }) if uid == "u1"));
    }

    #[test]
    fn the_status_is_written_where_it_differs_on_pods_that_use_the_annotation_or_had_a_status() {
        let seen = |networks: Option<&str>| Seen {
            namespace: "web".into(),
            name: "p".into(),
            uid: "u1".into(),
            networks: networks.map(String::from),
        };
        let status = |text: &str| BTreeMap::from([(NETWORK_STATUS.to_string(), text.to_string())]);
        let two = status(r#"[{"name": "ptp", "interface": "eth0"}, {"name": "web/lan", "interface": "net1"}]"#);
        let none = None;
        assert!(status_to_write(none, &seen(Some("lan")), false, &two), "an attach whose status was never written");
        let same_json = r#"[{"interface": "eth0", "name": "ptp"}, {"interface": "net1", "name": "web/lan"}]"#;
        assert!(!status_to_write(Some(same_json), &seen(Some("lan")), true, &two), "the same JSON, written otherwise");
        let one = status(r#"[{"name": "ptp", "interface": "eth0"}]"#);
        let had_two = Some(two[NETWORK_STATUS].as_str());
        assert!(
            status_to_write(had_two, &seen(None), false, &one),
            "the annotation removed: net1 goes from the status"
        );
        assert!(status_to_write(none, &seen(None), true, &one), "a change is always written");
        assert!(!status_to_write(none, &seen(None), false, &one), "a pod with one network and no status gets none");
        assert!(!status_to_write(had_two, &seen(None), true, &BTreeMap::new()), "networkStatus: never");
    }
}
