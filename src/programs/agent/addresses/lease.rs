//! The node's lease on its blocks (docs/ipam.md): a `coordination.k8s.io/v1` Lease named
//! `yh-ipam-<node>` in the agent's namespace, renewed in the background (`keep`) every quarter of
//! `--ipam-lease-duration`, never on an ADD. An agent whose last successful renewal is older than
//! that duration has lost contact with the API server for that long, and its blocks may be given to
//! other nodes: it hands out no address (`check`) until a renewal succeeds.
//!
//! A renewal that finds the lease run out (absent, not renewed within its duration, or after this
//! agent's own renewals failed for that long) has the node's blocks checked before the next
//! allocation (`take_lapsed`): yh-ipam's dead-node releaser may have released them meanwhile.
//!
//! Other nodes finding a pool exhausted mark the lease to ask this node to share its blocks of it
//! (`super::shared`): each renewal reads the marks (`share_asked`), and removes those served.
//!
//! A node that never used `yh-ipam` keeps no lease: the renewals start with the first allocation,
//! or at start when the records show addresses held, and that first allocation waits (up to a
//! renewal's time) for the first renewal.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{info, warn};

pub struct NodeLease {
    /// `--ipam-lease-duration`.
    duration: Duration,
    /// When the last successful renewal was sent.
    renewed: watch::Sender<Option<Instant>>,
    /// Whether the lease is held at all: set by the first allocation (or records held at start).
    wanted: watch::Sender<bool>,
    /// Why the last renewal failed, while renewals fail.
    failing: Mutex<Option<String>>,
    /// `namespace/name`, once known.
    shown: Mutex<String>,
    /// Whether the node's blocks must be checked before it hands out more addresses from them: the
    /// lease had run out (or was not there) when a renewal found it, so the dead-node releaser may
    /// have released them meanwhile.
    lapsed: std::sync::atomic::AtomicBool,
    /// The pools whose blocks other nodes ask this node to share, as the last renewal read them
    /// (emptied when taken).
    share_asked: watch::Sender<BTreeSet<String>>,
    /// The pools shared since the last renewal: their marks are removed by the next.
    served: Mutex<BTreeSet<String>>,
}

impl NodeLease {
    pub fn new(duration: Duration) -> Self {
        NodeLease {
            duration,
            renewed: watch::channel(None).0,
            wanted: watch::channel(false).0,
            failing: Mutex::new(None),
            shown: Mutex::new(String::new()),
            lapsed: std::sync::atomic::AtomicBool::new(false),
            share_asked: watch::channel(BTreeSet::new()).0,
            served: Mutex::default(),
        }
    }

    /// Hold the lease from now on.
    pub fn want(&self) {
        self.wanted.send_if_modified(|wanted| !std::mem::replace(wanted, true));
    }

    /// Once the lease is wanted: the node hands out `yh-ipam` addresses.
    pub async fn in_use(&self) {
        let _ = self.wanted.subscribe().wait_for(|wanted| *wanted).await;
    }

    /// Whether the node may hand out addresses: its lease renewed within its duration. The first
    /// time, the lease is asked for and its first renewal waited for. Why not, for the CNI error.
    pub async fn check(&self, node: &str) -> Result<(), String> {
        self.want();
        let mut renewed = self.renewed.subscribe();
        if renewed.borrow().is_none() {
            let _ = tokio::time::timeout(self.renewal_period(), renewed.wait_for(Option::is_some)).await;
        }
        let last = *self.renewed.borrow();
        let age = match last {
            Some(at) if at.elapsed() < self.duration => return Ok(()),
            Some(at) => format!("was last renewed {}s ago", at.elapsed().as_secs()),
            None => "has not been renewed since the agent started".to_string(),
        };
        let lease = self.shown.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let failing = match &*self.failing.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(why) => format!(" (the last renewal: {why})"),
            None => String::new(),
        };
        Err(format!(
            "node {node} has lost contact with the API server: its yh-ipam lease (Lease {lease}) {age}, \
             longer than --ipam-lease-duration ({}s){failing}, so its blocks may be given to other nodes \
             and it hands out no address from them until the lease is renewed; check the node's \
             connection to the API server and the yh-genie agent's log on the node",
            self.duration.as_secs()
        ))
    }

    /// Whether the node's blocks are to be checked (the lease had run out); the caller checks them
    /// now, or calls `check_blocks_again`.
    pub fn take_lapsed(&self) -> bool {
        self.lapsed.swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// The blocks could not all be checked: before the next allocation, again.
    pub fn check_blocks_again(&self) {
        self.lapsed.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Since the last successful renewal was sent; `None` before the first.
    pub fn age(&self) -> Option<Duration> {
        self.renewed.borrow().map(|at| at.elapsed())
    }

    /// The pools whose blocks other nodes ask this node to share, once some are asked for.
    pub async fn share_asked(&self) -> BTreeSet<String> {
        let _ = self.share_asked.subscribe().wait_for(|asked| !asked.is_empty()).await;
        let mut taken = BTreeSet::new();
        self.share_asked.send_modify(|asked| taken = std::mem::take(asked));
        taken
    }

    /// `pool`'s blocks are shared (or have no room to share): the next renewal removes its mark.
    pub fn served(&self, pool: &str) {
        self.served.lock().unwrap_or_else(|e| e.into_inner()).insert(pool.to_string());
    }

    pub fn renewal_period(&self) -> Duration {
        (self.duration / 4).max(Duration::from_millis(200))
    }

    /// Renew the lease for as long as the agent runs, once it is wanted.
    pub async fn keep(&self, client: &Client, node: &str) -> String {
        let _ = self.wanted.subscribe().wait_for(|wanted| *wanted).await;
        let namespace = client.default_namespace().to_string();
        let name = format!("yh-ipam-{node}");
        *self.shown.lock().unwrap_or_else(|e| e.into_inner()) = format!("{namespace}/{name}");
        let api: Api<Lease> = Api::namespaced(client.clone(), &namespace);
        let mut held: Option<Lease> = None;
        loop {
            let sent = Instant::now();
            let served = self.served.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let attempt = renew(&api, &name, node, self.duration, &mut held, &served);
            let outcome = match tokio::time::timeout(self.renewal_period(), attempt).await {
                Ok(outcome) => outcome,
                Err(_) => Err(format!("no answer within {}ms", self.renewal_period().as_millis())),
            };
            self.renewal_done(outcome, sent, &format!("{namespace}/{name}"), &served);
            tokio::time::sleep(self.renewal_period().saturating_sub(sent.elapsed())).await;
        }
    }

    fn renewal_done(
        &self,
        outcome: Result<(Found, Lease), String>,
        sent: Instant,
        lease: &str,
        served: &BTreeSet<String>,
    ) {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok((found, written)) => {
                self.served.lock().unwrap_or_else(|e| e.into_inner()).retain(|pool| !served.contains(pool));
                let asked = super::shared::asked(written.metadata.annotations.iter().flat_map(|a| a.keys()));
                if !asked.is_empty() {
                    self.share_asked.send_replace(asked);
                }
                if failing.take().is_some() {
                    info!("the yh-ipam lease {lease} is renewed again");
                }
                // Before the renewal counts (and ADDs pass `check`): the blocks are checked first
                // when the lease had run out, by this agent's clock or as found.
                let ran_out = self.renewed.borrow().is_some_and(|at| sent.duration_since(at) >= self.duration);
                if found == Found::RunOut || ran_out {
                    self.lapsed.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                self.renewed.send_replace(Some(sent));
            }
            Err(why) => {
                if failing.is_none() {
                    warn!("renewing the yh-ipam lease {lease}: {why}");
                }
                *failing = Some(why);
            }
        }
    }
}

/// What a renewal found of the lease before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// This node's, renewed within its duration.
    Held,
    /// Absent, another holder's, or not renewed within its duration: the node's blocks may have
    /// been released meanwhile.
    RunOut,
}

/// One renewal: a `PUT` of the lease as last read or written (read first, or created, when not
/// held or when another write came first: another node's mark asking to share), without the marks of
/// the pools `served`. What it found, and the lease as written.
async fn renew(
    api: &Api<Lease>,
    name: &str,
    node: &str,
    duration: Duration,
    held: &mut Option<Lease>,
    served: &BTreeSet<String>,
) -> Result<(Found, Lease), String> {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let spec = |acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(node.to_string()),
        lease_duration_seconds: Some(i32::try_from(duration.as_secs()).unwrap_or(i32::MAX).max(1)),
        acquire_time: acquired.or_else(|| Some(now.clone())),
        renew_time: Some(now.clone()),
        ..LeaseSpec::default()
    };
    let mut found = None;
    for _ in 0..2 {
        if held.is_none() {
            match api.get_opt(name).await.map_err(|e| e.to_string())? {
                Some(lease) => {
                    found.get_or_insert(as_found(&lease, node, duration));
                    *held = Some(lease);
                }
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta { name: Some(name.to_string()), ..ObjectMeta::default() },
                        spec: Some(spec(None)),
                    };
                    let created = api.create(&PostParams::default(), &lease).await.map_err(|e| e.to_string())?;
                    *held = Some(created.clone());
                    return Ok((Found::RunOut, created));
                }
            }
        }
        let mut lease = held.take().expect("read or kept above");
        let acquired = lease
            .spec
            .as_ref()
            .filter(|s| s.holder_identity.as_deref() == Some(node))
            .and_then(|s| s.acquire_time.clone());
        lease.spec = Some(spec(acquired));
        if let Some(annotations) = lease.metadata.annotations.as_mut() {
            annotations.retain(|key, _| {
                !key.strip_prefix(super::shared::SHARE_ASKED).is_some_and(|pool| served.contains(pool))
            });
        }
        // On a conflict (another node's mark) read it again at once; on any other failure next time.
        match api.replace(name, &PostParams::default(), &lease).await {
            Ok(written) => {
                *held = Some(written.clone());
                return Ok((found.unwrap_or(Found::Held), written));
            }
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("the lease was written by others at every attempt".into())
}

/// Whether `lease`, as read, is still this node's: its holder, renewed within `duration`.
fn as_found(lease: &Lease, node: &str, duration: Duration) -> Found {
    let Some(spec) = lease.spec.as_ref().filter(|s| s.holder_identity.as_deref() == Some(node)) else {
        return Found::RunOut;
    };
    let renewed = spec.renew_time.as_ref().map(|at| at.0.as_millisecond());
    let age = renewed.map(|at| k8s_openapi::jiff::Timestamp::now().as_millisecond() - at);
    match age.and_then(|ms| u64::try_from(ms).ok()) {
        Some(ms) if Duration::from_millis(ms) < duration => Found::Held,
        _ => Found::RunOut,
    }
}
