use super::*;
use crate::programs::selector::agent_face::{NETWORKS, trim_claim, trim_config_map, trim_slice};
use serde_json::json;
use std::collections::BTreeMap;

fn pod(name: &str, uid: &str, cm: &str, networks: Option<&str>) -> Pod {
    let annotations = networks.map(|n| json!({NETWORKS: n})).unwrap_or(json!({}));
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name, "uid": uid, "annotations": annotations,
                     "managedFields": [{"manager": "kubelet"}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "nginx", "env": [
            {"name": "CNI_NETWORK_CONFIG", "valueFrom": {"configMapKeyRef": {"name": cm, "key": "k"}}}]}]},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

fn cm_key(name: &str) -> ObjectKey {
    ObjectKey::new(Kind::ConfigMap, "default", name)
}

fn nad_key(namespace: &str, name: &str) -> ObjectKey {
    ObjectKey::new(Kind::NetworkAttachmentDefinition, namespace, name)
}

fn config_map(name: &str, value: &str) -> ObjectState {
    ObjectState::ConfigMap(Box::new(
        serde_json::from_value(json!({"metadata": {"namespace": "default", "name": name}, "data": {"k": value}}))
            .unwrap(),
    ))
}

fn found(store: &Store, name: &str, uid: Option<&str>) -> PodObjects {
    match store.lookup("default", name, uid) {
        Lookup::Found(objects) => *objects,
        Lookup::NotYet(miss) | Lookup::Gone(miss) => panic!("{name}: not found: {miss}"),
    }
}

fn miss(store: &Store, name: &str, uid: Option<&str>) -> (bool, Miss) {
    match store.lookup("default", name, uid) {
        Lookup::Found(_) => panic!("{name}: found"),
        Lookup::NotYet(miss) => (false, miss),
        Lookup::Gone(miss) => (true, miss),
    }
}

fn cm_watch(name: &str) -> WatchKey {
    WatchKey::Object(cm_key(name))
}

fn nads_watch(namespace: &str) -> WatchKey {
    WatchKey::Attachments(namespace.to_string())
}

fn nad(namespace: &str, name: &str, config: &str) -> NetworkAttachmentDefinition {
    serde_json::from_value(json!({
        "metadata": {"namespace": namespace, "name": name, "managedFields": [{"manager": "kubectl"}]},
        "spec": {"config": config}
    }))
    .unwrap()
}

fn started(keys: &[WatchKey]) -> Watches {
    Watches { start: keys.to_vec(), stop: vec![] }
}

fn stopped(keys: &[WatchKey]) -> Watches {
    Watches { start: vec![], stop: keys.to_vec() }
}

#[test]
fn a_referenced_configmap_or_namespace_of_nads_is_watched_from_first_user_to_last() {
    let mut store = Store::new(AttachmentPolicy::default());
    assert_eq!(miss(&store, "a", Some("ua")), (false, Miss::NotListed));
    assert_eq!(store.replace_all(vec![]), Watches::default());
    assert_eq!(miss(&store, "a", Some("ua")), (false, Miss::NotSeen));

    assert_eq!(store.apply(&pod("a", "ua", "nets", Some("lan"))), started(&[cm_watch("nets"), nads_watch("default")]));
    assert_eq!(miss(&store, "a", Some("ua")).1, Miss::ObjectPending(cm_key("nets")));
    store.set_object(&cm_key("nets"), config_map("nets", "blue"));
    assert_eq!(miss(&store, "a", Some("ua")).1, Miss::ObjectPending(nad_key("default", "lan")));
    // The namespace listed: `lan` is not there (absent), `wan` is.
    store.replace_attachments("default", vec![nad("default", "wan", "{}")]);
    let answer = found(&store, "a", Some("ua"));
    assert_eq!(answer.config_maps[0].object.as_ref().unwrap().data.as_ref().unwrap()["k"], "blue");
    assert_eq!((answer.network_attachments[0].name.as_str(), &answer.network_attachments[0].object), ("lan", &None));
    assert!(answer.pod.metadata.managed_fields.is_none() && answer.pod.status.is_none(), "held trimmed");

    // A second user of the ConfigMap, and of the namespace's NADs, starts nothing; a NAD of the
    // namespace that no pod named before is known at once.
    assert_eq!(store.apply(&pod("b", "ub", "nets", Some("wan"))), Watches::default());
    let answer = found(&store, "b", Some("ub"));
    assert_eq!(answer.config_maps.len(), 1);
    let wan = answer.network_attachments[0].object.as_ref().unwrap();
    assert_eq!(wan.inline_config(), Some("{}"));
    assert!(wan.metadata.managed_fields.is_none(), "held trimmed");
    assert_eq!((store.pod_count(), store.object_count(Kind::ConfigMap)), (2, 1));
    assert_eq!(store.object_count(Kind::NetworkAttachmentDefinition), 1);

    // The watch's changes: `lan` appears, `wan` goes.
    store.apply_attachment(nad("default", "lan", "{\"type\":\"x\"}"));
    store.delete_attachment(&nad("default", "wan", ""));
    assert!(found(&store, "a", Some("ua")).network_attachments[0].object.is_some());
    assert!(found(&store, "b", Some("ub")).network_attachments[0].object.is_none());

    // An update that keeps its references keeps their watches; one that changes them moves them.
    assert_eq!(store.apply(&pod("a", "ua", "nets", Some("lan"))), Watches::default());
    assert_eq!(
        store.apply(&pod("a", "ua", "other", Some("lan"))),
        Watches { start: vec![cm_watch("other")], stop: vec![] },
        "nets is still b's"
    );
    assert_eq!(store.delete(&pod("b", "ub", "nets", Some("wan"))), stopped(&[cm_watch("nets")]));
    assert_eq!(
        store.delete(&pod("a", "ua", "other", Some("lan"))),
        stopped(&[cm_watch("other"), nads_watch("default")])
    );
    assert_eq!((store.pod_count(), store.object_count(Kind::ConfigMap)), (0, 0));
    assert_eq!(store.object_count(Kind::NetworkAttachmentDefinition), 0, "forgotten with the watch");
    // What a stopped watch still delivers is ignored.
    store.apply_attachment(nad("default", "late", "{}"));
    assert_eq!(store.object_count(Kind::NetworkAttachmentDefinition), 0);
}

#[test]
fn a_pod_recreated_under_its_name_is_answered_only_for_its_own_uid() {
    let mut store = Store::new(AttachmentPolicy::default());
    store.replace_all(vec![pod("web-0", "old", "nets", None)]);
    store.set_object(&cm_key("nets"), config_map("nets", "blue"));
    assert_eq!(found(&store, "web-0", Some("old")).pod.metadata.uid.as_deref(), Some("old"));
    assert_eq!(miss(&store, "web-0", Some("new")), (false, Miss::OtherUid { held: "old".into() }), "may come");

    // Deleted and created again: the watch delivers the delete, then the new pod.
    store.delete(&pod("web-0", "old", "nets", None));
    assert_eq!(miss(&store, "web-0", Some("old")), (true, Miss::Deleted));
    store.apply(&pod("web-0", "new", "nets", None));
    store.set_object(&cm_key("nets"), config_map("nets", "blue"));
    assert_eq!(found(&store, "web-0", Some("new")).pod.metadata.uid.as_deref(), Some("new"));
    assert_eq!(miss(&store, "web-0", Some("old")), (true, Miss::Deleted), "never the new pod's answer");

    // Or only the new pod arrives (a re-list after the watch missed the delete).
    store.apply(&pod("web-0", "newer", "nets", None));
    assert_eq!(miss(&store, "web-0", Some("new")), (true, Miss::Deleted));
    // A late delete of an old uid changes nothing.
    assert_eq!(store.delete(&pod("web-0", "new", "nets", None)), Watches::default());
    assert_eq!(found(&store, "web-0", Some("newer")).pod.metadata.uid.as_deref(), Some("newer"));
    assert_eq!(found(&store, "web-0", None).pod.metadata.uid.as_deref(), Some("newer"), "any uid: explain");
}

#[test]
fn a_static_pod_is_answered_for_the_uid_its_mirror_pod_carries() {
    let mut store = Store::new(AttachmentPolicy::default());
    let mut mirror = pod("etcd-n1", "api-uid", "nets", None);
    mirror.metadata.annotations = Some(BTreeMap::from([(
        crate::programs::selector::choose::CONFIG_MIRROR.to_string(),
        "static-hash".to_string(),
    )]));
    store.replace_all(vec![mirror]);
    store.set_object(&cm_key("nets"), config_map("nets", "blue"));
    let held = found(&store, "etcd-n1", Some("static-hash")).pod;
    assert_eq!(held.metadata.uid.as_deref(), Some("api-uid"), "the mirror pod, kept with its annotation");
    assert_eq!(found(&store, "etcd-n1", Some("api-uid")).pod, held);
    assert_eq!(miss(&store, "etcd-n1", Some("other")), (false, Miss::OtherUid { held: "api-uid".into() }));
}

#[test]
fn a_relist_forgets_the_pods_it_no_longer_lists_with_their_watches() {
    let mut store = Store::new(AttachmentPolicy::default());
    store.replace_all(vec![pod("a", "ua", "one", None), pod("b", "ub", "two", None)]);
    assert!(store.listed());
    let watches = store.replace_all(vec![pod("b", "ub", "two", None), pod("c", "uc", "three", None)]);
    assert_eq!(watches, Watches { start: vec![cm_watch("three")], stop: vec![cm_watch("one")] });
    assert_eq!(miss(&store, "a", Some("ua")), (true, Miss::Deleted));
    assert_eq!(store.pod_count(), 2);
}

#[test]
fn the_namespace_policy_decides_which_attachments_are_watched() {
    let mut store = Store::new(AttachmentPolicy::default());
    let watches = store.apply(&pod("a", "ua", "nets", Some("lan, infra/shared")));
    assert_eq!(watches, started(&[cm_watch("nets"), nads_watch("default")]), "infra is not the pod's namespace");
    let global = AttachmentPolicy { global_namespaces: ["infra".to_string()].into(), ..Default::default() };
    assert_eq!(store.set_policy(global.clone()), started(&[nads_watch("infra")]));
    assert_eq!(store.set_policy(global), Watches::default());
    assert_eq!(store.set_policy(AttachmentPolicy::default()), stopped(&[nads_watch("infra")]));
}

#[test]
fn objects_are_held_trimmed() {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "nets", "namespace": "default", "resourceVersion": "4", "labels": {"a": "b"},
                     "managedFields": [{"manager": "kubectl"}]},
        "data": {"k": "blue"}, "binaryData": {"b": "AAAA"}
    }))
    .unwrap();
    let cm = trim_config_map(cm);
    assert_eq!(
        serde_json::to_value(&cm).unwrap(),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "blue"},
               "metadata": {"name": "nets", "namespace": "default", "resourceVersion": "4"}})
    );
    let nad: NetworkAttachmentDefinition = serde_json::from_value(json!({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": "lan", "namespace": "default", "annotations": {"x": "y"}}, "spec": {"config": "{}"}
    }))
    .unwrap();
    assert_eq!(
        serde_json::to_value(trim_attachment(nad)).unwrap(),
        json!({"metadata": {"name": "lan", "namespace": "default"}, "spec": {"config": "{}"}})
    );
    // A device network keeps its resourceName: the plugin decides from it as from the API server.
    let device: NetworkAttachmentDefinition = serde_json::from_value(json!({
        "metadata": {"name": "vf", "namespace": "default",
                     "annotations": {"x": "y", crate::platform::kube::RESOURCE_NAME: "example.com/vf"}}
    }))
    .unwrap();
    assert_eq!(
        serde_json::to_value(trim_attachment(device)).unwrap(),
        json!({"metadata": {"name": "vf", "namespace": "default",
                            "annotations": {crate::platform::kube::RESOURCE_NAME: "example.com/vf"}}})
    );
}

#[test]
fn an_object_that_changes_users_within_one_listing_is_listed_again() {
    let mut store = Store::new(AttachmentPolicy::default());
    store.replace_all(vec![pod("a", "ua", "x", None)]);
    store.set_object(&cm_key("x"), config_map("x", "red"));
    // Listed anew: `a` moved to `y`, and `b`, new, uses `x`. The store forgot `x` when `a` left it,
    // so `x`'s watch has to list it again rather than be kept.
    let watches = store.replace_all(vec![pod("a", "ua", "y", None), pod("b", "ub", "x", None)]);
    assert_eq!(watches, Watches { start: vec![cm_watch("y"), cm_watch("x")], stop: vec![cm_watch("x")] });
    assert_eq!(miss(&store, "b", Some("ub")), (false, Miss::ObjectPending(cm_key("x"))));
    store.set_object(&cm_key("x"), config_map("x", "red"));
    assert_eq!(found(&store, "b", Some("ub")).config_maps.len(), 1);
}

/// A pod with the DRA resource claim `claim` (made from a template), and no other reference.
fn pod_with_claim(name: &str, uid: &str, claim: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name, "uid": uid},
        "spec": {"nodeName": "n1", "containers": [{"name": "app"}],
                 "resourceClaims": [{"name": "nics", "resourceClaimTemplateName": "vfs"}]},
        "status": {"resourceClaimStatuses": [{"name": "nics", "resourceClaimName": claim}]}
    }))
    .unwrap()
}

fn claim_key(name: &str) -> ObjectKey {
    ObjectKey::new(Kind::ResourceClaim, "default", name)
}

/// The claim `name`, allocated `device` and reserved for the pod with uid `ua`.
fn allocated_claim(name: &str, device: &str) -> ObjectState {
    ObjectState::ResourceClaim(Box::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": name, "managedFields": [{"manager": "kube-scheduler"}]},
            "spec": {"devices": {"requests": [{"name": "vf", "exactly": {"deviceClassName": "vf"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "vf", "driver": "net.example.com", "pool": "n1", "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": "a", "uid": "ua"}]}
        }))
        .unwrap(),
    ))
}

fn node_slice() -> ResourceSlice {
    let device = |name: &str, id: &str| {
        json!({"name": name, "attributes": {
            "k8s.cni.cncf.io/resourceName": {"string": "example.com/vf"},
            "k8s.cni.cncf.io/deviceID": {"string": id},
            "model": {"string": "big"}}})
    };
    serde_json::from_value(json!({
        "metadata": {"name": "n1-net", "managedFields": [{"manager": "driver"}]},
        "spec": {"driver": "net.example.com", "nodeName": "n1",
                 "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                 "devices": [device("vf-0", "vf0"), device("vf-1", "vf1")]}
    }))
    .unwrap()
}

#[test]
fn a_pod_with_resource_claims_is_answered_with_its_allocated_devices() {
    let mut store = Store::new(AttachmentPolicy::default());
    store.replace_all(vec![]);
    let claim_watch = WatchKey::Object(claim_key("a-nics"));
    assert_eq!(store.apply(&pod_with_claim("a", "ua", "a-nics")), started(&[claim_watch, WatchKey::NodeDevices]));
    assert_eq!(miss(&store, "a", Some("ua")).1, Miss::ObjectPending(claim_key("a-nics")));
    store.set_object(&claim_key("a-nics"), allocated_claim("a-nics", "vf-1"));
    assert_eq!(miss(&store, "a", Some("ua")).1, Miss::SlicesPending);
    store.replace_slices(vec![trim_slice(node_slice())]);
    let answer = found(&store, "a", Some("ua"));
    assert_eq!(answer.resource_claims.len(), 1);
    let devices = answer.node_devices.as_ref().expect("the node's devices");
    assert_eq!(devices.len(), 1, "only the allocated device: {devices:?}");
    assert_eq!((devices[0].device.as_str(), devices[0].device_id.as_deref()), ("vf-1", Some("vf1")));
    let found_devices = crate::programs::selector::devices::dra::allocated(
        "default",
        &answer.pod,
        Some("ua"),
        &mut crate::programs::selector::devices::dra::FromAgent::new(&answer),
    )
    .unwrap();
    assert_eq!(found_devices.device_ids["example.com/vf"], ["vf1"]);
    assert_eq!((store.object_count(Kind::ResourceClaim), store.object_count(Kind::ResourceSlice)), (1, 1));
    assert_eq!(store.object_count(Kind::ConfigMap), 0, "claims are not ConfigMaps");
}

#[test]
fn the_node_slices_are_watched_while_any_pod_with_claims_is_held() {
    let mut store = Store::new(AttachmentPolicy::default());
    store.replace_all(vec![]);
    let claim_watch = WatchKey::Object(claim_key("a-nics"));
    assert_eq!(
        store.apply(&pod_with_claim("a", "ua", "a-nics")),
        started(&[claim_watch.clone(), WatchKey::NodeDevices])
    );
    store.set_object(&claim_key("a-nics"), allocated_claim("a-nics", "vf-1"));
    store.replace_slices(vec![trim_slice(node_slice())]);
    // A second pod with claims starts its claim's watch only; the last one gone stops the slices'.
    assert_eq!(store.apply(&pod_with_claim("b", "ub", "b-nics")), started(&[WatchKey::Object(claim_key("b-nics"))]));
    assert_eq!(store.delete(&pod_with_claim("a", "ua", "a-nics")), stopped(&[claim_watch]));
    assert_eq!(
        store.delete(&pod_with_claim("b", "ub", "b-nics")),
        stopped(&[WatchKey::Object(claim_key("b-nics")), WatchKey::NodeDevices])
    );
    assert_eq!(store.object_count(Kind::ResourceSlice), 0, "forgotten with the watch");
}

#[test]
fn slices_are_held_trimmed() {
    let slice = trim_slice(node_slice());
    let text = serde_json::to_string(&slice).unwrap();
    assert!(!text.contains("managedFields") && !text.contains("model"), "{text}");
    assert!(text.contains("k8s.cni.cncf.io/deviceID") && text.contains("\"pool\""), "{text}");
}

#[test]
fn claims_are_held_trimmed() {
    let ObjectState::ResourceClaim(claim) = allocated_claim("c", "vf-0") else { unreachable!() };
    let text = serde_json::to_string(&trim_claim(*claim)).unwrap();
    assert!(!text.contains("managedFields") && !text.contains("deviceClassName") && text.contains("vf-0"), "{text}");
}

#[test]
fn the_statefulset_ordinal_of_each_pod_held_is_kept_beside_its_trimmed_copy() {
    let member = |name: &str, uid: &str| -> Pod {
        let mut p = pod(name, uid, "cm", None);
        p.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "s1", "controller": true}))
            .unwrap(),
        ]);
        p
    };
    let mut store = Store::new(AttachmentPolicy::default());
    store.apply(&member("web-0", "u0"));
    store.apply(&pod("plain", "u9", "cm", None));
    assert_eq!(store.statefulset_member("u0").map(|m| m.ordinal), Some(0));
    assert_eq!(store.statefulset_member("u9"), None, "not a StatefulSet's");
    // Replaced under its name by the next pod of the ordinal: the old uid is forgotten.
    store.apply(&member("web-0", "u0b"));
    assert_eq!(store.statefulset_member("u0"), None);
    assert_eq!(store.statefulset_member("u0b").map(|m| m.name), Some("web".into()));
    store.delete(&member("web-0", "u0b"));
    assert_eq!(store.statefulset_member("u0b"), None);
    // A list hands trimmed copies; the ordinals come beside them, for the pods held only.
    let listed = member("web-1", "u1");
    let trimmed = trim_pod(&listed);
    store.replace_all(vec![trimmed]);
    let of = |uid: &str| (uid.to_string(), FixedOwner::of(&member("web-1", uid)).unwrap());
    store.add_members(vec![of("u1"), of("u-not-held")]);
    assert_eq!(store.statefulset_member("u1").map(|m| m.ordinal), Some(1));
    assert_eq!(store.statefulset_member("u-not-held"), None);
}
