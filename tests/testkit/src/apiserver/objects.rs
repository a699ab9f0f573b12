//! The test's hand on the server's objects: pods (with the containers that choose their networks),
//! ConfigMaps and NetworkAttachmentDefinitions put in, changed and removed as a cluster would change
//! them; and what the clients wrote: the pod patches applied and the Events created.

use super::store::{Resource, Store};
use super::{ApiServer, NODE_NAME};
use serde_json::{Value, json};
use std::sync::Mutex;

/// The container environment variable through which a pod chooses its network.
pub const ENV_VAR: &str = "CNI_NETWORK_CONFIG";

/// A pod's containers (as in a manifest) of which one takes `CNI_NETWORK_CONFIG` from ConfigMap
/// `name`, key `key`.
pub fn from_config_map(name: &str, key: &str) -> Value {
    json!([{"name": "app", "image": "nginx", "env": [
        {"name": ENV_VAR, "valueFrom": {"configMapKeyRef": {"name": name, "key": key}}}]}])
}

/// A pod's containers (as in a manifest) of which one sets `CNI_NETWORK_CONFIG` to `value`.
pub fn literal(value: &str) -> Value {
    json!([{"name": "app", "image": "nginx", "env": [{"name": "OTHER", "value": "1"}, {"name": ENV_VAR, "value": value}]}])
}

#[derive(Default)]
pub(super) struct Objects {
    pub store: Mutex<Store>,
    /// Pod patches applied: (namespace, name, body).
    pub patches: Mutex<Vec<(String, String, Value)>>,
    /// Events created, as posted (with their generated names).
    pub events: Mutex<Vec<Value>>,
}

impl ApiServer {
    /// Put a pod whose spec has these `containers` (JSON as in a manifest). Returns its uid.
    pub fn put_pod(&self, namespace: &str, name: &str, containers: Value) -> String {
        self.put_pod_spec(namespace, name, json!({ "containers": containers }))
    }

    /// Put a pod with a whole `spec`. Returns its uid.
    pub fn put_pod_spec(&self, namespace: &str, name: &str, spec: Value) -> String {
        self.put_pod_with(namespace, name, json!({}), spec)
    }

    /// Put a pod with these `annotations` and `containers`. Returns its uid.
    pub fn put_annotated_pod(&self, namespace: &str, name: &str, annotations: Value, containers: Value) -> String {
        self.put_pod_with(namespace, name, annotations, json!({ "containers": containers }))
    }

    fn put_pod_with(&self, namespace: &str, name: &str, annotations: Value, mut spec: Value) -> String {
        let uid = format!("uid-{namespace}-{name}");
        if spec.get("nodeName").is_none() {
            spec["nodeName"] = NODE_NAME.into();
        }
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "uid": uid, "annotations": annotations},
            "spec": spec,
        });
        self.put(Resource::Pods, namespace, name, pod);
        uid
    }

    /// Put an object as the API server would return it for a pod, even if it is not a valid pod.
    pub fn put_raw_pod(&self, namespace: &str, name: &str, object: Value) {
        self.put(Resource::Pods, namespace, name, object);
    }

    /// Delete a pod and create it again under its name with `uid`, as a StatefulSet does: watches
    /// see it deleted, then added.
    pub fn recreate_pod(&self, namespace: &str, name: &str, uid: &str) {
        self.recreate(namespace, name, uid, None);
    }

    /// Delete a pod and create it again under its name with `uid` and these `containers`.
    pub fn recreate_pod_choosing(&self, namespace: &str, name: &str, uid: &str, containers: Value) {
        self.recreate(namespace, name, uid, Some(containers));
    }

    fn recreate(&self, namespace: &str, name: &str, uid: &str, containers: Option<Value>) {
        let mut store = self.state.objects.store.lock().unwrap();
        let mut pod = store.remove(Resource::Pods, namespace, name).expect("the pod exists");
        pod["metadata"]["uid"] = uid.into();
        if let Some(containers) = containers {
            pod["spec"]["containers"] = containers;
        }
        store.put(Resource::Pods, namespace, name, pod);
    }

    /// The pod as the server holds it now (patches applied).
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.state.objects.store.lock().unwrap().get(Resource::Pods, namespace, name).cloned()
    }

    pub fn remove_pod(&self, namespace: &str, name: &str) {
        self.state.objects.store.lock().unwrap().remove(Resource::Pods, namespace, name);
    }

    pub fn put_config_map(&self, namespace: &str, name: &str, data: Value) {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": namespace, "name": name},
            "data": data,
        });
        self.put(Resource::ConfigMaps, namespace, name, cm);
    }

    /// Put a NetworkAttachmentDefinition of a device network: no `spec.config`, and the
    /// `k8s.v1.cni.cncf.io/resourceName` annotation naming `resource`.
    pub fn put_device_nad(&self, namespace: &str, name: &str, resource: &str) {
        let nad = json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"namespace": namespace, "name": name,
                         "annotations": {"k8s.v1.cni.cncf.io/resourceName": resource}},
            "spec": {},
        });
        self.put(Resource::Nads, namespace, name, nad);
    }

    /// Put a DRA ResourceClaim (`object` as the API server serves it, kind and apiVersion added).
    pub fn put_resource_claim(&self, namespace: &str, name: &str, mut object: Value) {
        object["apiVersion"] = "resource.k8s.io/v1".into();
        object["kind"] = "ResourceClaim".into();
        self.put(Resource::Claims, namespace, name, object);
    }

    /// Put a DRA ResourceSlice (cluster-scoped; `object` as the API server serves it).
    pub fn put_resource_slice(&self, name: &str, mut object: Value) {
        object["apiVersion"] = "resource.k8s.io/v1".into();
        object["kind"] = "ResourceSlice".into();
        self.put(Resource::Slices, "", name, object);
    }

    /// Put a NetworkAttachmentDefinition; `config` is its `spec.config` (none: no config).
    pub fn put_nad(&self, namespace: &str, name: &str, config: Option<&str>) {
        let nad = json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"namespace": namespace, "name": name},
            "spec": config.map(|c| json!({"config": c})).unwrap_or(json!({})),
        });
        self.put(Resource::Nads, namespace, name, nad);
    }

    /// Put an `IPBlock`, as another node's agent would have claimed it.
    pub fn put_ip_block(&self, name: &str, spec: Value) {
        let uid = format!("uid-ipblocks-{name}-put");
        let block = json!({"apiVersion": "ipam.yh-genie.io/v1alpha1", "kind": "IPBlock",
                           "metadata": {"name": name, "uid": uid}, "spec": spec});
        self.put(Resource::IpBlocks, "", name, block);
    }

    /// Put (or replace) the `AddressPool` `name`, as the admin would apply it.
    pub fn put_address_pool(&self, name: &str, spec: Value) {
        let pool = json!({"apiVersion": "ipam.yh-genie.io/v1alpha1", "kind": "AddressPool",
                          "metadata": {"name": name, "uid": format!("uid-addresspools-{name}")}, "spec": spec});
        self.put(Resource::AddressPools, "", name, pool);
    }

    /// Delete the `AddressPool` `name`.
    pub fn remove_address_pool(&self, name: &str) {
        self.state.objects.store.lock().unwrap().remove(Resource::AddressPools, "", name);
    }

    /// Put a Node named `name` with these `taints` (as in its spec).
    pub fn put_node(&self, name: &str, taints: Value) {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": format!("uid-node-{name}")},
                          "spec": {"taints": taints}});
        self.put(Resource::Nodes, "", name, node);
    }

    /// Delete the Node `name`.
    pub fn remove_node(&self, name: &str) {
        self.state.objects.store.lock().unwrap().remove(Resource::Nodes, "", name);
    }

    /// Put the `Lease` `namespace/name` held by `holder` for `duration_seconds`, last renewed
    /// `renewed_ago` before now (as the node agent writes it).
    pub fn put_lease(
        &self,
        namespace: &str,
        name: &str,
        holder: &str,
        duration_seconds: u32,
        renewed_ago: std::time::Duration,
    ) {
        let renewed = micro_time(std::time::SystemTime::now() - renewed_ago);
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-lease-{name}")},
                           "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration_seconds,
                                    "acquireTime": renewed, "renewTime": renewed}});
        self.put(Resource::Leases, namespace, name, lease);
    }

    /// The `IPBlock` `name`, whole, as last written.
    pub fn ip_block(&self, name: &str) -> Option<Value> {
        self.state.objects.store.lock().unwrap().get(Resource::IpBlocks, "", name).cloned()
    }

    /// Delete the `IPBlock` `name`, as the dead-node releaser does.
    pub fn remove_ip_block(&self, name: &str) {
        self.state.objects.store.lock().unwrap().remove(Resource::IpBlocks, "", name);
    }

    /// The `IPBlock`s, by name.
    pub fn ip_blocks(&self) -> std::collections::BTreeMap<String, Value> {
        let list = self.state.objects.store.lock().unwrap().list(Resource::IpBlocks, None, &Default::default());
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["metadata"]["name"].as_str().unwrap().to_string(), b["spec"].clone()))
            .collect()
    }

    /// Put the StatefulSet `namespace/name` of `uid` with `replicas`, as its controller would hold it.
    pub fn put_stateful_set(&self, namespace: &str, name: &str, uid: &str, replicas: u32) {
        let set = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                         "metadata": {"namespace": namespace, "name": name, "uid": uid},
                         "spec": {"replicas": replicas, "selector": {}, "template": {}, "serviceName": name}});
        self.put(Resource::StatefulSets, namespace, name, set);
    }

    /// Delete the StatefulSet `namespace/name`.
    pub fn remove_stateful_set(&self, namespace: &str, name: &str) {
        self.state.objects.store.lock().unwrap().remove(Resource::StatefulSets, namespace, name);
    }

    /// Put pod `namespace/name` of StatefulSet `set` (`set_uid`) with `uid`, on `node`, its
    /// ordinal in the `apps.kubernetes.io/pod-index` label, its `containers` choosing its network.
    pub fn put_stateful_set_pod(
        &self,
        (namespace, name, uid): (&str, &str, &str),
        (set, set_uid, ordinal): (&str, &str, u32),
        node: &str,
        containers: Value,
    ) {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "uid": uid,
                         "labels": {"apps.kubernetes.io/pod-index": ordinal.to_string()},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": set,
                                              "uid": set_uid, "controller": true}]},
            "spec": {"nodeName": node, "containers": containers},
        });
        self.put(Resource::Pods, namespace, name, pod);
    }

    /// Put the IPAMClaim `namespace/name` of `uid` (as KubeVirt creates one for a VM's interface).
    pub fn put_ipam_claim(&self, namespace: &str, name: &str, uid: &str) {
        let claim = json!({"apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
                           "metadata": {"namespace": namespace, "name": name, "uid": uid},
                           "spec": {"network": "lan", "interface": "net1"}});
        self.put(Resource::IpamClaims, namespace, name, claim);
    }

    /// The IPAMClaim `namespace/name`, as last written.
    pub fn ipam_claim(&self, namespace: &str, name: &str) -> Option<Value> {
        self.state.objects.store.lock().unwrap().get(Resource::IpamClaims, namespace, name).cloned()
    }

    /// Delete the IPAMClaim `namespace/name`.
    pub fn remove_ipam_claim(&self, namespace: &str, name: &str) {
        self.state.objects.store.lock().unwrap().remove(Resource::IpamClaims, namespace, name);
    }

    /// Put whereabouts' `IPPool` `namespace/name` over `range` with these `allocations` (offset
    /// from the range's first address to `{"id", "podref", "ifname"}`).
    pub fn put_ip_pool(&self, namespace: &str, name: &str, range: &str, allocations: Value) {
        let pool = json!({"apiVersion": "whereabouts.cni.cncf.io/v1alpha1", "kind": "IPPool",
                          "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-ippool-{name}")},
                          "spec": {"range": range, "allocations": allocations}});
        self.put(Resource::IpPools, namespace, name, pool);
    }

    /// Put whereabouts' `OverlappingRangeIPReservation` of `address` (its name) held by `podref`'s
    /// sandbox `container_id` on `ifname`.
    pub fn put_ip_reservation(&self, namespace: &str, address: &str, container_id: &str, podref: &str, ifname: &str) {
        let name = address.replace(':', "-");
        let reservation = json!({"apiVersion": "whereabouts.cni.cncf.io/v1alpha1",
                                 "kind": "OverlappingRangeIPReservation",
                                 "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-orir-{name}")},
                                 "spec": {"containerid": container_id, "podref": podref, "ifname": ifname}});
        self.put(Resource::Reservations, namespace, &name, reservation);
    }

    /// The `FixedAddress`es, by name, whole.
    pub fn fixed_addresses(&self) -> std::collections::BTreeMap<String, Value> {
        let list = self.state.objects.store.lock().unwrap().list(Resource::FixedAddresses, None, &Default::default());
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["metadata"]["name"].as_str().unwrap().to_string(), b.clone()))
            .collect()
    }

    /// The `Lease` `namespace/name`, as last written.
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Value> {
        self.state.objects.store.lock().unwrap().get(Resource::Leases, namespace, name).cloned()
    }

    fn put(&self, resource: Resource, namespace: &str, name: &str, object: Value) {
        self.state.objects.store.lock().unwrap().put(resource, namespace, name, object);
    }

    /// The pod patches applied so far: (namespace, name, body).
    pub fn patches(&self) -> Vec<(String, String, Value)> {
        self.state.objects.patches.lock().unwrap().clone()
    }

    /// The Events created so far, as posted.
    pub fn events(&self) -> Vec<Value> {
        self.state.objects.events.lock().unwrap().clone()
    }
}

/// `at` as a Kubernetes `MicroTime`: `2026-01-02T03:04:05.000006Z` (UTC).
fn micro_time(at: std::time::SystemTime) -> String {
    let at = jiff::Timestamp::try_from(at).expect("a time a test makes is in jiff's range");
    at.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn micro_time_is_kubernetes_format_in_utc() {
        let at = UNIX_EPOCH + Duration::from_secs(1_767_323_045) + Duration::from_micros(6);
        assert_eq!(super::micro_time(at), "2026-01-02T03:04:05.000006Z");
    }
}
