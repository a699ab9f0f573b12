//! The `FixedAddress` (`ipam.yh-genie.io/v1alpha1`, cluster-scoped; manifests/ipam-crd.yaml): one
//! address of a yh-ipam pool kept for an identity that outlives its pods (a StatefulSet's ordinal),
//! inside a fixed block (an `IPBlock` with `fixed: true`, held by no node). Its name is the
//! address itself, so that of two agents taking the same address the API server's `AlreadyExists`
//! tells the second it is taken; its label `IDENTITY_LABEL` (a hash of the pool, the identity, the
//! interface and the range set) finds an identity's address with one list.
//!
//! `FixedOwner` reads which StatefulSet ordinal a pod is, from its controller's
//! ownerReference and its `apps.kubernetes.io/pod-index` label (else its name's suffix); or names
//! an `IPAMClaim` (`k8s.cni.cncf.io/v1alpha1`, namespaced; manifests/ipamclaims-crd.yaml, from
//! k8snetworkplumbingwg/ipamclaims), whose address two pods may hold at once (a VM's live
//! migration) and which yh-ipam writes into its `status.ips`.

use ::kube::core::{ApiResource, GroupVersionKind};
use ipnetwork::IpNetwork;
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::net::IpAddr;

use super::ip_block::{GROUP, VERSION};

pub const KIND: &str = "FixedAddress";
pub const PLURAL: &str = "fixedaddresses";
/// The label naming the identity an address is kept for (`identity_label`).
pub const IDENTITY_LABEL: &str = "ipam.yh-genie.io/identity";
/// The label naming the sandbox and interface an address imported from whereabouts is held by
/// (`imported_label`): what the pod's DEL finds it by.
pub const IMPORTED_LABEL: &str = "ipam.yh-genie.io/imported-for";
/// The label naming the address's pool.
pub const POOL_LABEL: &str = "ipam.yh-genie.io/pool";
/// The label a StatefulSet's controller gives its pods, their ordinal (Kubernetes 1.28 on).
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// What a `FixedAddress` says: the address, its pool and fixed block, whose it is (the identity and
/// the interface) and which pod holds it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FixedAddressSpec {
    pub pool: String,
    pub address: IpAddr,
    pub block: IpNetwork,
    pub interface: String,
    /// Which of the pool's range sets it is of (0 unless dual stack).
    #[serde(default)]
    pub range_set: usize,
    pub owner: FixedOwner,
    pub pod: HoldingPod,
}

/// `FixedOwner::kind` of a StatefulSet's ordinal.
pub const STATEFUL_SET: &str = "StatefulSet";
/// `FixedOwner::kind` of an address imported from whereabouts: held by a pod's sandbox until its
/// DEL (`namespace`/`name` the pod's, `uid` the sandbox's container id, `ordinal` 0).
pub const WHEREABOUTS: &str = "Whereabouts";
/// `FixedOwner::kind` of an IPAMClaim (its `ordinal` 0).
pub const IPAM_CLAIM: &str = "IPAMClaim";
/// `FixedOwner::kind` of an address of a shared block (a node's block shared when the pool ran
/// low): held by one pod's sandbox until its DEL (`namespace`/`name` the pod's, `uid` the
/// sandbox's container id, `ordinal` 0; the pod's uid in `FixedAddressSpec::pod`).
pub const SHARED: &str = "Pod";

/// The identity a fixed address is kept for: a StatefulSet's ordinal, or an IPAMClaim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FixedOwner {
    /// `StatefulSet` or `IPAMClaim`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub ordinal: u32,
}

/// The pod holding a fixed address now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HoldingPod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub node: String,
}

impl FixedOwner {
    /// Which StatefulSet ordinal `pod` is, if it is one: its controller is a StatefulSet, and its
    /// ordinal is its `apps.kubernetes.io/pod-index` label, else its name's `-<n>` suffix.
    pub fn of(pod: &Pod) -> Option<Self> {
        let meta = &pod.metadata;
        let owner =
            meta.owner_references.iter().flatten().find(|o| {
                o.controller == Some(true) && o.kind == "StatefulSet" && o.api_version.starts_with("apps/")
            })?;
        let name = meta.name.as_deref()?;
        let from_label = meta.labels.as_ref().and_then(|l| l.get(POD_INDEX_LABEL)).and_then(|i| i.parse().ok());
        let from_name = name
            .strip_prefix(owner.name.as_str())
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|ordinal| ordinal.parse().ok());
        Some(FixedOwner {
            kind: STATEFUL_SET.into(),
            namespace: meta.namespace.clone()?,
            name: owner.name.clone(),
            uid: owner.uid.clone(),
            ordinal: from_label.or(from_name)?,
        })
    }

    /// `StatefulSet namespace/name ordinal n` or `IPAMClaim namespace/name`, for messages.
    pub fn describe(&self) -> String {
        match self.kind.as_str() {
            STATEFUL_SET => format!("{} {}/{} ordinal {}", self.kind, self.namespace, self.name, self.ordinal),
            _ => format!("{} {}/{}", self.kind, self.namespace, self.name),
        }
    }
}

/// The resource, for kube's dynamic API.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// The IPAMClaim resource (NPWG, k8snetworkplumbingwg/ipamclaims), for kube's dynamic API.
pub fn ipam_claim_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("k8s.cni.cncf.io", "v1alpha1", IPAM_CLAIM), "ipamclaims")
}

/// The object's name for `address`: the address as a DNS subdomain (`10.80.0.7`, `v6-fd80--7`).
pub fn object_name(address: IpAddr) -> String {
    match address {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("v6-{}", a.to_string().replace(':', "-")),
    }
}

/// The value of `IDENTITY_LABEL` for `owner`'s address on `interface` from range set `set` of
/// `pool`: a hash (a label value holds 63 characters at most, the identity more).
pub fn identity_label(pool: &str, owner: &FixedOwner, interface: &str, set: usize) -> String {
    let key = format!("{pool}\n{}\n{}\n{}\n{}\n{interface}\n{set}", owner.kind, owner.uid, owner.ordinal, owner.name);
    let digest = Sha256::digest(key.as_bytes());
    digest.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

/// The value of `IMPORTED_LABEL` for sandbox `container_id`'s interface `interface`: a hash (a
/// container id alone may fill a label value).
pub fn imported_label(container_id: &str, interface: &str) -> String {
    let digest = Sha256::digest(format!("{container_id}\n{interface}").as_bytes());
    digest.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_statefulset_pods_ordinal_comes_from_its_label_else_its_name() {
        let owner =
            json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "s1", "controller": true}]);
        let labelled = pod(json!({"metadata": {"name": "web-3", "namespace": "db", "ownerReferences": owner,
                                               "labels": {POD_INDEX_LABEL: "7"}}}));
        let member = FixedOwner::of(&labelled).unwrap();
        assert_eq!((member.name.as_str(), member.uid.as_str(), member.ordinal), ("web", "s1", 7));
        assert_eq!(member.describe(), "StatefulSet db/web ordinal 7");
        let named = pod(json!({"metadata": {"name": "web-3", "namespace": "db", "ownerReferences": owner}}));
        assert_eq!(FixedOwner::of(&named).unwrap().ordinal, 3);
        // Not a StatefulSet's: a ReplicaSet's, or not its controller.
        let replica =
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r1", "controller": true}]);
        assert!(
            FixedOwner::of(&pod(json!({"metadata": {"name": "web-3", "namespace": "db", "ownerReferences": replica}})))
                .is_none()
        );
        let loose = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "s1"}]);
        assert!(
            FixedOwner::of(&pod(json!({"metadata": {"name": "web-3", "namespace": "db", "ownerReferences": loose}})))
                .is_none()
        );
    }

    #[test]
    fn an_address_names_its_object_and_an_identity_its_label() {
        assert_eq!(object_name("10.80.0.7".parse().unwrap()), "10.80.0.7");
        assert_eq!(object_name("fd80::7".parse().unwrap()), "v6-fd80--7");
        let member = |ordinal| FixedOwner {
            kind: "StatefulSet".into(),
            namespace: "db".into(),
            name: "web".into(),
            uid: "s1".into(),
            ordinal,
        };
        let label = identity_label("lan", &member(0), "net1", 0);
        assert_eq!(label.len(), 40);
        assert_eq!(label, identity_label("lan", &member(0), "net1", 0));
        for other in [
            identity_label("lan", &member(1), "net1", 0),
            identity_label("lan", &member(0), "net2", 0),
            identity_label("lan", &member(0), "net1", 1),
            identity_label("wan", &member(0), "net1", 0),
        ] {
            assert_ne!(label, other);
        }
    }
}
