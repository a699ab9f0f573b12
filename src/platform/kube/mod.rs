//! Kubernetes access for the selector, behind one small trait.
//!
//! The selector reads a pod, the ConfigMaps its containers' `CNI_NETWORK_CONFIG` refers to and the
//! NetworkAttachmentDefinitions its `k8s.v1.cni.cncf.io/networks` annotation names (and, for a pod
//! with DRA resource claims, those claims and its node's ResourceSlices), and writes one
//! annotation back (`k8s.v1.cni.cncf.io/network-status`). `PodSource` is that interface,
//! synchronous like the `Plugin` trait, so selection logic is tested with an in-memory fake and
//! runs in production over `ApiClient`, which talks to the API server with the `kube` crate,
//! bounded in time and retried within one budget (see `client`). The node agent's long-lived,
//! async access (watches, the status writes it does for the plugin) is in `watching`; the socket
//! over which the plugin gets the same objects from the agent instead, in `agent_socket`.

pub mod address_pool;
mod client;
pub mod fixed_address;
pub mod ip_block;
mod nad;
pub mod tls;
pub mod whereabouts;

pub use client::{
    ApiClient, ApiPolicy, Failure, POD_REPLACED, annotations_patch, classify, error_chain, jittered, random_fraction,
};
pub use nad::{NetworkAttachmentDefinition, NetworkAttachmentDefinitionSpec, RESOURCE_NAME};

/// A DELETE the API server carries out only on the object as it was read: the same uid (not another
/// object created since under its name) and, when given, the same resourceVersion (not changed
/// since). Anything else is answered 409 and the object stays, so a decision made on what was read
/// never deletes what another party wrote after it.
pub fn delete_as_read(uid: Option<String>, resource_version: Option<String>) -> ::kube::api::DeleteParams {
    let preconditions = ::kube::api::Preconditions { uid, resource_version };
    ::kube::api::DeleteParams { preconditions: Some(preconditions), ..Default::default() }
}

use crate::platform::cni::CniError;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Every request `ApiClient` makes, as RBAC names it: (API group, resource, verb). The installer's
/// ClusterRole grants exactly these (tests/offline/manifests.rs holds the two equal).
pub const API_CALLS: [(&str, &str, &str); 6] = [
    ("", "pods", "get"),
    ("", "pods", "patch"),
    ("", "configmaps", "get"),
    ("k8s.cni.cncf.io", "network-attachment-definitions", "get"),
    ("resource.k8s.io", "resourceclaims", "get"),
    ("resource.k8s.io", "resourceslices", "list"),
];

/// Every request the node agent makes (`watching`, `crate::programs::agent`), as RBAC names them: it lists
/// and watches its node's pods and the ConfigMaps and NetworkAttachmentDefinitions they refer to,
/// patches a pod's network-status annotation and creates its `AddedInterface` events for the
/// plugin. For pods with DRA resource claims it watches those claims and its node's ResourceSlices.
/// For `yh-ipam` it claims blocks of addresses (`ip_block`) and reads a pod gone from its watch.
/// The ClusterRole grants these and `API_CALLS`, nothing else.
pub const AGENT_API_CALLS: [(&str, &str, &str); 31] = [
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods", "patch"),
    ("", "events", "create"),
    ("", "configmaps", "list"),
    ("", "configmaps", "watch"),
    ("k8s.cni.cncf.io", "network-attachment-definitions", "list"),
    ("k8s.cni.cncf.io", "network-attachment-definitions", "watch"),
    ("resource.k8s.io", "resourceclaims", "list"),
    ("resource.k8s.io", "resourceclaims", "watch"),
    ("resource.k8s.io", "resourceslices", "list"),
    ("resource.k8s.io", "resourceslices", "watch"),
    // `yh-ipam`'s blocks: claimed by creating one, read back when it exists already, confirmed by
    // an update after the node's lease had run out.
    ("ipam.yh-genie.io", "ipblocks", "create"),
    ("ipam.yh-genie.io", "ipblocks", "get"),
    ("ipam.yh-genie.io", "ipblocks", "update"),
    // Whether a pod gone from the watch, holding `yh-ipam` addresses, is gone for good.
    ("", "pods", "get"),
    // The dead-node releaser: the blocks listed, a node's state read, a dead node's blocks deleted.
    ("ipam.yh-genie.io", "ipblocks", "list"),
    ("ipam.yh-genie.io", "ipblocks", "delete"),
    ("", "nodes", "get"),
    // Fixed addresses: an identity's found by a list, one created per address, handed over to the
    // next pod of a StatefulSet's ordinal by an update; freed by the releaser's sweep, which reads
    // the StatefulSet.
    ("ipam.yh-genie.io", "fixedaddresses", "list"),
    // One address's object, freed by its pod's DEL (an address of a shared block).
    ("ipam.yh-genie.io", "fixedaddresses", "get"),
    ("ipam.yh-genie.io", "fixedaddresses", "create"),
    ("ipam.yh-genie.io", "fixedaddresses", "update"),
    ("ipam.yh-genie.io", "fixedaddresses", "delete"),
    ("apps", "statefulsets", "get"),
    // An IPAMClaim's fixed address: the claim read (its uid), its status.ips written; the sweep
    // reads it.
    ("k8s.cni.cncf.io", "ipamclaims", "get"),
    ("k8s.cni.cncf.io", "ipamclaims/status", "update"),
    // yh-ipam's import of the addresses whereabouts handed out (docs/migrate.md, "From whereabouts").
    ("whereabouts.cni.cncf.io", "ippools", "list"),
    ("whereabouts.cni.cncf.io", "overlappingrangeipreservations", "list"),
    // yh-ipam's pools defined by the admin's `AddressPool`s: listed and watched from the node's
    // first yh-ipam request on, never read on an ADD.
    ("ipam.yh-genie.io", "addresspools", "list"),
    ("ipam.yh-genie.io", "addresspools", "watch"),
];

/// The node agent's requests for its node's `yh-ipam` lease and the dead-node releaser's election
/// lease (`coordination.k8s.io` Leases; the releaser also lists and reads other nodes'), in its own
/// namespace only: a Role grants them there, not the ClusterRole.
pub const AGENT_LEASE_CALLS: [(&str, &str, &str); 5] = [
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "list"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
    // Another node's lease, marked to ask it to share its blocks of an exhausted pool.
    ("coordination.k8s.io", "leases", "patch"),
];

/// An object's annotations, by key.
pub type Annotations = BTreeMap<String, String>;

/// The reads and the one write the selector makes. `Ok(None)`: the object does not exist (the
/// caller knows what that means for it). Errors are CNI errors ready to print, naming the object:
/// code 11 when the API server could not be reached in time, 103 when it refused (unauthorized,
/// forbidden), sent an object that does not parse, or presented a certificate that is not trusted.
pub trait PodSource {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, CniError>;
    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, CniError>;
    fn network_attachment(&self, namespace: &str, name: &str) -> Result<Option<NetworkAttachmentDefinition>, CniError>;
    fn resource_claim(&self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, CniError>;
    /// The ResourceSlices whose devices are on `node` (field selector `spec.nodeName`).
    fn node_resource_slices(&self, node: &str) -> Result<Vec<ResourceSlice>, CniError>;
    /// Merge `annotations` into the pod's, in one request, only if the pod under that name is still
    /// the one with `uid` (a pod recreated under the same name is another pod). `Ok(false)`: the
    /// pod is gone or is another one, and nothing was written.
    fn annotate_pod(&self, namespace: &str, name: &str, uid: &str, annotations: &Annotations)
    -> Result<bool, CniError>;
}

/// A namespaced object as messages name it: `pod default/web-0`, `ConfigMap default/net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRef<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    Pod,
    ConfigMap,
    NetworkAttachmentDefinition,
    ResourceClaim,
    /// Cluster-scoped: an `ObjectRef` of one has no namespace.
    ResourceSlice,
}

impl<'a> ObjectRef<'a> {
    pub fn pod(namespace: &'a str, name: &'a str) -> Self {
        ObjectRef { kind: Kind::Pod, namespace, name }
    }
    pub fn config_map(namespace: &'a str, name: &'a str) -> Self {
        ObjectRef { kind: Kind::ConfigMap, namespace, name }
    }
    pub fn network_attachment(namespace: &'a str, name: &'a str) -> Self {
        ObjectRef { kind: Kind::NetworkAttachmentDefinition, namespace, name }
    }
    pub fn resource_claim(namespace: &'a str, name: &'a str) -> Self {
        ObjectRef { kind: Kind::ResourceClaim, namespace, name }
    }
}

impl fmt::Display for ObjectRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Pod => "pod",
            Kind::ConfigMap => "ConfigMap",
            Kind::NetworkAttachmentDefinition => "NetworkAttachmentDefinition",
            Kind::ResourceClaim => "ResourceClaim",
            Kind::ResourceSlice => "ResourceSlice",
        };
        write!(f, "{kind} {}/{}", self.namespace, self.name)
    }
}

/// An `ObjectRef` that owns its names: a key to hold objects by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        ObjectKey { kind, namespace: namespace.to_string(), name: name.to_string() }
    }
    pub fn as_ref(&self) -> ObjectRef<'_> {
        ObjectRef { kind: self.kind, namespace: &self.namespace, name: &self.name }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_ref().fmt(f)
    }
}
