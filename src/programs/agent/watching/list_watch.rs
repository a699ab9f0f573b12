//! One resource's objects as the node agent keeps them: listed, then watched, for as long as the
//! agent runs, handed over as a sequence of [`Update`]s. kube-runtime's `watcher` does the same,
//! but hides what the agent must act on and report (that a watch was re-established or a bookmark
//! came: the cache is current), does not fall back from a streaming list the API server cannot
//! serve, and lists again at once after a 410, so a cluster's agents would all list in the same
//! second after an API server restart.
//!
//! - **The first state** comes from a streaming list where the API server serves one (a watch with
//!   `sendInitialEvents=true` and `resourceVersion=0`: one request, answered from the watch cache,
//!   the objects arriving one at a time, then the watch goes on in the same stream). A streaming
//!   list the API server answers with anything but its objects and the bookmark that ends them is
//!   followed at once by a list with `resourceVersion=0` (its watch cache too) and a watch from the
//!   list's resourceVersion: an HTTP error (400 or 422 from Kubernetes before 1.27 or 1.33 with
//!   its `WatchList` gate off; anything else a proxy or an API server sends), an `ERROR` event of
//!   any code before the bookmark (500 from an API server whose etcd cannot answer progress
//!   requests: etcd before 3.4.31 or 3.5.13, or a current one the API server has not checked yet),
//!   a stream that ends before it, or one silent for `STREAMING_LIST_SILENCE` (stretched by a
//!   random part of itself). As client-go's reflector puts it, making progress is better than
//!   deadlocking. Only a failure of the connection itself (refused, reset, TLS) before any answer
//!   keeps the backoff below; a 429 or 503 carrying `retryAfterSeconds` is waited out first. When
//!   the list that follows is served, the refusal is remembered for the API server
//!   (`Streaming`, shared by every watch) for `STREAMING_RETRY`, logged once, and counted; then a
//!   streaming list is offered again. A list that fails too is the watch's failure, not the
//!   streaming list's: a 403 or a 404 says nothing about streaming.
//! - **A watch that ends** (its timeout, random between `WATCH_TIMEOUT` and twice it as client-go
//!   picks it, so that renewals do not line up) or breaks is resumed from the last resourceVersion
//!   seen: bookmarks keep it fresh. Only a 410 Gone (the API server no longer has that history:
//!   after its restart, or a watch that expired) lists again, after a random pause below
//!   `RELIST_SPREAD`, so the agents of a whole cluster spread their relists over that time.
//! - **After a failure** (refused connection, 5xx, 429, a broken stream, a quiet connection): a
//!   jittered exponential backoff, `FIRST_PAUSE` doubling to `MAX_PAUSE`, each pause stretched by
//!   a random part of itself, and never shorter than the `retryAfterSeconds` the API server asked
//!   for (up to `MAX_RETRY_AFTER`); it starts over once a watch has stayed up for `HEALTHY`.

use crate::platform::kube::random_fraction;
use ::kube::api::{ListParams, VersionMatch, WatchEvent, WatchParams};
use ::kube::{Api, Resource, ResourceExt};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::info;

pub const FIRST_PAUSE: Duration = Duration::from_millis(800);
pub const MAX_PAUSE: Duration = Duration::from_secs(30);
/// A watch that stayed up this long was healthy: the backoff starts over.
pub const HEALTHY: Duration = Duration::from_secs(60);
/// A relist after a 410 waits a random part of this.
pub const RELIST_SPREAD: Duration = Duration::from_secs(10);
/// The shortest watch asked for; each asks for a random time between this and twice it.
pub const WATCH_TIMEOUT: Duration = Duration::from_secs(300);
/// A watch that delivers nothing (no event, no bookmark, no end) this long past its own timeout is
/// on a dead connection.
const IDLE_GRACE: Duration = Duration::from_secs(30);
/// After a refused streaming list, lists for this long before offering a streaming list again (an
/// API server upgraded meanwhile, its etcd checked again, or another replica behind the same
/// address).
pub const STREAMING_RETRY: Duration = Duration::from_secs(600);
/// A streaming list that sends nothing for this long (stretched by a random part of itself) before
/// the bookmark that ends its initial events is taken as refused. The API server sends the initial
/// events from its watch cache without pause, and an empty list's bookmark at once; a stream that
/// stays quiet that long is stuck, and its objects can still be had by a plain list.
pub const STREAMING_LIST_SILENCE: Duration = Duration::from_secs(30);
/// The longest `retryAfterSeconds` honoured: an API server asks for a second or a few; a longer
/// wait (a misconfigured proxy) must not park a node's cache.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// A watch that ends this soon after it started, having delivered nothing, counts as a failure
/// (else a server or proxy that closes watches at once would be asked again and again at once).
const ENDED_AT_ONCE: Duration = Duration::from_secs(1);

/// What happened to the objects, in order.
#[derive(Debug)]
pub enum Update<K> {
    /// A list begins (`relist`: not the first); the `Listed` objects that follow, up to `ListDone`,
    /// replace everything held. A list that breaks off is followed by another `ListStarted`.
    ListStarted {
        relist: bool,
    },
    Listed(K),
    ListDone,
    Applied(K),
    Deleted(K),
    /// The watch is established, resumed, or sent a bookmark: what is held is current.
    Current,
    /// The watch cannot resume (410 Gone): a list follows in `relist_in`.
    Expired {
        relist_in: Duration,
    },
    /// A request or the watch failed: it is tried again in `retry_in`. `code` is the API server's
    /// status code, when it answered at all.
    Failed {
        error: String,
        code: Option<u16>,
        retry_in: Duration,
    },
}

/// Whether the API server serves streaming lists, as the agent found out: shared by its watches
/// (one API server, one connection), so that one refusal sends all of them to lists.
#[derive(Debug, Default)]
pub struct Streaming {
    refused_at: Mutex<Option<Instant>>,
    /// Refusals followed by a served list, by cause (`Refusal::cause`), for the metrics.
    refusals: Mutex<BTreeMap<String, u64>>,
}

impl Streaming {
    /// Whether a streaming list is offered now (none was refused within `STREAMING_RETRY`).
    pub fn offered(&self) -> bool {
        self.refused_at.lock().unwrap_or_else(|e| e.into_inner()).is_none_or(|at| at.elapsed() >= STREAMING_RETRY)
    }

    /// Note a refusal; whether it is news (not already known).
    fn refused(&self, refusal: &Refusal) -> bool {
        *self.refusals.lock().unwrap_or_else(|e| e.into_inner()).entry(refusal.cause.clone()).or_default() += 1;
        let mut at = self.refused_at.lock().unwrap_or_else(|e| e.into_inner());
        let news = at.is_none_or(|at| at.elapsed() >= STREAMING_RETRY);
        *at = Some(Instant::now());
        news
    }

    /// Refusals so far by cause: a status code (`500`, `422`), `ended`, `silent` or `undecodable`.
    pub fn refusals(&self) -> BTreeMap<String, u64> {
        self.refusals.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// How the API server answered a streaming list it did not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    /// For the metrics: the status code, or how the stream failed.
    cause: String,
    /// For the log: the code and the API server's message.
    detail: String,
    /// What the API server asked to wait before the next request.
    retry_after: Option<Duration>,
}

/// A request that failed, or a watch that broke.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    text: String,
    code: Option<u16>,
    retry_after: Option<Duration>,
}

impl Failure {
    fn of(e: &::kube::Error) -> Self {
        match e {
            ::kube::Error::Api(status) => Failure {
                text: format!("{} {}", status.code, status.message),
                code: (status.code != 0).then_some(status.code),
                retry_after: retry_after(status),
            },
            other => Failure { text: crate::platform::kube::error_chain(other), code: None, retry_after: None },
        }
    }

    fn said(text: String) -> Self {
        Failure { text, code: None, retry_after: None }
    }
}

/// Whether an error is an answer of the API server (or of whatever stands in its place), as
/// opposed to a connection that could not be made or broke: for a streaming list, an answer is a
/// refusal.
fn answered(e: &::kube::Error) -> Option<Refusal> {
    use ::kube::Error as E;
    match e {
        E::Api(status) => Some(Refusal {
            cause: status.code.to_string(),
            detail: format!("{} {}", status.code, status.message),
            retry_after: retry_after(status),
        }),
        E::SerdeError(_) | E::FromUtf8(_) | E::LinesCodecMaxLineLengthExceeded => Some(Refusal {
            cause: "undecodable".into(),
            detail: format!("an answer that is not a watch event: {}", crate::platform::kube::error_chain(e)),
            retry_after: None,
        }),
        _ => None,
    }
}

/// The wait a 429 or 503 asks for: the API server puts it in the status's `retryAfterSeconds`
/// and, from it, in the `Retry-After` header.
fn retry_after(status: &::kube::core::Status) -> Option<Duration> {
    if !matches!(status.code, 429 | 503) {
        return None;
    }
    let seconds = status.details.as_ref()?.retry_after_seconds;
    (seconds > 0).then(|| Duration::from_secs(seconds.into()).min(MAX_RETRY_AFTER))
}

type Events<K> = BoxStream<'static, ::kube::Result<WatchEvent<K>>>;

/// Why a watch stream ended.
enum Ended {
    /// Normally (its timeout): resume from the last resourceVersion.
    Resume,
    /// 410 Gone: list again.
    Expired,
    Failed(Failure),
}

/// The objects of `api` (matching `field_selector`), handed to `on` forever.
pub async fn follow<K, F>(api: Api<K>, field_selector: Option<String>, streaming: &Streaming, mut on: F)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: FnMut(Update<K>),
{
    let selector = field_selector.as_deref();
    let mut backoff = Backoff::default();
    let mut listed = false;
    let mut resume: Option<String> = None;
    loop {
        let stream = match resume.take() {
            None => match list(&api, selector, streaming, listed, &mut on).await {
                Ok((stream, version)) => {
                    listed = true;
                    match stream {
                        Some(stream) => (stream, version),
                        // A plain list: its watch starts from the list's resourceVersion.
                        None => {
                            resume = Some(version);
                            continue;
                        }
                    }
                }
                Err(failure) => {
                    fail(&mut on, &mut backoff, failure).await;
                    continue;
                }
            },
            Some(version) => match api.watch(&watch_params(selector, false), &version).await {
                Ok(stream) => {
                    on(Update::Current);
                    (stream.boxed(), version)
                }
                Err(::kube::Error::Api(status)) if status.code == 410 => {
                    expired(&mut on).await;
                    continue;
                }
                Err(e) => {
                    resume = Some(version);
                    fail(&mut on, &mut backoff, Failure::of(&e)).await;
                    continue;
                }
            },
        };
        let established = Instant::now();
        let (ended, delivered, version) = consume(stream.0, stream.1, &mut on).await;
        if established.elapsed() >= HEALTHY {
            backoff = Backoff::default();
        }
        match ended {
            Ended::Resume if delivered == 0 && established.elapsed() < ENDED_AT_ONCE => {
                resume = Some(version);
                fail(&mut on, &mut backoff, Failure::said("the watch ended as soon as it started".into())).await;
            }
            Ended::Resume => resume = Some(version),
            Ended::Expired => expired(&mut on).await,
            Ended::Failed(failure) => {
                resume = Some(version);
                fail(&mut on, &mut backoff, failure).await;
            }
        }
    }
}

/// The watch cannot resume: wait a random part of `RELIST_SPREAD` before the list.
async fn expired<K, F>(on: &mut F)
where
    F: FnMut(Update<K>),
{
    let relist_in = RELIST_SPREAD.mul_f64(random_fraction());
    on(Update::Expired { relist_in });
    tokio::time::sleep(relist_in).await;
}

/// List the objects, streaming where the API server serves it: the stream to go on watching (none
/// after a plain list) and the resourceVersion the objects are at.
async fn list<K, F>(
    api: &Api<K>,
    selector: Option<&str>,
    streaming: &Streaming,
    relist: bool,
    on: &mut F,
) -> Result<(Option<Events<K>>, String), Failure>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: FnMut(Update<K>),
{
    if !streaming.offered() {
        return plain_list(api, selector, relist, on).await;
    }
    let refusal = match api.watch(&watch_params(selector, true), "0").await {
        Ok(stream) => match streamed_list(stream.boxed(), relist, silence_limit(), on).await {
            Streamed::Served(stream, version) => return Ok((Some(stream), version)),
            Streamed::Refused(refusal) => refusal,
            Streamed::Broken(failure) => return Err(failure),
        },
        Err(e) => answered(&e).ok_or_else(|| Failure::of(&e))?,
    };
    if let Some(pause) = refusal.retry_after {
        tokio::time::sleep(pause).await;
    }
    let listed = plain_list(api, selector, relist, on).await?;
    if streaming.refused(&refusal) {
        info!(
            "the API server did not serve a streaming list ({}): listing instead, and offering a streaming list \
             again in {}s",
            refusal.detail,
            STREAMING_RETRY.as_secs()
        );
    }
    Ok(listed)
}

/// A list from the watch cache (`resourceVersion=0`); unpaged, as the API server answers such a
/// list whole anyway, and one node's pods or one namespace's objects are a small list.
async fn plain_list<K, F>(
    api: &Api<K>,
    selector: Option<&str>,
    relist: bool,
    on: &mut F,
) -> Result<(Option<Events<K>>, String), Failure>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: FnMut(Update<K>),
{
    let params = ListParams {
        field_selector: selector.map(String::from),
        resource_version: Some("0".into()),
        version_match: Some(VersionMatch::NotOlderThan),
        ..Default::default()
    };
    let list = api.list(&params).await.map_err(|e| Failure::of(&e))?;
    let version = list
        .metadata
        .resource_version
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Failure::said("the list has no resourceVersion".into()))?;
    on(Update::ListStarted { relist });
    for object in list.items {
        on(Update::Listed(object));
    }
    on(Update::ListDone);
    on(Update::Current);
    Ok((None, version))
}

/// How a streaming list went.
enum Streamed<K> {
    /// Its initial events, up to their bookmark: the stream goes on as the watch.
    Served(Events<K>, String),
    /// The API server answered with something else: a plain list may still be served.
    Refused(Refusal),
    /// The connection broke.
    Broken(Failure),
}

/// A random limit between `STREAMING_LIST_SILENCE` and twice it, so that agents that started
/// together do not give up together.
fn silence_limit() -> Duration {
    STREAMING_LIST_SILENCE.mul_f64(1.0 + random_fraction())
}

/// The initial events of a streaming list, up to the bookmark that ends them; `silence`: how long
/// the stream may send nothing before that.
async fn streamed_list<K, F>(mut stream: Events<K>, relist: bool, silence: Duration, on: &mut F) -> Streamed<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: FnMut(Update<K>),
{
    on(Update::ListStarted { relist });
    let refused =
        |cause: &str, detail: String| Streamed::Refused(Refusal { cause: cause.into(), detail, retry_after: None });
    loop {
        match tokio::time::timeout(silence, stream.next()).await {
            Err(_) => {
                return refused(
                    "silent",
                    format!("it sent nothing for {}s before the end of its initial events", silence.as_secs()),
                );
            }
            Ok(None) => return refused("ended", "it ended before the end of its initial events".into()),
            Ok(Some(Err(e))) => {
                return match answered(&e) {
                    Some(refusal) => Streamed::Refused(refusal),
                    None => Streamed::Broken(Failure::of(&e)),
                };
            }
            Ok(Some(Ok(event))) => match event {
                WatchEvent::Added(object) | WatchEvent::Modified(object) => on(Update::Listed(object)),
                // Not sent in the initial events (the API server's own documentation says so).
                WatchEvent::Deleted(_) => {}
                WatchEvent::Bookmark(mark) if mark.metadata.annotations.contains_key(INITIAL_EVENTS_END) => {
                    on(Update::ListDone);
                    on(Update::Current);
                    return Streamed::Served(stream, mark.metadata.resource_version);
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(status) => {
                    return refused(&status.code.to_string(), format!("{} {}", status.code, status.message));
                }
            },
        }
    }
}

/// The annotation of the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Hand over a watch's events until it ends; how it ended, how many it delivered, and the last
/// resourceVersion seen.
async fn consume<K, F>(mut stream: Events<K>, mut version: String, on: &mut F) -> (Ended, usize, String)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: FnMut(Update<K>),
{
    let idle = WATCH_TIMEOUT * 2 + IDLE_GRACE;
    let mut delivered = 0;
    loop {
        let event = match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => {
                return (Ended::Failed(Failure::said(format!("no event for {}s", idle.as_secs()))), delivered, version);
            }
            Ok(None) => return (Ended::Resume, delivered, version),
            Ok(Some(Err(e))) => return (Ended::Failed(Failure::of(&e)), delivered, version),
            Ok(Some(Ok(event))) => event,
        };
        delivered += 1;
        match event {
            WatchEvent::Added(object) | WatchEvent::Modified(object) => {
                version = object.resource_version().unwrap_or(version);
                on(Update::Applied(object));
            }
            WatchEvent::Deleted(object) => {
                version = object.resource_version().unwrap_or(version);
                on(Update::Deleted(object));
            }
            WatchEvent::Bookmark(mark) => {
                version = mark.metadata.resource_version;
                on(Update::Current);
            }
            WatchEvent::Error(status) if status.code == 410 => return (Ended::Expired, delivered, version),
            WatchEvent::Error(status) => {
                let failure = Failure {
                    text: format!("{} {}", status.code, status.message),
                    code: Some(status.code),
                    retry_after: retry_after(&status),
                };
                return (Ended::Failed(failure), delivered, version);
            }
        }
    }
}

fn watch_params(selector: Option<&str>, streaming_list: bool) -> WatchParams {
    let timeout = WATCH_TIMEOUT.mul_f64(1.0 + random_fraction()).as_secs();
    WatchParams {
        field_selector: selector.map(String::from),
        timeout: Some(u32::try_from(timeout).unwrap_or(u32::MAX)),
        bookmarks: true,
        send_initial_events: streaming_list,
        ..Default::default()
    }
}

/// Report `failure` and wait: the backoff's next pause, or longer if the API server asked for it.
async fn fail<K, F>(on: &mut F, backoff: &mut Backoff, failure: Failure)
where
    F: FnMut(Update<K>),
{
    let retry_in = backoff.next_pause().max(failure.retry_after.unwrap_or_default());
    on(Update::Failed { error: failure.text, code: failure.code, retry_in });
    tokio::time::sleep(retry_in).await;
}

/// The pauses after consecutive failures.
struct Backoff {
    base: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { base: FIRST_PAUSE }
    }
}

impl Backoff {
    fn next_pause(&mut self) -> Duration {
        let pause = self.base.mul_f64(1.0 + random_fraction());
        self.base = (self.base * 2).min(MAX_PAUSE);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_to_its_cap_each_pause_stretched_by_at_most_itself() {
        let mut backoff = Backoff::default();
        let mut base = FIRST_PAUSE;
        for _ in 0..10 {
            let pause = backoff.next_pause();
            assert!(pause >= base && pause < base * 2, "{pause:?} for {base:?}");
            base = (base * 2).min(MAX_PAUSE);
        }
        assert_eq!(backoff.base, MAX_PAUSE);
    }

    fn refusal(cause: &str) -> Refusal {
        Refusal { cause: cause.into(), detail: format!("{cause} refused"), retry_after: None }
    }

    #[test]
    fn a_refused_streaming_list_is_offered_again_only_later() {
        let streaming = Streaming::default();
        assert!(streaming.offered());
        streaming.refused(&refusal("500"));
        assert!(!streaming.offered());
        streaming.refused(&refusal("ended"));
        streaming.refused(&refusal("500"));
        assert!(!streaming.offered());
        *streaming.refused_at.lock().unwrap() = Some(Instant::now() - STREAMING_RETRY);
        assert!(streaming.offered());
    }

    #[test]
    fn only_the_first_streaming_list_refusal_is_news() {
        let streaming = Streaming::default();
        assert!(streaming.refused(&refusal("500")), "the first refusal is news");
        assert!(!streaming.refused(&refusal("ended")), "the next is not");
        assert!(!streaming.refused(&refusal("500")));
    }

    #[test]
    fn each_streaming_list_refusal_is_counted_by_its_cause() {
        let streaming = Streaming::default();
        for cause in ["500", "ended", "500"] {
            streaming.refused(&refusal(cause));
        }
        assert_eq!(streaming.refusals(), BTreeMap::from([("500".into(), 2), ("ended".into(), 1)]));
    }

    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn config_map(name: &str) -> ConfigMap {
        ConfigMap { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() }
    }

    fn status(code: u16, message: &str) -> ::kube::core::Status {
        ::kube::core::Status::failure(message, "").with_code(code)
    }

    fn end_of_initial_events(version: &str) -> WatchEvent<ConfigMap> {
        let mark = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"resourceVersion": version,
            "annotations": {INITIAL_EVENTS_END: "true"}}});
        WatchEvent::Bookmark(serde_json::from_value(mark).unwrap())
    }

    /// A streaming list whose stream yields `events`, then stays silent; what it handed over, and
    /// how it went (`Ok`: served, at that resourceVersion).
    fn stream(
        events: Vec<::kube::Result<WatchEvent<ConfigMap>>>,
        then_end: bool,
    ) -> (Vec<String>, Result<String, Result<Refusal, Failure>>) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let events = futures::stream::iter(events);
        let stream: Events<ConfigMap> =
            if then_end { events.boxed() } else { events.chain(futures::stream::pending()).boxed() };
        let mut seen = Vec::new();
        let outcome = runtime.block_on(streamed_list(stream, false, Duration::from_millis(50), &mut |u| {
            seen.push(match u {
                Update::Listed(cm) => cm.metadata.name.unwrap(),
                other => format!("{other:?}").split_whitespace().next().unwrap().to_string(),
            })
        }));
        let outcome = match outcome {
            Streamed::Served(_, version) => Ok(version),
            Streamed::Refused(refusal) => Err(Ok(refusal)),
            Streamed::Broken(failure) => Err(Err(failure)),
        };
        (seen, outcome)
    }

    #[test]
    fn a_streaming_list_is_served_up_to_the_bookmark_that_ends_its_initial_events() {
        let (seen, outcome) =
            stream(vec![Ok(WatchEvent::Added(config_map("a"))), Ok(end_of_initial_events("42"))], false);
        assert_eq!(outcome.unwrap(), "42");
        assert_eq!(seen, ["ListStarted", "a", "ListDone", "Current"]);
    }

    #[test]
    fn an_error_event_an_end_or_silence_before_the_bookmark_is_a_refusal() {
        let storage = "a watch stream was requested by the client but the required storage feature \
                       RequestWatchProgress is disabled";
        for (code, message) in [(500, storage), (410, "too old resource version: 1 (5)")] {
            let events =
                vec![Ok(WatchEvent::Added(config_map("a"))), Ok(WatchEvent::Error(status(code, message).boxed()))];
            let refusal = stream(events, false).1.unwrap_err().unwrap();
            assert_eq!(refusal.cause, code.to_string());
            assert_eq!(refusal.detail, format!("{code} {message}"));
        }
        // kube hands over a Status line that is not an event as an API error.
        let events = vec![Err(::kube::Error::Api(status(500, "internal error").boxed()))];
        assert_eq!(stream(events, false).1.unwrap_err().unwrap().cause, "500");
        let (seen, outcome) = stream(vec![Ok(WatchEvent::Added(config_map("a")))], true);
        assert_eq!(outcome.unwrap_err().unwrap().cause, "ended");
        assert_eq!(seen, ["ListStarted", "a"], "what came is handed over; the list that follows replaces it");
        assert_eq!(stream(vec![Ok(WatchEvent::Added(config_map("a")))], false).1.unwrap_err().unwrap().cause, "silent");
    }

    #[test]
    fn a_connection_that_breaks_during_a_streaming_list_is_not_a_refusal() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset by peer");
        let failure = stream(vec![Err(::kube::Error::ReadEvents(reset))], false).1.unwrap_err().unwrap_err();
        assert!(failure.text.contains("connection reset by peer"), "{failure:?}");
        assert_eq!(failure.code, None);
    }

    /// A refusal `code` whose details ask to retry after `seconds`.
    fn with_retry(code: u16, seconds: u32) -> ::kube::core::Status {
        let mut s = status(code, "slow down");
        s.details = Some(serde_json::from_value(serde_json::json!({"retryAfterSeconds": seconds})).unwrap());
        s
    }

    #[test]
    fn only_a_429_or_503_with_a_retry_after_asks_to_wait() {
        assert_eq!(retry_after(&with_retry(429, 3)), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(&with_retry(500, 3)), None);
        assert_eq!(retry_after(&with_retry(429, 0)), None);
        assert_eq!(retry_after(&status(429, "no details")), None);
    }

    #[test]
    fn a_wait_asked_for_never_exceeds_the_cap() {
        assert_eq!(retry_after(&with_retry(503, 3600)), Some(MAX_RETRY_AFTER));
    }

    #[test]
    fn a_wait_asked_for_is_carried_into_the_failure() {
        let e = ::kube::Error::Api(with_retry(429, 2).boxed());
        assert_eq!(answered(&e).unwrap().retry_after, Some(Duration::from_secs(2)));
        assert_eq!(Failure::of(&e).retry_after, Some(Duration::from_secs(2)));
    }

    #[test]
    fn watch_timeouts_spread_from_once_to_twice_the_shortest() {
        let timeouts: Vec<u32> = (0..200).map(|_| watch_params(None, false).timeout.unwrap()).collect();
        let shortest = WATCH_TIMEOUT.as_secs() as u32;
        assert!(timeouts.iter().all(|t| (shortest..shortest * 2).contains(t)), "{timeouts:?}");
        assert!(
            timeouts.iter().any(|t| *t < shortest + shortest / 4) && timeouts.iter().any(|t| *t > shortest * 7 / 4)
        );
    }

    #[test]
    fn a_streaming_list_asks_for_its_initial_events_with_bookmarks() {
        let streaming = watch_params(Some("metadata.name=x"), true);
        assert!(streaming.send_initial_events && streaming.bookmarks);
    }
}
