//! A watch, as the API server streams it: a `200` whose chunked body is one JSON event per line
//! (`{"type": "ADDED", "object": ...}`), first the changes after the asked revision
//! (`resourceVersion`), then each new one as it happens, until `timeoutSeconds`, until the test
//! drops the watches (`drop_watches`) or the connection goes. A revision older than the history
//! kept is answered as the API server does: an `ERROR` event carrying a 410 `Status` ("too old
//! resource version"), then the end. A streaming list (`sendInitialEvents=true`) starts with every
//! object as ADDED, then a `BOOKMARK` annotated `k8s.io/initial-events-end` at the current
//! revision, then the changes; a server told to (`answer_streaming_lists`) answers it otherwise:
//! with an HTTP error (422 as an API server whose `WatchList` feature gate is off does), with an
//! `ERROR` event instead of the bookmark (500 as one on an etcd without progress requests does), or
//! with a stream that ends before the bookmark.

use super::State;
use super::faults::{NO_PROGRESS_REQUESTS, StreamingList};
use super::reply::{Reply, status, status_retry_after};
use super::router::Target;
use super::store::{Change, Resource, Selector};
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::{Bytes, Frame};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

struct Watch {
    resource: Resource,
    namespace: Option<String>,
    selector: Selector,
    revision: u64,
    timeout: Duration,
    /// `sendInitialEvents=true`: a streaming list.
    initial_events: bool,
}

/// Start streaming the watch `target` asks for; the events are produced by a task of the server's
/// runtime.
pub(super) fn respond(state: &State, target: &Target, selector: Selector) -> Reply {
    let w = Watch {
        resource: target.resource,
        namespace: target.namespace.clone(),
        selector,
        revision: target.query.get("resourceVersion").and_then(|r| r.parse().ok()).unwrap_or(0),
        timeout: Duration::from_secs(target.query.get("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(1800)),
        initial_events: is_streaming_list(target),
    };
    let answer = if w.initial_events { state.faults.streaming_lists() } else { StreamingList::Served };
    match answer {
        StreamingList::Status { code: 422, .. } => {
            return status(
                422,
                "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is \
                 forbidden for watch unless the WatchList feature gate is enabled",
            );
        }
        StreamingList::Status { code, retry_after: Some(seconds) } => {
            return status_retry_after(code, "the server is currently unable to handle the request", seconds);
        }
        StreamingList::Status { code, retry_after: None } => return status(code, "injected streaming list failure"),
        _ => {}
    }
    let (events, body) = mpsc::channel::<Bytes>(256);
    let (backlog, mut changes, listed_at) = {
        let store = state.objects.store.lock().unwrap();
        let from = if w.initial_events { 0 } else { w.revision };
        let backlog = store.since(w.resource, w.namespace.as_deref(), &w.selector, from);
        (backlog, store.changes.subscribe(), w.initial_events.then(|| store.current_revision()))
    };
    let mut dropped = state.faults.watch_ends.subscribe();
    tokio::spawn(async move {
        let backlog = match backlog {
            Ok(backlog) => backlog,
            Err(compacted) => return drop(events.send(gone(w.revision, compacted)).await),
        };
        let mut last = w.revision;
        for change in backlog {
            last = last.max(change.revision);
            if events.send(event(&change)).await.is_err() {
                return;
            }
        }
        if let Some(revision) = listed_at {
            last = revision;
            let end = match answer {
                StreamingList::ErrorEvent(code) => error_event(code),
                StreamingList::EndBeforeBookmark => return,
                _ => initial_events_end(w.resource, revision),
            };
            if events.send(end).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(w.timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                change = changes.recv() => match change {
                    Ok(change) if change.revision > last && wanted(&w, &change) => {
                        last = change.revision;
                        if events.send(event(&change)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => return drop(events.send(gone(last, last)).await),
                    Err(RecvError::Closed) => return,
                },
                _ = dropped.changed() => return,
                () = &mut deadline => return,
                () = events.closed() => return,
            }
        }
    });
    let frames = futures::stream::unfold(body, |mut body| async move {
        body.recv().await.map(|bytes| (Ok::<_, std::io::Error>(Frame::data(bytes)), body))
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(StreamBody::new(frames).boxed())
        .unwrap()
}

/// A watch with `sendInitialEvents=true`: a streaming list.
pub(super) fn is_streaming_list(target: &Target) -> bool {
    target.query.get("sendInitialEvents").map(String::as_str) == Some("true")
}

fn wanted(w: &Watch, change: &Change) -> bool {
    change.resource == w.resource
        && w.namespace.as_deref().is_none_or(|n| n == change.namespace)
        && w.selector.matches(&change.object)
}

fn line(value: Value) -> Bytes {
    let mut text = value.to_string();
    text.push('\n');
    Bytes::from(text)
}

fn event(change: &Change) -> Bytes {
    line(json!({"type": change.kind, "object": change.object}))
}

fn initial_events_end(resource: Resource, revision: u64) -> Bytes {
    line(json!({"type": "BOOKMARK", "object": {
        "kind": resource.kind(), "apiVersion": resource.api_version(),
        "metadata": {"resourceVersion": revision.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}}}))
}

/// The ERROR event that ends a streaming list an API server cannot serve.
fn error_event(code: u16) -> Bytes {
    let (message, reason) = match code {
        500 => (NO_PROGRESS_REQUESTS.to_string(), "InternalError"),
        410 => ("too old resource version: 0 (1)".to_string(), "Expired"),
        _ => (format!("injected streaming list failure {code}"), "InternalError"),
    };
    line(json!({"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code}}))
}

fn gone(asked: u64, compacted: u64) -> Bytes {
    line(json!({"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("too old resource version: {asked} ({compacted})"), "reason": "Expired", "code": 410}}))
}
