//! The network-status annotations and `AddedInterface` events the plugin hands over after an ADD,
//! written by the agent on its own time, so that the plugin makes no API request and its ADD does
//! not wait for one. A status is one merge patch carrying the pod's uid (the API server refuses it
//! for a pod recreated under the name), written at once, a few at a time. Each is retried with
//! jittered backoff while the API server is unreachable, for at most `BUDGET`. Like the plugin's
//! own write, a status that cannot be written is a warning, never a failed pod. Each status taken
//! is kept on disk until it is written or given up (`kept_statuses`): an agent killed with statuses
//! waiting writes them when it starts again, before any taken since, for the plugin that handed
//! one over was answered `accepted` and does not write it itself.
//!
//! The events come after the status, and none for a pod that is gone. Every event is one API write
//! that cannot be batched, and its cost (the API server's CPU, etcd's fsync) lands on the machines
//! the node's ADDs run on, so they are not sent while the node is busy: they wait in `Events` until
//! the node's plugins have been quiet for `QUIET` (no selection asked, no event handed over, no
//! operation reported), or until they have waited `MAX_DELAY`, and then go one at a time, at most
//! one per `PACE`, on the agent's one connection. The queue is in memory and bounded (`EVENTS`):
//! an event the queue has no room for, or still queued when the agent restarts, is lost, counted
//! (`yh_genie_agent_events_total`) and logged; the pod's network never depends on one.

use super::Shared;
use super::kept_statuses::KeptStatus;
use super::metrics::{EventOutcome, StatusOutcome};
use crate::node::agent_socket::protocol::Answer;
use crate::platform::kube::jittered;
use crate::programs::agent::watching::{Annotated, EventPod, Reporter, annotate, create_event};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{Notify, Semaphore, mpsc};
use tracing::{info, warn};

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
/// Events waiting to be sent: a node's 110 pods with 16 interfaces each, and more.
pub(super) const EVENTS: usize = 4096;
/// The node is busy until this long after its plugins' latest request or report.
const QUIET: Duration = Duration::from_millis(250);
/// However busy the node, an event waits no longer than this for a quiet moment.
const MAX_DELAY: Duration = Duration::from_secs(30);
/// At most one event sent per this long: 10 per second.
const PACE: Duration = Duration::from_millis(100);

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
    /// The file keeping its status for the agent's next life, once taken (`kept_statuses`).
    pub kept: Option<PathBuf>,
}

/// Take a job for later, or say why not.
pub(super) fn offer(shared: &Shared, mut job: Job) -> Answer {
    if !job.annotations.is_empty() {
        let status = KeptStatus {
            namespace: job.namespace.clone(),
            name: job.name.clone(),
            uid: job.uid.clone(),
            annotations: job.annotations.clone(),
        };
        match shared.kept_statuses.keep(&status) {
            Ok(file) => job.kept = Some(file),
            Err(e) => {
                return Answer::Refused {
                    why: format!(
                        "keeping the status for the agent's next life: {e}; pod {}/{} writes its own",
                        job.namespace, job.name
                    ),
                };
            }
        }
    }
    let refused = |job: Job, why: String| {
        if let Some(file) = &job.kept {
            shared.kept_statuses.done(file);
        }
        Answer::Refused { why }
    };
    match shared.annotations.try_send(job) {
        Ok(()) => Answer::Accepted,
        Err(mpsc::error::TrySendError::Full(job)) => {
            let why =
                format!("{QUEUE} status writes are waiting already; pod {}/{} writes its own", job.namespace, job.name);
            refused(job, why)
        }
        Err(mpsc::error::TrySendError::Closed(job)) => refused(job, "the status writer has stopped".into()),
    }
}

/// Take a job whose plugin does not wait for the answer (only events): what `offer` would have
/// answered it is logged and counted here instead.
pub(super) fn take_unanswered(shared: &Shared, job: Job) {
    let (job, why) = match shared.annotations.try_send(job) {
        Ok(()) => return,
        Err(mpsc::error::TrySendError::Full(job)) => (job, format!("{QUEUE} writes are waiting already")),
        Err(mpsc::error::TrySendError::Closed(job)) => (job, "the status writer has stopped".into()),
    };
    warn!(
        "the {} {ADDED_INTERFACE} events of pod {}/{} (uid {}) are dropped: {why}",
        job.events.len(),
        job.namespace,
        job.name,
        job.uid
    );
    for _ in &job.events {
        shared.metrics.event(EventOutcome::Dropped);
    }
}

/// Write every job that comes, `CONCURRENT` at a time; first the statuses an earlier life of the
/// agent took and did not write, all of them before any taken since (an older status written last
/// would stand for the pod's newer sandbox).
pub(super) async fn run(shared: Arc<Shared>, mut jobs: mpsc::Receiver<Job>) -> String {
    let slots = Arc::new(Semaphore::new(CONCURRENT));
    let left = shared.kept_statuses.left();
    if !left.is_empty() {
        info!("{} network-status annotations taken before the agent started again are written now", left.len());
        let mut earlier = tokio::task::JoinSet::new();
        for (file, status) in left {
            let Ok(slot) = slots.clone().acquire_owned().await else { break };
            let job = Job {
                namespace: status.namespace,
                name: status.name,
                uid: status.uid,
                annotations: status.annotations,
                events: Vec::new(),
                accepted: Instant::now(),
                kept: Some(file),
            };
            let shared = shared.clone();
            earlier.spawn(async move {
                write(&shared, job).await;
                drop(slot);
            });
        }
        earlier.join_all().await;
    }
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
        // Written or given up: not for the agent's next life either.
        if let Some(file) = &job.kept {
            shared.kept_statuses.done(file);
        }
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
    let happened = SystemTime::now() - job.accepted.elapsed();
    for message in job.events {
        let event = Pending {
            namespace: job.namespace.clone(),
            name: job.name.clone(),
            uid: job.uid.clone(),
            message,
            accepted: job.accepted,
            happened,
        };
        if let Err(event) = shared.events.push(event) {
            warn!(
                "{EVENTS} {ADDED_INTERFACE} events are waiting already; the event \"{}\" of {pod} is dropped",
                event.message
            );
            shared.metrics.event(EventOutcome::Dropped);
        }
    }
}

/// An `AddedInterface` event waiting to be sent.
pub(super) struct Pending {
    namespace: String,
    name: String,
    uid: String,
    message: String,
    /// When the plugin handed it over (its retries' budget counts from there).
    accepted: Instant,
    /// When its ADD was done: the event's timestamp.
    happened: SystemTime,
}

/// The events waiting for a quiet moment of the node (module documentation).
#[derive(Default)]
pub(super) struct Events {
    state: Mutex<EventsState>,
    wake: Notify,
}

#[derive(Default)]
struct EventsState {
    waiting: VecDeque<Pending>,
    /// The node's plugins' latest request or report.
    busy_until: Option<Instant>,
}

/// What the sender does next.
enum Next {
    Send(Pending),
    WaitFor(Duration),
    WaitForMore,
}

impl Events {
    /// A plugin asked or reported something: the node is busy for `QUIET` from now.
    pub(super) fn busy(&self) {
        lock(&self.state).busy_until = Some(Instant::now() + QUIET);
    }

    /// Queue `event`, or hand it back when the queue is full.
    fn push(&self, event: Pending) -> Result<(), Box<Pending>> {
        let mut state = lock(&self.state);
        if state.waiting.len() >= EVENTS {
            return Err(Box::new(event));
        }
        state.waiting.push_back(event);
        state.busy_until = Some(Instant::now() + QUIET);
        drop(state);
        self.wake.notify_one();
        Ok(())
    }

    fn next(&self, now: Instant) -> Next {
        let mut state = lock(&self.state);
        let Some(first) = state.waiting.front() else { return Next::WaitForMore };
        let due = match state.busy_until {
            Some(busy_until) => busy_until.min(first.accepted + MAX_DELAY),
            None => now,
        };
        if due > now {
            return Next::WaitFor(due - now);
        }
        Next::Send(state.waiting.pop_front().expect("the queue has a first event"))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Send the queued events, each when the node is quiet or it has waited long enough, one per `PACE`.
pub(super) async fn send_events(shared: Arc<Shared>) -> String {
    let reporter = Reporter { component: crate::programs::selector::agent_face::NAME, node: &shared.node };
    loop {
        match shared.events.next(Instant::now()) {
            Next::WaitForMore => shared.events.wake.notified().await,
            Next::WaitFor(pause) => tokio::time::sleep(pause).await,
            Next::Send(event) => {
                let about = EventPod { namespace: &event.namespace, name: &event.name, uid: &event.uid };
                let (message, at) = (&event.message, event.happened);
                let create = || create_event(&shared.client, &about, &reporter, ADDED_INTERFACE, message, at);
                let outcome = retried(event.accepted + BUDGET, create).await;
                match outcome {
                    Annotated::Written => shared.metrics.event(EventOutcome::Created),
                    Annotated::PodGone | Annotated::Refused(_) | Annotated::Transient(_) => {
                        warn!(
                            "the {ADDED_INTERFACE} event \"{message}\" of pod {}/{} (uid {}) was not created: {outcome:?}",
                            event.namespace, event.name, event.uid
                        );
                        shared.metrics.event(EventOutcome::Failed);
                    }
                }
                tokio::time::sleep(PACE).await;
            }
        }
    }
}

/// `attempt` until it is not transient, with jittered backoff, while `deadline` allows another try;
/// a transient failure past it says how long it was retried.
pub(super) async fn retried<F, Fut>(deadline: Instant, mut attempt: F) -> Annotated
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(message: &str, accepted: Instant) -> Pending {
        Pending {
            namespace: "default".into(),
            name: "web".into(),
            uid: "u1".into(),
            message: message.into(),
            accepted,
            happened: SystemTime::now(),
        }
    }

    fn sent(next: Next) -> String {
        match next {
            Next::Send(e) => e.message,
            Next::WaitFor(d) => panic!("waits {d:?}"),
            Next::WaitForMore => panic!("waits for more"),
        }
    }

    #[test]
    fn events_wait_for_a_quiet_node_in_order() {
        let events = Events::default();
        assert!(matches!(events.next(Instant::now()), Next::WaitForMore));
        let handed = Instant::now();
        assert!(events.push(event("Add eth0", handed)).is_ok());
        assert!(events.push(event("Add net1", handed)).is_ok());
        let now = Instant::now();
        // Handed over just now: the node is busy for QUIET.
        match events.next(now) {
            Next::WaitFor(d) => assert!(d > Duration::ZERO && d <= QUIET, "{d:?}"),
            _ => panic!("an event went while the node was busy"),
        }
        // A plugin keeps the node busy: still waiting.
        events.busy();
        assert!(matches!(events.next(now + QUIET / 2), Next::WaitFor(_)));
        // Quiet: the events go, oldest first.
        let quiet = Instant::now() + QUIET;
        assert_eq!(sent(events.next(quiet)), "Add eth0");
        assert_eq!(sent(events.next(quiet)), "Add net1");
        assert!(matches!(events.next(quiet), Next::WaitForMore));
    }

    #[test]
    fn a_busy_node_holds_events_back_no_longer_than_max_delay() {
        let events = Events::default();
        let long_ago = Instant::now() - MAX_DELAY;
        assert!(events.push(event("Add eth0", long_ago)).is_ok());
        events.busy();
        assert_eq!(sent(events.next(Instant::now())), "Add eth0");
    }

    #[test]
    fn a_full_queue_hands_the_event_back() {
        let events = Events::default();
        let now = Instant::now();
        for i in 0..EVENTS {
            assert!(events.push(event(&format!("Add net{i}"), now)).is_ok());
        }
        let refused = events.push(event("one too many", now)).expect_err("the queue is full");
        assert_eq!(refused.message, "one too many");
    }
}
