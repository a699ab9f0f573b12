//! yh-ipam (docs/ipam.md) as the IPAM of a macvlan NetworkAttachmentDefinition on the nodes'
//! underlay (`ul0`, as whereabouts.rs runs it): the reference `macvlan` execs `yh-ipam` from the
//! nodes' bin dir, which asks its node's agent. Checked as a user checks it: the pods' addresses,
//! the `IPBlock`s and the nodes' Leases, the pods' events.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;
use testkit::cluster::Cluster;
use testkit::cluster::pods::{in_cidr, web_server};
use testkit::process::report;

use crate::test_namespace::TestNamespace;

const NS: &str = "yh-ipam-e2e";
/// Pool `e2e-lan`: 10.245.0.2-.30 in blocks of four.
const LAN: &str = "10.245.0.0/24";
/// Pool `e2e-small`: two addresses, 10.245.1.2 and .3, one block.
const SMALL: &str = "10.245.1.0/24";
/// Pool `e2e-shared`: 10.245.24.2 to .5 in blocks of four, .0/30 (.2 and .3) and .4/30 (.4, .5).
const SHARED: &str = "10.245.24.0/24";
const SHARED_NS: &str = "yh-ipam-share";
/// Two pods on each node.
const PODS: [(&str, &str); 4] = [("ipam-a1", "a"), ("ipam-a2", "a"), ("ipam-b1", "b"), ("ipam-b2", "b")];

/// A macvlan NAD on `ul0` whose IPAM is yh-ipam with `ipam`'s keys.
fn nad(cluster: &Cluster, name: &str, ipam: Value) -> Value {
    let mut ipam = ipam;
    ipam["type"] = json!("yh-ipam");
    let config = json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "ul0", "mode": "bridge", "ipam": ipam});
    cluster.apply_text(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  config: '{config}'\n"
    ));
    config
}

/// The `IPBlock`s: block (`10.245.0.0/30`) to (pool, node).
fn blocks(cluster: &Cluster) -> Vec<(String, String, String)> {
    let list = cluster.get_json(&["get", "ipblocks.ipam.yh-genie.io"]);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| (text(&b["spec"]["cidr"]), text(&b["spec"]["pool"]), text(&b["spec"]["node"])))
        .collect()
}

fn block_contains(cidr: &str, ip: &str) -> bool {
    in_cidr(ip, cidr)
}

/// Pods of one range on both nodes get distinct addresses, each from a block its own node holds,
/// and reach each other; each node's agent holds its lease. A pool of two addresses gives a third
/// pod a CNI error naming the pool, in the pod's events, and the address a deleted pod frees.
pub fn yh_ipam_gives_pods_across_nodes_distinct_addresses_and_frees_them(cluster: &mut Cluster) {
    let _namespace = TestNamespace::new(cluster, NS, |settings| {
        settings["allowInlineConfig"] = json!(true);
        settings["inlinePluginTypes"] = json!(["macvlan", "yh-ipam"]);
        // Its NADs define their pools inline (ranges), which the policy must open.
        settings["inlineYhIpamRanges"] = json!(true);
    });
    nad(
        cluster,
        "ipam-lan",
        json!({"pool": "e2e-lan", "blockSize": 4, "ranges": [[{"subnet": LAN, "rangeEnd": "10.245.0.30"}]]}),
    );
    for (name, slot) in PODS {
        cluster.apply_text(
            &web_server(NS, name).on_slot(slot).annotation("k8s.v1.cni.cncf.io/networks", "ipam-lan").yaml(),
        );
    }
    let mut addresses = Vec::new();
    for (name, _) in PODS {
        cluster.wait_pod_ready(NS, name);
        let net1 = cluster.pod_addresses(NS, name, "net1");
        assert!(net1.len() == 1 && in_cidr(&net1[0], LAN), "{name}: net1 holds {net1:?}, want one address in {LAN}");
        addresses.push(net1[0].clone());
    }
    let distinct: BTreeSet<&String> = addresses.iter().collect();
    assert_eq!(distinct.len(), PODS.len(), "yh-ipam gave one address twice: {addresses:?}");
    // Each address comes from a block of the pool that the pod's own node holds.
    let held = blocks(cluster);
    for ((name, slot), address) in PODS.iter().zip(&addresses) {
        let node = format!("node-{slot}");
        let block = held.iter().find(|(cidr, _, _)| block_contains(cidr, address));
        assert!(
            block.is_some_and(|(_, pool, holder)| pool == "e2e-lan" && *holder == node),
            "{name} on {node} got {address}, from block {block:?}; blocks: {held:?}"
        );
    }
    // Across the nodes, over the macvlan network.
    assert_eq!(cluster.fetch(NS, "ipam-a1", &addresses[2]), "ipam-b1", "ipam-a1 fetching ipam-b1 at {}", addresses[2]);
    assert_eq!(cluster.fetch(NS, "ipam-b2", &addresses[1]), "ipam-a2", "ipam-b2 fetching ipam-a2 at {}", addresses[1]);
    // Each node's agent holds its lease, in yh-genie's namespace, as the Role lets it.
    for node in ["node-a", "node-b"] {
        let lease = cluster.get_json(&["-n", "kube-system", "get", "lease", &format!("yh-ipam-{node}")]);
        assert_eq!(lease["spec"]["holderIdentity"], node, "{lease}");
        assert_eq!(lease["spec"]["leaseDurationSeconds"], 60, "{lease}");
    }
    report(&format!("cluster: yh-ipam gave {PODS:?} {addresses:?} from blocks {held:?}"));

    // A pool of two addresses on node-a: the third pod fails with an error naming the pool, until
    // a pod holding one is deleted and its DEL frees it.
    nad(
        cluster,
        "ipam-small",
        json!({"pool": "e2e-small", "blockSize": 4,
               "ranges": [[{"subnet": SMALL, "rangeStart": "10.245.1.2", "rangeEnd": "10.245.1.3"}]]}),
    );
    let small = |name: &str| web_server(NS, name).on_slot("a").annotation("k8s.v1.cni.cncf.io/networks", "ipam-small");
    let mut taken = Vec::new();
    for name in ["small-1", "small-2"] {
        cluster.apply_text(&small(name).yaml());
        cluster.wait_pod_ready(NS, name);
        taken.push(cluster.pod_addresses(NS, name, "net1").remove(0));
    }
    taken.sort();
    assert_eq!(taken, ["10.245.1.2", "10.245.1.3"]);
    cluster.apply_text(&small("small-3").yaml());
    let failure = cluster.wait_for("small-3's sandbox refused for want of an address", || {
        let selector = "involvedObject.name=small-3,reason=FailedCreatePodSandBox";
        let list = cluster.get_json(&["-n", NS, "get", "events", "--field-selector", selector]);
        list["items"].as_array()?.iter().find_map(|e| e["message"].as_str().map(String::from))
    });
    assert!(
        failure.contains("pool \"e2e-small\" has no free address in 10.245.1.2-10.245.1.3"),
        "small-3's event: {failure}"
    );
    let freed = cluster.pod_addresses(NS, "small-1", "net1").remove(0);
    cluster.delete_pod(NS, "small-1");
    cluster.wait_for_within(Duration::from_secs(300), "small-3 Ready once small-1 is gone", || {
        let pod = cluster.get_json(&["-n", NS, "get", "pod", "small-3"]);
        let ready =
            pod["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(())
    });
    assert_eq!(
        cluster.pod_addresses(NS, "small-3", "net1"),
        std::slice::from_ref(&freed),
        "small-3 gets small-1's address"
    );
    report(&format!("cluster: yh-ipam's pool of two refused a third pod ({failure}), then gave it {freed}"));
}

/// With exactly as many addresses as pods, the pool's last free address sits in a block another
/// node holds (the pool an `AddressPool` the NAD names). node-b's one pod takes .2 of block .0/30; node-a's two pods fill .4/30; node-a's
/// third pod is refused at first, the error saying node-b is asked to share, then gets .3 once
/// node-b has shared its block (a fixed block now, `sharedBy` node-b): every address in it is a
/// `FixedAddress` of its pod, node-b's pod keeps .2 and reaches the new one, and each pod's deletion
/// frees its object.
pub fn yh_ipam_shares_the_last_free_address_of_another_nodes_block(cluster: &mut Cluster) {
    let namespace = TestNamespace::new(cluster, SHARED_NS, |settings| {
        settings["allowInlineConfig"] = json!(true);
        settings["inlinePluginTypes"] = json!(["macvlan", "yh-ipam"]);
    });
    // The pool as the admin defines it for NADs, which may only name it (inlineYhIpamRanges unset).
    cluster.apply_text(&format!(
        "apiVersion: ipam.yh-genie.io/v1alpha1\nkind: AddressPool\nmetadata: {{name: e2e-shared}}\nspec:\n  \
         blockSize: 4\n  ranges:\n    - [{{subnet: \"{SHARED}\", rangeStart: 10.245.24.2, rangeEnd: 10.245.24.5}}]\n"
    ));
    let ipam = json!({"type": "yh-ipam", "pool": "e2e-shared"});
    let config = json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "ul0", "mode": "bridge", "ipam": ipam});
    cluster.apply_text(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: ipam-shared, namespace: {SHARED_NS}}}\nspec:\n  config: '{config}'\n"
    ));
    let pod = |name: &str, slot: &str| {
        web_server(SHARED_NS, name).on_slot(slot).annotation("k8s.v1.cni.cncf.io/networks", "ipam-shared").yaml()
    };
    let address = |cluster: &Cluster, name: &str| cluster.pod_addresses(SHARED_NS, name, "net1").remove(0);
    cluster.apply_text(&pod("share-b1", "b"));
    cluster.wait_pod_ready(SHARED_NS, "share-b1");
    assert_eq!(address(cluster, "share-b1"), "10.245.24.2", "node-b's first pod, from the pool's first block");
    for name in ["share-a1", "share-a2"] {
        cluster.apply_text(&pod(name, "a"));
        cluster.wait_pod_ready(SHARED_NS, name);
    }
    let mut filled = vec![address(cluster, "share-a1"), address(cluster, "share-a2")];
    filled.sort();
    assert_eq!(filled, ["10.245.24.4", "10.245.24.5"], "node-a's pods, from the block it claimed");

    cluster.apply_text(&pod("share-a3", "a"));
    let asked = cluster.wait_for("share-a3's first sandbox refused while node-b is asked to share", || {
        let selector = "involvedObject.name=share-a3,reason=FailedCreatePodSandBox";
        let list = cluster.get_json(&["-n", SHARED_NS, "get", "events", "--field-selector", selector]);
        list["items"].as_array()?.iter().find_map(|e| e["message"].as_str().map(String::from))
    });
    assert!(
        asked.contains("pool \"e2e-shared\" has no free address")
            && asked.contains("nodes node-b hold blocks of it and are asked to share the addresses left in them"),
        "share-a3's event: {asked}"
    );
    cluster.wait_for_within(Duration::from_secs(240), "share-a3 Ready once node-b has shared its block", || {
        let pod = cluster.get_json(&["-n", SHARED_NS, "get", "pod", "share-a3"]);
        let ready =
            pod["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(())
    });
    assert_eq!(address(cluster, "share-a3"), "10.245.24.3", "node-b's free address");
    assert_eq!(address(cluster, "share-b1"), "10.245.24.2", "node-b's pod keeps its address");
    let block = cluster.get_json(&["get", "ipblocks.ipam.yh-genie.io", "10.245.24.0-30"]);
    assert_eq!(
        (&block["spec"]["fixed"], &block["spec"]["sharedBy"], block["spec"]["node"].as_str().unwrap_or_default()),
        (&json!(true), &json!("node-b"), ""),
        "{block}"
    );
    let fixed = |cluster: &Cluster| -> Vec<(String, String)> {
        let list =
            cluster.get_json(&["get", "fixedaddresses.ipam.yh-genie.io", "-l", "ipam.yh-genie.io/pool=e2e-shared"]);
        let mut held: Vec<(String, String)> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    text(&o["spec"]["address"]),
                    format!("{} {}", text(&o["spec"]["owner"]["kind"]), text(&o["spec"]["pod"]["name"])),
                )
            })
            .collect();
        held.sort();
        held
    };
    assert_eq!(
        fixed(cluster),
        [
            ("10.245.24.2".to_string(), "Pod share-b1".to_string()),
            ("10.245.24.3".to_string(), "Pod share-a3".to_string())
        ]
    );
    assert_eq!(cluster.fetch(SHARED_NS, "share-a3", "10.245.24.2"), "share-b1", "share-a3 fetching share-b1");
    report(&format!(
        "cluster: yh-ipam's exhausted pool asked node-b to share ({asked}), then gave share-a3 10.245.24.3"
    ));

    cluster.delete_pod(SHARED_NS, "share-a3");
    cluster.wait_for("share-a3's FixedAddress deleted by its DEL", || (fixed(cluster).len() == 1).then_some(()));
    namespace.delete();
    cluster.wait_for("share-b1's FixedAddress deleted by its DEL", || fixed(cluster).is_empty().then_some(()));
    cluster.kubectl_ok(&["delete", "addresspool.ipam.yh-genie.io", "e2e-shared"]);
}
