//! Fixed addresses (docs/ipam.md, "Fixed addresses"): the address of a StatefulSet's ordinal, kept
//! across its pods wherever they run. It lives outside the nodes' blocks, in the pool's fixed
//! blocks (`IPBlock`s with `fixed: true`, claimed as a node claims its blocks: created, or found so
//! on `AlreadyExists`), as one `FixedAddress` object per address (`platform::kube::fixed_address`)
//! named by the address: the API server creates a name once, so no two identities (and no node
//! block) ever hold one address.
//!
//! One identity, one address: after creating its object the agent lists the identity's objects
//! (by their label) and keeps its own only if it is the only one; otherwise it deletes its own and
//! the ADD is tried again (code 11), when it finds the other. Of two agents creating at once, the
//! one listing last sees both, so at most one keeps its object.
//!
//! The next pod of the ordinal gets the address once the pod holding it is gone from the API
//! server (the holder written in the object, replaced with the resourceVersion read, so that of two
//! takers one wins); until then its ADD is refused with code 11, naming that pod. A pod's DEL never
//! frees a fixed address: the dead-node releaser's sweep does (`releaser::fixed`), once the ordinal
//! is gone from its StatefulSet (scaled down, or the StatefulSet deleted) and its last pod too.

use super::blocks::{candidates, first_free};
use crate::node::agent_socket::addresses::{AddressOwner, Allocated, PoolRange, PoolSpec};
use crate::platform::kube::delete_as_read;
use crate::platform::kube::fixed_address::{
    self, FixedAddressSpec, FixedOwner, HoldingPod, IDENTITY_LABEL, POOL_LABEL, identity_label,
};
use crate::platform::kube::ip_block::{self, IpBlockSpec};
use crate::platform::kube::{Failure, classify};
use ::kube::api::{DynamicObject, ListParams, PostParams};
use ::kube::{Api, Client};
use ipnetwork::IpNetwork;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeSet;
use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;
use tracing::info;

/// One request may take this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many blocks are claimed as fixed blocks for one address.
const MAX_CLAIMS: usize = 64;

/// Why a fixed address cannot be had: `retry` when asking again later may help.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub why: String,
    pub retry: bool,
}

pub(super) fn again(why: String) -> Refusal {
    Refusal { why, retry: true }
}

/// The fixed address of range set `set` (number `index`) of `spec` for `member`, on `owner`'s
/// interface, now held by `owner`'s pod on `node`: the one the identity has (handed over from a pod
/// gone), else a new one.
pub async fn take(
    client: &Client,
    node: &str,
    spec: &PoolSpec,
    index: usize,
    member: &FixedOwner,
    owner: &AddressOwner,
) -> Result<Allocated, Refusal> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &fixed_address::resource());
    let label = identity_label(&spec.name, member, &owner.ifname, index);
    let (namespace, name) = owner.pod.split_once('/').unwrap_or((member.namespace.as_str(), owner.pod.as_str()));
    let holder =
        HoldingPod { uid: owner.uid.clone(), namespace: namespace.into(), name: name.into(), node: node.into() };
    let mine = identity_objects(&api, &label).await?;
    if let Some(found) = mine.into_iter().next() {
        return hand_over(client, &api, found, member, holder).await;
    }
    let set = &spec.range_sets[index];
    let address = create(client, &api, spec, set, index, &label, member, &owner.ifname, holder).await?;
    info!(
        "fixed address {} of pool {:?} kept for {} on {} (pod {})",
        address.address,
        spec.name,
        member.describe(),
        owner.ifname,
        owner.pod
    );
    Ok(address)
}

/// Which StatefulSet ordinal pod `pod` (`namespace/name`) of `uid` is, read from the API server:
/// for a pod the agent's watch does not hold yet. `None` for a pod the API server does not have
/// under that uid (gone already, or never there).
pub async fn member_of(client: &Client, pod: &str, uid: &str) -> Result<Option<FixedOwner>, Refusal> {
    let Some((namespace, name)) = pod.split_once('/').filter(|(ns, name)| !ns.is_empty() && !name.is_empty()) else {
        return Ok(None);
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    // A pod the API server does not have under that uid is gone already: no ordinal's to keep.
    match ask(&format!("reading pod {pod}, to know whether it is a StatefulSet's"), pods.get_opt(name)).await? {
        Some(found) if found.metadata.uid.as_deref() == Some(uid) => Ok(FixedOwner::of(&found)),
        _ => Ok(None),
    }
}

/// The identity of IPAMClaim `claim` of pod `pod`'s (`namespace/name`) namespace: the claim as the
/// API server has it now (its uid).
pub async fn claim_owner(client: &Client, pod: &str, claim: &str) -> Result<FixedOwner, Refusal> {
    let namespace = pod.split_once('/').map(|(ns, _)| ns).filter(|ns| !ns.is_empty()).unwrap_or("default");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &fixed_address::ipam_claim_resource());
    match ask(&format!("reading IPAMClaim {namespace}/{claim}"), api.get_opt(claim)).await? {
        Some(found) => Ok(FixedOwner {
            kind: fixed_address::IPAM_CLAIM.into(),
            namespace: namespace.into(),
            name: claim.into(),
            uid: found.metadata.uid.unwrap_or_default(),
            ordinal: 0,
        }),
        None => Err(again(format!(
            "pod {pod} names IPAMClaim {namespace}/{claim} (ipam-claim-reference), which does not exist: the \
             address is kept for the claim, which must be created first"
        ))),
    }
}

/// How the claim's allocation went, for its `status` (as ovn-kubernetes writes it: the condition
/// `IPsAllocated`).
pub enum ClaimOutcome<'a> {
    /// Its addresses, handed to pod `pod` (its name).
    Allocated { addresses: &'a [Allocated], pod: &'a str },
    /// None could be had: the pool has no free address (`why`).
    Exhausted { why: &'a str },
}

/// Write the claim's status: its addresses into `status.ips` (as ovn-kubernetes does: each with its
/// range's prefix length), the pod holding it into `status.ownerPod`, and the condition
/// `IPsAllocated` (`True`, reason `SuccessfulAllocation`; `False`, reason `SubnetExhausted`);
/// unless it says them already.
pub async fn write_claim_status(
    client: &Client,
    pool: &PoolSpec,
    owner: &FixedOwner,
    outcome: ClaimOutcome<'_>,
) -> Result<(), Refusal> {
    let (ips, pod, condition): (Vec<String>, Option<&str>, (&str, &str, String)) = match outcome {
        ClaimOutcome::Allocated { addresses, pod } => {
            let ips = addresses
                .iter()
                .map(|a| {
                    let prefix = pool.range_sets.iter().flatten().find(|r| r.subnet.contains(a.address));
                    let prefix = prefix.map_or(if a.address.is_ipv4() { 32 } else { 128 }, |r| r.subnet.prefix());
                    format!("{}/{prefix}", a.address)
                })
                .collect();
            let message = format!("addresses of yh-ipam pool {:?} allocated to pod {pod}", pool.name);
            (ips, Some(pod), ("True", "SuccessfulAllocation", message))
        }
        ClaimOutcome::Exhausted { why } => (Vec::new(), None, ("False", "SubnetExhausted", why.to_string())),
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &owner.namespace, &fixed_address::ipam_claim_resource());
    let what = format!("writing the status of IPAMClaim {}/{}", owner.namespace, owner.name);
    for _ in 0..3 {
        let Some(mut claim) = ask(&what, api.get_opt(&owner.name)).await? else {
            return Err(again(format!("{what}: it is gone")));
        };
        let status = &mut claim.data["status"];
        let (state, reason, message) = &condition;
        let said =
            status["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "IPsAllocated")).cloned();
        let unchanged = |said: &serde_json::Value| said["status"] == *state && said["reason"] == *reason;
        if status["ips"] == serde_json::json!(ips)
            && pod.is_none_or(|pod| status["ownerPod"]["name"] == pod)
            && said.as_ref().is_some_and(|said| unchanged(said) && said["message"] == *message)
        {
            return Ok(());
        }
        status["ips"] = serde_json::json!(ips);
        if let Some(pod) = pod {
            status["ownerPod"] = serde_json::json!({ "name": pod });
        }
        // The transition time moves only when the condition's status does.
        let since = said
            .as_ref()
            .filter(|said| said["status"] == *state)
            .and_then(|said| said["lastTransitionTime"].as_str().map(str::to_string))
            .unwrap_or_else(|| k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        let written = serde_json::json!({
            "type": "IPsAllocated", "status": state, "reason": reason, "message": message,
            "lastTransitionTime": since, "observedGeneration": claim.metadata.generation.unwrap_or(0),
        });
        let mut conditions: Vec<serde_json::Value> = status["conditions"]
            .as_array()
            .map(|c| c.iter().filter(|c| c["type"] != "IPsAllocated").cloned().collect())
            .unwrap_or_default();
        conditions.push(written);
        status["conditions"] = serde_json::json!(conditions);
        match tokio::time::timeout(REQUEST_TIMEOUT, api.replace_status(&owner.name, &PostParams::default(), &claim))
            .await
        {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(::kube::Error::Api(status))) if status.code == 409 => continue,
            Ok(Err(e)) => return Err(again(format!("{what}: {}", describe(&e)))),
            Err(_) => return Err(again(format!("{what}: no answer within {}s", REQUEST_TIMEOUT.as_secs()))),
        }
    }
    Err(again(format!("{what}: changed by others at every attempt")))
}

/// The identity's objects (`label`), each with its spec.
pub(super) async fn identity_objects(
    api: &Api<DynamicObject>,
    label: &str,
) -> Result<Vec<(DynamicObject, FixedAddressSpec)>, Refusal> {
    let params = ListParams::default().labels(&format!("{IDENTITY_LABEL}={label}"));
    let listed = ask("listing FixedAddresses", api.list(&params)).await?;
    Ok(listed
        .items
        .into_iter()
        .filter(|o| o.metadata.labels.as_ref().and_then(|l| l.get(IDENTITY_LABEL)).is_some_and(|l| l == label))
        .filter_map(|o| serde_json::from_value(o.data["spec"].clone()).ok().map(|spec| (o, spec)))
        .collect())
}

/// The identity's address, `found`: this pod's already, or handed over from the pod holding it
/// once that pod is gone.
async fn hand_over(
    client: &Client,
    api: &Api<DynamicObject>,
    found: (DynamicObject, FixedAddressSpec),
    member: &FixedOwner,
    holder: HoldingPod,
) -> Result<Allocated, Refusal> {
    let (mut object, spec) = found;
    let allocated = Allocated { address: spec.address, block: spec.block, fixed: true, shared: false };
    if spec.pod.uid == holder.uid {
        return Ok(allocated);
    }
    if member.kind == fixed_address::IPAM_CLAIM {
        // Two pods hold a claim's address at once (a VM's live migration): the object names the
        // latest; a write that meets another is left to it.
        let mut spec = spec;
        let name = object.metadata.name.clone().unwrap_or_default();
        spec.pod = holder;
        object.data["spec"] = serde_json::to_value(&spec).expect("a spec serializes");
        let _ = ask("naming the claim's latest pod", api.replace(&name, &PostParams::default(), &object)).await;
        return Ok(allocated);
    }
    let old = &spec.pod;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &old.namespace);
    let there = ask("reading the pod holding it", pods.get_opt(&old.name)).await?;
    if there.as_ref().and_then(|p| p.metadata.uid.as_deref()) == Some(old.uid.as_str()) {
        return Err(again(format!(
            "fixed address {} of pool {:?} is kept for {} and held by pod {}/{} (uid {}) on node {}, whose object \
             still exists: it passes to this pod once that pod object is gone",
            spec.address,
            spec.pool,
            member.describe(),
            old.namespace,
            old.name,
            old.uid,
            old.node
        )));
    }
    let name = object.metadata.name.clone().unwrap_or_default();
    let previous = format!("{}/{} (uid {}) on node {}", old.namespace, old.name, old.uid, old.node);
    let shown = format!("{}/{} on node {}", holder.namespace, holder.name, holder.node);
    let mut spec = spec;
    spec.pod = holder;
    object.data["spec"] = serde_json::to_value(&spec).expect("a spec serializes");
    // The resourceVersion read: of two pods taking it at once, one write wins.
    ask("handing the address over", api.replace(&name, &PostParams::default(), &object)).await?;
    info!(
        "fixed address {} of pool {:?} ({}) handed over from pod {previous}, gone, to pod {shown}",
        spec.address,
        spec.pool,
        member.describe()
    );
    Ok(allocated)
}

/// A new address for the identity: the first free one of the pool's fixed blocks of `set`,
/// claiming a fixed block when none has room.
#[allow(clippy::too_many_arguments)]
pub(super) async fn create(
    client: &Client,
    api: &Api<DynamicObject>,
    spec: &PoolSpec,
    set: &[PoolRange],
    index: usize,
    label: &str,
    member: &FixedOwner,
    interface: &str,
    holder: HoldingPod,
) -> Result<Allocated, Refusal> {
    let blocks_api: Api<DynamicObject> = Api::all_with(client.clone(), &ip_block::resource());
    let listed = ask("listing IPBlocks", blocks_api.list(&ListParams::default())).await?;
    let mut known: BTreeSet<String> = BTreeSet::new();
    let mut fixed: Vec<IpNetwork> = Vec::new();
    for object in listed.items {
        let Some(name) = object.metadata.name.clone() else { continue };
        if let Ok(block) = serde_json::from_value::<IpBlockSpec>(object.data["spec"].clone())
            && block.fixed
            && block.pool == spec.name
        {
            fixed.push(block.cidr);
        }
        known.insert(name);
    }
    let params = ListParams::default().labels(&format!("{POOL_LABEL}={}", spec.name));
    let mut taken: BTreeSet<IpAddr> = ask("listing FixedAddresses", api.list(&params))
        .await?
        .items
        .into_iter()
        .filter_map(|o| serde_json::from_value::<FixedAddressSpec>(o.data["spec"].clone()).ok())
        .map(|s| s.address)
        .collect();
    let mut claims = 0;
    loop {
        let free = fixed
            .iter()
            .filter(|block| super::blocks::within(set, **block))
            .find_map(|block| first_free(spec, set, *block, |ip| !taken.contains(&ip)).map(|ip| (ip, *block)));
        if let Some((address, block)) = free {
            let object = FixedAddressSpec {
                pool: spec.name.clone(),
                address,
                block,
                interface: interface.into(),
                range_set: index,
                owner: member.clone(),
                pod: holder.clone(),
            };
            match create_object(api, &object, label).await? {
                Some(created) => return keep_if_alone(api, created, &object, label).await,
                None => {
                    taken.insert(address);
                    continue;
                }
            }
        }
        // No fixed block of the pool has room: claim the first block no one holds as one.
        let Some(block) = candidates(spec, set).find(|b| !known.contains(&ip_block::object_name(*b))) else {
            return Err(Refusal {
                why: format!(
                    "pool {:?} has no free address for {}: its fixed blocks are full and every other block is held",
                    spec.name,
                    member.describe()
                ),
                retry: false,
            });
        };
        claims += 1;
        if claims > MAX_CLAIMS {
            return Err(again(format!("pool {:?}: no fixed block could be claimed", spec.name)));
        }
        let name = ip_block::object_name(block);
        known.insert(name.clone());
        if claim_fixed(&blocks_api, block, &spec.name).await? {
            info!("block {block} of pool {:?} claimed for its fixed addresses", spec.name);
            fixed.push(block);
        }
    }
}

/// Create `block` as a fixed block of `pool`: whether it is one (created, or found one).
pub(super) async fn claim_fixed(api: &Api<DynamicObject>, block: IpNetwork, pool: &str) -> Result<bool, Refusal> {
    let name = ip_block::object_name(block);
    let spec =
        IpBlockSpec { cidr: block, pool: pool.into(), node: String::new(), fixed: true, shared_by: String::new() };
    let object = DynamicObject::new(&name, &ip_block::resource()).data(serde_json::json!({ "spec": spec }));
    match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &object)).await {
        Err(_) => {
            return Err(again(format!("creating IPBlock {name}: no answer within {}s", REQUEST_TIMEOUT.as_secs())));
        }
        Ok(Ok(_)) => return Ok(true),
        Ok(Err(::kube::Error::Api(status))) if status.code == 409 => {}
        Ok(Err(e)) => return Err(again(format!("creating IPBlock {name}: {}", describe(&e)))),
    }
    let found = ask("reading IPBlock", api.get(&name)).await?;
    Ok(serde_json::from_value::<IpBlockSpec>(found.data["spec"].clone())
        .is_ok_and(|found| found.fixed && found.pool == pool && found.cidr == block))
}

/// Create the object for `spec`: the object created, or `None` when the address is taken.
async fn create_object(
    api: &Api<DynamicObject>,
    spec: &FixedAddressSpec,
    label: &str,
) -> Result<Option<DynamicObject>, Refusal> {
    let name = fixed_address::object_name(spec.address);
    let mut object = DynamicObject::new(&name, &fixed_address::resource())
        .data(serde_json::json!({ "spec": serde_json::to_value(spec).expect("a spec serializes") }));
    object.metadata.labels =
        Some([(IDENTITY_LABEL.to_string(), label.to_string()), (POOL_LABEL.to_string(), spec.pool.clone())].into());
    match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &object)).await {
        Err(_) => Err(again(format!("creating FixedAddress {name}: no answer within {}s", REQUEST_TIMEOUT.as_secs()))),
        Ok(Ok(created)) => Ok(Some(created)),
        Ok(Err(::kube::Error::Api(status))) if status.code == 409 => Ok(None),
        Ok(Err(e)) => Err(again(format!("creating FixedAddress {name}: {}", describe(&e)))),
    }
}

/// Keep `created` only if it is its identity's one object; else delete it and ask for a retry,
/// which finds the other.
async fn keep_if_alone(
    api: &Api<DynamicObject>,
    created: DynamicObject,
    spec: &FixedAddressSpec,
    label: &str,
) -> Result<Allocated, Refusal> {
    let objects = identity_objects(api, label).await?;
    if objects.len() <= 1 {
        return Ok(Allocated { address: spec.address, block: spec.block, fixed: true, shared: false });
    }
    let name = created.metadata.name.clone().unwrap_or_default();
    let params = delete_as_read(created.metadata.uid.clone(), None);
    let deleted = ask("deleting a second FixedAddress of one identity", api.delete(&name, &params)).await;
    let others: Vec<String> = objects.iter().filter_map(|(o, _)| o.metadata.name.clone()).collect();
    Err(again(format!(
        "{} took fixed addresses {} at once from two pods{}: try again",
        spec.owner.describe(),
        others.join(", "),
        deleted.err().map(|e| format!(" (and {} is left: {})", name, e.why)).unwrap_or_default()
    )))
}

/// One request, bounded in time; its failure as a refusal to try again.
pub(super) async fn ask<T>(what: &str, request: impl Future<Output = Result<T, ::kube::Error>>) -> Result<T, Refusal> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Err(_) => Err(again(format!("{what}: no answer within {}s", REQUEST_TIMEOUT.as_secs()))),
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(again(format!("{what}: {}", describe(&e)))),
    }
}

pub(super) fn describe(e: &::kube::Error) -> String {
    match classify(e) {
        Failure::Transient(text) | Failure::Refused { text, .. } | Failure::NotServed(text) => text,
        Failure::Certificate(problem) => format!("the server's certificate: {problem}"),
    }
}
