//! The network-status annotations the plugin hands over after an ADD, written by the agent on its
//! own time, so that the plugin makes no API request and its ADD does not wait for one. Each is
//! one merge patch carrying the pod's uid (the API server refuses it for a pod recreated under the
//! name), retried with jittered backoff while the API server is unreachable, for at most
//! `BUDGET`; a few at a time. Like the plugin's own write, a status that cannot be written is a
//! warning, never a failed pod.

use super::Shared;
use super::metrics::StatusOutcome;
use crate::kube::agent_socket::protocol::Answer;
use crate::kube::jittered;
use crate::kube::watching::{Annotated, annotate};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc};
use tracing::warn;

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
    pub annotations: BTreeMap<String, String>,
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
    let mut pause = FIRST_PAUSE;
    loop {
        let outcome = annotate(&shared.client, &job.namespace, &job.name, &job.uid, &job.annotations).await;
        let failure = match outcome {
            Annotated::Written => return shared.metrics.status(StatusOutcome::Written),
            Annotated::PodGone => {
                warn!(
                    "{pod} is gone or was replaced by another pod of its name; its network-status annotation was not written"
                );
                return shared.metrics.status(StatusOutcome::PodGone);
            }
            Annotated::Refused(why) => why,
            Annotated::Transient(_) if Instant::now() + pause < deadline => {
                tokio::time::sleep(jittered(pause)).await;
                pause = (pause * 2).min(MAX_PAUSE);
                continue;
            }
            Annotated::Transient(why) => format!("{why} (retried for {}s)", BUDGET.as_secs()),
        };
        warn!("the network-status annotation of {pod} was not written: {failure}");
        return shared.metrics.status(StatusOutcome::Failed);
    }
}
