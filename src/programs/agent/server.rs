//! The agent's unix socket: one request line, one reply line per connection
//! (`node::agent_socket::protocol`). The socket is the plugin's (root only): its directory is made
//! 0700, the socket 0600, and it appears under its name only once it is listening and has its mode
//! (bound under a temporary name, then renamed over any socket a previous agent left).

use super::Shared;
use super::address_pools;
use super::addresses::Keeper;
use super::annotate;
use super::metrics::Outcome;
use super::store::{Lookup, Miss, WatchKey, watch_key};
use super::sync::Watched;
use crate::node::agent_socket::addresses::{AddressOwner, PoolSpec};
use crate::node::agent_socket::protocol::{Answer, Ask, MAX_WAIT_MS, Reply, Request};
use std::fs::{DirBuilder, Permissions};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, warn};

/// How long a client may take to send its request line, and to take the reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request: a selection ask is a few hundred bytes, an annotation a few KiB. (Replies,
/// which carry objects, may be up to `protocol::MAX_LINE`.)
const MAX_REQUEST: u64 = 1 << 20;

/// The file the agent listens on: (device, inode), to remove only its own socket on the way out.
pub type FileId = (u64, u64);

/// Listen on `path`, replacing whatever is there. Must be called inside the runtime.
pub(super) fn bind(path: &Path) -> std::io::Result<(UnixListener, FileId)> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, Permissions::from_mode(0o700))?;
    // Bound under a temp name and renamed into place, so a client never finds a socket that is
    // not yet listening or not yet private; what an agent killed in between left goes after.
    let temporary = crate::platform::durable::temp_sibling(path)?;
    let listener = std::os::unix::net::UnixListener::bind(&temporary)?;
    std::fs::set_permissions(&temporary, Permissions::from_mode(0o600))?;
    std::fs::rename(&temporary, path)?;
    crate::platform::durable::remove_abandoned_beside(path);
    let meta = std::fs::metadata(path)?;
    listener.set_nonblocking(true)?;
    Ok((UnixListener::from_std(listener)?, (meta.dev(), meta.ino())))
}

/// Connections served at once. A burst of ADDs beyond it waits in the listen backlog (a plugin
/// whose connect finds the backlog full takes the direct path at once), so that the agent's memory
/// and its one thread stay bounded whatever the node's runtime does.
const CONCURRENT: usize = 128;

/// Serve connections until the listener fails for good.
pub(super) async fn serve(shared: Arc<Shared>, listener: UnixListener) -> String {
    let slots = Arc::new(tokio::sync::Semaphore::new(CONCURRENT));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return "the connection slots closed".into() };
        match listener.accept().await {
            Ok((stream, _)) => {
                let shared = shared.clone();
                drop(tokio::spawn(async move {
                    connection(shared, stream).await;
                    drop(slot);
                }));
            }
            Err(e) => {
                // Out of descriptors, most likely: the connections in flight will free some.
                warn!("accepting on the agent socket: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(shared: Arc<Shared>, stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut line = Vec::new();
    let mut reader = BufReader::new(read).take(MAX_REQUEST);
    let read = tokio::time::timeout(CLIENT_TIMEOUT, reader.read_until(b'\n', &mut line)).await;
    let started = Instant::now();
    // A plugin at work: the events wait.
    shared.events.busy();
    let answer = match read {
        Ok(Ok(_)) if line.ends_with(b"\n") => match Request::parse(&line) {
            Ok(Request { ask: Ask::Selection { namespace, name, uid, wait_ms }, .. }) => {
                let wait = Duration::from_millis(wait_ms.min(MAX_WAIT_MS));
                let (answer, outcome) = selection(&shared, &namespace, &name, uid.as_deref(), wait).await;
                shared.metrics.answered(outcome, started.elapsed());
                answer
            }
            Ok(Request { ask: Ask::Annotate { namespace, name, uid, annotations, events, no_answer }, .. }) => {
                let job =
                    annotate::Job { namespace, name, uid, annotations, events, accepted: Instant::now(), kept: None };
                if no_answer {
                    // The plugin has gone already: nobody to answer, so the agent says it itself.
                    return annotate::take_unanswered(&shared, job);
                }
                annotate::offer(&shared, job)
            }
            Ok(Request { ask: Ask::Allocate { pool, owner, requested, claim }, .. }) => {
                match address_pools::check_inline(&shared, &pool.name).await {
                    Ok(()) => allocate(&shared, pool, owner, &requested, claim).await,
                    Err(refusal) => refusal,
                }
            }
            Ok(Request { ask: Ask::AllocateFromPoolObject { pool, owner, requested, claim }, .. }) => {
                // The pool resolved before anything is allocated: an invalid object takes nothing.
                match address_pools::definition(&shared, &pool).await {
                    Ok(defined) => match allocate(&shared, defined.spec.clone(), owner, &requested, claim).await {
                        Answer::Allocated { addresses } => Answer::AllocatedFromPoolObject { addresses, pool: defined },
                        other => other,
                    },
                    Err(refusal) => refusal,
                }
            }
            Ok(Request { ask: Ask::Release { pool, container_id, ifname, uid }, .. }) => {
                shared.addresses.release(&shared.client, &pool, &container_id, &ifname, uid.as_deref()).await
            }
            Err(why) => refused(&shared, why, started),
        },
        Ok(Ok(_)) => refused(&shared, "the request is not one line".into(), started),
        Ok(Err(e)) => refused(&shared, format!("reading the request: {e}"), started),
        Err(_) => refused(&shared, "no request in time".into(), started),
    };
    // The plugin may have given up already, or stopped reading: nothing to do about it, but its
    // connection is not kept for it.
    match tokio::time::timeout(CLIENT_TIMEOUT, write.write_all(&Reply::new(answer).line())).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!("the plugin did not take the agent's reply: {e}"),
        Err(_) => debug!("the plugin did not take the agent's reply in {}s", CLIENT_TIMEOUT.as_secs()),
    }
}

/// `pool`'s addresses for `owner`, kept beyond the pod for its IPAMClaim or its StatefulSet ordinal.
async fn allocate(
    shared: &Shared,
    pool: PoolSpec,
    owner: AddressOwner,
    requested: &[IpAddr],
    claim: Option<String>,
) -> Answer {
    // Which StatefulSet ordinal the pod is, as the watch holds it (`None`: not held yet).
    let member = {
        let store = shared.store.lock().unwrap_or_else(|e| e.into_inner());
        store.holds_uid(&owner.uid).then(|| store.statefulset_member(&owner.uid))
    };
    let keeper = match (claim, member) {
        (Some(claim), _) => Keeper::Claim(claim),
        (None, None) => Keeper::Unknown,
        (None, Some(None)) => Keeper::Pod,
        (None, Some(Some(member))) => Keeper::Ordinal(member),
    };
    shared.addresses.allocate(&shared.client, pool, owner, requested, keeper).await
}

fn refused(shared: &Shared, why: String, started: Instant) -> Answer {
    shared.metrics.answered(Outcome::Refused, started.elapsed());
    Answer::Refused { why }
}

/// The pod's objects as held, waiting up to `wait` for the watches to deliver what is missing.
async fn selection(
    shared: &Shared,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    wait: Duration,
) -> (Answer, Outcome) {
    let deadline = tokio::time::Instant::now() + wait;
    // Subscribed before the first look, so that no change between a look and the wait is missed.
    let mut changes = shared.changes.subscribe();
    let mut waited = false;
    loop {
        let lookup = shared.store.lock().unwrap_or_else(|e| e.into_inner()).lookup(namespace, name, uid);
        let miss = match lookup {
            Lookup::Found(objects) => {
                return (Answer::Objects(objects), if waited { Outcome::HitAfterWait } else { Outcome::Hit });
            }
            Lookup::Gone(miss) => miss,
            // Waiting cannot help while the watch that would deliver what is missing fails.
            Lookup::NotYet(miss) if let Some(failing) = failing_watch(shared, &miss) => failing,
            Lookup::NotYet(_) if tokio::time::Instant::now() < deadline => {
                waited = true;
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { tokio::time::sleep_until(deadline).await },
                    () = tokio::time::sleep_until(deadline) => {}
                }
                continue;
            }
            Lookup::NotYet(miss) => miss,
        };
        shared.metrics.missed(&miss);
        let whose = match uid {
            Some(uid) => format!("pod {namespace}/{name} uid {uid}"),
            None => format!("pod {namespace}/{name}"),
        };
        return (Answer::Unknown { why: format!("{whose}: {miss}") }, Outcome::Unknown);
    }
}

/// What `miss` waits for, if the watch that would deliver it is failing: the pod asked for gets
/// "unknown" at once, naming that watch and its failure, and the plugin asks the API server.
fn failing_watch(shared: &Shared, miss: &Miss) -> Option<Miss> {
    let watched = match miss {
        Miss::NotListed | Miss::NotSeen => Watched::Pods,
        Miss::ObjectPending(key) => Watched::Object(watch_key(key)),
        Miss::SlicesPending => Watched::Object(WatchKey::NodeDevices),
        Miss::OtherUid { .. } | Miss::Deleted | Miss::WatchFailing { .. } => return None,
    };
    let failure = shared.sync.failure(&watched)?;
    Some(Miss::WatchFailing { watch: watched.to_string(), error: failure.error })
}
