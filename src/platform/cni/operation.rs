//! One plugin operation's context, `Operation`: what the operation notes as it goes, read by the
//! one line it leaves in the log (`skel`) and by the report the selector sends its node agent.
//! `skel::run_with` makes one for each operation and hands it to the plugin's verbs; what they note
//! into it (the selector's networks, where its selection came from, how far it got) and the API
//! requests its clients make (`kube::ApiClient`) stay with that operation. What a program adds of
//! its own is kept generic here: its stage is a number the program gives meaning to.

use super::delegate::{Delegates, ExecDelegates};
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// What one operation has noted so far.
pub struct Operation {
    /// How the operation's plugin runs the plugins it delegates to.
    delegates: &'static dyn Delegates,
    /// The networks the operation concerns, comma-separated, when the plugin knows better than its
    /// config's `name` (the selector learns them by selecting).
    networks: Mutex<String>,
    /// Where the selector got the operation's selection from (`agent`, or `api` and why not the
    /// agent).
    selection: Mutex<String>,
    /// How far the operation got, in the plugin's own numbering; 0 until noted.
    stage: AtomicU8,
    /// Requests made to the API server for the operation (every attempt counts).
    api_requests: ApiRequests,
}

/// The count of an operation's requests to the API server, which its API clients add to.
#[derive(Debug, Clone, Default)]
pub struct ApiRequests(Arc<AtomicU32>);

impl ApiRequests {
    /// One more request.
    pub fn count_one(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn made(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Default for Operation {
    /// An operation whose delegates are exec'd from the CNI path.
    fn default() -> Self {
        Self::with_delegates(&ExecDelegates)
    }
}

impl std::fmt::Debug for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operation")
            .field("networks", &self.networks)
            .field("selection", &self.selection)
            .field("stage", &self.stage)
            .field("api_requests", &self.api_requests)
            .finish_non_exhaustive()
    }
}

impl Operation {
    /// An operation whose plugin runs its delegates with `delegates`.
    pub fn with_delegates(delegates: &'static dyn Delegates) -> Self {
        Operation {
            delegates,
            networks: Mutex::default(),
            selection: Mutex::default(),
            stage: AtomicU8::default(),
            api_requests: ApiRequests::default(),
        }
    }

    /// How the operation's plugin runs the plugins it delegates to.
    pub fn delegates(&self) -> &'static dyn Delegates {
        self.delegates
    }

    /// Note the operation's networks (none: the config's `name` stays).
    pub fn note_networks<'a>(&self, names: impl Iterator<Item = &'a str>) {
        let names: Vec<&str> = names.collect();
        if !names.is_empty() {
            *self.networks.lock().unwrap_or_else(|e| e.into_inner()) = names.join(",");
        }
    }

    pub fn noted_networks(&self) -> Option<String> {
        Some(self.networks.lock().unwrap_or_else(|e| e.into_inner()).clone()).filter(|n| !n.is_empty())
    }

    pub fn note_selection(&self, how: &str) {
        *self.selection.lock().unwrap_or_else(|e| e.into_inner()) = how.to_string();
    }

    pub fn noted_selection(&self) -> Option<String> {
        Some(self.selection.lock().unwrap_or_else(|e| e.into_inner()).clone()).filter(|n| !n.is_empty())
    }

    pub fn note_stage(&self, stage: u8) {
        self.stage.store(stage, Ordering::Relaxed);
    }

    pub fn noted_stage(&self) -> u8 {
        self.stage.load(Ordering::Relaxed)
    }

    /// The count the operation's API clients add their requests to.
    pub fn api_requests(&self) -> &ApiRequests {
        &self.api_requests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_notes_only_its_own() {
        let (op, other) = (Operation::default(), Operation::default());
        assert_eq!((op.noted_networks(), op.noted_selection(), op.noted_stage()), (None, None, 0));
        op.note_networks(["a", "b"].into_iter());
        op.note_networks(std::iter::empty());
        op.note_selection("agent");
        op.note_stage(2);
        let client = op.api_requests().clone();
        client.count_one();
        client.count_one();
        assert_eq!(op.noted_networks().as_deref(), Some("a,b"), "none noted keeps the networks");
        assert_eq!(
            (op.noted_selection().as_deref(), op.noted_stage(), op.api_requests().made()),
            (Some("agent"), 2, 2)
        );
        assert_eq!((other.noted_networks(), other.api_requests().made()), (None, 0));
    }
}
