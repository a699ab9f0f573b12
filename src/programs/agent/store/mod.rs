//! What the agent holds: every pod of its node, trimmed to what selection reads
//! (`agent_face::trim_pod`), and the ConfigMaps and NetworkAttachmentDefinitions those pods refer to
//! (`agent_face::references`, under the namespace policy and the admin's `defaultNetworks`), each
//! counted by the pods that use it. The store decides which watches run (`Watches`) and answers
//! lookups; it does no I/O, so the watches and the socket server around it are thin.
//!
//! Each kind of object is watched as it costs least:
//! - **A ConfigMap, by name** (`WatchKey::Object`): started when the first pod refers to it,
//!   stopped when the last goes, as the kubelet watches the ConfigMaps its pods mount. A namespace
//!   may hold thousands of ConfigMaps of up to 1 MiB each (application configuration, Helm
//!   releases, leader elections) that have nothing to do with networks: watching a whole namespace
//!   would send every agent with a pod there every change of them.
//! - **A namespace's NetworkAttachmentDefinitions, all of them** (`WatchKey::Attachments`): from
//!   the first pod that uses one of them to the last. A namespace holds a few small NADs (a CNI
//!   configuration each) that change rarely; one watch per namespace (Multus watches every
//!   namespace's) costs the API server one request at start where a watch per NAD costs one per
//!   NAD, and a NAD a new pod names is known at once.
//! - **A DRA ResourceClaim, by name** (`WatchKey::Object` with `Kind::ResourceClaim`), as a
//!   ConfigMap: a claim has no node field to select on, and a namespace holds the claims of all its
//!   pods on every node (one per pod made from a template, each written as it is allocated and
//!   reserved), so a watch of a namespace's claims would send every agent the changes of the other
//!   nodes' claims; a pod has few claims, and their watches are streams on the agent's one
//!   connection like the rest.
//! - **The node's ResourceSlices** (`WatchKey::NodeDevices`, field selector `spec.nodeName`): from
//!   the first pod with resource claims to the last, so a cluster without DRA (or before 1.34,
//!   which does not serve resource.k8s.io/v1) is never asked. Only the two attributes the plugin
//!   reads are kept of each device.

use crate::node::agent_socket::protocol::{Held, PodObjects, PublishedDevice};
use crate::platform::kube::fixed_address::FixedOwner;
use crate::platform::kube::{Kind, NetworkAttachmentDefinition, ObjectKey};
use crate::programs::selector::agent_face::{
    self, AttachmentPolicy, NETWORK_STATUS, PodDefaults, is_sandbox_pod, references, trim_attachment, trim_pod,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use std::collections::{HashMap, VecDeque};
use std::fmt;

/// How many uids of deleted pods are remembered, so that an ADD for a pod already deleted is told
/// "unknown" at once instead of waiting for a pod that will not come.
const REMEMBERED_DELETIONS: usize = 1024;

/// A ConfigMap or a ResourceClaim as its watch found it.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectState {
    /// Its watch has not listed it yet.
    Pending,
    /// Listed: it does not exist.
    Absent,
    ConfigMap(Box<ConfigMap>),
    ResourceClaim(Box<ResourceClaim>),
}

/// One watch the store needs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WatchKey {
    /// One object by name: a ConfigMap or a ResourceClaim (its key's kind).
    Object(ObjectKey),
    /// Every NetworkAttachmentDefinition of a namespace.
    Attachments(String),
    /// The ResourceSlices of the agent's node.
    NodeDevices,
}

impl WatchKey {
    pub fn kind(&self) -> Kind {
        match self {
            WatchKey::Object(key) => key.kind,
            WatchKey::Attachments(_) => Kind::NetworkAttachmentDefinition,
            WatchKey::NodeDevices => Kind::ResourceSlice,
        }
    }
}

impl fmt::Display for WatchKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchKey::Object(key) => key.fmt(f),
            WatchKey::Attachments(namespace) => write!(f, "the NetworkAttachmentDefinitions of namespace {namespace}"),
            WatchKey::NodeDevices => f.write_str("the node's ResourceSlices"),
        }
    }
}

/// The watches to start and stop after a change.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Watches {
    pub start: Vec<WatchKey>,
    pub stop: Vec<WatchKey>,
}

impl Watches {
    fn merge(&mut self, other: Watches) {
        // A key stopped by one change and started by the next is both: the store forgot what it
        // watched when its last user went, so its watch must list again (stops go first).
        self.start.extend(other.start);
        // A key started by one change and stopped by the next never needed a watch.
        for key in other.stop {
            match self.start.iter().position(|k| *k == key) {
                Some(i) => drop(self.start.remove(i)),
                None => self.stop.push(key),
            }
        }
    }
}

/// Why a lookup has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// The node's pods have not been listed yet.
    NotListed,
    /// No pod of that name on this node (yet).
    NotSeen,
    /// The agent holds another pod under that name (uid `held`).
    OtherUid { held: String },
    /// The pod with that uid has been deleted.
    Deleted,
    /// An object the pod refers to has not been listed by its watch yet.
    ObjectPending(ObjectKey),
    /// The pod has resource claims, and the node's ResourceSlices have not been listed yet.
    SlicesPending,
    /// What the pod needs has not been listed, and the watch that would deliver it fails.
    WatchFailing { watch: String, error: String },
}

impl Miss {
    /// The metrics label.
    pub fn label(&self) -> &'static str {
        match self {
            Miss::NotListed => "not_listed",
            Miss::NotSeen => "pod_not_seen",
            Miss::OtherUid { .. } => "other_uid",
            Miss::Deleted => "uid_deleted",
            Miss::ObjectPending(_) | Miss::SlicesPending => "object_not_listed",
            Miss::WatchFailing { .. } => "watch_failing",
        }
    }
    pub const LABELS: [&'static str; 6] =
        ["not_listed", "pod_not_seen", "other_uid", "uid_deleted", "object_not_listed", "watch_failing"];
}

impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Miss::NotListed => f.write_str("the agent has not listed its node's pods yet"),
            Miss::NotSeen => f.write_str("no such pod on this node's watch"),
            Miss::OtherUid { held } => write!(f, "the agent holds another pod of that name (uid {held})"),
            Miss::Deleted => f.write_str("that pod (uid) has been deleted"),
            Miss::ObjectPending(key) => write!(f, "{key} has not been listed yet"),
            Miss::SlicesPending => f.write_str("the node's ResourceSlices have not been listed yet"),
            Miss::WatchFailing { watch, error, .. } => write!(f, "{watch} fails ({error})"),
        }
    }
}

pub enum Lookup {
    Found(Box<PodObjects>),
    /// Not now; waiting for the watches may help.
    NotYet(Miss),
    /// Never: waiting cannot help.
    Gone(Miss),
}

struct HeldPod {
    pod: Pod,
    refs: Vec<ObjectKey>,
    /// Its `k8s.v1.cni.cncf.io/network-status` (trimmed from `pod`: the selector never reads it),
    /// which dynamic networks compare with the records before writing it.
    network_status: Option<String>,
}

/// A ConfigMap or a ResourceClaim.
struct HeldObject {
    /// Pods referring to it.
    users: usize,
    state: ObjectState,
}

/// A namespace whose NetworkAttachmentDefinitions are watched.
#[derive(Default)]
struct HeldNamespace {
    /// References of pods to its NADs (a pod naming two of them counts twice).
    users: usize,
    /// Whether its watch has listed it.
    listed: bool,
    /// Every NAD of the namespace, trimmed, by name.
    attachments: HashMap<String, NetworkAttachmentDefinition>,
}

/// The node's ResourceSlices, while a pod with resource claims is on it.
#[derive(Default)]
struct HeldSlices {
    /// Pods with resource claims.
    users: usize,
    listed: bool,
    /// Every slice of the node, trimmed to the devices' CNI attributes, by name.
    slices: HashMap<String, ResourceSlice>,
}

pub struct Store {
    policy: AttachmentPolicy,
    defaults: PodDefaults,
    pods: HashMap<(String, String), HeldPod>,
    /// The ConfigMaps and ResourceClaims the pods refer to.
    objects: HashMap<ObjectKey, HeldObject>,
    namespaces: HashMap<String, HeldNamespace>,
    slices: HeldSlices,
    deleted: VecDeque<String>,
    listed: bool,
    /// The StatefulSet ordinal each pod held is, by uid (`yh-ipam`'s fixed addresses), read from
    /// the pod before it is trimmed.
    members: HashMap<String, FixedOwner>,
}

impl Store {
    #[cfg(test)]
    pub fn new(policy: AttachmentPolicy) -> Self {
        Self::with_rules(policy, PodDefaults::default())
    }

    pub fn with_rules(policy: AttachmentPolicy, defaults: PodDefaults) -> Self {
        Store {
            policy,
            defaults,
            pods: HashMap::new(),
            objects: HashMap::new(),
            namespaces: HashMap::new(),
            slices: HeldSlices::default(),
            deleted: VecDeque::new(),
            listed: false,
            members: HashMap::new(),
        }
    }

    /// Whether the node's pods have been listed once (the agent's readiness).
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// Whether a pod of the node is the sandbox's of this uid (a static pod's: its mirror).
    pub fn holds_uid(&self, uid: &str) -> bool {
        self.pods.values().any(|held| is_sandbox_pod(&held.pod, uid))
    }

    /// The StatefulSet ordinal pod `uid` is, if the store holds it and it is one.
    pub fn statefulset_member(&self, uid: &str) -> Option<FixedOwner> {
        self.members.get(uid).cloned()
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Objects of `kind` held: ConfigMaps and ResourceClaims referred to (listed or not yet), the
    /// NADs of the watched namespaces, the node's ResourceSlices.
    pub fn object_count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Pod => self.pods.len(),
            Kind::ConfigMap | Kind::ResourceClaim => self.objects.keys().filter(|k| k.kind == kind).count(),
            Kind::NetworkAttachmentDefinition => self.namespaces.values().map(|n| n.attachments.len()).sum(),
            Kind::ResourceSlice => self.slices.slices.len(),
        }
    }

    /// A pod was added or changed.
    pub fn apply(&mut self, pod: &Pod) -> Watches {
        let Some(key) = pod_key(pod) else { return Watches::default() };
        let network_status = pod.metadata.annotations.as_ref().and_then(|a| a.get(NETWORK_STATUS)).cloned();
        if let (Some(uid), Some(member)) = (pod.metadata.uid.clone(), FixedOwner::of(pod)) {
            self.members.insert(uid, member);
        }
        let pod = trim_pod(pod);
        let mut refs = references(&self.policy, &self.defaults, &key.0, &pod);
        let claims = agent_face::claim_names(&pod);
        refs.extend(claims.iter().map(|claim| ObjectKey::new(Kind::ResourceClaim, &key.0, claim)));
        if !claims.is_empty() {
            refs.push(node_slices());
        }
        let mut watches = self.refer(&refs);
        if let Some(old) = self.pods.insert(key, HeldPod { pod, refs, network_status }) {
            watches.merge(self.release(&old.refs));
            self.replaced(old.pod);
        }
        watches
    }

    /// A pod was deleted. A delete of another uid than the one held (an old pod's late event)
    /// changes nothing.
    pub fn delete(&mut self, pod: &Pod) -> Watches {
        let Some(key) = pod_key(pod) else { return Watches::default() };
        let same = self
            .pods
            .get(&key)
            .is_some_and(|held| pod.metadata.uid.is_none() || held.pod.metadata.uid == pod.metadata.uid);
        if !same {
            self.remember_deleted(pod.metadata.uid.clone());
            return Watches::default();
        }
        let held = self.pods.remove(&key).expect("checked above");
        self.forget_member(&held.pod);
        self.remember_deleted(held.pod.metadata.uid);
        self.release(&held.refs)
    }

    /// The StatefulSet ordinals of pods listed (whose trimmed copies `replace_all` took), by uid.
    pub fn add_members(&mut self, members: Vec<(String, FixedOwner)>) {
        let held: Vec<(String, FixedOwner)> = members.into_iter().filter(|(uid, _)| self.holds_uid(uid)).collect();
        self.members.extend(held);
    }

    fn forget_member(&mut self, pod: &Pod) {
        if let Some(uid) = &pod.metadata.uid {
            self.members.remove(uid);
        }
    }

    /// The node's pods, listed anew: pods not in `pods` are gone.
    pub fn replace_all(&mut self, pods: Vec<Pod>) -> Watches {
        let listed: std::collections::HashSet<(String, String)> = pods.iter().filter_map(pod_key).collect();
        let gone: Vec<(String, String)> = self.pods.keys().filter(|k| !listed.contains(*k)).cloned().collect();
        let mut watches = Watches::default();
        for pod in &pods {
            watches.merge(self.apply(pod));
        }
        for key in gone {
            let held = self.pods.remove(&key).expect("listed from the map");
            self.forget_member(&held.pod);
            self.remember_deleted(held.pod.metadata.uid);
            watches.merge(self.release(&held.refs));
        }
        self.listed = true;
        watches
    }

    /// What a ConfigMap's or a ResourceClaim's watch found. Ignored for one no pod refers to any more.
    pub fn set_object(&mut self, key: &ObjectKey, state: ObjectState) {
        if let Some(held) = self.objects.get_mut(key) {
            held.state = state;
        }
    }

    /// The node's ResourceSlices, listed anew. Ignored when no pod needs them any more.
    pub fn replace_slices(&mut self, slices: Vec<ResourceSlice>) {
        if self.slices.users > 0 {
            self.slices.slices = slices.into_iter().filter_map(|s| Some((s.metadata.name.clone()?, s))).collect();
            self.slices.listed = true;
        }
    }

    /// A slice of the node was added or changed (`Some`), or deleted.
    pub fn apply_slice(&mut self, name: &str, slice: Option<ResourceSlice>) {
        if self.slices.users > 0 {
            match slice {
                Some(slice) => drop(self.slices.slices.insert(name.to_string(), slice)),
                None => drop(self.slices.slices.remove(name)),
            }
        }
    }

    /// The NADs of `namespace`, listed anew. Ignored for a namespace no longer watched.
    pub fn replace_attachments(&mut self, namespace: &str, attachments: Vec<NetworkAttachmentDefinition>) {
        if let Some(held) = self.namespaces.get_mut(namespace) {
            held.attachments = attachments
                .into_iter()
                .filter_map(|nad| Some((nad.metadata.name.clone()?, trim_attachment(nad))))
                .collect();
            held.listed = true;
        }
    }

    /// A NAD of a watched namespace was added or changed.
    pub fn apply_attachment(&mut self, nad: NetworkAttachmentDefinition) {
        let (Some(namespace), Some(name)) = (nad.metadata.namespace.as_deref(), nad.metadata.name.clone()) else {
            return;
        };
        if let Some(held) = self.namespaces.get_mut(namespace) {
            held.attachments.insert(name, trim_attachment(nad));
        }
    }

    /// A NAD of a watched namespace was deleted.
    pub fn delete_attachment(&mut self, nad: &NetworkAttachmentDefinition) {
        let (Some(namespace), Some(name)) = (nad.metadata.namespace.as_deref(), nad.metadata.name.as_deref()) else {
            return;
        };
        if let Some(held) = self.namespaces.get_mut(namespace) {
            held.attachments.remove(name);
        }
    }

    /// A new namespace policy: which NADs the pods may use, so which are watched.
    #[cfg(test)]
    pub fn set_policy(&mut self, policy: AttachmentPolicy) -> Watches {
        let defaults = self.defaults.clone();
        self.set_rules(policy, defaults)
    }

    /// A new namespace policy and `defaultNetworks`/`systemNamespaces`: which NADs are watched.
    pub fn set_rules(&mut self, policy: AttachmentPolicy, defaults: PodDefaults) -> Watches {
        if policy == self.policy && defaults == self.defaults {
            return Watches::default();
        }
        self.policy = policy;
        self.defaults = defaults;
        let pods: Vec<Pod> = self.pods.values().map(|held| held.pod.clone()).collect();
        let mut watches = Watches::default();
        for pod in &pods {
            watches.merge(self.apply(pod));
        }
        watches
    }

    /// The network-status and the resourceVersion of the pod `namespace/name` held, if it is `uid`.
    pub fn network_status_and_version(&self, namespace: &str, name: &str, uid: &str) -> Option<(Option<&str>, String)> {
        let held = self.pods.get(&(namespace.to_string(), name.to_string()))?;
        let metadata = &held.pod.metadata;
        if metadata.uid.as_deref() != Some(uid) {
            return None;
        }
        Some((held.network_status.as_deref(), metadata.resource_version.clone()?))
    }

    /// The pod `namespace/name` and its objects, if held for `uid` (any uid when `None`).
    pub fn lookup(&self, namespace: &str, name: &str, uid: Option<&str>) -> Lookup {
        let Some(held) = self.pods.get(&(namespace.to_string(), name.to_string())) else {
            if uid.is_some_and(|uid| self.deleted.iter().any(|d| d == uid)) {
                return Lookup::Gone(Miss::Deleted);
            }
            return Lookup::NotYet(if self.listed { Miss::NotSeen } else { Miss::NotListed });
        };
        let held_uid = held.pod.metadata.uid.as_deref().unwrap_or_default();
        // A static pod's sandbox has the kubelet's uid, which its mirror pod carries.
        if let Some(uid) = uid
            && !is_sandbox_pod(&held.pod, uid)
        {
            let miss = Miss::OtherUid { held: held_uid.to_string() };
            return if self.deleted.iter().any(|d| d == uid) {
                Lookup::Gone(Miss::Deleted)
            } else {
                Lookup::NotYet(miss)
            };
        }
        let mut answer = PodObjects {
            pod: held.pod.clone(),
            config_maps: Vec::new(),
            network_attachments: Vec::new(),
            resource_claims: Vec::new(),
            node_devices: None,
        };
        for key in &held.refs {
            let pending = Lookup::NotYet(Miss::ObjectPending(key.clone()));
            match key.kind {
                Kind::ResourceSlice if !self.slices.listed => return Lookup::NotYet(Miss::SlicesPending),
                Kind::ConfigMap | Kind::ResourceClaim => match self.objects.get(key).map(|o| &o.state) {
                    None | Some(ObjectState::Pending) => return pending,
                    Some(ObjectState::Absent) if key.kind == Kind::ResourceClaim => {
                        answer.resource_claims.push(held_object(key, None))
                    }
                    Some(ObjectState::Absent) => answer.config_maps.push(held_object(key, None)),
                    Some(ObjectState::ConfigMap(cm)) => answer.config_maps.push(held_object(key, Some((**cm).clone()))),
                    Some(ObjectState::ResourceClaim(claim)) => {
                        answer.resource_claims.push(held_object(key, Some((**claim).clone())))
                    }
                },
                Kind::NetworkAttachmentDefinition => match self.namespaces.get(&key.namespace) {
                    Some(namespace) if namespace.listed => {
                        answer.network_attachments.push(held_object(key, namespace.attachments.get(&key.name).cloned()))
                    }
                    _ => return pending,
                },
                Kind::Pod | Kind::ResourceSlice => {}
            }
        }
        if self.slices.listed && !answer.resource_claims.is_empty() {
            answer.node_devices = Some(self.node_devices_of(&answer.resource_claims));
        }
        Lookup::Found(Box::new(answer))
    }

    /// What the node's slices publish of the devices allocated to `claims`.
    fn node_devices_of(&self, claims: &[Held<ResourceClaim>]) -> Vec<PublishedDevice> {
        agent_face::published_devices(self.slices.slices.values(), claims)
    }

    /// Count one more user of each of `refs`; the watches that were not running yet start.
    fn refer(&mut self, refs: &[ObjectKey]) -> Watches {
        let mut watches = Watches::default();
        for key in refs {
            let users = match key.kind {
                Kind::ResourceSlice => {
                    self.slices.users += 1;
                    self.slices.users
                }
                Kind::ConfigMap | Kind::ResourceClaim => {
                    let held = self
                        .objects
                        .entry(key.clone())
                        .or_insert_with(|| HeldObject { users: 0, state: ObjectState::Pending });
                    held.users += 1;
                    held.users
                }
                Kind::NetworkAttachmentDefinition => {
                    let held = self.namespaces.entry(key.namespace.clone()).or_default();
                    held.users += 1;
                    held.users
                }
                Kind::Pod => continue,
            };
            if users == 1 {
                watches.start.push(watch_key(key));
            }
        }
        watches
    }

    /// Count one user less of each of `refs`; the watches nobody needs any more stop, and what they
    /// held is forgotten.
    fn release(&mut self, refs: &[ObjectKey]) -> Watches {
        let mut watches = Watches::default();
        for key in refs {
            let unused = match key.kind {
                Kind::ResourceSlice => {
                    self.slices.users -= 1;
                    let unused = self.slices.users == 0;
                    if unused {
                        self.slices = HeldSlices::default();
                    }
                    unused
                }
                Kind::ConfigMap | Kind::ResourceClaim => release_one(&mut self.objects, key, |held| &mut held.users),
                Kind::NetworkAttachmentDefinition => {
                    release_one(&mut self.namespaces, &key.namespace, |held| &mut held.users)
                }
                Kind::Pod => false,
            };
            if unused {
                watches.stop.push(watch_key(key));
            }
        }
        watches
    }

    /// The pod `old` was replaced under its name: if by another uid, the old one is gone.
    fn replaced(&mut self, old: Pod) {
        let key = pod_key(&old).expect("held pods have keys");
        if self.pods.get(&key).is_some_and(|now| now.pod.metadata.uid != old.metadata.uid) {
            self.forget_member(&old);
            self.remember_deleted(old.metadata.uid);
        }
    }

    fn remember_deleted(&mut self, uid: Option<String>) {
        let Some(uid) = uid else { return };
        if self.deleted.len() == REMEMBERED_DELETIONS {
            self.deleted.pop_front();
        }
        self.deleted.push_back(uid);
    }
}

/// The reference of a pod with resource claims to the node's ResourceSlices.
fn node_slices() -> ObjectKey {
    ObjectKey::new(Kind::ResourceSlice, "", "")
}

/// The watch that keeps `key` (a ConfigMap, a ResourceClaim, a NAD, the node's slices) current.
pub fn watch_key(key: &ObjectKey) -> WatchKey {
    match key.kind {
        Kind::NetworkAttachmentDefinition => WatchKey::Attachments(key.namespace.clone()),
        Kind::ResourceSlice => WatchKey::NodeDevices,
        _ => WatchKey::Object(key.clone()),
    }
}

/// One user less of `map[key]`; whether that was its last (it is then removed).
fn release_one<K, V>(map: &mut HashMap<K, V>, key: &K, users: impl Fn(&mut V) -> &mut usize) -> bool
where
    K: std::hash::Hash + Eq,
{
    let Some(held) = map.get_mut(key) else { return false };
    let count = users(held);
    *count -= 1;
    if *count > 0 {
        return false;
    }
    map.remove(key);
    true
}

fn held_object<T>(key: &ObjectKey, object: Option<T>) -> Held<T> {
    Held { namespace: key.namespace.clone(), name: key.name.clone(), object }
}

fn pod_key(pod: &Pod) -> Option<(String, String)> {
    Some((pod.metadata.namespace.clone()?, pod.metadata.name.clone()?))
}

#[cfg(test)]
mod tests;
