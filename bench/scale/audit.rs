//! The API server's audit log, read back: every request once (a watch logs when its response
//! starts and when it ends), with who made it (a node's token names its node), what, and when.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone)]
pub struct Request {
    pub at: SystemTime,
    pub user: String,
    /// The node a pod-bound service account token was bound to.
    pub node: Option<String>,
    pub verb: String,
    pub resource: String,
    /// A watch with `sendInitialEvents=true`.
    pub streaming_list: bool,
    /// The answer's HTTP status.
    pub code: u16,
}

impl Request {
    /// A list, or a watch that begins with the whole state: what a relist costs.
    pub fn is_list(&self) -> bool {
        self.verb == "list" || self.streaming_list
    }

    /// How the tables name it: `list pods`, `watch configmaps`, `watch+list pods` (a streaming
    /// list), with the status when it was refused: `create events (403)`.
    pub fn label(&self) -> String {
        let verb = if self.streaming_list { "watch+list" } else { self.verb.as_str() };
        match self.code {
            400.. => format!("{verb} {} ({})", self.resource, self.code),
            _ => format!("{verb} {}", self.resource),
        }
    }
}

pub struct Audit {
    pub requests: Vec<Request>,
}

impl Audit {
    pub fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut seen = HashSet::new();
        let mut requests = Vec::new();
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let id = event["auditID"].as_str().unwrap_or_default().to_string();
            if !seen.insert(id) {
                continue;
            }
            let at = event["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| k8s_openapi::jiff::Timestamp::from_str(t).ok())
                .map(|t| UNIX_EPOCH + Duration::from_micros(t.as_microsecond().max(0) as u64))
                .unwrap_or(UNIX_EPOCH);
            let node = event["user"]["extra"]["authentication.kubernetes.io/node-name"][0].as_str().map(String::from);
            let uri = event["requestURI"].as_str().unwrap_or_default();
            let mut resource = event["objectRef"]["resource"].as_str().unwrap_or("-").to_string();
            if let Some(sub) = event["objectRef"]["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            requests.push(Request {
                at,
                user: event["user"]["username"].as_str().unwrap_or_default().to_string(),
                node,
                verb: event["verb"].as_str().unwrap_or_default().to_string(),
                resource,
                streaming_list: uri.contains("sendInitialEvents=true"),
                code: event["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
            });
        }
        requests.sort_by_key(|r| r.at);
        Audit { requests }
    }

    /// The requests of `user` in [from, to).
    pub fn of(&self, user: &str, from: SystemTime, to: SystemTime) -> impl Iterator<Item = &Request> {
        self.requests.iter().filter(move |r| r.user == user && r.at >= from && r.at < to)
    }

    /// Requests of `user` in [from, to) by label.
    pub fn table(&self, user: &str, from: SystemTime, to: SystemTime) -> BTreeMap<String, usize> {
        let mut table = BTreeMap::new();
        for r in self.of(user, from, to) {
            *table.entry(r.label()).or_default() += 1;
        }
        table
    }

    /// Requests of `user` in [from, to) per node.
    pub fn per_node(&self, user: &str, from: SystemTime, to: SystemTime) -> BTreeMap<String, usize> {
        let mut table = BTreeMap::new();
        for r in self.of(user, from, to) {
            *table.entry(r.node.clone().unwrap_or_default()).or_default() += 1;
        }
        table
    }
}
