//! The node agent: a node-local cache of what pods chose, so that the plugin's ADD needs no API
//! request (docs/agent.md). It runs in the DaemonSet's container beside the installer
//! (`yh-genie install --agent`), or alone in the foreground (`yh-genie agent`), on a thread of its
//! own started the same way (`spawn`):
//!
//! - it watches only its node's pods and, for each, the ConfigMaps and NetworkAttachmentDefinitions
//!   the pod refers to (`watch`, `store`), so the objects are fetched when the pod appears, before
//!   the runtime asks for its network; every watch on one connection to the API server, each
//!   reporting whether it is current (`sync`);
//! - it answers the plugin over a root-only unix socket (`server`; the wire and the plugin's side
//!   are in `node::agent_socket`) with the pod and those objects; the plugin resolves them itself,
//!   with the same `resolve` as the direct path and its own view of the node's files;
//! - it writes the pods' network-status annotations and creates the `AddedInterface` events the
//!   plugin hands over (`annotate`), each status kept on disk until written (`kept_statuses`), so
//!   that an agent killed first writes it when it starts again;
//! - it hands out `yh-ipam`'s addresses from its node's blocks (`addresses`), its records read back
//!   before it answers, and gives back those of a pod its watch finds gone (`reclaim`); the pools
//!   defined by `AddressPool` objects it reads from a watch of them (`address_pools`); elected
//!   among the agents, it releases the blocks of nodes gone for good (`releaser`);
//! - it reports readiness and metrics on a local port (`http`, `metrics`), the plugin's operations
//!   among them, which each plugin process reports on a datagram socket when it is done (`reports`).
//!
//! It never runs plugins or touches a pod's netns: a crashed, slow or upgraded agent costs the
//! plugin speed (it takes the direct path), never a pod's network. A failure of the agent itself is
//! logged and the agent starts again after a jittered backoff; the installer's loop goes on.

mod address_pools;
mod addresses;
mod annotate;
mod dynamic;
mod http;
mod kept_statuses;
mod metrics;
mod reclaim;
mod releaser;
mod reports;
mod server;
mod store;
mod sync;
mod watch;
pub mod watching;

use crate::platform::kube::jittered;
use crate::platform::stop_signals::StopSignals;
use crate::programs::agent::watching::list_watch::Streaming;
use crate::programs::selector::agent_face::{AttachmentPolicy, PodDefaults};
use anyhow::{Context, anyhow, bail};
use metrics::Metrics;
use server::FileId;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::{Store, WatchKey, Watches};
use sync::{Sync, Watched};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tracing::{error, info, warn};
use watching::Access;

/// Where the agent listens unless `--agent-socket` says otherwise: where the plugin looks.
pub use crate::node::paths::AGENT_SOCKET as DEFAULT_SOCKET;
/// The readiness and metrics port unless configured otherwise: this host only.
pub const DEFAULT_METRICS_ADDRESS: &str = "127.0.0.1:9745";

/// The first pause after the agent fails; it doubles up to `MAX_RESTART_PAUSE`, and starts over
/// after an agent that ran for `HEALTHY_RUN`.
const FIRST_RESTART_PAUSE: Duration = Duration::from_secs(1);
const MAX_RESTART_PAUSE: Duration = Duration::from_secs(60);
const HEALTHY_RUN: Duration = Duration::from_secs(120);
/// How often the selector configuration (the namespace policy) is read again.
const POLICY_RELOAD: Duration = Duration::from_secs(10);

/// What an operator sets for the agent (`--node-name`, `--agent-socket`, `--agent-metrics-address`,
/// `--dynamic-networks`), checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    /// The node whose pods it watches.
    pub node_name: String,
    /// Its socket, as the host sees it (the plugin's `agentSocket`).
    pub socket: PathBuf,
    pub metrics_address: SocketAddr,
    /// `--dynamic-networks`: the agent has the attach worker apply running pods' networks
    /// annotation edits.
    pub dynamic_networks: bool,
    /// `--ipam-records`: where the node's `yh-ipam` allocations are recorded.
    pub ipam_records: PathBuf,
    /// `--ipam-reclaim-after`: how long a pod is gone before its addresses are given back.
    pub ipam_reclaim_after: Duration,
    /// `--ipam-lease-duration`: how long the node's `yh-ipam` lease holds without a renewal.
    pub ipam_lease_duration: Duration,
    /// `--ipam-clock-skew`: how far apart two nodes' clocks may be, waited for on top of a dead
    /// node's lease before its blocks are released.
    pub ipam_clock_skew: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The node whose pods it watches (the DaemonSet: the downward API's `spec.nodeName`).
    pub node: String,
    pub access: Access,
    /// The socket, as this process reaches it.
    pub socket: PathBuf,
    pub metrics_address: SocketAddr,
    /// The selector's extra keys (a JSON object), for the NetworkAttachmentDefinition namespace
    /// policy: only NADs a pod may use are watched.
    pub selector_config: Option<PathBuf>,
    /// Whether the node's default network is ready, as the installer finds it.
    pub default_network: NetworkReadiness,
    /// `--dynamic-networks`: the attach worker's socket, as this process reaches it; running pods'
    /// networks annotation edits are applied through it (`dynamic`).
    pub dynamic_networks: Option<PathBuf>,
    /// The node's `yh-ipam` allocation records, as this process reaches them.
    pub ipam_records: PathBuf,
    pub ipam_reclaim_after: Duration,
    pub ipam_lease_duration: Duration,
    pub ipam_clock_skew: Duration,
}

impl Options {
    /// The agent's options for `settings`, whoever starts it: `reach` turns a host path into the
    /// path this process reaches it by (under the installer's host root; itself for `yh-genie
    /// agent`). The attach worker listens beside the agent's socket.
    pub fn new(
        settings: &AgentSettings,
        access: Access,
        selector_config: Option<PathBuf>,
        default_network: NetworkReadiness,
        reach: impl Fn(&Path) -> PathBuf,
    ) -> Self {
        Options {
            node: settings.node_name.clone(),
            access,
            socket: reach(&settings.socket),
            metrics_address: settings.metrics_address,
            selector_config,
            default_network,
            dynamic_networks: settings
                .dynamic_networks
                .then(|| reach(&crate::node::paths::worker_socket(&settings.socket))),
            ipam_records: reach(&settings.ipam_records),
            ipam_reclaim_after: settings.ipam_reclaim_after,
            ipam_lease_duration: settings.ipam_lease_duration,
            ipam_clock_skew: settings.ipam_clock_skew,
        }
    }
}

/// Whether the node's default network is ready: the installer sets it (the conflist written, its
/// `--wait-for` files there), the agent's readiness reads it. Shared by the two.
#[derive(Debug, Clone, Default)]
pub struct NetworkReadiness(Arc<Mutex<Option<String>>>);

impl NetworkReadiness {
    /// Not ready until `set_ready`.
    pub fn waiting(why: &str) -> Self {
        let readiness = Self::default();
        readiness.set_waiting(why);
        readiness
    }

    pub fn set_ready(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    pub fn set_waiting(&self, why: &str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.to_string());
    }

    /// `None` when ready; else why not.
    pub fn waiting_for(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl PartialEq for NetworkReadiness {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for NetworkReadiness {}

/// The files the running agent listens on: (device, inode) of its socket and of its report socket.
type Bound = [Option<FileId>; 2];

/// The running agent, as the installer holds it.
pub struct Handle {
    socket: PathBuf,
    bound: Arc<Mutex<Bound>>,
}

impl Handle {
    /// On the way out: remove the sockets, if they are still this agent's (a newer agent may have
    /// replaced them already), so that plugins find no socket rather than one nobody serves.
    pub fn stop(&self) {
        let ours = *self.bound.lock().unwrap_or_else(|e| e.into_inner());
        let paths = [self.socket.clone(), crate::node::paths::reports_socket(&self.socket)];
        for (path, ours) in paths.iter().zip(ours) {
            let there = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
            if ours.is_some() && ours == there && std::fs::remove_file(path).is_ok() {
                info!("removed {}", path.display());
            }
        }
    }
}

/// `yh-genie agent`: the agent alone, in the foreground, until SIGTERM or SIGINT; its sockets are
/// removed on the way out. Returns the exit code (1: it could not start).
pub fn main(options: Options) -> i32 {
    crate::platform::logging::init_stderr_log();
    match run_in_foreground(options) {
        Ok(()) => 0,
        Err(e) => {
            error!("{e:#}");
            1
        }
    }
}

fn run_in_foreground(options: Options) -> anyhow::Result<()> {
    let stop = StopSignals::listen()?;
    let agent = spawn(options)?;
    let signal = stop.next();
    info!("{signal}: stopping");
    agent.stop();
    Ok(())
}

/// Start the agent on a thread of its own, restarting it whenever it fails.
pub fn spawn(options: Options) -> anyhow::Result<Handle> {
    let bound = Arc::new(Mutex::new([None, None]));
    let handle = Handle { socket: options.socket.clone(), bound: bound.clone() };
    std::thread::Builder::new()
        .name("agent".into())
        .spawn(move || supervise(&options, &bound))
        .context("starting the agent's thread")?;
    Ok(handle)
}

fn supervise(options: &Options, bound: &Mutex<Bound>) {
    let mut pause = FIRST_RESTART_PAUSE;
    loop {
        let started = Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(options, bound)));
        let why = match outcome {
            Ok(Ok(())) => "it stopped".to_string(),
            Ok(Err(e)) => format!("{e:#}"),
            Err(panic) => format!(
                "it panicked: {}",
                panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or(panic.downcast_ref::<&str>().copied())
                    .unwrap_or("?")
            ),
        };
        if started.elapsed() >= HEALTHY_RUN {
            pause = FIRST_RESTART_PAUSE;
        }
        let wait = jittered(pause * 2);
        error!("the node agent failed ({why}); starting it again in {:.1}s", wait.as_secs_f64());
        std::thread::sleep(wait);
        pause = (pause * 2).min(MAX_RESTART_PAUSE);
    }
}

/// One life of the agent: until one of its tasks fails for good.
fn run(options: &Options, bound: &Mutex<Bound>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("the agent's runtime")?;
    runtime.block_on(async {
        let client = watching::connect(&options.access).await.map_err(|e| anyhow!(e))?;
        // Before the socket answers anything: the addresses the node's pods hold.
        let addresses =
            addresses::Addresses::restore(&options.ipam_records, &options.node, options.ipam_lease_duration)
                .with_context(|| format!("reading the address records in {}", options.ipam_records.display()))?;
        let (listener, id) =
            server::bind(&options.socket).with_context(|| format!("listening on {}", options.socket.display()))?;
        let (report_socket, report_id) = reports::bind(&options.socket).with_context(|| {
            let path = crate::node::paths::reports_socket(&options.socket);
            format!("listening on {}", path.display())
        })?;
        *bound.lock().unwrap_or_else(|e| e.into_inner()) = [Some(id), Some(report_id)];
        let rules = options.selector_config.as_deref().map(read_rules).unwrap_or_else(|| Ok(Default::default()));
        let (policy, defaults) = rules.unwrap_or_else(|e| {
            warn!("{e:#}; the default namespace policy decides which NetworkAttachmentDefinitions are watched");
            Default::default()
        });
        let store = Store::with_rules(policy, defaults);
        let (annotations, jobs) = mpsc::channel(annotate::QUEUE);
        let (changes, _) = tokio::sync::watch::channel(0);
        let (dynamic, dynamic_changes) = match &options.dynamic_networks {
            Some(_) => {
                let (sender, receiver) = mpsc::unbounded_channel();
                (Some(sender), Some(receiver))
            }
            None => (None, None),
        };
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            changes,
            metrics: Metrics::default(),
            client,
            streaming: Streaming::default(),
            sync: Sync::default(),
            object_watches: Mutex::new(HashMap::new()),
            annotations,
            kept_statuses: kept_statuses::KeptStatuses::new(&crate::node::paths::kept_statuses(&options.socket)),
            events: annotate::Events::default(),
            node: options.node.clone(),
            default_network: options.default_network.clone(),
            dynamic,
            addresses,
            address_pools: address_pools::AddressPools::new(),
            reclaim_after: options.ipam_reclaim_after,
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(watch::pods(shared.clone(), options.node.clone()));
        tasks.spawn(server::serve(shared.clone(), listener));
        tasks.spawn(reports::serve(shared.clone(), report_socket));
        tasks.spawn(annotate::run(shared.clone(), jobs));
        tasks.spawn(annotate::send_events(shared.clone()));
        tasks.spawn(http::serve(shared.clone(), options.metrics_address));
        let keeper = shared.clone();
        tasks.spawn(async move { keeper.addresses.keep_lease(&keeper.client).await });
        let sharer = shared.clone();
        tasks.spawn(async move { sharer.addresses.share_when_asked(&sharer.client).await });
        let rule = releaser::Rule { lease_duration: options.ipam_lease_duration, clock_skew: options.ipam_clock_skew };
        tasks.spawn(releaser::run(shared.clone(), rule));
        if let (Some(worker), Some(changes)) = (options.dynamic_networks.clone(), dynamic_changes) {
            tasks.spawn(dynamic::run(shared.clone(), worker, changes));
        }
        if let Some(path) = options.selector_config.clone() {
            tasks.spawn(reload_policy(shared.clone(), path));
        }
        info!(
            "node agent for node {}: socket {}, readiness and metrics on http://{}, API access by {}",
            options.node,
            options.socket.display(),
            options.metrics_address,
            options.access
        );
        match tasks.join_next().await {
            Some(Ok(why)) => bail!("{why}"),
            Some(Err(e)) => bail!("a task of the agent failed: {e}"),
            None => bail!("the agent had no task"),
        }
    })
}

/// What the agent's tasks share. One thread runs them all (a current-thread runtime), so the
/// locks are never contended; they only satisfy `tokio::spawn`.
struct Shared {
    store: Mutex<Store>,
    /// Bumped after every change of the store: requests waiting for a pod look again.
    changes: tokio::sync::watch::Sender<u64>,
    metrics: Metrics,
    /// One connection to the API server (HTTP/2 where it is offered), shared by every watch.
    client: ::kube::Client,
    /// Whether the API server serves streaming lists, as the watches found out.
    streaming: Streaming,
    sync: Sync,
    object_watches: Mutex<HashMap<WatchKey, AbortHandle>>,
    annotations: mpsc::Sender<annotate::Job>,
    /// The statuses taken and not written yet, on disk for the agent's next life.
    kept_statuses: kept_statuses::KeptStatuses,
    /// The `AddedInterface` events waiting for a quiet moment of the node.
    events: annotate::Events,
    /// This node's name, which reports the events the agent creates.
    node: String,
    default_network: NetworkReadiness,
    /// Where the pod watch tells the running pods' networks annotations (`--dynamic-networks`).
    dynamic: Option<mpsc::UnboundedSender<dynamic::Change>>,
    /// `yh-ipam`'s addresses on this node.
    addresses: addresses::Addresses,
    /// The `AddressPool` objects, watched from the first `yh-ipam` request on.
    address_pools: address_pools::AddressPools,
    /// How long a pod is gone before its addresses are given back.
    reclaim_after: Duration,
}

impl Shared {
    /// Tell the dynamic networks' task about a pod event (`--dynamic-networks`).
    fn pod_event(&self, pod: &k8s_openapi::api::core::v1::Pod, deleted: bool) {
        if let Some(sender) = &self.dynamic
            && let Some(change) = dynamic::change(pod, deleted)
        {
            let _ = sender.send(change);
        }
    }

    /// Change the store, start and stop the watches it asks for, and wake the waiters.
    fn update(self: &Arc<Self>, change: impl FnOnce(&mut Store) -> Watches) {
        let watches = change(&mut self.store.lock().unwrap_or_else(|e| e.into_inner()));
        let mut running = self.object_watches.lock().unwrap_or_else(|e| e.into_inner());
        for key in watches.stop {
            if let Some(task) = running.remove(&key) {
                task.abort();
            }
            self.sync.stopped(&Watched::Object(key));
        }
        for key in watches.start {
            let task = watch::start(self, key.clone());
            if let Some(old) = running.insert(key, task) {
                old.abort();
            }
        }
        drop(running);
        self.changes.send_modify(|n| *n += 1);
    }

    /// `Ok` when the agent is ready (`/readyz`): the node's pods listed and their watch current,
    /// the default network ready; else why not. The other watches are not readiness: each concerns
    /// only the pods that need what it watches (`failing_watches` says which fail, and why).
    fn readiness(&self) -> Result<(), String> {
        if let Some(behind) = self.sync.pods_behind() {
            let state = if behind.listed { "is not current" } else { "has not listed yet" };
            return Err(match behind.failure {
                Some(failure) => format!("{} {state}: {}", Watched::Pods, failure.error),
                None => format!("{} {state}", Watched::Pods),
            });
        }
        if !self.store.lock().unwrap_or_else(|e| e.into_inner()).listed() {
            return Err("the node's pods are not listed yet".into());
        }
        match self.default_network.waiting_for() {
            Some(why) => Err(format!("the default network is not ready: {why}")),
            None => Ok(()),
        }
    }

    /// Each watch other than the pods' whose last request failed, and why: the pods that need
    /// what it watches are answered that the agent cannot help, and the plugin asks the API server.
    fn failing_watches(&self) -> Vec<String> {
        self.sync
            .failing()
            .into_iter()
            .filter(|(watched, _)| *watched != Watched::Pods)
            .map(|(watched, failure)| format!("{watched} fails: {}", failure.error))
            .collect()
    }

    fn render_metrics(&self) -> String {
        let ready = self.readiness().is_ok();
        let store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        self.metrics.render(&metrics::Snapshot {
            store: &store,
            sync: &self.sync,
            streaming: &self.streaming,
            ready,
            default_network_ready: self.default_network.waiting_for().is_none(),
            ipam: self.addresses.usage(),
            ipam_lease_age: self.addresses.lease_age(),
        })
    }
}

/// The namespace policy and the admin's `defaultNetworks`/`systemNamespaces`, from the selector's
/// extra keys (`--selector-config`): which NetworkAttachmentDefinitions the node's pods use.
fn read_rules(path: &Path) -> anyhow::Result<(AttachmentPolicy, PodDefaults)> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let keys: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&text).with_context(|| format!("{} is not a JSON object", path.display()))?;
    let policy = AttachmentPolicy::from_keys(&keys).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let defaults = PodDefaults::from_keys(&keys).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    Ok((policy, defaults))
}

/// Read the rules again now and then: the ConfigMap behind them may be edited.
async fn reload_policy(shared: Arc<Shared>, path: PathBuf) -> String {
    let mut last_error = None;
    loop {
        tokio::time::sleep(POLICY_RELOAD).await;
        match read_rules(&path) {
            Ok((policy, defaults)) => {
                last_error = None;
                shared.update(|store| store.set_rules(policy, defaults));
            }
            Err(e) => {
                let e = format!("{e:#}");
                if last_error.as_ref() != Some(&e) {
                    warn!("{e}; keeping the namespace policy read before");
                }
                last_error = Some(e);
            }
        }
    }
}
