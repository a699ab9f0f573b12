//! One resource's objects as the node agent keeps them: listed, then watched, for as long as the
//! agent runs, handed over as a sequence of [`Update`]s. kube-runtime's `watcher` does the same,
//! but hides what the agent must act on and report (that a watch was re-established or a bookmark
//! came: the cache is current), does not fall back from a streaming list the API server refuses,
//! and lists again at once after a 410, so a cluster's agents would all list in the same second
//! after an API server restart.
//!
//! - **The first state** comes from a streaming list where the API server serves one (a watch with
//!   `sendInitialEvents=true` and `resourceVersion=0`: one request, answered from the watch cache,
//!   the objects arriving one at a time, then the watch goes on in the same stream). A server that
//!   refuses it (400 or 422: Kubernetes before 1.27, or 1.33 whose `WatchList` gate is off by
//!   default) gets a list with `resourceVersion=0` (its watch cache too) and a watch from the list's
//!   resourceVersion, for `STREAMING_RETRY`, after which a streaming list is offered again.
//! - **A watch that ends** (its timeout, random between `WATCH_TIMEOUT` and twice it as client-go
//!   picks it, so that renewals do not line up) or breaks is resumed from the last resourceVersion
//!   seen: bookmarks keep it fresh. Only a 410 Gone (the API server no longer has that history:
//!   after its restart, or a watch that expired) lists again, after a random pause below
//!   `RELIST_SPREAD`, so the agents of a whole cluster spread their relists over that time.
//! - **After a failure** (refused connection, 5xx, 429, a broken stream, a quiet connection): a
//!   jittered exponential backoff, `FIRST_PAUSE` doubling to `MAX_PAUSE`, each pause stretched by
//!   a random part of itself; it starts over once a watch has stayed up for `HEALTHY`.

use crate::kube::random_fraction;
use ::kube::api::{ListParams, VersionMatch, WatchEvent, WatchParams};
use ::kube::{Api, Resource, ResourceExt};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::de::DeserializeOwned;
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
/// API server upgraded meanwhile, or another replica behind the same address).
pub const STREAMING_RETRY: Duration = Duration::from_secs(600);
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
    /// A request or the watch failed: it is tried again in `retry_in`.
    Failed {
        error: String,
        retry_in: Duration,
    },
}

/// Whether the API server serves streaming lists, as the agent found out: shared by its watches,
/// so that one refusal sends all of them to lists.
#[derive(Debug, Default)]
pub struct Streaming {
    refused_at: Mutex<Option<Instant>>,
}

impl Streaming {
    fn offered(&self) -> bool {
        self.refused_at.lock().unwrap_or_else(|e| e.into_inner()).is_none_or(|at| at.elapsed() >= STREAMING_RETRY)
    }

    /// Note a refusal; whether it is news (not already known).
    fn refused(&self) -> bool {
        let mut at = self.refused_at.lock().unwrap_or_else(|e| e.into_inner());
        let news = at.is_none_or(|at| at.elapsed() >= STREAMING_RETRY);
        *at = Some(Instant::now());
        news
    }
}

type Events<K> = BoxStream<'static, ::kube::Result<WatchEvent<K>>>;

/// Why a watch stream ended.
enum Ended {
    /// Normally (its timeout): resume from the last resourceVersion.
    Resume,
    /// 410 Gone: list again.
    Expired,
    Failed(String),
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
                Err(error) => {
                    fail(&mut on, &mut backoff, error).await;
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
                    fail(&mut on, &mut backoff, error_text(&e)).await;
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
                fail(&mut on, &mut backoff, "the watch ended as soon as it started".into()).await;
            }
            Ended::Resume => resume = Some(version),
            Ended::Expired => expired(&mut on).await,
            Ended::Failed(error) => {
                resume = Some(version);
                fail(&mut on, &mut backoff, error).await;
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

/// List the objects, streaming where the API server allows it: the stream to go on watching (none
/// after a plain list) and the resourceVersion the objects are at.
async fn list<K, F>(
    api: &Api<K>,
    selector: Option<&str>,
    streaming: &Streaming,
    relist: bool,
    on: &mut F,
) -> Result<(Option<Events<K>>, String), String>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: FnMut(Update<K>),
{
    if streaming.offered() {
        match api.watch(&watch_params(selector, true), "0").await {
            Ok(stream) => return streamed_list(stream.boxed(), relist, on).await,
            Err(::kube::Error::Api(status)) if matches!(status.code, 400 | 422) => {
                if streaming.refused() {
                    info!(
                        "the API server does not serve streaming lists ({} {}): listing instead",
                        status.code, status.message
                    );
                }
            }
            Err(e) => return Err(error_text(&e)),
        }
    }
    // From the watch cache (`resourceVersion=0`); unpaged, as the API server answers such a list
    // whole anyway, and one node's pods or one namespace's objects are a small list.
    let params = ListParams {
        field_selector: selector.map(String::from),
        resource_version: Some("0".into()),
        version_match: Some(VersionMatch::NotOlderThan),
        ..Default::default()
    };
    let list = api.list(&params).await.map_err(|e| error_text(&e))?;
    let version = list.metadata.resource_version.filter(|v| !v.is_empty()).ok_or("the list has no resourceVersion")?;
    on(Update::ListStarted { relist });
    for object in list.items {
        on(Update::Listed(object));
    }
    on(Update::ListDone);
    on(Update::Current);
    Ok((None, version))
}

/// The initial events of a streaming list, up to the bookmark that ends them.
async fn streamed_list<K, F>(
    mut stream: Events<K>,
    relist: bool,
    on: &mut F,
) -> Result<(Option<Events<K>>, String), String>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: FnMut(Update<K>),
{
    on(Update::ListStarted { relist });
    let idle = WATCH_TIMEOUT * 2 + IDLE_GRACE;
    loop {
        match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => return Err(format!("the streaming list sent nothing for {}s", idle.as_secs())),
            Ok(None) => return Err("the streaming list ended before its last object".into()),
            Ok(Some(Err(e))) => return Err(error_text(&e)),
            Ok(Some(Ok(event))) => match event {
                WatchEvent::Added(object) | WatchEvent::Modified(object) => on(Update::Listed(object)),
                // Not sent in the initial events (the API server's own documentation says so).
                WatchEvent::Deleted(_) => {}
                WatchEvent::Bookmark(mark) if mark.metadata.annotations.contains_key(INITIAL_EVENTS_END) => {
                    on(Update::ListDone);
                    on(Update::Current);
                    return Ok((Some(stream), mark.metadata.resource_version));
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(status) => return Err(format!("{} {}", status.code, status.message)),
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
            Err(_) => return (Ended::Failed(format!("no event for {}s", idle.as_secs())), delivered, version),
            Ok(None) => return (Ended::Resume, delivered, version),
            Ok(Some(Err(e))) => return (Ended::Failed(error_text(&e)), delivered, version),
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
                return (Ended::Failed(format!("{} {}", status.code, status.message)), delivered, version);
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

async fn fail<K, F>(on: &mut F, backoff: &mut Backoff, error: String)
where
    F: FnMut(Update<K>),
{
    let retry_in = backoff.next_pause();
    on(Update::Failed { error, retry_in });
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

/// A request's error on one line, with the cause transport errors hide a few levels down.
fn error_text(e: &::kube::Error) -> String {
    match e {
        ::kube::Error::Api(status) => format!("{} {}", status.code, status.message),
        other => crate::kube::client::error_chain(other),
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

    #[test]
    fn a_refused_streaming_list_is_offered_again_only_later() {
        let streaming = Streaming::default();
        assert!(streaming.offered());
        assert!(streaming.refused(), "the first refusal is news");
        assert!(!streaming.offered());
        assert!(!streaming.refused(), "the next is not");
        *streaming.refused_at.lock().unwrap() = Some(Instant::now() - STREAMING_RETRY);
        assert!(streaming.offered());
    }

    #[test]
    fn watches_ask_for_timeouts_spread_between_once_and_twice_the_shortest() {
        let timeouts: Vec<u32> = (0..200).map(|_| watch_params(None, false).timeout.unwrap()).collect();
        let shortest = WATCH_TIMEOUT.as_secs() as u32;
        assert!(timeouts.iter().all(|t| (shortest..shortest * 2).contains(t)), "{timeouts:?}");
        assert!(
            timeouts.iter().any(|t| *t < shortest + shortest / 4) && timeouts.iter().any(|t| *t > shortest * 7 / 4)
        );
        let streaming = watch_params(Some("metadata.name=x"), true);
        assert!(streaming.send_initial_events && streaming.bookmarks);
    }
}
