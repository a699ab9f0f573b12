//! The network-status annotations and `AddedInterface` events the plugin hands over after an ADD,
//! written by the agent on its own time, so that the plugin makes no API request and its ADD does
//! not wait for one. The events come after the status, and none for a pod that is gone. Each is
//! one merge patch carrying the pod's uid (the API server refuses it for a pod recreated under the
//! name), retried with jittered backoff while the API server is unreachable, for at most
//! `BUDGET`; a few at a time. Like the plugin's own write, a status that cannot be written is a
//! warning, never a failed pod.

use super::Shared;
use super::metrics::StatusOutcome;
use crate::kube::agent_socket::protocol::Answer;
use crate::kube::jittered;
use crate::kube::watching::{Annotated, EventPod, Reporter, annotate, create_event};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc};
use tracing::warn;

/// The reason of the events that say which interface a pod got, as Multus names it.
const ADDED_INTERFACE: &str = "AddedInterface";
/// Writes waiting; when full, the plugin is told so and writes the status itself.
pub(super) const QUEUE: usize = 1024;
/// Writes in flight at once.
const CONCURRENT: usize = 4;
/// How long one status is retried, from when the plugin handed it over: a status that waited in
/// the queue through an outage is not retried for as long again (1024 of them, four at a time,
/// would otherwise keep the queue full for hours, and every plugin meanwhile handing over more).
const BUDGET: Duration = Duration::from_secs(120);
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(10);

pub(super) struct Job {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Empty: no status to write (only events).
    pub annotations: BTreeMap<String, String>,
    /// Messages of the `AddedInterface` events to create, after the status.
    pub events: Vec<String>,
    /// When the plugin handed it over.
    pub accepted: Instant,
}

/// Take a job for later, or say why not.
pub(super) fn offer(shared: &Shared, job: Job) -> Answer {
    match shared.annotations.try_send(job) {
        Ok(()) => Answer::Accepted,
        Err(mpsc::error::TrySendError::Full(job)) => Answer::Refused {
            why: format!(
                "{QUEUE} status writes are waiting already; pod {}/{} writes its own",
                job.namespace, job.name
            ),
        },
        Err(mpsc::error::TrySendError::Closed(_)) => Answer::Refused { why: "the status writer has stopped".into() },
    }
}

/// Write every job that comes, `CONCURRENT` at a time.
pub(super) async fn run(shared: Arc<Shared>, mut jobs: mpsc::Receiver<Job>) -> String {
    let slots = Arc::new(Semaphore::new(CONCURRENT));
    while let Some(job) = jobs.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { break };
        let shared = shared.clone();
        tokio::spawn(async move {
            write(&shared, job).await;
            drop(slot);
        });
    }
    "the status writer's queue closed".into()
}

async fn write(shared: &Shared, job: Job) {
    let pod = format!("pod {}/{} (uid {})", job.namespace, job.name, job.uid);
    let deadline = job.accepted + BUDGET;
    if !job.annotations.is_empty() {
        let outcome =
            retried(deadline, || annotate(&shared.client, &job.namespace, &job.name, &job.uid, &job.annotations)).await;
        match outcome {
            Annotated::Written => shared.metrics.status(StatusOutcome::Written),
            Annotated::PodGone => {
                warn!(
                    "{pod} is gone or was replaced by another pod of its name; its network-status annotation was not written"
                );
                // Nor are events about a pod that is not there.
                return shared.metrics.status(StatusOutcome::PodGone);
            }
            Annotated::Refused(why) | Annotated::Transient(why) => {
                warn!("the network-status annotation of {pod} was not written: {why}");
                shared.metrics.status(StatusOutcome::Failed);
            }
        }
    }
    let about = EventPod { namespace: &job.namespace, name: &job.name, uid: &job.uid };
    let reporter = Reporter { component: crate::selector::NAME, node: &shared.node };
    for message in &job.events {
        let outcome =
            retried(deadline, || create_event(&shared.client, &about, &reporter, ADDED_INTERFACE, message)).await;
        match outcome {
            Annotated::Written => {}
            Annotated::PodGone | Annotated::Refused(_) | Annotated::Transient(_) => {
                warn!("the {ADDED_INTERFACE} event \"{message}\" of {pod} was not created: {outcome:?}");
            }
        }
    }
}

/// `attempt` until it is not transient, with jittered backoff, while `deadline` allows another try;
/// a transient failure past it says how long it was retried.
async fn retried<F, Fut>(deadline: Instant, mut attempt: F) -> Annotated
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Annotated>,
{
    let mut pause = FIRST_PAUSE;
    loop {
        match attempt().await {
            Annotated::Transient(_) if Instant::now() + pause < deadline => {
                tokio::time::sleep(jittered(pause)).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
            Annotated::Transient(why) => {
                return Annotated::Transient(format!("{why} (retried for {}s)", BUDGET.as_secs()));
            }
            done => return done,
        }
    }
}
