//! The node's addresses in memory: the blocks this node holds, the blocks found held by others,
//! and each owner's addresses. It never asks the API server: when a range set has no room in the
//! node's blocks it says which block to claim (`Step::Claim`), and the caller claims it
//! (`claims`) and asks again. An allocation is all of a pool's range sets or nothing.
//!
//! An address the runtime asked for (`ips`) is taken from the block holding it: from memory when
//! the block is this node's and the address free there, after claiming the block when no node holds
//! it; refused when the pool can never hand it out, when another node holds its block, or when it
//! is taken.

use super::blocks::{block_of, candidates, first_free, number, usable, usable_in, within};
use super::claims::Holder;
use crate::node::agent_socket::addresses::{AddressOwner, Allocated, PoolSpec};
use ipnetwork::IpNetwork;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// A block this node holds: its pool and the addresses handed out from it.
#[derive(Debug, Default)]
struct NodeBlock {
    pool: String,
    used: BTreeSet<IpAddr>,
    /// How many addresses it may hand out in all, once the pool's ranges are known (an ADD of the
    /// pool brings them; the records alone do not).
    usable: Option<usize>,
}

/// What this node holds of one pool, for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolUsage {
    pub blocks: usize,
    pub used: usize,
    /// The addresses its blocks may still hand out; `None` while the pool's ranges are unknown.
    pub free: Option<usize>,
    /// The fixed addresses the node's pods hold (outside its blocks).
    pub fixed: usize,
}

/// An owner's addresses in one pool, by (pool, uid, container id, ifname).
type HeldKey = (String, String, String, String);

fn key(pool: &str, owner: &AddressOwner) -> HeldKey {
    (pool.to_string(), owner.uid.clone(), owner.container_id.clone(), owner.ifname.clone())
}

#[derive(Debug, Default)]
pub struct Allocator {
    blocks: BTreeMap<IpNetwork, NodeBlock>,
    /// Blocks another node holds, as found while claiming, with that node: not asked for again in
    /// this life.
    elsewhere: BTreeMap<IpNetwork, Holder>,
    /// Blocks this node began to share (its records say so) and has not seen fixed yet, each with
    /// its pool: nothing is handed out from them from memory, and the addresses its pods hold in them
    /// are theirs as `FixedAddress` objects.
    unfinished: BTreeMap<IpNetwork, String>,
    held: BTreeMap<HeldKey, (AddressOwner, Vec<Allocated>)>,
    /// When each pod holding addresses last had them handed out (its ADD, a retry, or the records
    /// read back at start): its ADD may be in flight since.
    handed: BTreeMap<String, Instant>,
}

/// What `allocate` found.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// The owner's addresses: held already (a retried ADD) or just taken (`fresh`: to be recorded).
    Addresses { addresses: Vec<Allocated>, fresh: bool },
    /// No block of the node has room: claim this one, then ask again.
    Claim(IpNetwork),
    /// No block has room and none is left to claim: why, naming the pool.
    Exhausted(String),
    /// An address asked for cannot be had: why, naming it and the pool. `invalid`: the pool can
    /// never hand it out (outside its ranges, excluded, its gateway); otherwise it is taken, or in a
    /// block another node holds.
    Refused { why: String, invalid: bool },
}

impl Allocator {
    /// An address of each range set of `spec` for `owner`: the ones it holds, else the ones
    /// `requested` where asked and free ones of the node's blocks of the pool elsewhere.
    pub fn allocate(&mut self, spec: &PoolSpec, owner: &AddressOwner, requested: &[IpAddr]) -> Step {
        for (block, held) in self.blocks.iter_mut().filter(|(_, held)| held.pool == spec.name) {
            held.usable.get_or_insert_with(|| usable_in(spec, *block));
        }
        let key = key(&spec.name, owner);
        if let Some((_, addresses)) = self.held.get(&key) {
            self.handed.insert(owner.uid.clone(), Instant::now());
            return Step::Addresses { addresses: addresses.clone(), fresh: false };
        }
        let wanted = match wanted_by_set(spec, requested) {
            Ok(wanted) => wanted,
            Err(why) => return Step::Refused { why, invalid: true },
        };
        let mut taken: Vec<Allocated> = Vec::new();
        for (set, wanted) in spec.range_sets.iter().zip(wanted) {
            if let Some(ip) = wanted {
                match self.requested(spec, ip) {
                    Ok(allocated) => taken.push(allocated),
                    Err(step) => return step,
                }
                continue;
            }
            let free =
                self.blocks.iter().filter(|(block, held)| held.pool == spec.name && within(set, **block)).find_map(
                    |(block, held)| {
                        let free = |ip: IpAddr| !held.used.contains(&ip) && !taken.iter().any(|t| t.address == ip);
                        first_free(spec, set, *block, free).map(|address| Allocated {
                            address,
                            block: *block,
                            fixed: false,
                            shared: false,
                        })
                    },
                );
            match free {
                Some(allocated) => taken.push(allocated),
                None => {
                    return match candidates(spec, set)
                        .find(|b| !self.blocks.contains_key(b) && !self.elsewhere.contains_key(b))
                    {
                        Some(block) => Step::Claim(block),
                        None => Step::Exhausted(exhausted(
                            spec,
                            set,
                            self.blocks.values().filter(|b| b.pool == spec.name).count(),
                        )),
                    };
                }
            }
        }
        for allocated in &taken {
            self.blocks.entry(allocated.block).or_default().used.insert(allocated.address);
        }
        self.held.insert(key, (owner.clone(), taken.clone()));
        self.handed.insert(owner.uid.clone(), Instant::now());
        Step::Addresses { addresses: taken, fresh: true }
    }

    /// Address `ip`, asked for and usable in the pool: from the node's block holding it when free
    /// there; else the block to claim, or why it cannot be had.
    fn requested(&self, spec: &PoolSpec, ip: IpAddr) -> Result<Allocated, Step> {
        let block = block_of(number(ip), spec.block_size, ip.is_ipv4());
        let refused = |why: String| Step::Refused {
            why: format!("address {ip} asked for in 'ips' cannot be had from pool {:?}: {why}", spec.name),
            invalid: false,
        };
        match self.elsewhere.get(&block) {
            Some(Holder::Fixed) => {
                return Err(refused(format!("it is in block {block}, which holds the pool's fixed addresses")));
            }
            Some(holder) => return Err(refused(format!("it is in block {block}, which {holder} holds"))),
            None => {}
        }
        let Some(held) = self.blocks.get(&block) else {
            return Err(Step::Claim(block));
        };
        if held.used.contains(&ip) {
            let holder = self.held.values().find(|(_, addresses)| addresses.iter().any(|a| a.address == ip));
            let pod = holder.map_or("another pod".to_string(), |(owner, _)| format!("pod {}", owner.pod));
            return Err(refused(format!("it is taken, held by {pod} on this node")));
        }
        Ok(Allocated { address: ip, block, fixed: false, shared: false })
    }

    /// `block` is this node's, for `pool` (claimed now, or found claimed by this node before).
    pub fn adopt(&mut self, block: IpNetwork, pool: &str) {
        self.blocks.entry(block).or_insert_with(|| NodeBlock { pool: pool.to_string(), ..NodeBlock::default() });
    }

    /// `block` is `holder`'s.
    pub fn held_elsewhere(&mut self, block: IpNetwork, holder: Holder) {
        self.elsewhere.insert(block, holder);
    }

    /// The blocks found held by others, as the API server has them now (`holder`: who holds one,
    /// `None` when its object is gone): a block released (a dead node's) may be claimed again, a
    /// block shared is a fixed block. Whether any was released.
    pub fn refresh_elsewhere(&mut self, holder: impl Fn(IpNetwork) -> Option<Holder>) -> bool {
        let before = self.elsewhere.len();
        self.elsewhere.retain(|block, _| holder(*block).is_some());
        for (block, held_by) in self.elsewhere.iter_mut() {
            if let Some(now) = holder(*block) {
                *held_by = now;
            }
        }
        self.elsewhere.len() != before
    }

    /// The nodes holding blocks of `spec`'s pool (as found while claiming): those to ask to share
    /// them when the pool is exhausted.
    pub fn other_holders(&self, spec: &PoolSpec) -> BTreeSet<String> {
        self.elsewhere
            .iter()
            .filter(|(block, _)| spec.range_sets.iter().any(|set| within(set, **block)))
            .filter_map(|(_, holder)| match holder {
                Holder::Node(node) => Some(node.clone()),
                Holder::Fixed | Holder::Unreadable(_) => None,
            })
            .collect()
    }

    /// The node's blocks of `spec`'s pool with an address left to hand out, each with the addresses
    /// handed out from it and their owners: what the node shares when another finds the pool
    /// exhausted.
    pub fn blocks_with_room(&self, spec: &PoolSpec) -> Vec<(IpNetwork, Vec<(AddressOwner, Allocated)>)> {
        self.blocks
            .iter()
            .filter(|(block, held)| held.pool == spec.name && usable_in(spec, **block) > held.used.len())
            .map(|(block, _)| {
                let holders = self.held.iter().filter(|(k, _)| k.0 == spec.name).flat_map(|(_, (owner, addresses))| {
                    addresses.iter().filter(|a| a.block == *block && !a.fixed).map(|a| (owner.clone(), a.clone()))
                });
                (*block, holders.collect())
            })
            .collect()
    }

    /// This node shares `block` of `pool`: nothing more is handed out from it from memory, and the
    /// addresses this node's pods hold in it are theirs as `FixedAddress` objects (created first),
    /// freed by their DEL. The owners whose addresses changed so, with their pool and addresses
    /// now, to be recorded again before the block is made fixed (`finish_share`).
    pub fn begin_share(&mut self, block: IpNetwork, pool: &str) -> Vec<(String, AddressOwner, Vec<Allocated>)> {
        self.blocks.remove(&block);
        self.unfinished.insert(block, pool.to_string());
        let mut changed = Vec::new();
        for ((held_pool, ..), (owner, addresses)) in self.held.iter_mut() {
            if mark_shared(addresses, block) {
                changed.push((held_pool.clone(), owner.clone(), addresses.clone()));
            }
        }
        changed
    }

    /// Undo `begin_share` of `block` of `pool`, no record written again yet: the block is the
    /// node's again, with its addresses.
    pub fn abort_share(&mut self, block: IpNetwork, pool: &str) {
        self.unfinished.remove(&block);
        self.adopt(block, pool);
        let mut used = Vec::new();
        for (_, addresses) in self.held.values_mut() {
            for allocated in addresses.iter_mut().filter(|a| a.block == block && a.shared) {
                allocated.fixed = false;
                allocated.shared = false;
                used.push(allocated.address);
            }
        }
        self.blocks.entry(block).or_default().used.extend(used);
    }

    /// `block`, begun to be shared, is a fixed block now (`holder` `Holder::Fixed`), or another
    /// node's (released while this node's lease had run out, and claimed).
    pub fn finish_share(&mut self, block: IpNetwork, holder: Holder) {
        self.unfinished.remove(&block);
        self.elsewhere.insert(block, holder);
    }

    /// The blocks begun to be shared and not seen fixed yet, each with its pool.
    pub fn unfinished(&self) -> Vec<(IpNetwork, String)> {
        self.unfinished.iter().map(|(block, pool)| (*block, pool.clone())).collect()
    }

    /// The blocks this node holds, each with its pool.
    pub fn held_blocks(&self) -> Vec<(IpNetwork, String)> {
        self.blocks.iter().map(|(block, held)| (*block, held.pool.clone())).collect()
    }

    /// `block` is another node's now (released while this node's lease had run out, and claimed):
    /// nothing more is handed out from it. The addresses this node's pods hold in it stay theirs
    /// (their records) until their DEL.
    pub fn lose(&mut self, block: IpNetwork, holder: Holder) {
        self.blocks.remove(&block);
        self.elsewhere.insert(block, holder);
    }

    /// Whether any block was found held by another node.
    pub fn knows_elsewhere(&self) -> bool {
        !self.elsewhere.is_empty()
    }

    /// An owner's addresses as its record says, at start. A fixed address's block is no node's.
    pub fn restore(&mut self, pool: &str, owner: &AddressOwner, addresses: &[Allocated]) {
        let mut addresses = addresses.to_vec();
        for block in self.unfinished.keys() {
            mark_shared(&mut addresses, *block);
        }
        for allocated in addresses.iter().filter(|a| !a.fixed) {
            self.adopt(allocated.block, pool);
            self.blocks.entry(allocated.block).or_default().used.insert(allocated.address);
        }
        self.held.insert(key(pool, owner), (owner.clone(), addresses));
        self.handed.insert(owner.uid.clone(), Instant::now());
    }

    /// The node's addresses as its records say, at start. A block of which a record holds a shared
    /// address may be one this node began to share as it stopped, its other pods' records not written
    /// again yet: it is not the node's to hand out from, and every address in it is taken as shared,
    /// until `finish_share`.
    pub fn from_records<'a>(
        records: impl Iterator<Item = (&'a str, &'a AddressOwner, &'a [Allocated])> + Clone,
    ) -> Self {
        let mut allocator = Allocator::default();
        for (pool, _, addresses) in records.clone() {
            for allocated in addresses.iter().filter(|a| a.shared) {
                allocator.unfinished.insert(allocated.block, pool.to_string());
            }
        }
        for (pool, owner, addresses) in records {
            allocator.restore(pool, owner, addresses);
        }
        allocator
    }

    /// Whether `owner` holds addresses of `pool` already: a retried ADD.
    pub fn holds(&self, pool: &str, owner: &AddressOwner) -> bool {
        self.held.contains_key(&key(pool, owner))
    }

    /// `owner`'s fixed addresses (`super::fixed`), taken outside the node's blocks.
    pub fn hold_fixed(&mut self, pool: &str, owner: &AddressOwner, addresses: &[Allocated]) {
        self.held.insert(key(pool, owner), (owner.clone(), addresses.to_vec()));
        self.handed.insert(owner.uid.clone(), Instant::now());
    }

    /// Give back what (`container_id`, `ifname`) holds in `pool` (only pod `uid`'s when given): the
    /// owners released, and what each held.
    pub fn release(
        &mut self,
        pool: &str,
        container_id: &str,
        ifname: &str,
        uid: Option<&str>,
    ) -> Vec<(AddressOwner, Vec<Allocated>)> {
        self.release_where(|held_pool, owner| held_pool == pool && owner.released_by(container_id, ifname, uid))
            .into_iter()
            .map(|(_, owner, addresses)| (owner, addresses))
            .collect()
    }

    /// Give back everything pod `uid` holds, in every pool: (pool, owner, addresses) released. Not
    /// while its addresses were handed out less than `quiet` ago, their ADD perhaps still in flight:
    /// then how long until they may be.
    pub fn release_pod(
        &mut self,
        uid: &str,
        quiet: Duration,
    ) -> Result<Vec<(String, AddressOwner, Vec<Allocated>)>, Duration> {
        if let Some(since) = self.handed.get(uid).map(Instant::elapsed)
            && since < quiet
        {
            return Err(quiet - since);
        }
        Ok(self.release_where(|_, owner| owner.uid == uid))
    }

    /// The pods holding addresses: uid and the pod's `namespace/name` (as its ADD told it).
    pub fn holders(&self) -> BTreeMap<String, String> {
        self.held.values().map(|(owner, _)| (owner.uid.clone(), owner.pod.clone())).collect()
    }

    fn release_where(
        &mut self,
        whose: impl Fn(&str, &AddressOwner) -> bool,
    ) -> Vec<(String, AddressOwner, Vec<Allocated>)> {
        let keys: Vec<HeldKey> =
            self.held.iter().filter(|(k, (owner, _))| whose(&k.0, owner)).map(|(k, _)| k.clone()).collect();
        let mut released = Vec::new();
        for k in keys {
            let (owner, addresses) = self.held.remove(&k).expect("listed just now");
            for allocated in &addresses {
                if let Some(block) = self.blocks.get_mut(&allocated.block) {
                    block.used.remove(&allocated.address);
                }
            }
            released.push((k.0, owner, addresses));
        }
        let holding: BTreeSet<&String> = self.held.values().map(|(owner, _)| &owner.uid).collect();
        self.handed.retain(|uid, _| holding.contains(uid));
        released
    }

    /// Undo a fresh allocation whose record could not be written.
    pub fn forget(&mut self, pool: &str, owner: &AddressOwner) {
        self.release(pool, &owner.container_id, &owner.ifname, Some(&owner.uid));
    }

    /// The node's blocks of each pool, the addresses used in them and those still free.
    pub fn usage(&self) -> BTreeMap<String, PoolUsage> {
        let mut usage: BTreeMap<String, PoolUsage> = BTreeMap::new();
        for block in self.blocks.values() {
            let entry = usage.entry(block.pool.clone()).or_insert(PoolUsage { free: Some(0), ..PoolUsage::default() });
            entry.blocks += 1;
            entry.used += block.used.len();
            entry.free =
                entry.free.zip(block.usable).map(|(free, usable)| free + usable.saturating_sub(block.used.len()));
        }
        for ((pool, ..), (_, addresses)) in &self.held {
            let fixed = addresses.iter().filter(|a| a.fixed).count();
            if fixed > 0 {
                usage.entry(pool.clone()).or_default().fixed += fixed;
            }
        }
        usage
    }
}

/// Mark the addresses of `block` among `addresses` shared (fixed addresses of their pod's alone):
/// whether any was not yet.
fn mark_shared(addresses: &mut [Allocated], block: IpNetwork) -> bool {
    let mut marked = false;
    for allocated in addresses.iter_mut().filter(|a| a.block == block && !a.shared) {
        allocated.fixed = true;
        allocated.shared = true;
        marked = true;
    }
    marked
}

/// For each range set of `spec`, the address of `requested` in it, if any; why not, when one is no
/// address the pool may hand out or two are of one set.
fn wanted_by_set(spec: &PoolSpec, requested: &[IpAddr]) -> Result<Vec<Option<IpAddr>>, String> {
    let mut wanted: Vec<Option<IpAddr>> = vec![None; spec.range_sets.len()];
    for ip in requested {
        match spec.range_sets.iter().position(|set| usable(spec, set, *ip)) {
            None => return Err(unusable(spec, *ip)),
            Some(n) => match wanted[n] {
                Some(other) => {
                    return Err(format!(
                        "addresses {other} and {ip} asked for in 'ips' are of one range set of pool {:?}, which \
                         gives a pod one address of each",
                        spec.name
                    ));
                }
                None => wanted[n] = Some(*ip),
            },
        }
    }
    Ok(wanted)
}

/// Why `ip` is no address of `spec` to hand out.
fn unusable(spec: &PoolSpec, ip: IpAddr) -> String {
    let ranges = spec.range_sets.iter().flatten();
    let why = if let Some(r) = ranges.clone().find(|r| r.gateway == ip) {
        format!("it is the gateway of {}", r.subnet)
    } else if let Some(x) = spec.exclude.iter().find(|x| x.contains(ip)) {
        format!("it is excluded ({x})")
    } else {
        let listed: Vec<String> = ranges.map(|r| format!("{}-{}", r.start, r.end)).collect();
        format!("it is outside the pool's ranges {}", listed.join(", "))
    };
    format!("address {ip} asked for in 'ips' is not one pool {:?} hands out: {why}", spec.name)
}

fn exhausted(spec: &PoolSpec, set: &[crate::node::agent_socket::addresses::PoolRange], own: usize) -> String {
    let ranges: Vec<String> = set.iter().map(|r| format!("{}-{}", r.start, r.end)).collect();
    format!(
        "pool {:?} has no free address in {}: every block of it is full or held by another node ({own} of them by this node)",
        spec.name,
        ranges.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::agent_socket::addresses::PoolRange;

    fn node_b() -> Holder {
        Holder::Node("node-b".into())
    }

    fn spec(subnet: &str, end: &str, block_size: u32) -> PoolSpec {
        let subnet: IpNetwork = subnet.parse().unwrap();
        PoolSpec {
            name: "lan".into(),
            range_sets: vec![vec![PoolRange {
                subnet,
                start: (subnet.network().to_string().trim_end_matches('0').to_string() + "1").parse().unwrap(),
                end: end.parse().unwrap(),
                gateway: (subnet.network().to_string().trim_end_matches('0').to_string() + "1").parse().unwrap(),
            }]],
            exclude: vec![],
            block_size,
        }
    }

    fn owner(n: u32) -> AddressOwner {
        AddressOwner {
            uid: format!("uid-{n}"),
            container_id: format!("c{n}"),
            ifname: "net1".into(),
            pod: format!("default/p{n}"),
        }
    }

    /// Allocate for `owner`, claiming every block asked for as this node's; the addresses.
    fn take(a: &mut Allocator, spec: &PoolSpec, owner: &AddressOwner) -> Result<Vec<String>, String> {
        loop {
            match a.allocate(spec, owner, &[]) {
                Step::Addresses { addresses, .. } => {
                    return Ok(addresses.iter().map(|x| x.address.to_string()).collect());
                }
                Step::Claim(block) => a.adopt(block, &spec.name),
                Step::Exhausted(why) | Step::Refused { why, .. } => return Err(why),
            }
        }
    }

    #[test]
    fn addresses_come_from_the_nodes_block_and_a_retry_gets_the_same() {
        let s = spec("10.80.0.0/24", "10.80.0.254", 16);
        let mut a = Allocator::default();
        assert_eq!(a.allocate(&s, &owner(1), &[]), Step::Claim("10.80.0.0/28".parse().unwrap()));
        a.adopt("10.80.0.0/28".parse().unwrap(), "lan");
        assert_eq!(take(&mut a, &s, &owner(1)).unwrap(), ["10.80.0.2"]);
        assert_eq!(take(&mut a, &s, &owner(2)).unwrap(), ["10.80.0.3"]);
        let again = a.allocate(&s, &owner(1), &[]);
        assert!(
            matches!(&again, Step::Addresses { fresh: false, addresses } if addresses[0].address.to_string() == "10.80.0.2"),
            "{again:?}"
        );
        // The same sandbox and interface of another pod (uid) is another owner.
        let other = AddressOwner { uid: "uid-9".into(), ..owner(1) };
        assert_eq!(take(&mut a, &s, &other).unwrap(), ["10.80.0.4"]);
    }

    #[test]
    fn a_full_block_claims_the_next_and_blocks_of_others_are_skipped() {
        let s = spec("10.80.0.0/24", "10.80.0.254", 4);
        let mut a = Allocator::default();
        a.held_elsewhere("10.80.0.4/30".parse().unwrap(), node_b());
        let got: Vec<String> = (0..4).map(|n| take(&mut a, &s, &owner(n)).unwrap().remove(0)).collect();
        // .0/30 gives .2 and .3 (not the network address, not the gateway); .4/30 is another node's.
        assert_eq!(got, ["10.80.0.2", "10.80.0.3", "10.80.0.8", "10.80.0.9"]);
        assert_eq!(a.usage()["lan"], PoolUsage { blocks: 2, used: 4, free: Some(2), fixed: 0 }, ".10 and .11 left");
    }

    #[test]
    fn a_block_released_elsewhere_may_be_claimed_and_a_lost_block_hands_out_nothing() {
        let s = spec("10.80.0.0/24", "10.80.0.7", 4);
        let mut a = Allocator::default();
        let (first, second) = ("10.80.0.0/30".parse().unwrap(), "10.80.0.4/30".parse().unwrap());
        a.held_elsewhere(second, node_b());
        assert_eq!(take(&mut a, &s, &owner(1)).unwrap(), ["10.80.0.2"]);
        assert_eq!(take(&mut a, &s, &owner(2)).unwrap(), ["10.80.0.3"]);
        assert!(matches!(a.allocate(&s, &owner(3), &[]), Step::Exhausted(_)));
        let held_by_b = |gone: IpNetwork| move |block: IpNetwork| (block != gone).then(node_b);
        assert!(!a.refresh_elsewhere(held_by_b(first)), "not one known elsewhere");
        assert!(a.refresh_elsewhere(held_by_b(second)));
        assert!(!a.knows_elsewhere());
        assert_eq!(a.allocate(&s, &owner(3), &[]), Step::Claim(second));
        // The first block lost to another node: its holders keep their addresses, nothing new from it.
        a.lose(first, node_b());
        assert_eq!(a.held_blocks(), []);
        assert_eq!(
            a.allocate(&s, &owner(1), &[]),
            Step::Addresses { addresses: a.held[&key("lan", &owner(1))].1.clone(), fresh: false }
        );
        assert_eq!(a.allocate(&s, &owner(3), &[]), Step::Claim(second));
    }

    #[test]
    fn a_node_shares_its_blocks_with_room_and_then_hands_out_nothing_from_them() {
        let s = spec("10.80.0.0/24", "10.80.0.254", 4);
        let (first, second, third): (IpNetwork, IpNetwork, IpNetwork) =
            ("10.80.0.0/30".parse().unwrap(), "10.80.0.4/30".parse().unwrap(), "10.80.0.8/30".parse().unwrap());
        let mut a = Allocator::default();
        a.held_elsewhere(third, node_b());
        a.held_elsewhere("10.80.0.12/30".parse().unwrap(), Holder::Fixed);
        assert_eq!(a.other_holders(&s), BTreeSet::from(["node-b".to_string()]), "not the fixed block's");
        // .0/30 full (.2, .3), .4/30 with .4 taken and .5 to .7 left.
        for n in 1..=3 {
            take(&mut a, &s, &owner(n)).unwrap();
        }
        let room = a.blocks_with_room(&s);
        assert_eq!(room.len(), 1, "{room:?}");
        assert_eq!(room[0].0, second);
        let holders: Vec<(String, String)> =
            room[0].1.iter().map(|(o, a)| (o.pod.clone(), a.address.to_string())).collect();
        assert_eq!(holders, [("default/p3".to_string(), "10.80.0.4".to_string())]);
        let changed = a.begin_share(second, "lan");
        assert_eq!(changed.len(), 1);
        let (pool, changed_owner, addresses) = &changed[0];
        assert_eq!((pool.as_str(), changed_owner.pod.as_str()), ("lan", "default/p3"));
        assert!(addresses[0].fixed && addresses[0].shared, "{addresses:?}");
        assert_eq!(a.held_blocks(), [(first, "lan".to_string())]);
        assert_eq!(a.usage()["lan"], PoolUsage { blocks: 1, used: 2, free: Some(0), fixed: 1 });
        assert_eq!(a.unfinished(), [(second, "lan".to_string())]);
        // Stopped now, the records say: the block is not the node's to hand out from, though a
        // record written before the share says .4 is not shared.
        let stale =
            vec![Allocated { address: "10.80.0.4".parse().unwrap(), block: second, fixed: false, shared: false }];
        let shared_too =
            vec![Allocated { address: "10.80.0.5".parse().unwrap(), block: second, fixed: true, shared: true }];
        let records = [("lan", owner(3), stale), ("lan", owner(5), shared_too)];
        let restored = Allocator::from_records(records.iter().map(|(p, o, a)| (*p, o, a.as_slice())));
        assert_eq!(restored.held_blocks(), [], "{restored:?}");
        assert!(restored.held.values().all(|(_, addresses)| addresses[0].shared), "{restored:?}");
        a.finish_share(second, Holder::Fixed);
        assert_eq!(a.unfinished(), []);
        // Nothing more from the shared block: the next block to claim is one no node holds.
        assert_eq!(a.allocate(&s, &owner(4), &[]), Step::Claim("10.80.0.16/30".parse().unwrap()));
        // The shared address, released, frees no address of the node's blocks.
        assert_eq!(a.release("lan", "c3", "net1", None).len(), 1);
        assert_eq!(a.usage()["lan"], PoolUsage { blocks: 1, used: 2, free: Some(0), fixed: 0 });
        // A block found shared by others: its holder is no longer asked.
        assert!(!a.refresh_elsewhere(|_| Some(Holder::Fixed)));
        assert!(a.other_holders(&s).is_empty());
    }

    #[test]
    fn release_frees_the_address_for_the_next_owner_and_only_its_owners() {
        let s = spec("10.80.0.0/24", "10.80.0.3", 4);
        let mut a = Allocator::default();
        assert_eq!(take(&mut a, &s, &owner(1)).unwrap(), ["10.80.0.2"]);
        assert_eq!(take(&mut a, &s, &owner(2)).unwrap(), ["10.80.0.3"]);
        let why = take(&mut a, &s, &owner(3)).unwrap_err();
        assert!(why.contains("pool \"lan\" has no free address in 10.80.0.1-10.80.0.3"), "{why}");
        assert!(a.release("lan", "c1", "net1", Some("uid-other")).is_empty(), "another pod's DEL");
        assert!(a.release("other", "c1", "net1", None).is_empty(), "another pool");
        assert_eq!(a.release("lan", "c1", "net1", Some("uid-1")).len(), 1);
        assert_eq!(take(&mut a, &s, &owner(3)).unwrap(), ["10.80.0.2"]);
        // A pod gone: everything its uid holds, whatever the sandbox; not while its ADD may be in
        // flight (its addresses handed out less than the quiet time ago).
        let holders = |a: &Allocator| a.holders().into_keys().collect::<Vec<_>>();
        assert_eq!(holders(&a), ["uid-2", "uid-3"]);
        let wait = a.release_pod("uid-2", Duration::from_secs(60)).unwrap_err();
        assert!(wait > Duration::from_secs(59) && wait <= Duration::from_secs(60), "{wait:?}");
        assert_eq!(holders(&a), ["uid-2", "uid-3"]);
        let gone = a.release_pod("uid-2", Duration::ZERO).unwrap();
        assert_eq!((gone.len(), gone[0].0.as_str(), gone[0].1.container_id.as_str()), (1, "lan", "c2"));
        assert_eq!(holders(&a), ["uid-3"]);
        assert_eq!(take(&mut a, &s, &owner(4)).unwrap(), ["10.80.0.3"]);
    }

    #[test]
    fn dual_stack_takes_one_address_of_each_set_or_none() {
        let mut s = spec("10.80.0.0/24", "10.80.0.254", 4);
        s.range_sets.push(spec("fd80::/120", "fd80::3", 4).range_sets.remove(0));
        let mut a = Allocator::default();
        assert_eq!(take(&mut a, &s, &owner(1)).unwrap(), ["10.80.0.2", "fd80::2"]);
        assert_eq!(take(&mut a, &s, &owner(2)).unwrap(), ["10.80.0.3", "fd80::3"]);
        // The IPv6 set is full: nothing is taken from the IPv4 one either.
        assert!(take(&mut a, &s, &owner(3)).unwrap_err().contains("fd80::1-fd80::3"));
        assert_eq!(a.usage()["lan"].used, 4);
    }

    #[test]
    fn restored_records_hold_their_addresses() {
        let s = spec("10.80.0.0/24", "10.80.0.254", 16);
        let block: IpNetwork = "10.80.0.0/28".parse().unwrap();
        let mut a = Allocator::default();
        a.restore(
            "lan",
            &owner(1),
            &[Allocated { address: "10.80.0.2".parse().unwrap(), block, fixed: false, shared: false }],
        );
        assert_eq!(take(&mut a, &s, &owner(2)).unwrap(), ["10.80.0.3"], "no claim: the block is the node's");
        assert_eq!(take(&mut a, &s, &owner(1)).unwrap(), ["10.80.0.2"]);
    }

    #[test]
    fn usage_counts_the_blocks_and_their_used_and_free_addresses() {
        // Blocks of 8 from .1 to .20, the gateway .1 and .5 excluded: .0/29 may hand out .2-.4 and
        // .6-.7 (5), .8/29 all 8, .16/29 .16-.20 (5).
        let mut s = spec("10.80.0.0/24", "10.80.0.20", 8);
        s.exclude = vec!["10.80.0.5/32".parse().unwrap()];
        let block: IpNetwork = "10.80.0.0/29".parse().unwrap();
        let mut a = Allocator::default();
        a.restore(
            "lan",
            &owner(1),
            &[Allocated { address: "10.80.0.2".parse().unwrap(), block, fixed: false, shared: false }],
        );
        assert_eq!(
            a.usage()["lan"],
            PoolUsage { blocks: 1, used: 1, free: None, fixed: 0 },
            "the ranges not known yet"
        );
        for n in 2..=7 {
            take(&mut a, &s, &owner(n)).unwrap();
        }
        assert_eq!(a.usage()["lan"], PoolUsage { blocks: 2, used: 7, free: Some(6), fixed: 0 });
        a.release("lan", "c2", "net1", None);
        assert_eq!(a.usage()["lan"], PoolUsage { blocks: 2, used: 6, free: Some(7), fixed: 0 });
    }

    #[test]
    fn an_address_asked_for_is_handed_out_only_from_the_pool_and_only_when_free() {
        let mut s = spec("10.80.0.0/24", "10.80.0.20", 4);
        s.exclude = vec!["10.80.0.16/30".parse().unwrap()];
        let ip = |text: &str| -> IpAddr { text.parse().unwrap() };
        let refused = |step: Step| match step {
            Step::Refused { why, invalid } => (why, invalid),
            other => panic!("{other:?}"),
        };
        let mut a = Allocator::default();
        // In a block no node holds: claimed, then the address from it; a retry gets it again.
        assert_eq!(a.allocate(&s, &owner(1), &[ip("10.80.0.6")]), Step::Claim("10.80.0.4/30".parse().unwrap()));
        a.adopt("10.80.0.4/30".parse().unwrap(), "lan");
        let got = a.allocate(&s, &owner(1), &[ip("10.80.0.6")]);
        assert!(matches!(&got, Step::Addresses { fresh: true, addresses } if addresses[0].address == ip("10.80.0.6")));
        assert!(matches!(a.allocate(&s, &owner(1), &[ip("10.80.0.6")]), Step::Addresses { fresh: false, .. }));
        // A pod asking nothing gets the block's first free address, never the one taken.
        assert_eq!(take(&mut a, &s, &owner(2)).unwrap(), ["10.80.0.4"]);
        // Taken: naming its holder.
        let (why, invalid) = refused(a.allocate(&s, &owner(3), &[ip("10.80.0.6")]));
        assert!(!invalid);
        assert!(
            why.contains("address 10.80.0.6 asked for in 'ips' cannot be had from pool \"lan\": it is taken, held by pod default/p1"),
            "{why}"
        );
        // In another node's block.
        a.held_elsewhere("10.80.0.8/30".parse().unwrap(), node_b());
        let (why, invalid) = refused(a.allocate(&s, &owner(3), &[ip("10.80.0.9")]));
        assert!(!invalid && why.contains("it is in block 10.80.0.8/30, which node node-b holds"), "{why}");
        // Never the pool's: outside its ranges, excluded, its gateway; two of one range set.
        for (asked, says) in [
            (vec![ip("10.80.0.30")], "it is outside the pool's ranges 10.80.0.1-10.80.0.20"),
            (vec![ip("10.81.0.5")], "outside"),
            (vec![ip("10.80.0.17")], "it is excluded (10.80.0.16/30)"),
            (vec![ip("10.80.0.1")], "it is the gateway of 10.80.0.0/24"),
            (vec![ip("10.80.0.5"), ip("10.80.0.7")], "are of one range set"),
        ] {
            let (why, invalid) = refused(a.allocate(&s, &owner(3), &asked));
            assert!(invalid && why.contains(says), "{asked:?}: {why}");
            assert!(why.contains("pool \"lan\""), "{why}");
        }
        assert_eq!(a.usage()["lan"].used, 2, "nothing taken by a refusal");
    }
}
