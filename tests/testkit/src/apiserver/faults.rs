//! Misbehaving on demand: faults queued for the next requests or set for all of them (HTTP errors,
//! slow answers, hangs, dropped connections), every watch stream ended at once, streaming lists
//! refused, and a restart (the port closed for a while, the watch cache built anew).

use super::ApiServer;
use super::reply::{Reply, status};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// Set by `refuse_streaming_lists`.
    streaming_lists_refused: AtomicBool,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            queued: Mutex::default(),
            faulted: AtomicUsize::default(),
            watch_ends: tokio::sync::watch::channel(0).0,
            streaming_lists_refused: AtomicBool::default(),
        }
    }
}

impl Faults {
    /// Whether a streaming list is answered with 422 (see `watch`).
    pub fn streaming_lists_refused(&self) -> bool {
        self.streaming_lists_refused.load(Ordering::SeqCst)
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
        self.state.faults.streaming_lists_refused.store(true, Ordering::SeqCst);
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
