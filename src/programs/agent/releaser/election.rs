//! One releaser at a time: the agents whose nodes hand out `yh-ipam` addresses hold the
//! `coordination.k8s.io/v1` Lease `yh-ipam-releaser` (in their namespace) in turn. The holder
//! renews it every round; another agent takes it over only once it has not been renewed for its
//! duration plus `--ipam-clock-skew`, by a `PUT` of the lease as read (its resourceVersion), so
//! that of two agents taking it at once the API server lets one through. A holder whose last
//! successful renewal (timed by its own clock, from when it was sent) is older than the duration
//! stops releasing (`leading`), before any other agent may take over.

use super::{Problem, ask};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use std::time::{Duration, Instant};
use tracing::info;

/// The election's lease, in the agent's namespace.
pub const LEASE_NAME: &str = "yh-ipam-releaser";

pub struct Election {
    /// This agent's node: the holder it writes.
    identity: String,
    duration: Duration,
    clock_skew: Duration,
    /// The lease as this agent last wrote it, while it holds it.
    held: Option<Lease>,
    /// When the last successful renewal was sent.
    renewed: Option<Instant>,
}

impl Election {
    pub fn new(identity: &str, duration: Duration, clock_skew: Duration) -> Self {
        Election { identity: identity.to_string(), duration, clock_skew, held: None, renewed: None }
    }

    /// Whether this agent is the releaser: its last renewal sent within the lease's duration.
    pub fn leading(&self) -> bool {
        self.renewed.is_some_and(|at| at.elapsed() < self.duration)
    }

    /// Stop holding the lease (it expires unrenewed; another agent may take it).
    pub fn step_down(&mut self) {
        self.held = None;
        self.renewed = None;
    }

    /// One round: renew the lease if this agent holds it, take it if it is free or expired.
    /// Whether this agent is the releaser now.
    pub async fn round(&mut self, api: &Api<Lease>, shown: &str) -> Result<bool, Problem> {
        let sent = Instant::now();
        let current = match self.held.take() {
            Some(held) => held,
            None => match ask(api.get_opt(LEASE_NAME)).await? {
                Some(lease) => lease,
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta { name: Some(LEASE_NAME.to_string()), ..ObjectMeta::default() },
                        spec: Some(self.spec(None)),
                    };
                    return match ask(api.create(&PostParams::default(), &lease)).await {
                        Ok(created) => Ok(self.won(created, sent, false, shown)),
                        Err(Problem::Conflict(_)) => Ok(self.lost()),
                        Err(e) => Err(e),
                    };
                }
            },
        };
        let spec = current.spec.clone().unwrap_or_default();
        let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        if !mine && !self.expired(&spec) {
            return Ok(self.lost());
        }
        let mut lease = current;
        lease.spec = Some(self.spec(if mine { spec.acquire_time } else { None }));
        match ask(api.replace(LEASE_NAME, &PostParams::default(), &lease)).await {
            Ok(written) => Ok(self.won(written, sent, mine, shown)),
            Err(Problem::Conflict(_)) => Ok(self.lost()),
            // Read again next round; `leading` runs out on its own if this goes on.
            Err(e) => Err(e),
        }
    }

    fn won(&mut self, lease: Lease, sent: Instant, renewal: bool, shown: &str) -> bool {
        if !renewal || !self.leading() {
            info!("this agent is now yh-ipam's dead-node releaser (Lease {shown})");
        }
        self.held = Some(lease);
        self.renewed = Some(sent);
        true
    }

    fn lost(&mut self) -> bool {
        if self.leading() {
            info!("this agent is no longer yh-ipam's dead-node releaser: another agent holds the lease");
        }
        self.step_down();
        false
    }

    /// Whether another holder's lease has run out: not renewed for its duration plus the skew.
    fn expired(&self, spec: &LeaseSpec) -> bool {
        let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else { return true };
        let stated = spec.lease_duration_seconds.and_then(|s| u64::try_from(s).ok()).unwrap_or(0);
        let wait = self.duration.max(Duration::from_secs(stated)) + self.clock_skew;
        let age = Timestamp::now().as_millisecond() - renewed.0.as_millisecond();
        u64::try_from(age).is_ok_and(|age| Duration::from_millis(age) > wait)
    }

    fn spec(&self, acquired: Option<MicroTime>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX).max(1)),
            acquire_time: acquired.or_else(|| Some(now.clone())),
            renew_time: Some(now),
            ..LeaseSpec::default()
        }
    }
}
