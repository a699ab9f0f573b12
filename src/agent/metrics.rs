//! The agent's counters, in the Prometheus text format (`/metrics` on its local port). Plain
//! atomics: the agent is one thread, and a scrape reads them without stopping it.
//!
//! Each answer the plugin cannot use (`unknown`, `refused`) is a fallback of the plugin to the
//! direct path; the fallbacks the agent cannot see (it was not running, its socket was missing)
//! are in the plugin's operation log line (`selection="api: ..."`).

use super::store::{Miss, Store};
use crate::kube::Kind;
use std::fmt::Write as _;
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

const RESOURCES: [(&str, Kind); 3] = [
    ("pods", Kind::Pod),
    ("configmaps", Kind::ConfigMap),
    ("network-attachment-definitions", Kind::NetworkAttachmentDefinition),
];

/// Upper bounds of the answer latency histogram, in seconds.
const BUCKETS: [f64; 12] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5];

#[derive(Default)]
pub struct Metrics {
    answers: [AtomicU64; 4],
    misses: [AtomicU64; Miss::LABELS.len()],
    /// Per bucket (the last one: above every bound), and the sum in nanoseconds.
    latency: [AtomicU64; BUCKETS.len() + 1],
    latency_sum_ns: AtomicU64,
    watch_errors: [AtomicU64; 3],
    relists: [AtomicU64; 3],
    statuses: [AtomicU64; 3],
}

fn index<T: PartialEq + Copy>(table: &[(&str, T)], value: T) -> usize {
    table.iter().position(|(_, v)| *v == value).expect("every value is in its table")
}

impl Metrics {
    pub fn answered(&self, outcome: Outcome, took: Duration) {
        self.answers[index(&OUTCOMES, outcome)].fetch_add(1, Ordering::Relaxed);
        let seconds = took.as_secs_f64();
        let bucket = BUCKETS.iter().position(|bound| seconds <= *bound).unwrap_or(BUCKETS.len());
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.latency_sum_ns.fetch_add(ns, Ordering::Relaxed);
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

    /// The text a scrape gets; `watches` is the number of object watches running.
    pub fn render(&self, store: &Store, watches: usize) -> String {
        let mut out = String::new();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        fn family(out: &mut String, name: &str, kind: &str, help: &str) {
            let _ = writeln!(out, "# HELP yh_genie_agent_{name} {help}\n# TYPE yh_genie_agent_{name} {kind}");
        }
        family(&mut out, "ready", "gauge", "1 once the node's pods have been listed");
        let _ = writeln!(out, "yh_genie_agent_ready {}", u8::from(store.listed()));
        family(&mut out, "pods", "gauge", "pods of this node held");
        let _ = writeln!(out, "yh_genie_agent_pods {}", store.pod_count());
        family(&mut out, "objects", "gauge", "objects the node's pods refer to, held");
        for (label, kind) in &RESOURCES[1..] {
            let _ = writeln!(out, "yh_genie_agent_objects{{resource=\"{label}\"}} {}", store.object_count(*kind));
        }
        family(&mut out, "object_watches", "gauge", "watches of single referenced objects running");
        let _ = writeln!(out, "yh_genie_agent_object_watches {watches}");
        family(
            &mut out,
            "answers_total",
            "counter",
            "selection requests by outcome (unknown and refused: the plugin asks the API server)",
        );
        for (i, (label, _)) in OUTCOMES.iter().enumerate() {
            let _ = writeln!(out, "yh_genie_agent_answers_total{{outcome=\"{label}\"}} {}", get(&self.answers[i]));
        }
        family(&mut out, "unknown_total", "counter", "unknown answers by reason");
        for (i, label) in Miss::LABELS.iter().enumerate() {
            let _ = writeln!(out, "yh_genie_agent_unknown_total{{reason=\"{label}\"}} {}", get(&self.misses[i]));
        }
        family(
            &mut out,
            "watch_restarts_total",
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
        family(&mut out, "relists_total", "counter", "lists after the first (a watch that could not resume)");
        for (i, (label, _)) in RESOURCES.iter().enumerate() {
            let _ = writeln!(out, "yh_genie_agent_relists_total{{resource=\"{label}\"}} {}", get(&self.relists[i]));
        }
        family(
            &mut out,
            "status_writes_total",
            "counter",
            "network-status annotations written for the plugin, by outcome",
        );
        for (i, (label, _)) in STATUS_OUTCOMES.iter().enumerate() {
            let _ =
                writeln!(out, "yh_genie_agent_status_writes_total{{outcome=\"{label}\"}} {}", get(&self.statuses[i]));
        }
        family(&mut out, "answer_seconds", "histogram", "time from a selection request to its answer");
        let mut cumulative = 0;
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += get(&self.latency[i]);
            let _ = writeln!(out, "yh_genie_agent_answer_seconds_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += get(&self.latency[BUCKETS.len()]);
        let _ = writeln!(out, "yh_genie_agent_answer_seconds_bucket{{le=\"+Inf\"}} {cumulative}");
        let sum = get(&self.latency_sum_ns) as f64 / 1e9;
        let _ =
            writeln!(out, "yh_genie_agent_answer_seconds_sum {sum}\nyh_genie_agent_answer_seconds_count {cumulative}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::config::policy::AttachmentPolicy;

    #[test]
    fn renders_counters_and_a_cumulative_histogram() {
        let m = Metrics::default();
        m.answered(Outcome::Hit, Duration::from_micros(80));
        m.answered(Outcome::HitAfterWait, Duration::from_millis(300));
        m.answered(Outcome::Unknown, Duration::from_secs(1));
        m.missed(&Miss::NotSeen);
        m.watch_error(Kind::ConfigMap);
        m.relisted(Kind::Pod);
        m.status(StatusOutcome::Written);
        let text = m.render(&Store::new(AttachmentPolicy::default()), 2);
        for line in [
            "yh_genie_agent_ready 0",
            "yh_genie_agent_answers_total{outcome=\"hit\"} 1",
            "yh_genie_agent_answers_total{outcome=\"unknown\"} 1",
            "yh_genie_agent_unknown_total{reason=\"pod_not_seen\"} 1",
            "yh_genie_agent_watch_restarts_total{resource=\"configmaps\"} 1",
            "yh_genie_agent_relists_total{resource=\"pods\"} 1",
            "yh_genie_agent_status_writes_total{outcome=\"written\"} 1",
            "yh_genie_agent_object_watches 2",
            "yh_genie_agent_answer_seconds_bucket{le=\"0.0001\"} 1",
            "yh_genie_agent_answer_seconds_bucket{le=\"0.5\"} 2",
            "yh_genie_agent_answer_seconds_bucket{le=\"+Inf\"} 3",
            "yh_genie_agent_answer_seconds_count 3",
            "# TYPE yh_genie_agent_answer_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from:\n{text}");
        }
    }
}
