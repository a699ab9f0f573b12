//! yh-ipam's fixed addresses (docs/ipam.md#fixed-addresses) on the real cluster: a StatefulSet's
//! pods keep theirs across nodes until it is scaled down, two pods of one IPAMClaim hold its address
//! at once, a pod's `ips` asks for one. Each test makes a macvlan NAD on `ul0` (as yh_ipam.rs) with
//! a pool of its own, in this file's namespace, and [`Setup`] undoes what it made even when it
//! fails. Checked as a user checks it: the pods' addresses in their netns and network-status, the
//! `FixedAddress` objects, the IPAMClaim's status, the pods' events.

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use testkit::cluster::Cluster;
use testkit::cluster::pods::{in_cidr, sleeper};
use testkit::process::report;
use yh_genie::platform::kube::ip_block::object_name;

use crate::test_namespace::TestNamespace;

const NS: &str = "yh-ipam-fixed-e2e";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const FIXED_ADDRESSES: &str = "fixedaddresses.ipam.yh-genie.io";
/// The releaser sweeps once per lease duration (60 s in the manifest): a freed ordinal's or
/// claim's address goes within two sweeps, and the pod's own deletion before.
const SWEEP_PATIENCE: Duration = Duration::from_secs(240);

/// What a test set up: the selector's policy letting inline macvlan and yh-ipam NADs in, the
/// namespace with the NAD `lan`. Dropped, pass or fail: the nodes uncordoned, the namespace
/// (pods, StatefulSets, claims, the NAD) deleted, the pool's `FixedAddress`es left deleted, the
/// policy as it was.
struct Setup<'a> {
    namespace: TestNamespace<'a>,
    cluster: &'a Cluster,
    pool: &'static str,
}

impl<'a> Setup<'a> {
    /// `pool` on `subnet`, its plugin declaring the `ips` capability when `ips`.
    fn new(cluster: &'a Cluster, pool: &'static str, subnet: &str, ips: bool) -> Setup<'a> {
        let namespace = TestNamespace::new(cluster, NS, |settings| {
            settings["allowInlineConfig"] = json!(true);
            settings["inlinePluginTypes"] = json!(["macvlan", "yh-ipam"]);
            // Its NADs define their pools inline (ranges), which the policy must open.
            settings["inlineYhIpamRanges"] = json!(true);
        });
        let setup = Setup { namespace, cluster, pool };
        let mut config = json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "ul0", "mode": "bridge",
            "ipam": {"type": "yh-ipam", "pool": pool, "blockSize": 4, "ranges": [[{"subnet": subnet}]]}});
        if ips {
            config["capabilities"] = json!({"ips": true});
        }
        cluster.apply_text(&format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: lan, namespace: {NS}}}\nspec:\n  config: '{config}'\n"
        ));
        setup
    }
}

impl Drop for Setup<'_> {
    fn drop(&mut self) {
        let cluster = self.cluster;
        for node in ["node-a", "node-b"] {
            let _ = cluster.kubectl(&["uncordon", node]);
        }
        self.namespace.delete();
        // Their pods gone, what the releaser would sweep: so that a failed test leaves nothing.
        for (name, spec) in fixed_addresses(cluster) {
            if spec["pool"] == self.pool {
                let _ = cluster.kubectl(&["delete", FIXED_ADDRESSES, &name, "--ignore-not-found"]);
            }
        }
    }
}

/// Every `FixedAddress`: (name, spec).
fn fixed_addresses(cluster: &Cluster) -> Vec<(String, Value)> {
    let (ok, out, _) = cluster.kubectl(&["get", FIXED_ADDRESSES, "-o", "json"]);
    let list: Value = if ok { serde_json::from_str(&out).unwrap_or_default() } else { Value::Null };
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .into_iter()
        .map(|f| (f["metadata"]["name"].as_str().unwrap_or_default().to_string(), f["spec"].clone()))
        .collect()
}

/// The spec of the `FixedAddress` of `address`, if there is one.
fn fixed_address(cluster: &Cluster, address: &str) -> Option<Value> {
    fixed_addresses(cluster).into_iter().find(|(_, spec)| spec["address"] == address).map(|(_, spec)| spec)
}

/// Waits until the releaser has deleted the `FixedAddress` of `address`; how long it took.
fn wait_freed(cluster: &Cluster, address: &str, what: &str) -> Duration {
    let started = Instant::now();
    cluster.wait_for_within(SWEEP_PATIENCE, &format!("the FixedAddress of {address} ({what}) deleted"), || {
        fixed_address(cluster, address).is_none().then_some(())
    });
    started.elapsed()
}

/// The pod `name` once it is Ready and is not the pod of uid `not` (a StatefulSet's pod recreated
/// under its name): its object.
fn ready_pod(cluster: &Cluster, name: &str, not: Option<&str>) -> Value {
    cluster.wait_for(&format!("pod {NS}/{name} Ready (not uid {not:?})"), || {
        let (ok, out, _) = cluster.kubectl(&["-n", NS, "get", "pod", name, "-o", "json"]);
        let pod: Value = if ok { serde_json::from_str(&out).ok()? } else { return None };
        let other = not.is_none_or(|uid| pod["metadata"]["uid"] != uid);
        let ready =
            pod["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
        (other && ready).then_some(pod)
    })
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

/// The pod's one address on net1, in its netns, checked against its network-status entry.
fn net1_address(cluster: &Cluster, pod: &Value, subnet: &str) -> String {
    let name = text(&pod["metadata"]["name"]);
    let net1 = cluster.pod_addresses(NS, &name, "net1");
    assert!(net1.len() == 1 && in_cidr(&net1[0], subnet), "{name}: net1 holds {net1:?}, want one address in {subnet}");
    let uid = text(&pod["metadata"]["uid"]);
    let listed = cluster.network_status(NS, &name, Some(&uid));
    assert!(
        listed.contains(&("net1".to_string(), net1[0].clone())),
        "{name}: its network-status {listed:?} does not list net1 with {}",
        net1[0]
    );
    net1[0].clone()
}

/// A StatefulSet `name` of `replicas` sleepers on the NAD `lan`.
fn statefulset(cluster: &Cluster, name: &str, replicas: u32) {
    cluster.apply_text(&format!(
        "apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {name}, namespace: {NS}}}
spec:
  replicas: {replicas}
  serviceName: {name}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata:
      labels: {{app: {name}}}
      annotations: {{{NETWORKS}: lan}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {{name: main, image: busybox:1.36, command: [sleep, '3600']}}
"
    ));
}

/// Waits until the pod `name` is gone from the API server.
fn wait_pod_gone(cluster: &Cluster, name: &str) {
    cluster.wait_for(&format!("pod {NS}/{name} gone"), || {
        let (ok, out, _) = cluster.kubectl(&["-n", NS, "get", "pod", name, "--ignore-not-found", "-o", "name"]);
        (ok && out.trim().is_empty()).then_some(())
    });
}

/// A StatefulSet of two: each pod's address from a fixed block, its `FixedAddress` naming the
/// ordinal and the pod. Pod 0 deleted with its node cordoned comes back on the other node with the
/// same address, the object naming the new pod and node. Scaled to one, ordinal 1's object is
/// deleted by the releaser's sweep once its pod is gone, and its address goes to another
/// StatefulSet's pod; ordinal 0 keeps its own.
pub fn yh_ipam_keeps_a_statefulset_pods_address_across_nodes_until_scaled_down(cluster: &mut Cluster) {
    const SUBNET: &str = "10.245.16.0/24";
    let _setup = Setup::new(cluster, "e2e-sts", SUBNET, false);
    statefulset(cluster, "db", 2);
    let mut addresses = Vec::new();
    let mut pods = Vec::new();
    for (ordinal, name) in ["db-0", "db-1"].into_iter().enumerate() {
        let pod = ready_pod(cluster, name, None);
        let address = net1_address(cluster, &pod, SUBNET);
        let spec = fixed_address(cluster, &address).unwrap_or_else(|| panic!("{name}'s {address}: no FixedAddress"));
        assert_eq!(spec["pool"], "e2e-sts", "{spec}");
        assert_eq!(spec["interface"], "net1", "{spec}");
        assert_eq!(
            (text(&spec["owner"]["kind"]), text(&spec["owner"]["namespace"]), text(&spec["owner"]["name"])),
            ("StatefulSet".to_string(), NS.to_string(), "db".to_string()),
            "{spec}"
        );
        assert_eq!(spec["owner"]["ordinal"], ordinal, "{spec}");
        assert_eq!(spec["pod"]["uid"], pod["metadata"]["uid"], "{spec}");
        assert_eq!(spec["pod"]["node"], pod["spec"]["nodeName"], "{spec}");
        // The spec names the block by its CIDR; its object by the block as a DNS subdomain.
        let block_name = object_name(text(&spec["block"]).parse().expect("a FixedAddress's block is a CIDR"));
        let block = cluster.get_json(&["get", "ipblocks.ipam.yh-genie.io", &block_name]);
        assert_eq!(block["spec"]["fixed"], true, "{name}'s address is not of a fixed block: {block}");
        addresses.push(address);
        pods.push(pod);
    }
    assert_ne!(addresses[0], addresses[1], "two ordinals, one address");

    // Pod 0 rescheduled on the other node: its node cordoned, the pod deleted.
    let old_node = text(&pods[0]["spec"]["nodeName"]);
    let old_uid = text(&pods[0]["metadata"]["uid"]);
    cluster.kubectl_ok(&["cordon", &old_node]);
    let moved_at = Instant::now();
    cluster.delete_pod(NS, "db-0");
    let moved = ready_pod(cluster, "db-0", Some(&old_uid));
    let took = moved_at.elapsed();
    cluster.kubectl_ok(&["uncordon", &old_node]);
    let new_node = text(&moved["spec"]["nodeName"]);
    assert_ne!(new_node, old_node, "db-0 came back on its cordoned node");
    assert_eq!(net1_address(cluster, &moved, SUBNET), addresses[0], "db-0 on {new_node} lost its address");
    let spec = fixed_address(cluster, &addresses[0]).expect("db-0's FixedAddress");
    assert_eq!(
        (text(&spec["pod"]["uid"]), text(&spec["pod"]["name"]), text(&spec["pod"]["node"])),
        (text(&moved["metadata"]["uid"]), "db-0".to_string(), new_node.clone()),
        "{spec}"
    );
    report(&format!(
        "cluster: db-0 kept {} from {old_node} to {new_node}, Ready again {took:.1?} after the delete",
        addresses[0]
    ));

    // Scaled down: ordinal 1's address freed once its pod is gone, then another's.
    cluster.kubectl_ok(&["-n", NS, "scale", "statefulset", "db", "--replicas=1"]);
    wait_pod_gone(cluster, "db-1");
    let swept = wait_freed(cluster, &addresses[1], "db ordinal 1 scaled away");
    assert!(fixed_address(cluster, &addresses[0]).is_some(), "db-0's FixedAddress went with ordinal 1's");
    statefulset(cluster, "cache", 1);
    let cache = ready_pod(cluster, "cache-0", None);
    assert_eq!(net1_address(cluster, &cache, SUBNET), addresses[1], "cache-0 does not get db-1's freed address");
    let spec = fixed_address(cluster, &addresses[1]).expect("cache-0's FixedAddress");
    assert_eq!(spec["owner"]["name"], "cache", "{spec}");
    assert_eq!(cluster.pod_addresses(NS, "db-0", "net1"), std::slice::from_ref(&addresses[0]));
    report(&format!("cluster: db scaled to 1: {} freed by the sweep {swept:.1?} after db-1 was gone", addresses[1]));
}

/// An IPAMClaim and two pods naming it, on two nodes (a live migration's source and target): both
/// hold its address on net1, written into its status.ips, its `FixedAddress` names the claim and
/// the latest pod. Both pods and the claim deleted, the releaser frees it, and another claim's
/// pod gets it.
pub fn yh_ipam_gives_two_pods_of_one_ipam_claim_its_address_until_the_claim_is_gone(cluster: &mut Cluster) {
    const SUBNET: &str = "10.245.18.0/24";
    let _setup = Setup::new(cluster, "e2e-claim", SUBNET, false);
    let claim = |name: &str| {
        cluster.apply_text(&format!(
            "apiVersion: k8s.cni.cncf.io/v1alpha1\nkind: IPAMClaim\nmetadata: {{name: {name}, namespace: {NS}}}\nspec: {{network: lan, interface: net1}}\n"
        ));
    };
    let pod = |name: &str, slot: &str, claim: &str| {
        let networks = json!([{"name": "lan", "interface": "net1", "ipam-claim-reference": claim}]).to_string();
        cluster.apply_text(&sleeper(NS, name).on_slot(slot).annotation(NETWORKS, &networks).yaml());
    };
    claim("vm-a.net1");
    pod("vm-a-source", "a", "vm-a.net1");
    let source = ready_pod(cluster, "vm-a-source", None);
    let address = net1_address(cluster, &source, SUBNET);
    pod("vm-a-target", "b", "vm-a.net1");
    let target = ready_pod(cluster, "vm-a-target", None);
    assert_eq!(
        net1_address(cluster, &target, SUBNET),
        address,
        "the target on node-b does not hold the claim's address"
    );
    assert_eq!(cluster.pod_addresses(NS, "vm-a-source", "net1"), std::slice::from_ref(&address), "the source lost it");
    let status = cluster.wait_for("vm-a.net1's status.ips", || {
        let object = cluster.get_json(&["-n", NS, "get", "ipamclaims.k8s.cni.cncf.io", "vm-a.net1"]);
        object["status"]["ips"].as_array().cloned()
    });
    assert_eq!(status, [json!(format!("{address}/24"))], "the claim's status.ips");
    // The rest of its status, as the real API server validated it against the CRD's schema.
    let written = cluster.get_json(&["-n", NS, "get", "ipamclaims.k8s.cni.cncf.io", "vm-a.net1"]);
    let condition =
        written["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "IPsAllocated"));
    assert!(
        condition.is_some_and(|c| c["status"] == "True" && c["reason"] == "SuccessfulAllocation"),
        "{}",
        written["status"]
    );
    assert!(
        ["vm-a-source", "vm-a-target"].contains(&written["status"]["ownerPod"]["name"].as_str().unwrap_or_default()),
        "{}",
        written["status"]
    );
    let spec = fixed_address(cluster, &address).expect("the claim's FixedAddress");
    assert_eq!(
        (text(&spec["owner"]["kind"]), text(&spec["owner"]["namespace"]), text(&spec["owner"]["name"])),
        ("IPAMClaim".to_string(), NS.to_string(), "vm-a.net1".to_string()),
        "{spec}"
    );
    assert_eq!(
        (text(&spec["pod"]["name"]), text(&spec["pod"]["node"])),
        ("vm-a-target".to_string(), "node-b".to_string()),
        "the object names the latest pod: {spec}"
    );

    for name in ["vm-a-source", "vm-a-target"] {
        cluster.delete_pod(NS, name);
    }
    assert!(fixed_address(cluster, &address).is_some(), "the claim's address went with its pods' DEL");
    cluster.kubectl_ok(&["-n", NS, "delete", "ipamclaims.k8s.cni.cncf.io", "vm-a.net1", "--wait=true"]);
    let swept = wait_freed(cluster, &address, "IPAMClaim vm-a.net1 deleted");
    claim("vm-b.net1");
    pod("vm-b", "a", "vm-b.net1");
    let next = ready_pod(cluster, "vm-b", None);
    assert_eq!(net1_address(cluster, &next, SUBNET), address, "the next claim's pod does not get the freed address");
    report(&format!("cluster: IPAMClaim vm-a.net1 held {address} on both nodes; freed {swept:.1?} after its deletion"));
}

/// A pod's `ips` asks for a free address of the pool and gets it; a second pod on the same node
/// asking for it is refused (its sandbox's event names the pod holding it), and gets it once the
/// first is deleted.
pub fn yh_ipam_gives_a_pod_the_address_it_asks_for_only_once_it_is_free(cluster: &mut Cluster) {
    const SUBNET: &str = "10.245.17.0/24";
    const ASKED: &str = "10.245.17.20";
    let _setup = Setup::new(cluster, "e2e-asked", SUBNET, true);
    let networks = json!([{"name": "lan", "ips": [format!("{ASKED}/24")]}]).to_string();
    let pod = |name: &str| cluster.apply_text(&sleeper(NS, name).on_slot("a").annotation(NETWORKS, &networks).yaml());
    pod("asks-1");
    let first = ready_pod(cluster, "asks-1", None);
    assert_eq!(net1_address(cluster, &first, SUBNET), ASKED, "asks-1 did not get the address it asked for");
    pod("asks-2");
    let refused = cluster.wait_for("asks-2's sandbox refused for the address asks-1 holds", || {
        let selector = "involvedObject.name=asks-2,reason=FailedCreatePodSandBox";
        let list = cluster.get_json(&["-n", NS, "get", "events", "--field-selector", selector]);
        list["items"].as_array()?.iter().find_map(|e| e["message"].as_str().map(String::from))
    });
    let want = format!(
        "address {ASKED} asked for in 'ips' cannot be had from pool \"e2e-asked\": it is taken, held by pod {NS}/asks-1 on this node"
    );
    assert!(refused.contains(&want), "asks-2's event: {refused}\nwant: {want}");
    cluster.delete_pod(NS, "asks-1");
    let freed_at = Instant::now();
    let second = cluster.wait_for_within(Duration::from_secs(300), "asks-2 Ready once asks-1 is gone", || {
        let pod = cluster.get_json(&["-n", NS, "get", "pod", "asks-2"]);
        let ready =
            pod["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(pod)
    });
    assert_eq!(net1_address(cluster, &second, SUBNET), ASKED, "asks-2 did not get the address once free");
    report(&format!(
        "cluster: asks-2 refused {ASKED} while asks-1 held it, got it {:.1?} after asks-1 was gone",
        freed_at.elapsed()
    ));
}
