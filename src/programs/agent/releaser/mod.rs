//! `yh-ipam`'s dead-node releaser (docs/ipam.md, "Dead nodes"): the blocks of a node gone for good
//! are deleted, so that their addresses go back to the pool rather than stay lost to it. By file:
//!
//! - `election`: one releaser at a time: the agents whose nodes hand out `yh-ipam` addresses
//!   hold the Lease `yh-ipam-releaser` in turn;
//! - `verdict`: whether a node's blocks may go, from its Node object and its node lease alone (the
//!   Node deleted or tainted out-of-service, and the lease older than its duration plus
//!   `--ipam-clock-skew`);
//! - `release`: the blocks listed by node, and each deleted with preconditions (the uid and
//!   resourceVersion listed);
//! - `fixed`: the fixed addresses of StatefulSet ordinals gone (scaled down, or the StatefulSet
//!   deleted) and whose last pod is gone, deleted in the same sweep.
//!
//! Each round (a quarter of the lease duration) the releaser renews its lease; holding it, once per
//! lease duration it lists the `IPBlock`s and the leases, and reads the Node object of each node
//! holding blocks whose lease has run out. Before each block's deletion it reads the node's lease again and checks
//! that it still is the releaser: a node whose agent renews again keeps what is left.
//!
//! An agent joins only once its own node hands out `yh-ipam` addresses: a cluster without
//! `yh-ipam` sees no request of it. An agent the API server does not allow these requests (or that
//! does not serve `IPBlock`s) logs it once, steps aside and asks again after `DEGRADED_PAUSE`; the
//! rest of the agent goes on.

mod election;
mod fixed;
mod release;
mod verdict;

use super::Shared;
use crate::platform::kube::ip_block::resource;
use crate::platform::kube::{Failure, classify};
use election::Election;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};
pub use verdict::Rule;

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an agent not allowed to release waits before it asks again (its RBAC may be fixed).
const DEGRADED_PAUSE: Duration = Duration::from_secs(300);

/// Why a request of the releaser failed.
#[derive(Debug)]
pub enum Problem {
    /// Not allowed (401, 403), or the kind not served (no `IPBlock` CRD): asking again soon will
    /// not change it.
    Unable(String),
    /// 409: another write came first (a lease taken, a block changed).
    Conflict(String),
    /// 404 for the object asked about.
    Gone,
    /// Anything else: perhaps better next time.
    Failed(String),
}

/// One request, bounded in time, its failure sorted.
pub async fn ask<T>(request: impl Future<Output = Result<T, kube::Error>>) -> Result<T, Problem> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Err(_) => Err(Problem::Failed(format!("no answer within {}s", REQUEST_TIMEOUT.as_secs()))),
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(kube::Error::Api(status))) if matches!(status.code, 401 | 403) => {
            Err(Problem::Unable(format!("{} {}", status.code, status.message)))
        }
        Ok(Err(kube::Error::Api(status))) if status.code == 409 => Err(Problem::Conflict(status.message.clone())),
        Ok(Err(e)) => match classify(&e) {
            Failure::NotServed(text) => Err(Problem::Unable(text)),
            Failure::Refused { status: Some(404), .. } => Err(Problem::Gone),
            Failure::Transient(text) | Failure::Refused { text, .. } => Err(Problem::Failed(text)),
            Failure::Certificate(problem) => Err(Problem::Failed(format!("the server's certificate: {problem}"))),
        },
    }
}

/// The releaser's requests and what it remembers between rounds.
struct Releaser {
    shared: Arc<Shared>,
    rule: Rule,
    namespace: String,
    leases: Api<Lease>,
    nodes: Api<Node>,
    blocks: Api<DynamicObject>,
    election: Election,
    /// When this releaser first saw the lease of a gone node holding blocks absent.
    absent_since: HashMap<String, Instant>,
    /// When the blocks were last looked through: once per lease duration, while elected.
    swept: Option<Instant>,
    /// Why the last sweep of fixed addresses failed, logged once until it works again.
    fixed_failing: Option<String>,
}

/// Take part in the election and release dead nodes' blocks while elected, for as long as the
/// agent runs (once its node hands out `yh-ipam` addresses).
pub(super) async fn run(shared: Arc<Shared>, rule: Rule) -> String {
    shared.addresses.in_use().await;
    let client = shared.client.clone();
    let namespace = client.default_namespace().to_string();
    let mut releaser = Releaser {
        leases: Api::namespaced(client.clone(), &namespace),
        nodes: Api::all(client.clone()),
        blocks: Api::all_with(client, &resource()),
        election: Election::new(&shared.node, rule.lease_duration, rule.clock_skew),
        shared,
        rule,
        namespace,
        absent_since: HashMap::new(),
        swept: None,
        fixed_failing: None,
    };
    let period = (rule.lease_duration / 4).max(Duration::from_millis(200));
    let mut unable: Option<String> = None;
    let mut failing: Option<String> = None;
    loop {
        let started = Instant::now();
        match releaser.round().await {
            Ok(()) => {
                if unable.take().is_some() || failing.take().is_some() {
                    info!("yh-ipam's dead-node releaser works again");
                }
            }
            Err(Problem::Unable(why)) => {
                if unable.as_ref() != Some(&why) {
                    warn!(
                        "yh-ipam's dead-node releaser cannot work from this agent: {why}; the blocks of dead nodes \
                         are not released by it (the agent needs get on nodes, list and delete on ipblocks and its \
                         leases, as manifests/yh-genie.yaml grants); it asks again in {}s",
                        DEGRADED_PAUSE.as_secs()
                    );
                }
                unable = Some(why);
                releaser.election.step_down();
                releaser.shared.metrics.ipam_releaser(false);
                tokio::time::sleep(DEGRADED_PAUSE).await;
                continue;
            }
            Err(Problem::Failed(why) | Problem::Conflict(why)) => {
                if failing.is_none() {
                    warn!("yh-ipam's dead-node releaser: {why}; trying again");
                }
                failing = Some(why);
            }
            Err(Problem::Gone) => {}
        }
        tokio::time::sleep(period.saturating_sub(started.elapsed())).await;
    }
}

impl Releaser {
    fn shown(&self, name: &str) -> String {
        format!("{}/{name}", self.namespace)
    }

    async fn round(&mut self) -> Result<(), Problem> {
        let shown = self.shown(election::LEASE_NAME);
        let leading = self.election.round(&self.leases, &shown).await?;
        self.shared.metrics.ipam_releaser(leading);
        if !leading {
            self.swept = None;
            return Ok(());
        }
        if self.swept.is_some_and(|at| at.elapsed() < self.rule.lease_duration) {
            return Ok(());
        }
        let started = Instant::now();
        let listed = ask(self.blocks.list(&ListParams::default())).await?;
        let by_node = release::by_node(listed.items);
        self.absent_since.retain(|node, _| by_node.contains_key(node));
        let leases = ask(self.leases.list(&ListParams::default())).await?;
        let leases: HashMap<String, Lease> =
            leases.items.into_iter().filter_map(|lease| Some((lease.metadata.name.clone()?, lease))).collect();
        for (node, blocks) in by_node {
            // A node whose lease is current keeps its blocks without its Node even being read.
            if node != self.shared.node && self.judge(&node, leases.get(&node_lease(&node))).is_ok() {
                self.consider(&node, &blocks).await?;
            }
        }
        // The fixed addresses' sweep failing (an older ClusterRole, without them) leaves the blocks'.
        match fixed::sweep(&self.shared.client).await {
            Ok(_) => {
                if self.fixed_failing.take().is_some() {
                    info!("yh-ipam's sweep of fixed addresses works again");
                }
            }
            Err(Problem::Unable(why) | Problem::Failed(why) | Problem::Conflict(why)) => {
                if self.fixed_failing.as_ref() != Some(&why) {
                    warn!(
                        "yh-ipam's sweep of fixed addresses: {why}; the fixed addresses of StatefulSet ordinals gone are \
                         not freed (the agent needs list and delete on fixedaddresses, get on statefulsets and pods, as \
                         manifests/yh-genie.yaml grants)"
                    );
                }
                self.fixed_failing = Some(why);
            }
            Err(Problem::Gone) => {}
        }
        // Only a sweep that went through waits a lease duration for the next one.
        self.swept = Some(started);
        Ok(())
    }

    /// Release `node`'s `blocks` if it is gone and its lease has run out.
    async fn consider(&mut self, node: &str, blocks: &[release::Listed]) -> Result<(), Problem> {
        let Some(gone) = verdict::gone(ask(self.nodes.get_opt(node)).await?.as_ref()) else {
            return Ok(());
        };
        let mut released = Vec::new();
        let mut why = String::new();
        let mut outcome = Ok(());
        for block in blocks {
            // Read the lease again before each deletion: a node whose agent renews keeps the rest.
            match self.lease_expired(node).await {
                Ok(Ok(expired)) => why = expired,
                Ok(Err(not_yet)) => {
                    debug!("node {node}: {gone}, but {not_yet}: its yh-ipam blocks stay");
                    break;
                }
                Err(problem) => {
                    outcome = Err(problem);
                    break;
                }
            }
            if !self.election.leading() {
                break;
            }
            match release::delete(&self.blocks, block).await {
                Ok(true) => {
                    self.shared.metrics.ipam_dead_node_block_released();
                    released.push(block.name.as_str());
                }
                Ok(false) => {}
                Err(problem) => {
                    outcome = Err(problem);
                    break;
                }
            }
        }
        if !released.is_empty() {
            info!(
                "node {node} is gone ({gone}) and {why}: released its yh-ipam blocks {} ({} of {} listed)",
                released.join(", "),
                released.len(),
                blocks.len()
            );
        }
        outcome
    }

    /// Whether `node`'s lease, read now, allows its blocks to go.
    async fn lease_expired(&mut self, node: &str) -> Result<Result<String, String>, Problem> {
        let lease = ask(self.leases.get_opt(&node_lease(node))).await?;
        Ok(self.judge(node, lease.as_ref()))
    }

    /// Whether `node`'s `lease` as read (`None`: there is none) allows its blocks to go (see
    /// `verdict::lease_expired`): why, or why not yet.
    fn judge(&mut self, node: &str, lease: Option<&Lease>) -> Result<String, String> {
        let absent_for = match lease {
            Some(_) => {
                self.absent_since.remove(node);
                Duration::ZERO
            }
            None => self.absent_since.entry(node.to_string()).or_insert_with(Instant::now).elapsed(),
        };
        let spec = lease.and_then(|lease| lease.spec.as_ref());
        let verdict = verdict::lease_expired(spec, absent_for, Timestamp::now(), self.rule);
        let named = format!("its yh-ipam lease (Lease {})", self.shown(&node_lease(node)));
        verdict.map(|why| why.replacen("its yh-ipam lease", &named, 1))
    }
}

/// The name of `node`'s lease.
fn node_lease(node: &str) -> String {
    format!("yh-ipam-{node}")
}
