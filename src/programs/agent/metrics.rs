//! The agent's metrics, in the Prometheus text format (`/metrics` on its local port), named and
//! labelled as Prometheus asks (a unit in every name, `_total` counters, `_seconds`, bounded labels:
//! resources, outcomes, reasons and the admin's network names; never a pod's name). Each family is
//! documented in docs/agent.md.
//!
//! - The agent's own: readiness, what it holds, its watches (synced, age, restarts, relists), its
//!   answers to the plugin and the status writes it makes for it.
//! - `yh-ipam`'s on this node (`yh_genie_agent_ipam_*`): the blocks it holds and their addresses
//!   used and free, by pool (the admin's pool names), and its lease's age; whether it is the
//!   dead-node releaser, and the dead nodes' blocks it released.
//! - The plugin's operations (`yh_genie_cni_*`): ADD, DEL and CHECK latency per network and outcome,
//!   failures by reason, the API requests each command made, where ADD's selection came from; from
//!   the report each plugin process sends when it is done (`node::reports`), so they
//!   count the operations of the node while the agent ran.
//!
//! Each answer the plugin cannot use (`unknown`, `refused`) is a fallback of the plugin to the
//! direct path; the fallbacks the agent cannot see at the socket (it was not running, its socket was
//! missing) are counted by the plugin's reports (`selection="api"`) when the agent hears them, and
//! are in the plugin's operation log line (`selection="api: ..."`) always.

use super::addresses::PoolUsage;
use super::store::{Miss, Store};
use super::sync::Sync;
use crate::node::reports::{Command, Failure, OperationReport, Selection};
use crate::platform::kube::Kind;
use crate::programs::agent::watching::list_watch::Streaming;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How an answer to a selection request went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered from what was held at once.
    Hit,
    /// Answered after waiting for a watch to deliver the pod or an object.
    HitAfterWait,
    /// "Unknown": the plugin asks the API server.
    Unknown,
    /// The request could not be served (malformed, another protocol version, queue full).
    Refused,
}

const OUTCOMES: [(&str, Outcome); 4] = [
    ("hit", Outcome::Hit),
    ("hit_after_wait", Outcome::HitAfterWait),
    ("unknown", Outcome::Unknown),
    ("refused", Outcome::Refused),
];

/// How a status write for the plugin ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusOutcome {
    Written,
    PodGone,
    Failed,
}

const STATUS_OUTCOMES: [(&str, StatusOutcome); 3] =
    [("written", StatusOutcome::Written), ("pod_gone", StatusOutcome::PodGone), ("failed", StatusOutcome::Failed)];

/// How an `AddedInterface` event handed over by the plugin ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    Created,
    /// Refused by the API server, or not sent within its budget.
    Failed,
    /// The queue had no room for it.
    Dropped,
}

const EVENT_OUTCOMES: [(&str, EventOutcome); 3] =
    [("created", EventOutcome::Created), ("failed", EventOutcome::Failed), ("dropped", EventOutcome::Dropped)];

const RESOURCES: [(&str, Kind); 5] = [
    ("pods", Kind::Pod),
    ("configmaps", Kind::ConfigMap),
    ("network-attachment-definitions", Kind::NetworkAttachmentDefinition),
    ("resourceclaims", Kind::ResourceClaim),
    ("resourceslices", Kind::ResourceSlice),
];

/// Upper bounds of the answer latency histogram, in seconds: a local lookup, or a wait for a watch.
const ANSWER_BUCKETS: [f64; 12] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5];
/// Upper bounds of the plugin operation histograms, in seconds: a no-op network's ADD takes a few
/// milliseconds, a device plugin's or a slow IPAM's seconds.
const OPERATION_BUCKETS: [f64; 13] = [0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Distinct network names the operation metrics carry; the operations of any further network are
/// counted under `network="other"`. Network names are the admin's (the node's network files), but a
/// namespace policy may let pods bring inline configurations of their own naming: this bounds them.
pub const MAX_NETWORK_LABELS: usize = 64;
const OTHER_NETWORK: &str = "other";

/// A histogram's bucket counts (the last: above every bound) and sum.
#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], seconds: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len() + 1];
        }
        let bucket = bounds.iter().position(|bound| seconds <= *bound).unwrap_or(bounds.len());
        self.counts[bucket] += 1;
        self.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, bound) in bounds.iter().enumerate() {
            cumulative += self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.counts.get(bounds.len()).copied().unwrap_or(0);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}");
        let braces = |s: &str| if s.is_empty() { String::new() } else { format!("{{{s}}}") };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {cumulative}", braces(labels));
    }
}

/// What the plugin's reports tell.
#[derive(Debug, Default)]
struct Operations {
    durations: BTreeMap<(Command, String, bool), Histogram>,
    failures: BTreeMap<(Command, String, Failure), u64>,
    api_requests: BTreeMap<Command, u64>,
    selections: BTreeMap<&'static str, u64>,
    networks: BTreeSet<String>,
    /// Datagrams that were not reports.
    malformed: u64,
}

impl Operations {
    /// The label for `network`: itself while there are few, else `other`.
    fn network_label(&mut self, network: &str) -> String {
        if self.networks.contains(network) {
            return network.to_string();
        }
        if self.networks.len() < MAX_NETWORK_LABELS {
            self.networks.insert(network.to_string());
            return network.to_string();
        }
        OTHER_NETWORK.to_string()
    }
}

#[derive(Default)]
pub struct Metrics {
    answers: [AtomicU64; 4],
    misses: [AtomicU64; Miss::LABELS.len()],
    answer_latency: Mutex<Histogram>,
    watch_errors: [AtomicU64; RESOURCES.len()],
    relists: [AtomicU64; RESOURCES.len()],
    statuses: [AtomicU64; 3],
    events: [AtomicU64; 3],
    /// `yh-ipam`: blocks of dead nodes this agent released.
    dead_node_blocks_released: AtomicU64,
    /// `yh-ipam`: 1 while this agent is the dead-node releaser.
    releaser: AtomicU64,
    operations: Mutex<Operations>,
}

fn index<T: PartialEq + Copy>(table: &[(&str, T)], value: T) -> usize {
    table.iter().position(|(_, v)| *v == value).expect("every value is in its table")
}

/// What a scrape reads besides the counters: the store, the watches, readiness.
pub struct Snapshot<'a> {
    pub store: &'a Store,
    pub sync: &'a Sync,
    pub streaming: &'a Streaming,
    pub ready: bool,
    pub default_network_ready: bool,
    /// `yh-ipam`: what the node holds of each pool.
    pub ipam: BTreeMap<String, PoolUsage>,
    /// `yh-ipam`: since the node's lease was last renewed, if it holds one.
    pub ipam_lease_age: Option<Duration>,
}

impl Metrics {
    pub fn answered(&self, outcome: Outcome, took: Duration) {
        self.answers[index(&OUTCOMES, outcome)].fetch_add(1, Ordering::Relaxed);
        lock(&self.answer_latency).observe(&ANSWER_BUCKETS, took.as_secs_f64());
    }

    pub fn missed(&self, miss: &Miss) {
        let i = Miss::LABELS.iter().position(|l| *l == miss.label()).expect("every miss has a label");
        self.misses[i].fetch_add(1, Ordering::Relaxed);
    }

    /// A watch of `kind` failed (it is re-established after a jittered backoff).
    pub fn watch_error(&self, kind: Kind) {
        self.watch_errors[index(&RESOURCES, kind)].fetch_add(1, Ordering::Relaxed);
    }

    /// A watch of `kind` listed anew (its resourceVersion was too old to resume from).
    pub fn relisted(&self, kind: Kind) {
        self.relists[index(&RESOURCES, kind)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn status(&self, outcome: StatusOutcome) {
        self.statuses[index(&STATUS_OUTCOMES, outcome)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn event(&self, outcome: EventOutcome) {
        self.events[index(&EVENT_OUTCOMES, outcome)].fetch_add(1, Ordering::Relaxed);
    }

    /// A plugin operation's report.
    pub fn operation(&self, report: &OperationReport) {
        let mut ops = lock(&self.operations);
        let network = if report.network.is_empty() { String::new() } else { ops.network_label(&report.network) };
        ops.durations
            .entry((report.command, network.clone(), report.failure.is_none()))
            .or_default()
            .observe(&OPERATION_BUCKETS, report.seconds);
        if let Some(failure) = report.failure {
            *ops.failures.entry((report.command, network, failure)).or_default() += 1;
        }
        *ops.api_requests.entry(report.command).or_default() += u64::from(report.api_requests);
        if let Some(selection) = report.selection {
            let source = match selection {
                Selection::Agent => "agent",
                Selection::Api => "api",
            };
            *ops.selections.entry(source).or_default() += 1;
        }
    }

    /// `yh-ipam`: a dead node's block released by this agent.
    pub fn ipam_dead_node_block_released(&self) {
        self.dead_node_blocks_released.fetch_add(1, Ordering::Relaxed);
    }

    /// `yh-ipam`: whether this agent is the dead-node releaser.
    pub fn ipam_releaser(&self, leading: bool) {
        self.releaser.store(u64::from(leading), Ordering::Relaxed);
    }

    /// A datagram on the report socket that is not a report.
    pub fn malformed_report(&self) {
        lock(&self.operations).malformed += 1;
    }

    /// The text a scrape gets.
    pub fn render(&self, now: &Snapshot<'_>) -> String {
        let mut out = String::new();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        family(
            &mut out,
            "yh_genie_agent_ready",
            "gauge",
            "1 when /readyz says ready: the node's pods listed and their watch current, the default network ready",
        );
        let _ = writeln!(out, "yh_genie_agent_ready {}", u8::from(now.ready));
        family(
            &mut out,
            "yh_genie_agent_default_network_ready",
            "gauge",
            "1 once the installer has written the conflist (every --wait-for file is there)",
        );
        let _ = writeln!(out, "yh_genie_agent_default_network_ready {}", u8::from(now.default_network_ready));
        family(&mut out, "yh_genie_agent_pods", "gauge", "pods of this node held");
        let _ = writeln!(out, "yh_genie_agent_pods {}", now.store.pod_count());
        family(
            &mut out,
            "yh_genie_agent_objects",
            "gauge",
            "objects the node's pods refer to (and their namespaces' NADs), held",
        );
        for (label, kind) in &RESOURCES[1..] {
            let _ = writeln!(out, "yh_genie_agent_objects{{resource=\"{label}\"}} {}", now.store.object_count(*kind));
        }
        let kinds: Vec<(&str, super::sync::KindState)> =
            RESOURCES.iter().map(|(label, kind)| (*label, now.sync.kind(*kind))).collect();
        family(&mut out, "yh_genie_agent_watches", "gauge", "watches running, all on one connection");
        for (label, state) in &kinds {
            let _ = writeln!(out, "yh_genie_agent_watches{{resource=\"{label}\"}} {}", state.watches);
        }
        family(
            &mut out,
            "yh_genie_agent_cache_synced",
            "gauge",
            "1 when every watch of the resource has listed and none has failed since",
        );
        for (label, state) in &kinds {
            let _ = writeln!(out, "yh_genie_agent_cache_synced{{resource=\"{label}\"}} {}", u8::from(state.synced));
        }
        family(
            &mut out,
            "yh_genie_agent_cache_age_seconds",
            "gauge",
            "since the stalest watch of the resource was last confirmed current (list, resume, bookmark, event)",
        );
        for (label, state) in &kinds {
            let _ = writeln!(
                out,
                "yh_genie_agent_cache_age_seconds{{resource=\"{label}\"}} {:.3}",
                state.age.as_secs_f64()
            );
        }
        family(
            &mut out,
            "yh_genie_agent_watches_failing",
            "gauge",
            "watches not current because their last request failed, by the API server's code (connection: no answer)",
        );
        for ((kind, code), count) in now.sync.failing_by_kind() {
            let label = RESOURCES[index(&RESOURCES, kind)].0;
            let _ = writeln!(out, "yh_genie_agent_watches_failing{{resource=\"{label}\",code=\"{code}\"}} {count}");
        }
        family(
            &mut out,
            "yh_genie_agent_streaming_lists",
            "gauge",
            "1 while lists are asked for as streaming lists; 0 for a while after the API server did not serve one",
        );
        let _ = writeln!(out, "yh_genie_agent_streaming_lists {}", u8::from(now.streaming.offered()));
        family(
            &mut out,
            "yh_genie_agent_streaming_list_refusals_total",
            "counter",
            "streaming lists not served, each followed by a list that was, by cause (a status code, ended, silent, undecodable)",
        );
        for (cause, count) in now.streaming.refusals() {
            let _ = writeln!(out, "yh_genie_agent_streaming_list_refusals_total{{cause=\"{cause}\"}} {count}");
        }
        family(
            &mut out,
            "yh_genie_agent_watch_restarts_total",
            "counter",
            "watch failures, each re-established after a jittered backoff",
        );
        for (i, (label, _)) in RESOURCES.iter().enumerate() {
            let _ = writeln!(
                out,
                "yh_genie_agent_watch_restarts_total{{resource=\"{label}\"}} {}",
                get(&self.watch_errors[i])
            );
        }
        family(
            &mut out,
            "yh_genie_agent_relists_total",
            "counter",
            "lists after the first (a watch that could not resume: 410 Gone)",
        );
        for (i, (label, _)) in RESOURCES.iter().enumerate() {
            let _ = writeln!(out, "yh_genie_agent_relists_total{{resource=\"{label}\"}} {}", get(&self.relists[i]));
        }
        family(
            &mut out,
            "yh_genie_agent_answers_total",
            "counter",
            "selection requests by outcome (unknown and refused: the plugin asks the API server)",
        );
        for (i, (label, _)) in OUTCOMES.iter().enumerate() {
            let _ = writeln!(out, "yh_genie_agent_answers_total{{outcome=\"{label}\"}} {}", get(&self.answers[i]));
        }
        family(&mut out, "yh_genie_agent_unknown_total", "counter", "unknown answers by reason");
        for (i, label) in Miss::LABELS.iter().enumerate() {
            let _ = writeln!(out, "yh_genie_agent_unknown_total{{reason=\"{label}\"}} {}", get(&self.misses[i]));
        }
        family(&mut out, "yh_genie_agent_answer_seconds", "histogram", "time from a selection request to its answer");
        lock(&self.answer_latency).render(&mut out, "yh_genie_agent_answer_seconds", "", &ANSWER_BUCKETS);
        family(
            &mut out,
            "yh_genie_agent_status_writes_total",
            "counter",
            "network-status annotations written for the plugin, by outcome",
        );
        for (i, (label, _)) in STATUS_OUTCOMES.iter().enumerate() {
            let _ =
                writeln!(out, "yh_genie_agent_status_writes_total{{outcome=\"{label}\"}} {}", get(&self.statuses[i]));
        }
        family(
            &mut out,
            "yh_genie_agent_events_total",
            "counter",
            "AddedInterface events handed over by the plugin, by outcome (sent when the node is quiet)",
        );
        for (i, (label, _)) in EVENT_OUTCOMES.iter().enumerate() {
            let _ = writeln!(out, "yh_genie_agent_events_total{{outcome=\"{label}\"}} {}", get(&self.events[i]));
        }
        render_ipam(&mut out, now);
        family(
            &mut out,
            "yh_genie_agent_ipam_dead_node_blocks_released_total",
            "counter",
            "yh-ipam blocks of dead nodes (Node deleted or out-of-service, lease expired) this agent released",
        );
        let released = get(&self.dead_node_blocks_released);
        let _ = writeln!(out, "yh_genie_agent_ipam_dead_node_blocks_released_total {released}");
        family(&mut out, "yh_genie_agent_ipam_releaser", "gauge", "1 while this agent is yh-ipam's dead-node releaser");
        let _ = writeln!(out, "yh_genie_agent_ipam_releaser {}", get(&self.releaser));
        self.render_operations(&mut out);
        out
    }

    fn render_operations(&self, out: &mut String) {
        let ops = lock(&self.operations);
        let name = "yh_genie_cni_operation_duration_seconds";
        family(out, name, "histogram", "plugin ADD, DEL and CHECK, from the plugin's start to its answer");
        for ((command, network, success), histogram) in &ops.durations {
            let outcome = if *success { "success" } else { "error" };
            let labels =
                format!("command=\"{}\",network=\"{}\",outcome=\"{outcome}\"", command.label(), escape(network));
            histogram.render(out, name, &labels, &OPERATION_BUCKETS);
        }
        family(out, "yh_genie_cni_operation_errors_total", "counter", "failed plugin operations by reason");
        for ((command, network, failure), count) in &ops.failures {
            let _ = writeln!(
                out,
                "yh_genie_cni_operation_errors_total{{command=\"{}\",network=\"{}\",reason=\"{}\"}} {count}",
                command.label(),
                escape(network),
                failure.label()
            );
        }
        family(
            out,
            "yh_genie_cni_api_requests_total",
            "counter",
            "requests the plugin made to the API server, by command (ADD: 0 while the agent answers)",
        );
        for command in Command::ALL {
            let count = ops.api_requests.get(&command).copied().unwrap_or(0);
            let _ = writeln!(out, "yh_genie_cni_api_requests_total{{command=\"{}\"}} {count}", command.label());
        }
        family(
            out,
            "yh_genie_cni_add_selections_total",
            "counter",
            "ADDs by where the pod's selection came from: the agent, or the API server (a fallback)",
        );
        for source in ["agent", "api"] {
            let count = ops.selections.get(source).copied().unwrap_or(0);
            let _ = writeln!(out, "yh_genie_cni_add_selections_total{{source=\"{source}\"}} {count}");
        }
        family(
            out,
            "yh_genie_agent_malformed_reports_total",
            "counter",
            "datagrams on the report socket that were not reports",
        );
        let _ = writeln!(out, "yh_genie_agent_malformed_reports_total {}", ops.malformed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn render_ipam(out: &mut String, now: &Snapshot<'_>) {
    family(out, "yh_genie_agent_ipam_blocks", "gauge", "yh-ipam blocks this node holds, by pool");
    for (pool, usage) in &now.ipam {
        let _ = writeln!(out, "yh_genie_agent_ipam_blocks{{pool=\"{}\"}} {}", escape(pool), usage.blocks);
    }
    family(
        out,
        "yh_genie_agent_ipam_addresses",
        "gauge",
        "addresses of this node's yh-ipam blocks, by pool: handed out (used) and still free",
    );
    for (pool, usage) in &now.ipam {
        let pool = escape(pool);
        let _ = writeln!(out, "yh_genie_agent_ipam_addresses{{pool=\"{pool}\",state=\"used\"}} {}", usage.used);
        if let Some(free) = usage.free {
            let _ = writeln!(out, "yh_genie_agent_ipam_addresses{{pool=\"{pool}\",state=\"free\"}} {free}");
        }
    }
    family(
        out,
        "yh_genie_agent_ipam_fixed_addresses",
        "gauge",
        "fixed yh-ipam addresses (kept for a StatefulSet's ordinal or an IPAMClaim, outside the node's blocks) this node's pods hold, by pool",
    );
    for (pool, usage) in &now.ipam {
        let _ = writeln!(out, "yh_genie_agent_ipam_fixed_addresses{{pool=\"{}\"}} {}", escape(pool), usage.fixed);
    }
    family(
        out,
        "yh_genie_agent_ipam_lease_age_seconds",
        "gauge",
        "since the node's yh-ipam lease was last renewed (none while the node holds no lease)",
    );
    if let Some(age) = now.ipam_lease_age {
        let _ = writeln!(out, "yh_genie_agent_ipam_lease_age_seconds {:.3}", age.as_secs_f64());
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value as the text format wants it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::reports::VERSION;
    use crate::programs::agent::store::WatchKey;
    use crate::programs::agent::sync::{Failure as WatchFailure, Watched};
    use crate::programs::selector::agent_face::AttachmentPolicy;

    fn snapshot<'a>(store: &'a Store, sync: &'a Sync) -> Snapshot<'a> {
        static STREAMING: std::sync::LazyLock<Streaming> = std::sync::LazyLock::new(Streaming::default);
        Snapshot {
            store,
            sync,
            streaming: &STREAMING,
            ready: false,
            default_network_ready: true,
            ipam: BTreeMap::new(),
            ipam_lease_age: None,
        }
    }

    fn lines(text: &str, expected: &[&str]) {
        for line in expected {
            assert!(text.lines().any(|l| l == *line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn yh_ipam_pools_render_their_blocks_and_addresses() {
        let (store, sync) = (Store::new(AttachmentPolicy::default()), Sync::default());
        let mut now = snapshot(&store, &sync);
        now.ipam.insert("lan".into(), PoolUsage { blocks: 2, used: 5, free: Some(3), fixed: 2 });
        now.ipam.insert("restored".into(), PoolUsage { blocks: 1, used: 1, free: None, fixed: 0 });
        now.ipam_lease_age = Some(Duration::from_millis(1500));
        let metrics = Metrics::default();
        metrics.ipam_dead_node_block_released();
        metrics.ipam_dead_node_block_released();
        metrics.ipam_releaser(true);
        let text = metrics.render(&now);
        lines(
            &text,
            &[
                "yh_genie_agent_ipam_dead_node_blocks_released_total 2",
                "yh_genie_agent_ipam_releaser 1",
                "yh_genie_agent_ipam_blocks{pool=\"lan\"} 2",
                "yh_genie_agent_ipam_addresses{pool=\"lan\",state=\"used\"} 5",
                "yh_genie_agent_ipam_addresses{pool=\"lan\",state=\"free\"} 3",
                "yh_genie_agent_ipam_blocks{pool=\"restored\"} 1",
                "yh_genie_agent_ipam_addresses{pool=\"restored\",state=\"used\"} 1",
                "yh_genie_agent_ipam_fixed_addresses{pool=\"lan\"} 2",
                "yh_genie_agent_ipam_fixed_addresses{pool=\"restored\"} 0",
                "yh_genie_agent_ipam_lease_age_seconds 1.500",
            ],
        );
        assert!(!text.contains("pool=\"restored\",state=\"free\""), "free unknown until the pool's ranges are: {text}");
    }

    #[test]
    fn metrics_render_in_prometheus_text_format() {
        let m = Metrics::default();
        m.answered(Outcome::Hit, Duration::from_micros(80));
        m.answered(Outcome::HitAfterWait, Duration::from_millis(300));
        m.answered(Outcome::Unknown, Duration::from_secs(1));
        m.missed(&Miss::NotSeen);
        m.watch_error(Kind::ConfigMap);
        m.relisted(Kind::Pod);
        m.status(StatusOutcome::Written);
        let (store, sync) = (Store::new(AttachmentPolicy::default()), Sync::default());
        let nads = |namespace: &str| Watched::Object(WatchKey::Attachments(namespace.into()));
        for (namespace, code) in [("a", Some(404)), ("b", Some(404)), ("c", Some(403)), ("d", None)] {
            sync.started(nads(namespace));
            sync.failed(&nads(namespace), WatchFailure { code, error: "no".into() });
        }
        let text = m.render(&snapshot(&store, &sync));
        lines(
            &text,
            &[
                "yh_genie_agent_ready 0",
                "yh_genie_agent_default_network_ready 1",
                "yh_genie_agent_answers_total{outcome=\"hit\"} 1",
                "yh_genie_agent_answers_total{outcome=\"unknown\"} 1",
                "yh_genie_agent_unknown_total{reason=\"pod_not_seen\"} 1",
                "yh_genie_agent_watch_restarts_total{resource=\"configmaps\"} 1",
                "yh_genie_agent_relists_total{resource=\"pods\"} 1",
                "yh_genie_agent_status_writes_total{outcome=\"written\"} 1",
                "yh_genie_agent_watches{resource=\"configmaps\"} 0",
                "yh_genie_agent_cache_synced{resource=\"configmaps\"} 1",
                "yh_genie_agent_watches_failing{resource=\"network-attachment-definitions\",code=\"404\"} 2",
                "yh_genie_agent_watches_failing{resource=\"network-attachment-definitions\",code=\"403\"} 1",
                "yh_genie_agent_watches_failing{resource=\"network-attachment-definitions\",code=\"connection\"} 1",
                "yh_genie_agent_streaming_lists 1",
                "yh_genie_agent_answer_seconds_bucket{le=\"0.0001\"} 1",
                "yh_genie_agent_answer_seconds_bucket{le=\"0.5\"} 2",
                "yh_genie_agent_answer_seconds_bucket{le=\"+Inf\"} 3",
                "yh_genie_agent_answer_seconds_count 3",
                "# TYPE yh_genie_agent_answer_seconds histogram",
                "# TYPE yh_genie_cni_operation_duration_seconds histogram",
                "yh_genie_cni_add_selections_total{source=\"agent\"} 0",
            ],
        );
    }

    /// The metrics' text after five plugin reports on networks `lan` and "", and CHECKs on more
    /// networks than are labelled, each named with a quote in it.
    fn rendered_plugin_reports() -> String {
        let m = Metrics::default();
        let report = |command, network: &str, failure, seconds, selection, api_requests| OperationReport {
            version: VERSION,
            command,
            network: network.into(),
            failure,
            seconds,
            selection,
            api_requests,
        };
        m.operation(&report(Command::Add, "lan", None, 0.004, Some(Selection::Agent), 0));
        m.operation(&report(Command::Add, "lan", None, 0.02, Some(Selection::Api), 2));
        m.operation(&report(Command::Add, "lan", Some(Failure::Plugin), 0.3, Some(Selection::Agent), 0));
        m.operation(&report(Command::Add, "", Some(Failure::Policy), 0.001, Some(Selection::Agent), 0));
        m.operation(&report(Command::Del, "lan", None, 0.002, None, 0));
        for i in 0..MAX_NETWORK_LABELS + 5 {
            m.operation(&report(Command::Check, &format!("n\"{i}"), None, 0.001, None, 0));
        }
        m.malformed_report();
        let (store, sync) = (Store::new(AttachmentPolicy::default()), Sync::default());
        m.render(&snapshot(&store, &sync))
    }

    #[test]
    fn plugin_reports_become_histograms_per_command_network_outcome() {
        lines(
            &rendered_plugin_reports(),
            &[
                "yh_genie_cni_operation_duration_seconds_bucket{command=\"ADD\",network=\"lan\",outcome=\"success\",le=\"0.005\"} 1",
                "yh_genie_cni_operation_duration_seconds_bucket{command=\"ADD\",network=\"lan\",outcome=\"success\",le=\"0.025\"} 2",
                "yh_genie_cni_operation_duration_seconds_count{command=\"ADD\",network=\"lan\",outcome=\"success\"} 2",
                "yh_genie_cni_operation_duration_seconds_count{command=\"ADD\",network=\"lan\",outcome=\"error\"} 1",
                "yh_genie_cni_operation_duration_seconds_count{command=\"DEL\",network=\"lan\",outcome=\"success\"} 1",
                "yh_genie_cni_operation_errors_total{command=\"ADD\",network=\"lan\",reason=\"plugin\"} 1",
                "yh_genie_cni_operation_errors_total{command=\"ADD\",network=\"\",reason=\"policy\"} 1",
                "yh_genie_cni_api_requests_total{command=\"ADD\"} 2",
                "yh_genie_cni_add_selections_total{source=\"agent\"} 3",
                "yh_genie_cni_add_selections_total{source=\"api\"} 1",
                "yh_genie_agent_malformed_reports_total 1",
            ],
        );
    }

    #[test]
    fn network_labels_are_escaped_with_networks_past_the_first_64_counted_as_other() {
        let text = rendered_plugin_reports();
        lines(
            &text,
            &[
                "yh_genie_cni_operation_duration_seconds_count{command=\"CHECK\",network=\"n\\\"0\",outcome=\"success\"} 1",
                "yh_genie_cni_operation_duration_seconds_count{command=\"CHECK\",network=\"other\",outcome=\"success\"} 6",
            ],
        );
        let networks: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.split("network=\"").nth(1))
            .map(|rest| rest.split("\",").next().unwrap())
            .collect();
        // The admin's first 64, "other", and "" (no network chosen).
        assert_eq!(networks.len(), MAX_NETWORK_LABELS + 2, "{networks:?}");
    }

    /// The metrics' text with nothing counted yet, and its families (name, type) from `# TYPE`.
    fn families_served() -> (String, Vec<(String, String)>) {
        let (store, sync) = (Store::new(AttachmentPolicy::default()), Sync::default());
        let text = Metrics::default().render(&snapshot(&store, &sync));
        let families = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|rest| rest.split_once(' ').expect("# TYPE name type"))
            .map(|(name, kind)| (name.to_string(), kind.to_string()))
            .collect();
        (text, families)
    }

    /// An operator finds every metric the agent serves in docs/agent.md.
    #[test]
    fn every_metric_family_is_documented() {
        let docs = include_str!("../../../docs/agent.md");
        let (text, families) = families_served();
        assert!(families.len() >= 15, "{text}");
        for (name, _) in &families {
            assert!(docs.contains(&format!("`{name}")), "{name} is not documented in docs/agent.md");
        }
    }

    /// Every metric is named as Prometheus expects: counters end in `_total`, histograms carry their
    /// unit (`_seconds`), gauges are not named like counters, and every sample belongs to a family
    /// announced with its type.
    #[test]
    fn every_metric_family_follows_prometheus_naming_conventions() {
        let (text, families) = families_served();
        assert!(families.len() >= 15, "{text}");
        for (name, kind) in &families {
            assert!(name.starts_with("yh_genie_"), "{name}: the namespace prefix");
            match kind.as_str() {
                "counter" => assert!(name.ends_with("_total"), "counter {name} must end in _total"),
                "histogram" => assert!(name.ends_with("_seconds"), "histogram {name} must name its unit"),
                "gauge" => assert!(!name.ends_with("_total"), "gauge {name} named like a counter"),
                other => panic!("{name}: unexpected type {other}"),
            }
            assert!(text.contains(&format!("# HELP {name} ")), "{name} has no HELP");
        }
        for sample in text.lines().filter(|l| !l.starts_with('#')) {
            let name = sample.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
            assert!(
                families.iter().any(|(f, _)| *f == name || *f == family),
                "{name} is served without its family's # TYPE"
            );
        }
    }
}
