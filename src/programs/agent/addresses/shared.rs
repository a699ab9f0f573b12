//! Shared blocks (docs/ipam.md, "When a pool runs low"): with as many addresses as pods, a pool's
//! last free addresses sit in blocks other nodes hold, which only their agents may hand out (from
//! memory, with no API request). A node that finds the pool exhausted asks those nodes to share
//! (`ask_to_share`: a mark on each one's node lease, read by its next renewal). Each such node, under
//! its allocator, so between two of its own allocations, shares its blocks of the pool that have room
//! (`share`): every address it handed out from one becomes a `FixedAddress` held by its pod's
//! sandbox, then the block a fixed block. From then on every node hands out the block's free
//! addresses one `FixedAddress` at a time (`take`), whose creation the API server decides, as in the
//! pool's fixed blocks; a pod's DEL deletes its object (`release`). Only the block's owner changes
//! the block, and only while it hands out nothing from it: nothing races it.
//!
//! The steps, each safe to stop after: the objects created (a block still the node's, with objects
//! of its own in it: the next share replaces them, and a pod's DEL in between leaves its object,
//! which the dead-node releaser's sweep deletes once the pod is gone); the pods' records written
//! again, saying their addresses are shared (from then on, and at the next start, the node hands
//! out nothing from the block, `Allocator::from_records`); the block made fixed (`make_fixed`,
//! tried again until it is).

use super::blocks::usable;
use super::claims::Holder;
use super::fixed::{self, Refusal, ask, identity_objects};
use crate::node::agent_socket::addresses::{AddressOwner, Allocated, PoolSpec};
use crate::platform::kube::delete_as_read;
use crate::platform::kube::fixed_address::{
    self, FixedAddressSpec, FixedOwner, HoldingPod, IDENTITY_LABEL, POOL_LABEL, SHARED, identity_label,
};
use crate::platform::kube::ip_block::{self, IpBlockSpec};
use ::kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use ::kube::{Api, Client};
use ipnetwork::IpNetwork;
use k8s_openapi::api::coordination::v1::Lease;
use std::collections::BTreeSet;
use tracing::{debug, info};

/// The annotation on a node's lease asking it to share its blocks of a pool: this prefix, then the
/// pool's name; its value names the node asking.
pub const SHARE_ASKED: &str = "share.ipam.yh-genie.io/";

/// The annotation asking for `pool`'s blocks, when the pool's name may be one's name part (63
/// characters at most, of letters, digits, `-`, `_` and `.`, alphanumeric at both ends).
pub fn share_key(pool: &str) -> Option<String> {
    let edges = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let fits = pool.len() <= 63
        && edges(pool.chars().next())
        && edges(pool.chars().last())
        && pool.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    fits.then(|| format!("{SHARE_ASKED}{pool}"))
}

/// Ask `node` to share its blocks of `pool`, for node `asking`: the mark on its lease
/// `yh-ipam-<node>`. Whether it was asked (its lease found and marked).
pub async fn ask_to_share(client: &Client, node: &str, pool: &str, asking: &str) -> bool {
    let Some(key) = share_key(pool) else {
        debug!("pool {pool:?}: its name cannot be a lease annotation's, so no node is asked to share its blocks");
        return false;
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), client.default_namespace());
    let patch = serde_json::json!({ "metadata": { "annotations": { key: asking } } });
    let name = format!("yh-ipam-{node}");
    match ask(&format!("marking Lease {name}"), leases.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)))
        .await
    {
        Ok(_) => {
            info!("pool {pool:?} is exhausted on this node: node {node} is asked to share its blocks of it");
            true
        }
        Err(refusal) => {
            debug!("pool {pool:?}: node {node} cannot be asked to share its blocks: {}", refusal.why);
            false
        }
    }
}

/// The identity of `owner`'s sandbox, whose alone an address of a shared block is.
fn sandbox(owner: &AddressOwner) -> FixedOwner {
    let (namespace, name) = owner.pod.split_once('/').unwrap_or(("", owner.pod.as_str()));
    FixedOwner {
        kind: SHARED.into(),
        namespace: namespace.into(),
        name: name.into(),
        uid: owner.container_id.clone(),
        ordinal: 0,
    }
}

fn holding(owner: &AddressOwner, node: &str) -> HoldingPod {
    let (namespace, name) = owner.pod.split_once('/').unwrap_or(("", owner.pod.as_str()));
    HoldingPod { uid: owner.uid.clone(), namespace: namespace.into(), name: name.into(), node: node.into() }
}

/// The first step of sharing `block` of `spec`'s pool, this node's: each address handed out from
/// it (`holders`) kept as a `FixedAddress` held by its pod's sandbox. Called under the allocator,
/// by the block's owner alone.
pub async fn hold_as_objects(
    client: &Client,
    node: &str,
    spec: &PoolSpec,
    block: IpNetwork,
    holders: &[(AddressOwner, Allocated)],
) -> Result<(), String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &fixed_address::resource());
    for (owner, allocated) in holders {
        let set = spec.range_sets.iter().position(|set| usable(spec, set, allocated.address)).unwrap_or(0);
        let member = sandbox(owner);
        let object_spec = FixedAddressSpec {
            pool: spec.name.clone(),
            address: allocated.address,
            block,
            interface: owner.ifname.clone(),
            range_set: set,
            owner: member.clone(),
            pod: holding(owner, node),
        };
        let name = fixed_address::object_name(allocated.address);
        let mut object = DynamicObject::new(&name, &fixed_address::resource())
            .data(serde_json::json!({ "spec": serde_json::to_value(&object_spec).expect("a spec serializes") }));
        object.metadata.labels = Some(
            [
                (IDENTITY_LABEL.to_string(), identity_label(&spec.name, &member, &owner.ifname, set)),
                (POOL_LABEL.to_string(), spec.name.clone()),
            ]
            .into(),
        );
        if call(&format!("creating FixedAddress {name}"), &[409], api.create(&PostParams::default(), &object))
            .await?
            .is_ok()
        {
            continue;
        }
        // An object of this address in a block this node still holds: this node's own, of a share
        // cut short; it is to say what this node holds now.
        let found = ask(&format!("reading FixedAddress {name}"), api.get(&name)).await.map_err(|r| r.why)?;
        if serde_json::from_value::<FixedAddressSpec>(found.data["spec"].clone()).ok().as_ref() == Some(&object_spec) {
            continue;
        }
        object.metadata.resource_version = found.metadata.resource_version.clone();
        ask(&format!("replacing FixedAddress {name}"), api.replace(&name, &PostParams::default(), &object))
            .await
            .map_err(|r| r.why)?;
    }
    Ok(())
}

/// The last step of sharing `block`, once its pods' records say so: its `IPBlock` made a fixed
/// block (`sharedBy` this node). Who holds it now: `Holder::Fixed`, or the node that does when it is
/// no longer this node's (released while this node's lease had run out, and claimed). A block
/// released meanwhile (its object gone) is created fixed, for the `FixedAddress`es in it: a node
/// claiming it for its own would hand out their addresses again.
pub async fn make_fixed(client: &Client, node: &str, pool: &str, block: IpNetwork) -> Result<Holder, String> {
    let blocks: Api<DynamicObject> = Api::all_with(client.clone(), &ip_block::resource());
    let name = ip_block::object_name(block);
    for _ in 0..3 {
        let Some(mut found) =
            ask(&format!("reading IPBlock {name}"), blocks.get_opt(&name)).await.map_err(|r| r.why)?
        else {
            // Created fixed now, or by another meanwhile (then read again).
            if super::fixed::claim_fixed(&blocks, block, pool).await.map_err(|r| r.why)? {
                return Ok(Holder::Fixed);
            }
            continue;
        };
        let mut block_spec: IpBlockSpec =
            serde_json::from_value(found.data["spec"].clone()).map_err(|e| format!("IPBlock {name}: {e}"))?;
        if block_spec.fixed {
            return Ok(Holder::Fixed);
        }
        if block_spec.node != node {
            return Ok(Holder::Node(block_spec.node));
        }
        block_spec.fixed = true;
        block_spec.node = String::new();
        block_spec.shared_by = node.into();
        found.data["spec"] = serde_json::to_value(&block_spec).expect("a spec serializes");
        match call(&format!("sharing IPBlock {name}"), &[409], blocks.replace(&name, &PostParams::default(), &found))
            .await?
        {
            Ok(_) => {
                info!("block {block} of pool {:?} is shared with every node", block_spec.pool);
                return Ok(Holder::Fixed);
            }
            // Written by another meanwhile (an operator's label, say): read again.
            Err(_) => continue,
        }
    }
    Err(format!("IPBlock {name} was changed by others at every attempt"))
}

/// An address of range set `index` of `spec` for `owner`'s sandbox alone, from the pool's fixed
/// blocks (shared ones among them): the one its object holds already (an ADD retried), else the
/// first free one, created.
pub async fn take(
    client: &Client,
    node: &str,
    spec: &PoolSpec,
    index: usize,
    owner: &AddressOwner,
) -> Result<Allocated, Refusal> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &fixed_address::resource());
    let member = sandbox(owner);
    let label = identity_label(&spec.name, &member, &owner.ifname, index);
    if let Some((_, found)) = identity_objects(&api, &label).await?.into_iter().next() {
        return Ok(Allocated { address: found.address, block: found.block, fixed: true, shared: true });
    }
    let set = &spec.range_sets[index];
    let holder = holding(owner, node);
    let allocated = fixed::create(client, &api, spec, set, index, &label, &member, &owner.ifname, holder).await?;
    Ok(Allocated { shared: true, ..allocated })
}

/// Free `allocated`, an address of a shared block `owner` held: its object deleted, if it is still
/// the sandbox's (with the uid and resourceVersion read).
pub async fn release(client: &Client, owner: &AddressOwner, allocated: &Allocated) -> Result<(), String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &fixed_address::resource());
    let name = fixed_address::object_name(allocated.address);
    let Some(found) = ask(&format!("reading FixedAddress {name}"), api.get_opt(&name)).await.map_err(|r| r.why)? else {
        return Ok(());
    };
    let Ok(spec) = serde_json::from_value::<FixedAddressSpec>(found.data["spec"].clone()) else { return Ok(()) };
    if spec.owner.kind != SHARED || spec.owner.uid != owner.container_id || spec.interface != owner.ifname {
        return Ok(());
    }
    let params = delete_as_read(found.metadata.uid.clone(), found.metadata.resource_version.clone());
    // Gone (404) or changed (409) since it was read: no longer the sandbox's to free.
    call(&format!("deleting FixedAddress {name}"), &[404, 409], api.delete(&name, &params)).await.map(|_| ())
}

/// One request, bounded in time: its answer, or `Err(code)` when the API server refused it with one
/// of the `expected` codes; any other failure as why.
async fn call<T>(
    what: &str,
    expected: &[u16],
    request: impl std::future::Future<Output = Result<T, ::kube::Error>>,
) -> Result<Result<T, u16>, String> {
    match tokio::time::timeout(std::time::Duration::from_secs(10), request).await {
        Err(_) => Err(format!("{what}: no answer within 10s")),
        Ok(Ok(answer)) => Ok(Ok(answer)),
        Ok(Err(::kube::Error::Api(status))) if expected.contains(&status.code) => Ok(Err(status.code)),
        Ok(Err(e)) => Err(format!("{what}: {}", super::fixed::describe(&e))),
    }
}

/// The pools whose blocks `annotations` ask this node to share (`SHARE_ASKED`).
pub fn asked<'a>(annotations: impl IntoIterator<Item = &'a String>) -> BTreeSet<String> {
    annotations.into_iter().filter_map(|key| key.strip_prefix(SHARE_ASKED)).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_is_asked_for_by_an_annotation_when_its_name_fits_one() {
        assert_eq!(share_key("lan").as_deref(), Some("share.ipam.yh-genie.io/lan"));
        assert_eq!(share_key("macvlan-conf.v2").as_deref(), Some("share.ipam.yh-genie.io/macvlan-conf.v2"));
        for unfit in ["", "-lan", "lan_", "a/b", &"x".repeat(64)] {
            assert_eq!(share_key(unfit), None, "{unfit:?}");
        }
        let keys = ["share.ipam.yh-genie.io/lan".to_string(), "other/thing".to_string()];
        assert_eq!(asked(&keys), BTreeSet::from(["lan".to_string()]));
    }
}
