//! Whether each of the agent's watches is current: for readiness (`/readyz` says ready once the
//! watch of the node's pods has listed and is current; the other watches only say which of them
//! fail and why, as they concern only the pods that need them) and for the cache metrics (synced,
//! failing, and how long ago the stalest watch of a resource was last confirmed current).
//!
//! A watch is confirmed current when it lists, when it is established or resumed, when a bookmark
//! comes (the API server sends one about every minute to a watch that asks for them) and with
//! every event. It stops being current when it fails or expires, until it is back; a failure is
//! kept, with the API server's code and message, until then.

use super::store::WatchKey;
use crate::platform::kube::Kind;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One of the agent's watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Watched {
    /// The node's pods.
    Pods,
    /// One the store needs for its pods: a ConfigMap or a ResourceClaim, a namespace's NADs, the
    /// node's ResourceSlices.
    Object(WatchKey),
}

impl Watched {
    pub fn kind(&self) -> Kind {
        match self {
            Watched::Pods => Kind::Pod,
            Watched::Object(key) => key.kind(),
        }
    }
}

impl fmt::Display for Watched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Watched::Pods => f.write_str("the watch of the node's pods"),
            Watched::Object(key) => write!(f, "the watch of {key}"),
        }
    }
}

/// Why a watch is not current: its last request's failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The API server's status code; none when it did not answer (the connection failed).
    pub code: Option<u16>,
    pub error: String,
}

impl Failure {
    /// The metrics label: the code, or `connection`.
    pub fn label(&self) -> String {
        self.code.map_or_else(|| "connection".into(), |code| code.to_string())
    }
}

#[derive(Debug)]
struct State {
    listed: bool,
    current: bool,
    confirmed: Instant,
    /// Its last failure, while it is not current.
    failure: Option<Failure>,
}

/// The state of every running watch.
#[derive(Debug, Default)]
pub struct Sync {
    watches: Mutex<HashMap<Watched, State>>,
}

/// How one resource's watches stand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KindState {
    pub watches: usize,
    /// Every one has listed and is current (true when there is none).
    pub synced: bool,
    /// Since the stalest was last confirmed current (zero when there is none).
    pub age: Duration,
}

/// How the watch of the node's pods stands, when it is not current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    pub listed: bool,
    pub failure: Option<Failure>,
}

impl Sync {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<Watched, State>) -> T) -> T {
        f(&mut self.watches.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A watch starts: not listed yet.
    pub fn started(&self, watched: Watched) {
        self.with(|w| {
            w.insert(watched, State { listed: false, current: false, confirmed: Instant::now(), failure: None })
        });
    }

    /// A watch stopped: it counts no more.
    pub fn stopped(&self, watched: &Watched) {
        self.with(|w| w.remove(watched));
    }

    /// It listed: what it holds is complete and current. Whether it was failing until now.
    pub fn listed(&self, watched: &Watched) -> bool {
        self.mark(watched, |s| s.listed = true)
    }

    /// It is established, resumed, sent a bookmark or an event. Whether it was failing until now.
    pub fn confirmed(&self, watched: &Watched) -> bool {
        self.mark(watched, |_| {})
    }

    /// It expired: not current until it is back.
    pub fn lost(&self, watched: &Watched) {
        self.with(|w| {
            if let Some(state) = w.get_mut(watched) {
                state.current = false;
            }
        });
    }

    /// It failed: not current until it is back. Whether that is news (it was not failing, or
    /// failed with another code), worth a log line.
    pub fn failed(&self, watched: &Watched, failure: Failure) -> bool {
        self.with(|w| {
            let Some(state) = w.get_mut(watched) else { return false };
            state.current = false;
            let news = state.failure.as_ref().is_none_or(|before| before.code != failure.code);
            state.failure = Some(failure);
            news
        })
    }

    fn mark(&self, watched: &Watched, also: impl FnOnce(&mut State)) -> bool {
        self.with(|w| {
            // A watch stopped meanwhile (its task aborted) is not brought back.
            let Some(state) = w.get_mut(watched) else { return false };
            also(state);
            state.current = state.listed;
            state.confirmed = Instant::now();
            if state.current { state.failure.take().is_some() } else { false }
        })
    }

    /// The watch of the node's pods, when it has not listed yet or is not current; none when it
    /// is synced (or not started).
    pub fn pods_behind(&self) -> Option<Behind> {
        self.with(|w| {
            let state = w.get(&Watched::Pods)?;
            (!(state.listed && state.current)).then(|| Behind { listed: state.listed, failure: state.failure.clone() })
        })
    }

    /// Why `watched` is not current, when its last request failed.
    pub fn failure(&self, watched: &Watched) -> Option<Failure> {
        self.with(|w| w.get(watched).filter(|s| !s.current).and_then(|s| s.failure.clone()))
    }

    /// Every watch whose last request failed, and why, in a stable order.
    pub fn failing(&self) -> Vec<(Watched, Failure)> {
        let mut failing: Vec<(Watched, Failure)> = self.with(|w| {
            w.iter().filter(|(_, s)| !s.current).filter_map(|(k, s)| Some((k.clone(), s.failure.clone()?))).collect()
        });
        failing.sort_by_key(|(watched, failure)| (watched.to_string(), failure.label()));
        failing
    }

    /// How many watches of each resource fail, by the failure's label.
    pub fn failing_by_kind(&self) -> BTreeMap<(Kind, String), usize> {
        let mut counts = BTreeMap::new();
        for (watched, failure) in self.failing() {
            *counts.entry((watched.kind(), failure.label())).or_default() += 1;
        }
        counts
    }

    pub fn kind(&self, kind: Kind) -> KindState {
        self.with(|w| {
            let mine: Vec<&State> = w.iter().filter(|(k, _)| k.kind() == kind).map(|(_, s)| s).collect();
            KindState {
                watches: mine.len(),
                synced: mine.iter().all(|s| s.listed && s.current),
                age: mine.iter().map(|s| s.confirmed.elapsed()).max().unwrap_or_default(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::kube::ObjectKey;

    #[test]
    fn a_kind_is_synced_once_each_of_its_watches_listed_with_none_lost_since() {
        let sync = Sync::default();
        sync.started(Watched::Pods);
        sync.confirmed(&Watched::Pods);
        assert_eq!(sync.pods_behind(), Some(Behind { listed: false, failure: None }), "established is not listed");
        sync.listed(&Watched::Pods);
        assert_eq!(sync.pods_behind(), None);
        let cm = Watched::Object(WatchKey::Object(ObjectKey::new(Kind::ConfigMap, "default", "nets")));
        sync.started(cm.clone());
        assert_eq!(sync.pods_behind(), None, "only the pods' watch is readiness");
        assert!(!sync.kind(Kind::ConfigMap).synced && sync.kind(Kind::Pod).synced);
        sync.listed(&cm);
        assert!(sync.kind(Kind::ConfigMap).synced);
        sync.lost(&cm);
        assert!(!sync.kind(Kind::ConfigMap).synced);
        assert_eq!(sync.failure(&cm), None, "expired is not failing");
        sync.confirmed(&cm);
        assert!(sync.kind(Kind::ConfigMap).synced, "back once resumed");
        sync.stopped(&cm);
        sync.confirmed(&cm);
        assert_eq!(sync.kind(Kind::ConfigMap), KindState { watches: 0, synced: true, age: Duration::ZERO });
        assert_eq!(sync.kind(Kind::Pod).watches, 1);
    }

    #[test]
    fn a_failure_is_kept_with_its_code_until_the_watch_is_current_again() {
        let sync = Sync::default();
        let nads = Watched::Object(WatchKey::Attachments("team-a".into()));
        sync.started(Watched::Pods);
        sync.started(nads.clone());
        let missing = Failure { code: Some(404), error: "404 the server could not find the requested resource".into() };
        assert!(sync.failed(&nads, missing.clone()), "the first failure is news");
        assert!(!sync.failed(&nads, missing.clone()), "the same again is not");
        let refused = Failure { code: None, error: "connection refused".into() };
        assert!(sync.failed(&Watched::Pods, refused.clone()));
        assert_eq!(sync.pods_behind(), Some(Behind { listed: false, failure: Some(refused) }));
        assert_eq!(sync.failure(&nads), Some(missing.clone()));
        assert_eq!(
            sync.failing_by_kind(),
            BTreeMap::from([
                ((Kind::Pod, "connection".to_string()), 1),
                ((Kind::NetworkAttachmentDefinition, "404".to_string()), 1)
            ])
        );
        assert!(!sync.confirmed(&nads), "established, not listed: still not current");
        assert_eq!(sync.failure(&nads), Some(missing));
        assert!(sync.listed(&nads), "listed: it was failing until now");
        assert_eq!(sync.failure(&nads), None);
        assert_eq!(sync.failing().len(), 1);
        assert!(!sync.listed(&nads), "no failure to recover from");
    }
}
