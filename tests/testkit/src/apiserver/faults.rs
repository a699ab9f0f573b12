//! Misbehaving on demand: faults queued for the next requests or set for all of them (HTTP errors,
//! slow answers, hangs, dropped connections), every watch stream ended at once, streaming lists
//! answered otherwise than with their objects, a resource denied (as RBAC forbids it, or as a
//! cluster without its CRD answers), and a restart (the port closed for a while, the watch cache
//! built anew).

use super::ApiServer;
use super::reply::{Reply, status};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How the server misbehaves for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this HTTP status and a `Status` body instead of the object (503, 429, 500...).
    Status(u16),
    /// Answer normally, after this long.
    Delay(Duration),
    /// Never answer; the connection stays open until the client gives up.
    Hang,
    /// Close the connection without an answer.
    Drop,
}

/// How a streaming list (`sendInitialEvents=true`) is answered instead of its objects and the
/// bookmark that ends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamingList {
    /// Served.
    Served,
    /// This HTTP status and a `Status` body: 422 as an API server whose `WatchList` feature gate is
    /// off, 500, 503... With `retry_after`, the body's `details.retryAfterSeconds` and the
    /// `Retry-After` header say how long to wait, as the API server says it.
    Status { code: u16, retry_after: Option<u32> },
    /// A `200` whose stream carries the objects, then an `ERROR` event of this code instead of the
    /// bookmark: 500 as an API server on an etcd without progress requests answers, 410...
    ErrorEvent(u16),
    /// A `200` whose stream carries the objects, then ends without the bookmark.
    EndBeforeBookmark,
}

/// The message of the ERROR event an API server sends for a streaming list when its etcd cannot
/// answer progress requests (etcd before 3.4.31 or 3.5.13).
pub const NO_PROGRESS_REQUESTS: &str =
    "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled";

#[derive(Default)]
struct Queued {
    /// Faults for the next requests, one each, in order.
    next: VecDeque<Fault>,
    /// A fault for every request once `next` is empty.
    always: Option<Fault>,
}

pub(super) struct Faults {
    queued: Mutex<Queued>,
    /// Requests answered with a fault.
    faulted: AtomicUsize,
    /// Bumped by `drop_watches`: every watch stream ends.
    pub watch_ends: tokio::sync::watch::Sender<u64>,
    /// How streaming lists are answered (`answer_streaming_lists`).
    streaming_lists: Mutex<StreamingList>,
    /// (resource plural, namespace or every one, status code) answered instead of any request for
    /// them (`deny`).
    denied: Mutex<Vec<(&'static str, Option<String>, u16)>>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            queued: Mutex::default(),
            faulted: AtomicUsize::default(),
            watch_ends: tokio::sync::watch::channel(0).0,
            streaming_lists: Mutex::new(StreamingList::Served),
            denied: Mutex::default(),
        }
    }
}

impl Faults {
    /// How a streaming list is answered (see `watch`).
    pub fn streaming_lists(&self) -> StreamingList {
        self.streaming_lists.lock().unwrap().clone()
    }

    /// The status every request for `resource` in `namespace` is answered with, if denied.
    pub fn denied(&self, resource: &str, namespace: Option<&str>) -> Option<u16> {
        self.denied
            .lock()
            .unwrap()
            .iter()
            .find(|(r, ns, _)| *r == resource && (ns.is_none() || ns.as_deref() == namespace))
            .map(|(_, _, code)| *code)
    }

    /// Misbehave as the next fault says: `Some` answer (or a dropped connection) instead of the
    /// request's, or `None` to answer it (after a delay, if that is the fault).
    pub async fn apply(&self) -> Option<Result<Reply, std::io::Error>> {
        let fault = {
            let mut queued = self.queued.lock().unwrap();
            queued.next.pop_front().or_else(|| queued.always.clone())?
        };
        self.faulted.fetch_add(1, Ordering::SeqCst);
        match fault {
            Fault::Status(code) => Some(Ok(status(code, "injected fault"))),
            Fault::Delay(d) => {
                tokio::time::sleep(d).await;
                None
            }
            Fault::Hang => std::future::pending().await,
            Fault::Drop => Some(Err(std::io::Error::other("injected fault: connection dropped"))),
        }
    }
}

impl ApiServer {
    /// Misbehave with `fault` for the next `times` requests (after faults queued before).
    pub fn inject(&self, fault: Fault, times: usize) {
        self.state.faults.queued.lock().unwrap().next.extend(std::iter::repeat_n(fault, times));
    }

    /// Misbehave with `fault` for every request until `clear_faults`.
    pub fn inject_always(&self, fault: Fault) {
        self.state.faults.queued.lock().unwrap().always = Some(fault);
    }

    pub fn clear_faults(&self) {
        *self.state.faults.queued.lock().unwrap() = Queued::default();
    }

    /// Requests answered with an injected fault so far (connections refused while `down` are not
    /// requests, and not counted).
    pub fn faulted_requests(&self) -> usize {
        self.state.faults.faulted.load(Ordering::SeqCst)
    }

    /// End every watch stream now (the clients see the stream end, as when an API server's
    /// watch times out or it sheds load).
    pub fn drop_watches(&self) {
        self.state.faults.watch_ends.send_modify(|n| *n += 1);
    }

    /// Answer streaming lists (`sendInitialEvents=true`) with 422 from now on, as an API server
    /// whose `WatchList` feature gate is off does: its clients must list instead.
    pub fn refuse_streaming_lists(&self) {
        self.answer_streaming_lists(StreamingList::Status { code: 422, retry_after: None });
    }

    /// Answer streaming lists as `answer` says from now on (plain lists and watches are served).
    pub fn answer_streaming_lists(&self, answer: StreamingList) {
        *self.state.faults.streaming_lists.lock().unwrap() = answer;
    }

    /// Answer every request for `resource` (its plural, e.g. `network-attachment-definitions`, or
    /// one verb of it, e.g. `ipblocks/update`) in `namespace` (every namespace: `None`) with `code`
    /// from now on: 403 as RBAC answers a request it does not allow, 404 as a cluster without the
    /// resource's CRD answers.
    pub fn deny(&self, resource: &'static str, namespace: Option<&str>, code: u16) {
        self.state.faults.denied.lock().unwrap().push((resource, namespace.map(String::from), code));
    }

    /// Serve every resource again after `deny`.
    pub fn clear_denials(&self) {
        self.state.faults.denied.lock().unwrap().clear();
    }

    /// What an API server restart does to its clients: every connection and watch cut, the port
    /// refused for `outage`, while `meanwhile` changes objects, and the watch cache built anew
    /// (a watch resuming from before those changes gets 410 and must list again).
    pub fn restart(&self, outage: Duration, meanwhile: impl FnOnce(&Self)) {
        self.down();
        meanwhile(self);
        self.state.objects.store.lock().unwrap().compact();
        std::thread::sleep(outage);
        self.up();
    }
}
