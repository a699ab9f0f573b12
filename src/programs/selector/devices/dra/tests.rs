use super::*;
use crate::node::agent_socket::protocol::Held;
use serde_json::{Value, json};

/// Claims and slices in memory, counting what is asked.
#[derive(Default)]
struct Fake {
    claims: BTreeMap<String, ResourceClaim>,
    slices: Vec<ResourceSlice>,
    asked: Vec<String>,
}

impl DraObjects for Fake {
    fn resource_claim(&mut self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, CniError> {
        self.asked.push(format!("claim {namespace}/{name}"));
        Ok(self.claims.get(name).cloned())
    }
    fn node_devices(&mut self, node: &str) -> Result<NodeDevices, CniError> {
        self.asked.push(format!("slices of {node}"));
        Ok(NodeDevices::from_slices(&self.slices))
    }
}

const UID: &str = "pod-uid";

fn pod(spec_claims: Value, statuses: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "web-0", "uid": UID},
        "spec": {"nodeName": "node-a", "containers": [], "resourceClaims": spec_claims},
        "status": {"resourceClaimStatuses": statuses}
    }))
    .unwrap()
}

/// A claim allocated `devices` (request, driver, pool, device), reserved for the pod.
fn claim(name: &str, devices: &[(&str, &str, &str, &str)]) -> ResourceClaim {
    let results: Vec<Value> = devices
        .iter()
        .map(|(request, driver, pool, device)| json!({"request": request, "driver": driver, "pool": pool, "device": device}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name},
        "spec": {},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": "web-0", "uid": UID}]
        }
    }))
    .unwrap()
}

/// A slice of `driver`'s pool `node-a` at `generation`: devices (name, resourceName, deviceID).
fn slice(driver: &str, generation: i64, devices: &[(&str, Option<&str>, Option<&str>)]) -> ResourceSlice {
    let devices: Vec<Value> = devices
        .iter()
        .map(|(name, resource, id)| {
            let mut attributes = serde_json::Map::new();
            if let Some(resource) = resource {
                attributes.insert(RESOURCE_NAME_ATTRIBUTE.into(), json!({"string": resource}));
            }
            if let Some(id) = id {
                attributes.insert(DEVICE_ID_ATTRIBUTE.into(), json!({"string": id}));
            }
            attributes.insert("model".into(), json!({"string": "x"}));
            json!({"name": name, "attributes": attributes})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": format!("{driver}-{generation}")},
        "spec": {"driver": driver, "nodeName": "node-a",
                 "pool": {"name": "node-a", "generation": generation, "resourceSliceCount": 1},
                 "devices": devices}
    }))
    .unwrap()
}

fn node_slices() -> Vec<ResourceSlice> {
    vec![
        slice(
            "net.example.com",
            1,
            &[
                ("vf-0", Some("example.com/vf"), Some("0000:3b:02.1")),
                ("vf-1", Some("example.com/vf"), Some("0000:3b:02.0")),
                ("red-0", Some("example.com/red"), Some("red0")),
                ("half", Some("example.com/vf"), None),
            ],
        ),
        slice("gpu.example.com", 3, &[("gpu-0", None, None)]),
    ]
}

fn template_pod() -> Pod {
    pod(
        json!([{"name": "nics", "resourceClaimTemplateName": "two-vfs"}, {"name": "gpu", "resourceClaimName": "shared-gpu"}]),
        json!([{"name": "nics", "resourceClaimName": "web-0-nics-x7k"}]),
    )
}

fn fake(claims: Vec<ResourceClaim>) -> Fake {
    Fake {
        claims: claims.into_iter().map(|c| (c.metadata.name.clone().unwrap(), c)).collect(),
        slices: node_slices(),
        asked: Vec::new(),
    }
}

#[test]
fn a_pod_without_claims_has_no_devices_found_without_a_request() {
    let mut objects = fake(vec![]);
    let plain: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": []}})).unwrap();
    assert_eq!(allocated("default", &plain, Some(UID), &mut objects).unwrap(), DraDevices::default());
    assert!(objects.asked.is_empty(), "{:?}", objects.asked);
}

#[test]
fn a_device_missing_from_a_pod_without_claims_is_told_it_has_none() {
    let missing = DraDevices::default().missing("example.com/vf");
    assert!(missing.contains("no DRA resource claims"), "{missing}");
}

/// The devices found for the template pod, of claim web-0-nics-x7k (two VFs, a red device and a
/// VF without a deviceID, in no order) and shared-gpu (a device of no network resource), and what
/// the lookup asked.
fn found_in_two_claims() -> (DraDevices, Vec<String>) {
    let nics = claim(
        "web-0-nics-x7k",
        &[
            ("vf", "net.example.com", "node-a", "vf-0"),
            ("vf", "net.example.com", "node-a", "vf-1"),
            ("red", "net.example.com", "node-a", "red-0"),
            ("vf", "net.example.com", "node-a", "half"),
        ],
    );
    let gpu = claim("shared-gpu", &[("gpu", "gpu.example.com", "node-a", "gpu-0")]);
    let mut objects = fake(vec![nics, gpu]);
    let found = allocated("default", &template_pod(), Some(UID), &mut objects).unwrap();
    (found, objects.asked)
}

#[test]
fn devices_of_template_with_named_claims_are_sorted_by_resource() {
    let (found, asked) = found_in_two_claims();
    let ids: Vec<(&str, Vec<&str>)> =
        found.device_ids.iter().map(|(r, ids)| (r.as_str(), ids.iter().map(String::as_str).collect())).collect();
    assert_eq!(
        ids,
        [("example.com/red", vec!["red0"]), ("example.com/vf", vec!["0000:3b:02.0", "0000:3b:02.1"])],
        "sorted, whatever the allocation's order"
    );
    assert_eq!(found.claims, ["web-0-nics-x7k", "shared-gpu"], "the template's claim and the named one, in spec order");
    assert_eq!(
        asked,
        ["claim default/web-0-nics-x7k", "slices of node-a", "claim default/shared-gpu"],
        "the node's slices listed once"
    );
}

#[test]
fn devices_passed_over_are_named_when_a_resource_is_missing() {
    let (found, _) = found_in_two_claims();
    let missing = found.missing("example.com/blue");
    for part in [
        "web-0-nics-x7k, shared-gpu",
        "\"example.com/red\", \"example.com/vf\"",
        "device gpu-0 of pool node-a (driver gpu.example.com) of ResourceClaim default/shared-gpu: its ResourceSlice gives it neither",
        "device half of pool node-a (driver net.example.com) of ResourceClaim default/web-0-nics-x7k: its ResourceSlice gives it k8s.cni.cncf.io/resourceName \"example.com/vf\" but no k8s.cni.cncf.io/deviceID",
    ] {
        assert!(missing.contains(part), "{part:?} not in {missing}");
    }
}

#[test]
fn a_claim_the_controller_found_unneeded_gives_nothing() {
    let p = pod(json!([{"name": "nics", "resourceClaimTemplateName": "t"}]), json!([{"name": "nics"}]));
    let mut objects = fake(vec![]);
    let found = allocated("default", &p, Some(UID), &mut objects).unwrap();
    assert!(found.device_ids.is_empty() && found.claims.is_empty());
    assert!(objects.asked.is_empty());
}

#[test]
fn a_missing_piece_is_an_error_that_names_it() {
    let err = |p: &Pod, claims: Vec<ResourceClaim>| allocated("default", p, Some(UID), &mut fake(claims)).unwrap_err();
    // The claim of a template not made yet.
    let e = err(&pod(json!([{"name": "nics", "resourceClaimTemplateName": "two-vfs"}]), json!([])), vec![]);
    assert_eq!(e.code, code::TRY_AGAIN_LATER);
    assert!(
        e.msg.contains("\"nics\"") && e.msg.contains("two-vfs") && e.msg.contains("no ResourceClaim yet"),
        "{}",
        e.msg
    );
    let nics = || claim("web-0-nics-x7k", &[]);
    // A claim that does not exist.
    let e = err(&template_pod(), vec![nics()]);
    assert!(e.msg.contains("ResourceClaim default/shared-gpu") && e.msg.contains("does not exist"), "{}", e.msg);
    // A claim not allocated yet.
    let mut unallocated = claim("shared-gpu", &[]);
    let status = unallocated.status.as_mut().unwrap();
    (status.allocation, status.reserved_for) = (None, None);
    let e = err(&template_pod(), vec![nics(), unallocated]);
    assert_eq!(e.code, code::TRY_AGAIN_LATER);
    assert!(e.msg.contains("ResourceClaim default/shared-gpu is not allocated yet"), "{}", e.msg);
    // A claim reserved for another pod.
    let mut others = claim("shared-gpu", &[]);
    others.status.as_mut().unwrap().reserved_for.as_mut().unwrap()[0].uid = "another".into();
    let e = err(&template_pod(), vec![nics(), others]);
    assert!(e.msg.contains("not reserved for this pod (uid pod-uid"), "{}", e.msg);
}

#[test]
fn only_the_newest_generation_of_a_pool_counts() {
    let mut objects = fake(vec![claim("c", &[("vf", "net.example.com", "node-a", "vf-0")])]);
    objects.slices.push(slice("net.example.com", 2, &[("vf-0", Some("example.com/vf"), Some("0000:3b:02.7"))]));
    let p = pod(json!([{"name": "c", "resourceClaimName": "c"}]), json!([]));
    let found = allocated("default", &p, Some(UID), &mut objects).unwrap();
    assert_eq!(found.device_ids["example.com/vf"], ["0000:3b:02.7"]);
}

/// A pod whose extended resource `example.com/vf` the scheduler satisfied with a claim.
fn extended_pod() -> Pod {
    let mut p = pod(json!([]), json!([]));
    let status = json!({"resourceClaimName": "web-0-extended-resources-abc",
        "requestMappings": [{"containerName": "app", "resourceName": "example.com/vf", "requestName": "container-0-request-0"}]});
    p.status.as_mut().unwrap().extended_resource_claim_status = Some(serde_json::from_value(status).unwrap());
    p
}

/// The devices found for the extended-resource pod when its claim holds `devices`.
fn extended_claim_holding(devices: &[(&str, &str, &str, &str)]) -> Result<DraDevices, CniError> {
    let name = "web-0-extended-resources-abc";
    allocated("default", &extended_pod(), Some(UID), &mut fake(vec![claim(name, devices)]))
}

const EXTENDED_REQUEST: &str = "container-0-request-0";

#[test]
fn an_extended_resource_request_finds_its_device_under_the_resource_name() {
    let found = extended_claim_holding(&[(EXTENDED_REQUEST, "net.example.com", "node-a", "vf-1")]).unwrap();
    assert_eq!(found.device_ids["example.com/vf"], ["0000:3b:02.0"]);
}

#[test]
fn every_device_of_an_extended_resource_must_be_of_that_resource() {
    let e = extended_claim_holding(&[(EXTENDED_REQUEST, "net.example.com", "node-a", "red-0")]).unwrap_err();
    assert!(
        e.msg.contains("is \"example.com/red\"") && e.msg.contains("extended resource \"example.com/vf\""),
        "{}",
        e.msg
    );
    let e = extended_claim_holding(&[(EXTENDED_REQUEST, "gpu.example.com", "node-a", "gpu-0")]).unwrap_err();
    assert!(e.msg.contains("neither"), "{}", e.msg);
    let e = extended_claim_holding(&[("other", "net.example.com", "node-a", "vf-1")]).unwrap_err();
    assert!(e.msg.contains("no device allocated for its request \"container-0-request-0\""), "{}", e.msg);
}

fn nics_claim() -> ResourceClaim {
    claim("web-0-nics-x7k", &[("vf", "net.example.com", "node-a", "vf-0")])
}

fn held(c: &ResourceClaim) -> Held<ResourceClaim> {
    Held { namespace: "default".into(), name: c.metadata.name.clone().unwrap(), object: Some(trim_claim(c.clone())) }
}

/// The agent's answer for the template pod: both its claims, and of the node's devices vf-0.
fn agents_answer() -> PodObjects {
    let devices = NodeDevices::from_slices(&node_slices());
    let key = DeviceKey { driver: "net.example.com".into(), pool: "node-a".into(), device: "vf-0".into() };
    PodObjects {
        pod: template_pod(),
        config_maps: vec![],
        network_attachments: vec![],
        resource_claims: vec![held(&claim("shared-gpu", &[])), held(&nics_claim())],
        node_devices: Some(devices.only([&key])),
    }
}

#[test]
fn the_agents_answer_serves_the_devices_it_holds() {
    let objects = agents_answer();
    let found = allocated("default", &objects.pod.clone(), Some(UID), &mut FromAgent::new(&objects)).unwrap();
    assert_eq!(found.device_ids["example.com/vf"], ["0000:3b:02.1"]);
}

#[test]
fn the_agents_answer_names_what_it_lacks() {
    let mut objects = agents_answer();
    objects.resource_claims.pop();
    let mut answered = FromAgent::new(&objects);
    allocated("default", &objects.pod.clone(), Some(UID), &mut answered).unwrap_err();
    assert_eq!(answered.lacking.as_deref(), Some("ResourceClaim default/web-0-nics-x7k"));
    objects.resource_claims.push(held(&nics_claim()));
    objects.node_devices = None;
    let mut answered = FromAgent::new(&objects);
    allocated("default", &objects.pod.clone(), Some(UID), &mut answered).unwrap_err();
    assert_eq!(answered.lacking.as_deref(), Some("the ResourceSlices of node node-a"));
}

#[test]
fn a_trimmed_claim_keeps_what_the_lookup_reads() {
    let full = claim("c", &[("vf", "net.example.com", "node-a", "vf-0")]);
    let trimmed = trim_claim(full.clone());
    assert_eq!(trimmed.status.as_ref().unwrap().allocation, full.status.as_ref().unwrap().allocation);
    assert_eq!(trimmed.status.as_ref().unwrap().reserved_for, full.status.as_ref().unwrap().reserved_for);
}
