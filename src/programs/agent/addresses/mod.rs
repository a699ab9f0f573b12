//! `yh-ipam`'s addresses, held by the node agent (docs/ipam.md): the plugin's ADD asks the agent
//! over its socket, and the agent hands out addresses from its node's blocks, from memory and a
//! durable record, without an API request while a block has room.
//!
//! - `blocks`: a pool carved into blocks, and which addresses a block may hand out;
//! - `allocator`: the node's blocks and owners in memory, saying which block to claim when none has
//!   room;
//! - `claims`: a block claimed through the API server, one `IPBlock` object per block; confirmed
//!   by a write after the node's lease had run out; the blocks listed when a pool seems exhausted,
//!   to claim those released since;
//! - `lease`: the node's lease on its blocks, renewed in the background; no address is handed out
//!   while it is older than its duration, and after it had run out none before the node's blocks
//!   are checked (yh-ipam's dead-node releaser, `super::releaser`, may have released them);
//! - `fixed`: fixed addresses, kept for a StatefulSet's ordinal across its pods, outside the nodes'
//!   blocks: one `FixedAddress` object per address, in the pool's fixed blocks;
//! - `shared`: a node's blocks shared with every node when the pool runs low, asked for by the
//!   nodes that find it exhausted, their free addresses handed out one `FixedAddress` at a time;
//! - `imported`: the addresses whereabouts handed out, imported as fixed addresses held by their
//!   pods' sandboxes before a pool's first ADD, freed by their DEL;
//! - `records`: one durable file per owner, written before the plugin hears its addresses and read
//!   back at start, before the agent answers.
//!
//! One allocation or release at a time (`Addresses::state`): a claim waits on the API server with
//! the allocator held, so that two ADDs never claim two blocks where one would do.

mod allocator;
mod blocks;
mod claims;
mod fixed;
mod imported;
mod lease;
mod records;
mod shared;

use crate::node::agent_socket::addresses::{AddressOwner, Allocated, PoolSpec};
use crate::node::agent_socket::protocol::Answer;
use crate::platform::kube::fixed_address::{self, FixedOwner};
use crate::platform::kube::ip_block::object_name;
pub use allocator::PoolUsage;
use allocator::{Allocator, Step};
use claims::Claimed;
use ipnetwork::IpNetwork;
use records::{Record, Records};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Whose an ADD's addresses are beyond its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keeper {
    /// The agent's watch does not hold the pod yet: the API server is asked whether it is a
    /// StatefulSet's.
    Unknown,
    /// The pod's alone: from the node's blocks.
    Pod,
    /// A StatefulSet's ordinal: a fixed address, kept across its pods.
    Ordinal(FixedOwner),
    /// The IPAMClaim of the pod's namespace the pod names (`ipam-claim-reference`): a fixed address,
    /// which two pods may hold at once (a VM's live migration).
    Claim(String),
}

pub struct Addresses {
    state: tokio::sync::Mutex<Allocator>,
    records: Records,
    node: String,
    lease: lease::NodeLease,
    /// What the node holds of each pool, as of the last change: for the metrics, which cannot wait
    /// on an allocation in progress.
    usage: std::sync::Mutex<BTreeMap<String, PoolUsage>>,
    /// The pools imported from whereabouts since the agent started (`import`), each with whether it
    /// may hold imported addresses: where it holds none (whereabouts not installed, or nothing of
    /// the pool in it), a DEL the records know nothing of asks the API server nothing.
    imported: std::sync::Mutex<BTreeMap<String, bool>>,
    /// Each pool as its last ADD described it: what the node shares of its blocks when asked.
    pools: std::sync::Mutex<BTreeMap<String, PoolSpec>>,
    /// When each (node, pool) was last asked to share its blocks.
    asked: std::sync::Mutex<BTreeMap<(String, String), Instant>>,
}

/// A node asked to share its blocks again no sooner than this: until then it has shared them, or
/// had no room to share.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(60);

impl Addresses {
    /// The node's addresses as its records under `dir` hold them; what could not be read is logged.
    pub fn restore(dir: &Path, node: &str, lease_duration: std::time::Duration) -> std::io::Result<Self> {
        let records = Records::new(dir);
        for unfinished in records.remove_unfinished_writes()? {
            info!("removed {}: the write of an address record, cut short by a stop", unfinished.display());
        }
        let (read, problems) = records.read_all()?;
        for problem in problems {
            warn!("an address record that cannot be read, its addresses unknown: {problem}");
        }
        let allocator =
            Allocator::from_records(read.iter().map(|r| (r.pool.as_str(), &r.owner, r.addresses.as_slice())));
        let lease = lease::NodeLease::new(lease_duration);
        if !read.is_empty() {
            info!("{} address records read back from {}", read.len(), dir.display());
            lease.want();
        }
        let usage = std::sync::Mutex::new(allocator.usage());
        Ok(Addresses {
            state: tokio::sync::Mutex::new(allocator),
            records,
            node: node.to_string(),
            lease,
            usage,
            imported: std::sync::Mutex::default(),
            pools: std::sync::Mutex::default(),
            asked: std::sync::Mutex::default(),
        })
    }

    /// An address of each of `pool`'s range sets for `owner` (those `requested` where asked),
    /// claiming blocks as needed; a fixed address (`fixed`) for a StatefulSet's pod that asks for
    /// none, and for a pod naming an IPAMClaim (`keeper`).
    pub async fn allocate(
        &self,
        client: &::kube::Client,
        pool: PoolSpec,
        owner: AddressOwner,
        requested: &[IpAddr],
        keeper: Keeper,
    ) -> Answer {
        if let Err(why) = self.lease.check(&self.node).await {
            return Answer::NoAddress { why, retry: true, invalid: false };
        }
        self.pools.lock().unwrap_or_else(|e| e.into_inner()).insert(pool.name.clone(), pool.clone());
        let mut state = self.state.lock().await;
        if self.lease.take_lapsed()
            && let Err(why) = self.check_blocks(&mut state, client).await
        {
            self.lease.check_blocks_again();
            self.publish(&state);
            return Answer::NoAddress { why, retry: true, invalid: false };
        }
        if let Err(refusal) = self.import(client, &pool).await {
            self.publish(&state);
            return Answer::NoAddress { why: refusal.why, retry: refusal.retry, invalid: false };
        }
        let answer = if let Keeper::Claim(claim) = &keeper
            && !requested.is_empty()
        {
            Answer::NoAddress {
                why: format!(
                    "pod {} names IPAMClaim {claim} and asks for addresses in 'ips': one or the other",
                    owner.pod
                ),
                retry: false,
                invalid: true,
            }
        } else if requested.is_empty() && !state.holds(&pool.name, &owner) {
            let keeper = match keeper {
                Keeper::Unknown => match fixed::member_of(client, &owner.pod, &owner.uid).await {
                    Ok(Some(member)) => Ok(Keeper::Ordinal(member)),
                    Ok(None) => Ok(Keeper::Pod),
                    Err(refusal) => Err(refusal),
                },
                known => Ok(known),
            };
            match keeper {
                Ok(Keeper::Ordinal(member)) => self.allocate_fixed(&mut state, client, &pool, &owner, &member).await,
                Ok(Keeper::Claim(claim)) => match fixed::claim_owner(client, &owner.pod, &claim).await {
                    Ok(member) => self.allocate_fixed(&mut state, client, &pool, &owner, &member).await,
                    Err(refusal) => Answer::NoAddress { why: refusal.why, retry: refusal.retry, invalid: false },
                },
                Ok(_) => self.allocate_in(&mut state, client, &pool, &owner, requested).await,
                Err(refusal) => Answer::NoAddress { why: refusal.why, retry: refusal.retry, invalid: false },
            }
        } else {
            self.allocate_in(&mut state, client, &pool, &owner, requested).await
        };
        self.publish(&state);
        answer
    }

    /// Import `pool`'s addresses from whereabouts (`imported`), once in the agent's life.
    async fn import(&self, client: &::kube::Client, pool: &PoolSpec) -> Result<(), fixed::Refusal> {
        if self.imported.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&pool.name) {
            return Ok(());
        }
        let imported = imported::import(client, &self.node, pool).await?;
        debug!("pool {:?}: the import from whereabouts: {imported:?}", pool.name);
        self.imported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pool.name.clone(), imported.may_hold_addresses());
        Ok(())
    }

    /// After the node's lease had run out: whether each block the node holds is still its own,
    /// confirmed by a write to its object (`claims::confirm`), or created again when the dead-node
    /// releaser deleted it. A block another node claimed meanwhile is lost to this node.
    async fn check_blocks(&self, state: &mut Allocator, client: &::kube::Client) -> Result<(), String> {
        let blocks = state.held_blocks();
        if !blocks.is_empty() {
            info!("the node's yh-ipam lease had run out: checking that its {} blocks are still its own", blocks.len());
        }
        for (block, pool) in blocks {
            match claims::confirm(client, block, &pool, &self.node).await {
                Claimed::Here => {}
                Claimed::Elsewhere(holder) => {
                    warn!(
                        "block {block} of pool {pool:?} is held by {holder} now (released while this node's \
                         lease had run out): no address is handed out from it here; the pods of this node holding \
                         addresses in it should be deleted"
                    );
                    state.lose(block, holder);
                }
                Claimed::Unknown(why) => {
                    return Err(format!(
                        "the node's yh-ipam lease had run out, and whether block {block} of pool {pool:?} is still \
                         its own cannot be told: {why}"
                    ));
                }
            }
        }
        self.publish(state);
        Ok(())
    }

    async fn allocate_in(
        &self,
        state: &mut Allocator,
        client: &::kube::Client,
        pool: &PoolSpec,
        owner: &AddressOwner,
        requested: &[IpAddr],
    ) -> Answer {
        let mut refreshed = false;
        loop {
            let (why, invalid, exhausted) = match state.allocate(pool, owner, requested) {
                Step::Addresses { addresses, fresh } => {
                    if fresh {
                        let record =
                            Record { pool: pool.name.clone(), owner: owner.clone(), addresses: addresses.clone() };
                        if let Err(e) = self.records.write(&record) {
                            state.forget(&pool.name, owner);
                            return Answer::NoAddress {
                                why: format!("recording the addresses: {e}"),
                                retry: true,
                                invalid: false,
                            };
                        }
                    }
                    return Answer::Allocated { addresses };
                }
                Step::Claim(block) => match claims::claim(client, block, &pool.name, &self.node).await {
                    Claimed::Here => {
                        info!("block {block} of pool {:?} claimed for this node", pool.name);
                        state.adopt(block, &pool.name);
                        continue;
                    }
                    Claimed::Elsewhere(holder) => {
                        state.held_elsewhere(block, holder);
                        continue;
                    }
                    Claimed::Unknown(why) => {
                        return Answer::NoAddress {
                            why: format!(
                                "pool {:?} needs a block of this node's and cannot claim one: {why}",
                                pool.name
                            ),
                            retry: true,
                            invalid: false,
                        };
                    }
                },
                Step::Exhausted(why) => (why, false, true),
                Step::Refused { why, invalid } => (why, invalid, false),
            };
            // Blocks found another node's may have been released since, or shared: look once.
            if !invalid && !refreshed && state.knows_elsewhere() {
                refreshed = true;
                match claims::existing(client).await {
                    Ok(holders) => {
                        if state.refresh_elsewhere(|block| holders.get(&object_name(block)).cloned()) {
                            continue;
                        }
                    }
                    Err(e) => debug!("pool {:?}: {why}, and {e}", pool.name),
                }
            }
            if exhausted && requested.is_empty() {
                return self.allocate_shared(state, client, pool, owner, why).await;
            }
            return Answer::NoAddress { why, retry: false, invalid };
        }
    }

    /// An address of each range set for `owner` from the pool's fixed blocks, shared ones among
    /// them (`shared`), the node's own blocks being full and none left to claim; when none has room,
    /// the nodes holding blocks of the pool are asked to share theirs, and the ADD is to be tried
    /// again while they may.
    async fn allocate_shared(
        &self,
        state: &mut Allocator,
        client: &::kube::Client,
        pool: &PoolSpec,
        owner: &AddressOwner,
        exhausted: String,
    ) -> Answer {
        let mut addresses: Vec<Allocated> = Vec::new();
        for index in 0..pool.range_sets.len() {
            match shared::take(client, &self.node, pool, index, owner).await {
                Ok(allocated) => addresses.push(allocated),
                Err(refusal) => {
                    for taken in &addresses {
                        if let Err(e) = shared::release(client, owner, taken).await {
                            warn!("pool {:?}: freeing {} again: {e}", pool.name, taken.address);
                        }
                    }
                    if refusal.retry {
                        return Answer::NoAddress { why: refusal.why, retry: true, invalid: false };
                    }
                    let waiting = self.ask_to_share(state, client, pool).await;
                    if waiting.is_empty() {
                        return Answer::NoAddress { why: exhausted, retry: false, invalid: false };
                    }
                    return Answer::NoAddress {
                        why: format!(
                            "{exhausted}; nodes {} hold blocks of it and are asked to share the addresses left in \
                             them: try again",
                            waiting.join(", ")
                        ),
                        retry: true,
                        invalid: false,
                    };
                }
            }
        }
        let record = Record { pool: pool.name.clone(), owner: owner.clone(), addresses: addresses.clone() };
        if let Err(e) = self.records.write(&record) {
            for taken in &addresses {
                if let Err(e) = shared::release(client, owner, taken).await {
                    warn!("pool {:?}: freeing {} again: {e}", pool.name, taken.address);
                }
            }
            return Answer::NoAddress { why: format!("recording the addresses: {e}"), retry: true, invalid: false };
        }
        state.hold_fixed(&pool.name, owner, &addresses);
        Answer::Allocated { addresses }
    }

    /// Ask the nodes holding blocks of `pool` to share them, each once in `ASK_AGAIN_AFTER`: those
    /// asked recently enough that they may not have answered yet (within two renewals of their lease).
    async fn ask_to_share(&self, state: &Allocator, client: &::kube::Client, pool: &PoolSpec) -> Vec<String> {
        let answer_time = self.lease.renewal_period() * 2 + Duration::from_secs(1);
        let mut waiting = Vec::new();
        for node in state.other_holders(pool) {
            let key = (node.clone(), pool.name.clone());
            let last = self.asked.lock().unwrap_or_else(|e| e.into_inner()).get(&key).copied();
            match last.map(|at| at.elapsed()) {
                Some(since) if since < answer_time => waiting.push(node),
                Some(since) if since < ASK_AGAIN_AFTER => {}
                _ => {
                    if shared::ask_to_share(client, &node, &pool.name, &self.node).await {
                        self.asked.lock().unwrap_or_else(|e| e.into_inner()).insert(key, Instant::now());
                        waiting.push(node);
                    }
                }
            }
        }
        waiting
    }

    /// Share this node's blocks of the pools other nodes ask for, for as long as the agent runs
    /// (`shared`): each under the allocator, between two allocations. Blocks begun to be shared and
    /// not made fixed yet (a request that failed, or the agent stopped in between) are made fixed
    /// first, and again every quarter of the lease's duration until they are.
    pub async fn share_when_asked(&self, client: &::kube::Client) -> String {
        loop {
            let unfinished = self.finish_shares(client).await;
            let asked = tokio::select! {
                asked = self.lease.share_asked() => asked,
                _ = tokio::time::sleep(self.lease.renewal_period()), if unfinished => continue,
            };
            for pool in asked {
                let spec = self.pools.lock().unwrap_or_else(|e| e.into_inner()).get(&pool).cloned();
                match spec {
                    Some(spec) => self.share(client, &spec).await,
                    // The ranges come with an ADD: none of the pool since the agent started.
                    None => debug!("pool {pool:?}: asked to share its blocks before any ADD of it here"),
                }
                self.lease.served(&pool);
            }
        }
    }

    /// Share each of this node's blocks of `spec`'s pool that has room: its pods' addresses in it
    /// made `FixedAddress`es, their records written again, then the block made fixed. Nothing is
    /// handed out from it from memory once its records are written.
    async fn share(&self, client: &::kube::Client, spec: &PoolSpec) {
        let mut state = self.state.lock().await;
        for (block, holders) in state.blocks_with_room(spec) {
            if let Err(why) = shared::hold_as_objects(client, &self.node, spec, block, &holders).await {
                warn!("block {block} of pool {:?} cannot be shared: {why}", spec.name);
                continue;
            }
            for (written, (pool, owner, addresses)) in state.begin_share(block, &spec.name).into_iter().enumerate() {
                if let Err(e) = self.records.write(&Record { pool, owner: owner.clone(), addresses }) {
                    warn!(
                        "block {block} of pool {:?} cannot be shared now: recording again the address of {}: {e}",
                        spec.name, owner.pod
                    );
                    // No record says so yet: the block stays the node's. Once one does, it is
                    // shared at the next start whatever the others say (`Allocator::from_records`),
                    // so it is made fixed.
                    if written == 0 {
                        state.abort_share(block, &spec.name);
                        break;
                    }
                }
            }
            if state.unfinished().iter().any(|(b, _)| *b == block) {
                self.finish_share(&mut state, client, &spec.name, block).await;
            }
        }
        self.publish(&state);
    }

    /// Make fixed the blocks begun to be shared; whether some are left to do.
    async fn finish_shares(&self, client: &::kube::Client) -> bool {
        let mut state = self.state.lock().await;
        for (block, pool) in state.unfinished() {
            self.finish_share(&mut state, client, &pool, block).await;
        }
        self.publish(&state);
        !state.unfinished().is_empty()
    }

    async fn finish_share(&self, state: &mut Allocator, client: &::kube::Client, pool: &str, block: IpNetwork) {
        match shared::make_fixed(client, &self.node, pool, block).await {
            Ok(holder) => state.finish_share(block, holder),
            Err(why) => warn!("block {block} is shared, but cannot be made a fixed block yet: {why}"),
        }
    }

    /// The fixed addresses of StatefulSet ordinal `member` (one of each range set), taken or handed
    /// over through the API server (`fixed`), then recorded as any other.
    async fn allocate_fixed(
        &self,
        state: &mut Allocator,
        client: &::kube::Client,
        pool: &PoolSpec,
        owner: &AddressOwner,
        member: &FixedOwner,
    ) -> Answer {
        let mut addresses = Vec::new();
        let claim = member.kind == fixed_address::IPAM_CLAIM;
        for index in 0..pool.range_sets.len() {
            match fixed::take(client, &self.node, pool, index, member, owner).await {
                Ok(allocated) => addresses.push(allocated),
                Err(refusal) => {
                    // The pool has none for the claim: its status says so (a failure to write it
                    // changes nothing of the answer).
                    if claim && !refusal.retry {
                        let outcome = fixed::ClaimOutcome::Exhausted { why: &refusal.why };
                        if let Err(e) = fixed::write_claim_status(client, pool, member, outcome).await {
                            debug!("{}", e.why);
                        }
                    }
                    return Answer::NoAddress { why: refusal.why, retry: refusal.retry, invalid: false };
                }
            }
        }
        let pod_name = owner.pod.split_once('/').map_or(owner.pod.as_str(), |(_, name)| name);
        let outcome = fixed::ClaimOutcome::Allocated { addresses: &addresses, pod: pod_name };
        if claim && let Err(refusal) = fixed::write_claim_status(client, pool, member, outcome).await {
            return Answer::NoAddress { why: refusal.why, retry: refusal.retry, invalid: false };
        }
        let record = Record { pool: pool.name.clone(), owner: owner.clone(), addresses: addresses.clone() };
        if let Err(e) = self.records.write(&record) {
            // The addresses stay the identity's (their objects): the retried ADD finds them.
            return Answer::NoAddress { why: format!("recording the addresses: {e}"), retry: true, invalid: false };
        }
        state.hold_fixed(&pool.name, owner, &addresses);
        Answer::Allocated { addresses }
    }

    /// Give back what (`container_id`, `ifname`) holds in `pool`. A record that cannot be removed
    /// keeps its addresses held (they would come back with it at the next start): the DEL fails, and
    /// the runtime asks again. A DEL the node's records know nothing of may be of a pod whose
    /// address was imported from whereabouts: its object is deleted (`imported::release`).
    pub async fn release(
        &self,
        client: &::kube::Client,
        pool: &str,
        container_id: &str,
        ifname: &str,
        uid: Option<&str>,
    ) -> Answer {
        let mut state = self.state.lock().await;
        let released = state.release(pool, container_id, ifname, uid);
        if released.is_empty() {
            // Not under the allocator: the lookup waits on the API server, and an imported address
            // is freed by deleting its object, which no allocation of this node's memory races.
            drop(state);
            let none_imported = self.imported.lock().unwrap_or_else(|e| e.into_inner()).get(pool) == Some(&false);
            if !none_imported && let Err(e) = imported::release(client, pool, container_id, ifname).await {
                warn!(
                    "the DEL of sandbox {container_id} ({ifname}) in pool {pool:?} could not look for an address \
                     imported from whereabouts: {e}"
                );
            }
            return Answer::Released;
        }
        let mut answer = Answer::Released;
        for (owner, addresses) in released {
            let mut freed = Ok(());
            for allocated in addresses.iter().filter(|a| a.shared) {
                freed = freed.and(shared::release(client, &owner, allocated).await);
            }
            if let Err(e) = freed {
                state.restore(pool, &owner, &addresses);
                answer = Answer::Refused {
                    why: format!("freeing the address of {} in pool {pool:?} from its shared block: {e}", owner.pod),
                };
                break;
            }
            if let Err(e) = self.records.remove(pool, &owner) {
                state.restore(pool, &owner, &addresses);
                answer = Answer::Refused {
                    why: format!("removing the address record of {} in pool {pool:?}: {e}", owner.pod),
                };
                break;
            }
        }
        self.publish(&state);
        answer
    }

    /// Give back what pod `uid` holds, now that it is gone: its DEL may never come (a pod deleted
    /// with its node's runtime down, a sandbox the runtime lost). Not while its addresses were
    /// handed out less than `quiet` ago (its ADD may be in flight): then how long until they may
    /// be. A record that cannot be removed keeps its addresses held.
    pub async fn release_pod(&self, uid: &str, quiet: std::time::Duration) -> Result<(), std::time::Duration> {
        let mut state = self.state.lock().await;
        for (pool, owner, addresses) in state.release_pod(uid, quiet)? {
            let listed: Vec<String> = addresses.iter().map(|a| a.address.to_string()).collect();
            match self.records.remove(&pool, &owner) {
                Ok(()) => info!(
                    "pod {} (uid {uid}) is gone: its addresses {} of pool {pool:?} are free",
                    owner.pod,
                    listed.join(", ")
                ),
                Err(e) => {
                    state.restore(&pool, &owner, &addresses);
                    warn!("pod {} (uid {uid}) is gone, but removing its address record failed: {e}", owner.pod);
                }
            }
        }
        self.publish(&state);
        Ok(())
    }

    fn publish(&self, state: &Allocator) {
        *self.usage.lock().unwrap_or_else(|e| e.into_inner()) = state.usage();
    }

    /// What the node holds of each pool: blocks, addresses used and free.
    pub fn usage(&self) -> BTreeMap<String, PoolUsage> {
        self.usage.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Since the node's lease was last renewed; `None` while it holds none.
    pub fn lease_age(&self) -> Option<std::time::Duration> {
        self.lease.age()
    }

    /// Renew the node's lease for as long as the agent runs (once an allocation or a record wants it).
    pub async fn keep_lease(&self, client: &::kube::Client) -> String {
        self.lease.keep(client, &self.node).await
    }

    /// Once this node hands out `yh-ipam` addresses (an allocation, or records read back).
    pub async fn in_use(&self) {
        self.lease.in_use().await;
    }

    /// The pods holding addresses on this node: uid and `namespace/name`.
    pub async fn holders(&self) -> BTreeMap<String, String> {
        self.state.lock().await.holders()
    }
}
