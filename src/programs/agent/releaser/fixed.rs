//! Fixed addresses freed once their identity is gone (docs/ipam.md, "Fixed addresses"): a
//! `FixedAddress` kept for a StatefulSet's ordinal is deleted when the ordinal is no longer its
//! StatefulSet's (scaled down below it: `spec.replicas` at most the ordinal), or the StatefulSet is
//! gone (deleted, or another object under its name), and the pod holding the address is gone
//! too; a `FixedAddress` kept for an IPAMClaim once the claim is gone (deleted, or another object
//! under its name) and the last pod holding it too; an address imported from whereabouts once no
//! pod of its name exists (its DEL frees it first, as a rule). A pod's DEL never frees the others: the next pod of
//! the ordinal (or of the claim) takes it over.
//!
//! Decided from objects read after the address was listed: a StatefulSet scaled up again creates
//! its pod, which takes the address over by a write that changes its resourceVersion, so the
//! deletion, made with the uid and resourceVersion listed, fails rather than free an address in use.

use super::{Problem, ask};
use crate::platform::kube::delete_as_read;
use crate::platform::kube::fixed_address::{
    FixedAddressSpec, IPAM_CLAIM, SHARED, WHEREABOUTS, ipam_claim_resource, resource,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};
use tracing::info;

/// Delete the fixed addresses whose identity is gone; how many.
pub async fn sweep(client: &Client) -> Result<usize, Problem> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let listed = ask(api.list(&ListParams::default())).await?;
    let mut freed = 0;
    for object in listed.items {
        let Ok(spec) = serde_json::from_value::<FixedAddressSpec>(object.data["spec"].clone()) else { continue };
        let Some(why) = identity_gone(client, &spec).await? else { continue };
        let holder = &spec.pod;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &holder.namespace);
        let pod = ask(pods.get_opt(&holder.name)).await?;
        if pod.and_then(|p| p.metadata.uid).as_deref() == Some(holder.uid.as_str()) {
            continue;
        }
        let name = object.metadata.name.clone().unwrap_or_default();
        let params = delete_as_read(object.metadata.uid.clone(), object.metadata.resource_version.clone());
        match ask(api.delete(&name, &params)).await {
            Ok(_) => {
                freed += 1;
                info!(
                    "fixed address {} of pool {:?} is free: {} {why}, and its last pod {}/{} is gone",
                    spec.address,
                    spec.pool,
                    spec.owner.describe(),
                    holder.namespace,
                    holder.name
                );
            }
            Err(Problem::Conflict(_) | Problem::Gone) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(freed)
}

/// Why `spec`'s identity is gone (a StatefulSet's ordinal, an IPAMClaim), or `None` while it is there.
async fn identity_gone(client: &Client, spec: &FixedAddressSpec) -> Result<Option<String>, Problem> {
    let owner = &spec.owner;
    if owner.kind == SHARED {
        // Its pod's alone: gone with it (the pod is read next).
        return Ok(Some(format!("(sandbox {}) held it alone", owner.uid)));
    }
    if owner.kind == WHEREABOUTS {
        // whereabouts kept no pod uid: a pod of the name, whichever, keeps it.
        let pods: Api<Pod> = Api::namespaced(client.clone(), &owner.namespace);
        return Ok(match ask(pods.get_opt(&owner.name)).await? {
            None => Some("is gone (no pod of its name)".into()),
            Some(_) => None,
        });
    }
    if owner.kind == IPAM_CLAIM {
        let claims: Api<DynamicObject> = Api::namespaced_with(client.clone(), &owner.namespace, &ipam_claim_resource());
        return Ok(match ask(claims.get_opt(&owner.name)).await? {
            None => Some("is gone (deleted)".into()),
            Some(claim) if claim.metadata.uid.as_deref() != Some(owner.uid.as_str()) => {
                Some("is gone (deleted; another has its name)".into())
            }
            Some(_) => None,
        });
    }
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &owner.namespace);
    let Some(set) = ask(sets.get_opt(&owner.name)).await? else {
        return Ok(Some("is gone (its StatefulSet is deleted)".into()));
    };
    if set.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
        return Ok(Some("is gone (its StatefulSet is deleted; another has its name)".into()));
    }
    let replicas = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    if i64::from(owner.ordinal) >= i64::from(replicas) {
        return Ok(Some(format!("is gone (its StatefulSet is scaled down to {replicas})")));
    }
    Ok(None)
}
