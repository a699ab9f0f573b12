//! Whether each of the agent's watches is current: for readiness (`/readyz` says ready only when
//! every watch has listed and none has failed since) and for the cache metrics (synced, and how
//! long ago the stalest watch of a resource was last confirmed current).
//!
//! A watch is confirmed current when it lists, when it is established or resumed, when a bookmark
//! comes (the API server sends one about every minute to a watch that asks for them) and with
//! every event. It stops being current when it fails or expires, until it is back.

use super::store::WatchKey;
use crate::kube::Kind;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One of the agent's watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Watched {
    /// The node's pods.
    Pods,
    /// A ConfigMap, or a namespace's NADs.
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

#[derive(Debug)]
struct State {
    listed: bool,
    current: bool,
    confirmed: Instant,
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

impl Sync {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<Watched, State>) -> T) -> T {
        f(&mut self.watches.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A watch starts: not listed yet.
    pub fn started(&self, watched: Watched) {
        self.with(|w| w.insert(watched, State { listed: false, current: false, confirmed: Instant::now() }));
    }

    /// A watch stopped: it counts no more.
    pub fn stopped(&self, watched: &Watched) {
        self.with(|w| w.remove(watched));
    }

    /// It listed: what it holds is complete and current.
    pub fn listed(&self, watched: &Watched) {
        self.mark(watched, |s| s.listed = true);
    }

    /// It is established, resumed, sent a bookmark or an event.
    pub fn confirmed(&self, watched: &Watched) {
        self.mark(watched, |_| {});
    }

    /// It failed or expired: not current until it is back.
    pub fn lost(&self, watched: &Watched) {
        self.with(|w| {
            if let Some(state) = w.get_mut(watched) {
                state.current = false;
            }
        });
    }

    fn mark(&self, watched: &Watched, also: impl FnOnce(&mut State)) {
        self.with(|w| {
            // A watch stopped meanwhile (its task aborted) is not brought back.
            if let Some(state) = w.get_mut(watched) {
                also(state);
                state.current = state.listed;
                state.confirmed = Instant::now();
            }
        });
    }

    /// A watch that has not listed yet or is not current (and whether it has listed); none when
    /// every one is synced.
    pub fn first_behind(&self) -> Option<(Watched, bool)> {
        self.with(|w| w.iter().find(|(_, s)| !(s.listed && s.current)).map(|(k, s)| (k.clone(), s.listed)))
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
    use crate::kube::ObjectKey;

    #[test]
    fn synced_once_every_watch_listed_and_none_lost_since() {
        let sync = Sync::default();
        sync.started(Watched::Pods);
        sync.confirmed(&Watched::Pods);
        assert_eq!(sync.first_behind(), Some((Watched::Pods, false)), "established is not listed");
        sync.listed(&Watched::Pods);
        assert_eq!(sync.first_behind(), None);
        let cm = Watched::Object(WatchKey::ConfigMap(ObjectKey::new(Kind::ConfigMap, "default", "nets")));
        sync.started(cm.clone());
        assert_eq!(sync.first_behind(), Some((cm.clone(), false)));
        assert!(!sync.kind(Kind::ConfigMap).synced && sync.kind(Kind::Pod).synced);
        sync.listed(&cm);
        assert_eq!(sync.first_behind(), None);
        sync.lost(&cm);
        assert_eq!(sync.first_behind(), Some((cm.clone(), true)));
        sync.confirmed(&cm);
        assert_eq!(sync.first_behind(), None, "back once resumed");
        sync.stopped(&cm);
        sync.confirmed(&cm);
        assert_eq!(sync.kind(Kind::ConfigMap), KindState { watches: 0, synced: true, age: Duration::ZERO });
        assert_eq!(sync.kind(Kind::Pod).watches, 1);
    }
}
