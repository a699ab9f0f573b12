//! Every request the server received, counted and logged, and the authenticated ones by client (the
//! plugin's token or the agent's), verb and resource, as RBAC and the tests see them.

use super::ApiServer;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One request as RBAC and the tests see it: who asked (`plugin` or `agent`), verb, resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub client: &'static str,
    pub verb: &'static str,
    pub resource: &'static str,
    /// The `resourceVersion` asked for (lists: "0" is "from the watch cache").
    pub resource_version: Option<String>,
    /// A watch with `sendInitialEvents=true`: a streaming list.
    pub streaming_list: bool,
}

#[derive(Default)]
pub(super) struct Requests {
    received: AtomicUsize,
    /// `METHOD /path` of every request, in order.
    log: Mutex<Vec<String>>,
    calls: Mutex<Vec<Call>>,
}

impl Requests {
    /// A request arrived (each one counts, whatever the answer).
    pub fn received(&self, method: &hyper::Method, path: &str) {
        self.received.fetch_add(1, Ordering::SeqCst);
        self.log.lock().unwrap().push(format!("{method} {path}"));
    }

    /// An authenticated request was understood as `call`.
    pub fn record(&self, call: Call) {
        self.calls.lock().unwrap().push(call);
    }
}

impl ApiServer {
    /// Requests received so far (each one counts, whatever the answer).
    pub fn requests(&self) -> usize {
        self.state.requests.received.load(Ordering::SeqCst)
    }

    /// `METHOD /path` of every request so far, in order.
    pub fn request_log(&self) -> Vec<String> {
        self.state.requests.log.lock().unwrap().clone()
    }

    /// Every authenticated request so far, by client, verb and resource, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state.requests.calls.lock().unwrap().clone()
    }

    /// Requests made with the plugin's token (`TOKEN`) so far.
    pub fn plugin_requests(&self) -> usize {
        self.calls().iter().filter(|c| c.client == "plugin").count()
    }
}
