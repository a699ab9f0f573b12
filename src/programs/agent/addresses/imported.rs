//! Addresses imported from whereabouts (docs/migrate.md, "From whereabouts"): when a network moves
//! from whereabouts to yh-ipam with its ranges, its running pods keep the addresses whereabouts gave
//! them. Before the first ADD of a pool in the agent's life, the agent reads whereabouts' `IPPool`s
//! and `OverlappingRangeIPReservation`s (`platform::kube::whereabouts`) and keeps each address in
//! the pool's ranges as a fixed address (`fixed`) held by the pod's sandbox: its block claimed as a
//! fixed block, one `FixedAddress` per address, created atomically (`AlreadyExists`: imported by
//! another agent already). No node ever hands out an address of a fixed block, so no new pod gets
//! one of them. The pod's DEL, which now reaches yh-ipam, deletes its object: the address is free
//! for the pool's fixed addresses again.
//!
//! Whereabouts' objects are left as they are, still naming the pods gone since: a pool is imported
//! once in the cluster, marked by a Lease `yh-ipam-imported-<pool>` in the agent's namespace written
//! after an import without conflict, so that an agent started later does not import again an
//! address freed by its pod's DEL. A block that a node holds already holds addresses whereabouts gave
//! too: each is a conflict, refused to the ADD with what to do, and the pool is imported again at
//! the next ADD.

use super::blocks::{block_of, number, usable};
use super::fixed::{Refusal, again, ask, claim_fixed, describe};
use crate::node::agent_socket::addresses::PoolSpec;
use crate::platform::kube::delete_as_read;
use crate::platform::kube::fixed_address::{
    self, FixedAddressSpec, FixedOwner, HoldingPod, IMPORTED_LABEL, POOL_LABEL, imported_label,
};
use crate::platform::kube::ip_block;
use crate::platform::kube::whereabouts::{self, Reservation};
use ::kube::api::{DynamicObject, ListParams, PostParams};
use ::kube::{Api, Client};
use ipnetwork::IpNetwork;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use std::collections::BTreeMap;
use std::net::IpAddr;
use tracing::{info, warn};

/// What importing a pool came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Imported {
    /// Imported now or before (by this agent or another: the Lease says so), with how many of the
    /// pool's addresses whereabouts had handed out (`None`: a marker that does not say).
    Addresses(Option<usize>),
    /// whereabouts' resources are not served: it was never installed.
    NoWhereabouts,
}

/// The marker Lease's annotation: how many of the pool's addresses the import found, so that an
/// agent finding none imported looks for none on a DEL its records know nothing of.
const IMPORTED_COUNT: &str = "ipam.yh-genie.io/imported-addresses";

impl Imported {
    /// Whether the pool may hold addresses imported from whereabouts.
    pub fn may_hold_addresses(&self) -> bool {
        match self {
            Imported::NoWhereabouts | Imported::Addresses(Some(0)) => false,
            Imported::Addresses(_) => true,
        }
    }
}

/// Import `pool`'s addresses from whereabouts' objects, as the module says.
pub async fn import(client: &Client, node: &str, pool: &PoolSpec) -> Result<Imported, Refusal> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), client.default_namespace());
    let marker = format!("yh-ipam-imported-{}", pool.name);
    if let Some(marked) = ask("reading the Lease marking the import from whereabouts", leases.get_opt(&marker)).await? {
        let count = marked.metadata.annotations.as_ref().and_then(|a| a.get(IMPORTED_COUNT)?.parse().ok());
        return Ok(Imported::Addresses(count));
    }
    let Some(pools) = list(client, whereabouts::ip_pool_resource()).await? else {
        return Ok(Imported::NoWhereabouts);
    };
    let reservations = list(client, whereabouts::reservation_resource()).await?.unwrap_or_default();
    // An address of both an IPPool and a reservation: the IPPool's says it.
    let mut found: BTreeMap<IpAddr, (usize, Reservation)> = BTreeMap::new();
    let listed = pools.iter().flat_map(whereabouts::pool_reservations);
    for reservation in listed.chain(reservations.iter().flat_map(whereabouts::object_reservations)) {
        if let Some(set) = range_set_of(pool, reservation.address) {
            found.entry(reservation.address).or_insert((set, reservation));
        }
    }
    let blocks_api: Api<DynamicObject> = Api::all_with(client.clone(), &ip_block::resource());
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &fixed_address::resource());
    let mut fixed_blocks: BTreeMap<IpNetwork, bool> = BTreeMap::new();
    let (mut kept, mut conflicts, count) = (0, Vec::new(), found.len());
    for (address, (set, reservation)) in found {
        let block = block_of(
            number(address) / u128::from(pool.block_size) * u128::from(pool.block_size),
            pool.block_size,
            address.is_ipv4(),
        );
        let fixed = match fixed_blocks.get(&block) {
            Some(fixed) => *fixed,
            None => {
                let fixed = claim_fixed(&blocks_api, block, &pool.name).await?;
                fixed_blocks.insert(block, fixed);
                fixed
            }
        };
        if !fixed {
            conflicts.push(format!(
                "{address} (pod {}, sandbox {}) is in block {block}, which a node holds (IPBlock {})",
                reservation.pod_ref,
                reservation.container_id,
                ip_block::object_name(block)
            ));
            continue;
        }
        if create(&api, pool, address, block, set, &reservation).await? {
            kept += 1;
        }
    }
    if !conflicts.is_empty() {
        for conflict in &conflicts {
            warn!("pool {:?}: an address whereabouts handed out cannot be imported: {conflict}", pool.name);
        }
        return Err(Refusal {
            why: format!(
                "pool {:?} cannot import the addresses whereabouts handed out: {}; a node handed out addresses from \
                 these blocks already, so the pods holding them may share addresses: delete the pods named (or \
                 those holding the same addresses from the block, on its node), and remove their allocations from \
                 whereabouts' IPPools and OverlappingRangeIPReservations, then the next ADD imports again",
                pool.name,
                conflicts.join("; ")
            ),
            retry: false,
        });
    }
    let mut lease = Lease::default();
    lease.metadata.name = Some(marker.clone());
    lease.metadata.annotations = Some(BTreeMap::from([(IMPORTED_COUNT.to_string(), count.to_string())]));
    lease.spec = Some(LeaseSpec { holder_identity: Some(node.into()), ..LeaseSpec::default() });
    match tokio::time::timeout(std::time::Duration::from_secs(10), leases.create(&PostParams::default(), &lease)).await
    {
        Ok(Ok(_)) => {}
        Ok(Err(::kube::Error::Api(status))) if status.code == 409 => {}
        Ok(Err(e)) => return Err(again(format!("creating the Lease {marker}: {}", describe(&e)))),
        Err(_) => return Err(again(format!("creating the Lease {marker}: no answer"))),
    }
    info!("pool {:?}: {kept} addresses imported from whereabouts (Lease {marker} marks the import)", pool.name);
    Ok(Imported::Addresses(Some(count)))
}

/// Which of `pool`'s range sets may hand out `address`.
fn range_set_of(pool: &PoolSpec, address: IpAddr) -> Option<usize> {
    pool.range_sets.iter().position(|set| usable(pool, set, address))
}

/// The objects of `resource` in every namespace; `None` when it is not served (404).
async fn list(client: &Client, resource: ::kube::core::ApiResource) -> Result<Option<Vec<serde_json::Value>>, Refusal> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match tokio::time::timeout(std::time::Duration::from_secs(10), api.list(&ListParams::default())).await {
        Ok(Ok(listed)) => {
            Ok(Some(listed.items.into_iter().map(|o| serde_json::to_value(o).expect("an object serializes")).collect()))
        }
        Ok(Err(::kube::Error::Api(status))) if status.code == 404 => Ok(None),
        // Not a reason to go on without importing: the pool's pods might be given addresses in use.
        Ok(Err(e)) if matches!(&e, ::kube::Error::Api(status) if status.code == 403) => Err(again(format!(
            "listing whereabouts' {}, to import the addresses it handed out before the pool's first ADD: {}; the \
             ClusterRole of manifests/yh-genie.yaml grants it",
            resource.plural,
            describe(&e)
        ))),
        Ok(Err(e)) => Err(again(format!("listing whereabouts' {}: {}", resource.plural, describe(&e)))),
        Err(_) => Err(again(format!("listing whereabouts' {}: no answer", resource.plural))),
    }
}

/// Create the `FixedAddress` of an imported address: whether it was created (not there already).
async fn create(
    api: &Api<DynamicObject>,
    pool: &PoolSpec,
    address: IpAddr,
    block: IpNetwork,
    set: usize,
    reservation: &Reservation,
) -> Result<bool, Refusal> {
    let (namespace, name) = reservation.pod_ref.split_once('/').unwrap_or(("", reservation.pod_ref.as_str()));
    let spec = FixedAddressSpec {
        pool: pool.name.clone(),
        address,
        block,
        interface: reservation.ifname.clone(),
        range_set: set,
        owner: FixedOwner {
            kind: fixed_address::WHEREABOUTS.into(),
            namespace: namespace.into(),
            name: name.into(),
            uid: reservation.container_id.clone(),
            ordinal: 0,
        },
        pod: HoldingPod { uid: String::new(), namespace: namespace.into(), name: name.into(), node: String::new() },
    };
    let object_name = fixed_address::object_name(address);
    let mut object = DynamicObject::new(&object_name, &fixed_address::resource())
        .data(serde_json::json!({ "spec": serde_json::to_value(&spec).expect("a spec serializes") }));
    object.metadata.labels = Some(
        [
            (POOL_LABEL.to_string(), pool.name.clone()),
            (IMPORTED_LABEL.to_string(), imported_label(&reservation.container_id, &reservation.ifname)),
        ]
        .into(),
    );
    match tokio::time::timeout(std::time::Duration::from_secs(10), api.create(&PostParams::default(), &object)).await {
        Ok(Ok(_)) => Ok(true),
        Ok(Err(::kube::Error::Api(status))) if status.code == 409 => Ok(false),
        Ok(Err(e)) => Err(again(format!("creating FixedAddress {object_name}: {}", describe(&e)))),
        Err(_) => Err(again(format!("creating FixedAddress {object_name}: no answer"))),
    }
}

/// Free what sandbox `container_id`'s interface `ifname` holds in `pool` of the addresses imported
/// from whereabouts: its DEL. Each object is deleted with the uid and resourceVersion listed.
pub async fn release(client: &Client, pool: &str, container_id: &str, ifname: &str) -> Result<(), String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &fixed_address::resource());
    let selector = format!("{POOL_LABEL}={pool},{IMPORTED_LABEL}={}", imported_label(container_id, ifname));
    let listed =
        ask("listing FixedAddresses", api.list(&ListParams::default().labels(&selector))).await.map_err(|r| r.why)?;
    for object in listed.items {
        let Ok(spec) = serde_json::from_value::<FixedAddressSpec>(object.data["spec"].clone()) else { continue };
        if spec.owner.kind != fixed_address::WHEREABOUTS || spec.owner.uid != container_id || spec.interface != ifname {
            continue;
        }
        let name = object.metadata.name.clone().unwrap_or_default();
        let params = delete_as_read(object.metadata.uid.clone(), object.metadata.resource_version.clone());
        ask(&format!("deleting FixedAddress {name}"), api.delete(&name, &params)).await.map_err(|r| r.why)?;
        info!(
            "address {} of pool {pool:?}, imported from whereabouts, is free: pod {}/{} (sandbox {container_id}) \
             released it",
            spec.address, spec.owner.namespace, spec.owner.name
        );
    }
    Ok(())
}
