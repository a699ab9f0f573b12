//! The server's objects, as etcd and the watch cache hold them: every change gets the next revision
//! (the objects' `resourceVersion`), is kept in a history that watches replay from a revision, and
//! is broadcast to the watches running. `compact` forgets the history, as etcd compaction (or an
//! API server restart losing its watch cache) does: a watch from before it gets 410 Gone.

use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use tokio::sync::broadcast;

/// Changes kept for watches to resume from (older ones are compacted away, as etcd does).
const HISTORY: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Pods,
    ConfigMaps,
    Nads,
    /// DRA's (resource.k8s.io/v1), namespaced.
    Claims,
    /// DRA's, cluster-scoped (namespace "").
    Slices,
    /// yh-ipam's blocks (ipam.yh-genie.io/v1alpha1), cluster-scoped.
    IpBlocks,
    /// coordination.k8s.io/v1, namespaced: the lease a node agent holds for its yh-ipam blocks.
    Leases,
    /// core/v1, cluster-scoped: what yh-ipam's dead-node releaser reads.
    Nodes,
    /// yh-ipam's fixed addresses (ipam.yh-genie.io/v1alpha1), cluster-scoped.
    FixedAddresses,
    /// yh-ipam's pools defined by the admin (ipam.yh-genie.io/v1alpha1), cluster-scoped.
    AddressPools,
    /// apps/v1, namespaced: what yh-ipam reads of a StatefulSet whose ordinal keeps an address.
    StatefulSets,
    /// NPWG's IPAMClaims (k8s.cni.cncf.io/v1alpha1), namespaced.
    IpamClaims,
    /// whereabouts' IPPools (whereabouts.cni.cncf.io/v1alpha1), namespaced: what yh-ipam imports.
    IpPools,
    /// whereabouts' OverlappingRangeIPReservations, namespaced: what yh-ipam imports.
    Reservations,
}

impl Resource {
    pub fn plural(self) -> &'static str {
        match self {
            Resource::Pods => "pods",
            Resource::ConfigMaps => "configmaps",
            Resource::Nads => "network-attachment-definitions",
            Resource::Claims => "resourceclaims",
            Resource::Slices => "resourceslices",
            Resource::IpBlocks => "ipblocks",
            Resource::Leases => "leases",
            Resource::Nodes => "nodes",
            Resource::FixedAddresses => "fixedaddresses",
            Resource::AddressPools => "addresspools",
            Resource::StatefulSets => "statefulsets",
            Resource::IpamClaims => "ipamclaims",
            Resource::IpPools => "ippools",
            Resource::Reservations => "overlappingrangeipreservations",
        }
    }
    /// The `kind` of one object.
    pub fn kind(self) -> &'static str {
        match self {
            Resource::Pods => "Pod",
            Resource::ConfigMaps => "ConfigMap",
            Resource::Nads => "NetworkAttachmentDefinition",
            Resource::Claims => "ResourceClaim",
            Resource::Slices => "ResourceSlice",
            Resource::IpBlocks => "IPBlock",
            Resource::Leases => "Lease",
            Resource::Nodes => "Node",
            Resource::FixedAddresses => "FixedAddress",
            Resource::AddressPools => "AddressPool",
            Resource::StatefulSets => "StatefulSet",
            Resource::IpamClaims => "IPAMClaim",
            Resource::IpPools => "IPPool",
            Resource::Reservations => "OverlappingRangeIPReservation",
        }
    }
    fn list_kind(self) -> &'static str {
        match self {
            Resource::Pods => "PodList",
            Resource::ConfigMaps => "ConfigMapList",
            Resource::Nads => "NetworkAttachmentDefinitionList",
            Resource::Claims => "ResourceClaimList",
            Resource::Slices => "ResourceSliceList",
            Resource::IpBlocks => "IPBlockList",
            Resource::Leases => "LeaseList",
            Resource::Nodes => "NodeList",
            Resource::FixedAddresses => "FixedAddressList",
            Resource::AddressPools => "AddressPoolList",
            Resource::StatefulSets => "StatefulSetList",
            Resource::IpamClaims => "IPAMClaimList",
            Resource::IpPools => "IPPoolList",
            Resource::Reservations => "OverlappingRangeIPReservationList",
        }
    }
    pub fn api_version(self) -> &'static str {
        match self {
            Resource::Nads => "k8s.cni.cncf.io/v1",
            Resource::Claims | Resource::Slices => "resource.k8s.io/v1",
            Resource::IpBlocks | Resource::FixedAddresses | Resource::AddressPools => "ipam.yh-genie.io/v1alpha1",
            Resource::StatefulSets => "apps/v1",
            Resource::IpamClaims => "k8s.cni.cncf.io/v1alpha1",
            Resource::Leases => "coordination.k8s.io/v1",
            Resource::IpPools | Resource::Reservations => "whereabouts.cni.cncf.io/v1alpha1",
            _ => "v1",
        }
    }
}

/// One change, as a watch sends it.
#[derive(Debug)]
pub struct Change {
    pub revision: u64,
    pub resource: Resource,
    pub namespace: String,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    pub object: Value,
}

/// A field selector: `a.b=value` terms, all of which must hold.
#[derive(Debug, Clone, Default)]
pub struct Selector(Vec<(String, String)>);

impl Selector {
    /// Parse `spec.nodeName=n1,metadata.name=x` (`=` or `==`); the fields the API server supports
    /// for pods, ConfigMaps and NADs that the agent uses.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in text.split(',').filter(|t| !t.is_empty()) {
            let (field, value) =
                term.split_once("==").or_else(|| term.split_once('=')).ok_or(format!("bad term {term:?}"))?;
            if !["metadata.name", "metadata.namespace", "spec.nodeName"].contains(&field) {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((format!("/{}", field.replace('.', "/")), value.to_string()));
        }
        Ok(Selector(terms))
    }
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(pointer, value)| object.pointer(pointer).and_then(Value::as_str).unwrap_or("") == value)
    }
}

pub struct Store {
    objects: BTreeMap<(Resource, String, String), Value>,
    revision: u64,
    history: VecDeque<Arc<Change>>,
    /// Watches from a revision below this one get 410 Gone.
    compacted: u64,
    pub changes: broadcast::Sender<Arc<Change>>,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            objects: BTreeMap::new(),
            revision: 1,
            history: VecDeque::new(),
            compacted: 0,
            changes: broadcast::channel(4096).0,
        }
    }
}

impl Store {
    pub fn get(&self, resource: Resource, namespace: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(resource, namespace.to_string(), name.to_string()))
    }

    /// Store `object` (its resourceVersion set to the new revision); returns it as stored.
    pub fn put(&mut self, resource: Resource, namespace: &str, name: &str, mut object: Value) -> Value {
        self.revision += 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), self.revision.to_string().into());
        }
        let key = (resource, namespace.to_string(), name.to_string());
        let kind = if self.objects.insert(key, object.clone()).is_some() { "MODIFIED" } else { "ADDED" };
        self.record(resource, namespace, kind, object.clone());
        object
    }

    pub fn remove(&mut self, resource: Resource, namespace: &str, name: &str) -> Option<Value> {
        let mut object = self.objects.remove(&(resource, namespace.to_string(), name.to_string()))?;
        self.revision += 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), self.revision.to_string().into());
        }
        self.record(resource, namespace, "DELETED", object.clone());
        Some(object)
    }

    fn record(&mut self, resource: Resource, namespace: &str, kind: &'static str, object: Value) {
        let change = Arc::new(Change { revision: self.revision, resource, namespace: namespace.into(), kind, object });
        self.history.push_back(change.clone());
        if self.history.len() > HISTORY {
            let dropped = self.history.pop_front().expect("not empty");
            self.compacted = dropped.revision;
        }
        let _ = self.changes.send(change);
    }

    /// Forget the history: watches from any revision until now get 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.revision;
    }

    /// The revision of the last change.
    pub fn current_revision(&self) -> u64 {
        self.revision
    }

    /// The list answer: the current revision and the matching objects.
    pub fn list(&self, resource: Resource, namespace: Option<&str>, selector: &Selector) -> Value {
        let items: Vec<&Value> = self
            .objects
            .iter()
            .filter(|((r, ns, _), object)| {
                *r == resource && namespace.is_none_or(|n| n == ns) && selector.matches(object)
            })
            .map(|(_, object)| object)
            .collect();
        json!({"kind": resource.list_kind(), "apiVersion": resource.api_version(),
               "metadata": {"resourceVersion": self.revision.to_string()}, "items": items})
    }

    /// The matching changes after `revision`, or `Err(compacted)` when they are not all kept.
    /// Revision 0: the current objects, as ADDED.
    pub fn since(
        &self,
        resource: Resource,
        namespace: Option<&str>,
        selector: &Selector,
        revision: u64,
    ) -> Result<Vec<Arc<Change>>, u64> {
        let wanted = |c: &Change| {
            c.resource == resource && namespace.is_none_or(|n| n == c.namespace) && selector.matches(&c.object)
        };
        if revision == 0 {
            let current = self.objects.iter().filter(|((r, ns, _), object)| {
                *r == resource && namespace.is_none_or(|n| n == ns) && selector.matches(object)
            });
            return Ok(current
                .map(|((r, ns, _), object)| {
                    let revision = object.pointer("/metadata/resourceVersion").and_then(Value::as_str);
                    Arc::new(Change {
                        revision: revision.and_then(|r| r.parse().ok()).unwrap_or(self.revision),
                        resource: *r,
                        namespace: ns.clone(),
                        kind: "ADDED",
                        object: object.clone(),
                    })
                })
                .collect());
        }
        if revision < self.compacted {
            return Err(self.compacted);
        }
        Ok(self.history.iter().filter(|c| c.revision > revision && wanted(c)).cloned().collect())
    }
}
