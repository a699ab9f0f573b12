//! Whether a node's `yh-ipam` blocks may be released, decided from its Node object and its node
//! lease alone, never from what its pods or blocks look like: a node that may still hand out
//! addresses from them must keep them.
//!
//! Both must hold: the node is gone (its Node object deleted, or tainted
//! `node.kubernetes.io/out-of-service` by an operator who knows it is down), and its lease has not
//! been renewed for longer than its duration plus `--ipam-clock-skew`. The node's agent stops
//! handing out addresses once its own last renewal is older than the duration (timed by its own
//! clock, from when it sent the renewal); the releaser reads the renewal time the agent wrote and
//! compares it with its own clock, so the skew covers the two clocks disagreeing. A node that is
//! gone but whose agent still renews (a Node object deleted while the machine runs, registering
//! again) keeps its blocks; a node whose lease expired but which is neither deleted nor tainted
//! (perhaps only cut off from the API server) keeps them too.

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use std::fmt;
use std::time::Duration;

/// The taint that says a node is shut down for good (Kubernetes' non-graceful node shutdown).
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// Why a node counts as gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    Deleted,
    OutOfService,
}

impl fmt::Display for Gone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gone::Deleted => write!(f, "its Node object is deleted"),
            Gone::OutOfService => write!(f, "its Node is tainted {OUT_OF_SERVICE}"),
        }
    }
}

/// Whether the node is gone, from its Node object as read (`None`: there is none).
pub fn gone(node: Option<&Node>) -> Option<Gone> {
    let Some(node) = node else { return Some(Gone::Deleted) };
    let taints = node.spec.as_ref().and_then(|spec| spec.taints.as_deref()).unwrap_or_default();
    taints.iter().any(|taint| taint.key == OUT_OF_SERVICE).then_some(Gone::OutOfService)
}

/// The durations the rule waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// `--ipam-lease-duration` of this agent: the least a lease is taken to last, whatever it says.
    pub lease_duration: Duration,
    /// `--ipam-clock-skew`.
    pub clock_skew: Duration,
}

/// Whether a gone node's lease allows its blocks to be released at `now`: `Ok` says why they may
/// be, `Err` why not yet. `lease` is its node lease as read (`None`: there is none), `absent_for`
/// how long this releaser has seen it absent.
pub fn lease_expired(
    lease: Option<&LeaseSpec>,
    absent_for: Duration,
    now: Timestamp,
    rule: Rule,
) -> Result<String, String> {
    let renewed = lease.and_then(|spec| spec.renew_time.as_ref().or(spec.acquire_time.as_ref()));
    let Some(renewed) = renewed.map(|at| at.0) else {
        let wait = rule.lease_duration + rule.clock_skew;
        let said = format!(
            "its yh-ipam lease is absent (for {}s as this releaser saw it), and --ipam-lease-duration \
             ({}s) plus --ipam-clock-skew ({}s)",
            absent_for.as_secs(),
            rule.lease_duration.as_secs(),
            rule.clock_skew.as_secs()
        );
        return if absent_for > wait {
            Ok(format!("{said} have passed"))
        } else {
            Err(format!("{said} have not passed"))
        };
    };
    let stated = lease.and_then(|spec| spec.lease_duration_seconds).and_then(|s| u64::try_from(s).ok());
    let duration = rule.lease_duration.max(Duration::from_secs(stated.unwrap_or(0)));
    let age = Duration::from_millis(u64::try_from(now.as_millisecond() - renewed.as_millisecond()).unwrap_or(0));
    let said = format!(
        "its yh-ipam lease was last renewed {}s ago (at {renewed}), expired since {}",
        age.as_secs(),
        renewed + duration_span(duration)
    );
    let limit =
        format!("its duration ({}s) plus --ipam-clock-skew ({}s)", duration.as_secs(), rule.clock_skew.as_secs());
    if age > duration + rule.clock_skew {
        Ok(format!("{said}, longer ago than {limit}"))
    } else if age > duration {
        Err(format!("{said}, not longer ago than {limit}"))
    } else {
        Err(format!(
            "its yh-ipam lease was renewed {}s ago, within its duration ({}s)",
            age.as_secs(),
            duration.as_secs()
        ))
    }
}

fn duration_span(duration: Duration) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::try_from(duration).unwrap_or(k8s_openapi::jiff::SignedDuration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    const RULE: Rule = Rule { lease_duration: Duration::from_secs(60), clock_skew: Duration::from_secs(30) };

    fn node(taints: &[&str]) -> Node {
        let taints = taints
            .iter()
            .map(|key| Taint { key: key.to_string(), effect: "NoExecute".into(), ..Taint::default() })
            .collect();
        Node { spec: Some(NodeSpec { taints: Some(taints), ..NodeSpec::default() }), ..Node::default() }
    }

    fn renewed(now: Timestamp, ago: u64, duration: i32) -> LeaseSpec {
        let at = now - duration_span(Duration::from_secs(ago));
        LeaseSpec {
            holder_identity: Some("n".into()),
            lease_duration_seconds: Some(duration),
            renew_time: Some(MicroTime(at)),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_node_is_gone_when_deleted_or_out_of_service_only() {
        assert_eq!(gone(None), Some(Gone::Deleted));
        assert_eq!(gone(Some(&node(&[OUT_OF_SERVICE]))), Some(Gone::OutOfService));
        assert_eq!(gone(Some(&node(&["node.kubernetes.io/unreachable"]))), None, "perhaps only cut off");
        assert_eq!(gone(Some(&Node::default())), None);
    }

    #[test]
    fn a_lease_must_be_older_than_its_duration_plus_the_skew() {
        let now = Timestamp::now();
        assert!(lease_expired(Some(&renewed(now, 5, 60)), Duration::ZERO, now, RULE).unwrap_err().contains("within"));
        let skewed = lease_expired(Some(&renewed(now, 75, 60)), Duration::ZERO, now, RULE).unwrap_err();
        assert!(skewed.contains("not longer ago than its duration (60s) plus --ipam-clock-skew (30s)"), "{skewed}");
        let why = lease_expired(Some(&renewed(now, 95, 60)), Duration::ZERO, now, RULE).unwrap();
        assert!(why.starts_with("its yh-ipam lease was last renewed 95s ago"), "{why}");
        // A longer duration in the lease itself (its node's flag) wins over this agent's.
        assert!(lease_expired(Some(&renewed(now, 95, 120)), Duration::ZERO, now, RULE).is_err());
        // A shorter one does not.
        assert!(lease_expired(Some(&renewed(now, 80, 1)), Duration::ZERO, now, RULE).is_err());
    }

    #[test]
    fn an_absent_lease_counts_from_when_the_releaser_first_saw_it_absent() {
        let now = Timestamp::now();
        assert!(lease_expired(None, Duration::from_secs(10), now, RULE).is_err());
        let why = lease_expired(None, Duration::from_secs(91), now, RULE).unwrap();
        assert!(why.contains("absent (for 91s"), "{why}");
        assert!(lease_expired(Some(&LeaseSpec::default()), Duration::from_secs(91), now, RULE).is_ok());
    }
}
