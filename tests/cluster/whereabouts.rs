//! whereabouts, the cluster-wide IPAM most Multus users run for secondary networks, as the IPAM of
//! a macvlan NetworkAttachmentDefinition under yh-genie, set up as whereabouts' own docs set it up:
//! its CRDs, its binary in the nodes' bin dir, and on each node the flat file
//! `/etc/cni/net.d/whereabouts.d/whereabouts.conf` naming its kubeconfig, so that the NAD names no
//! path at all (as whereabouts' README writes it, without a `name`, as Multus users do).
//!
//! whereabouts is not part of this repository. `YH_GENIE_WHEREABOUTS` names the directory
//! `scripts/cluster/whereabouts.sh` fills (the binary and `crds/`, v0.9.2 built from the Go module
//! proxy; scripts/test.sh's cluster tier sets it). Without it the test says so and checks nothing.

use serde_json::json;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use testkit::cluster::Cluster;
use testkit::cluster::pods::{in_cidr, web_server};
use testkit::process::report;

use crate::inline_kubeconfig;
use crate::test_namespace::TestNamespace;

const NS: &str = "yh-whereabouts";
const RANGE: &str = "10.246.0.0/28";
const WHEREABOUTS_DIR: &str = "/etc/cni/net.d/whereabouts.d";
/// Two pods on each node.
const PODS: [(&str, &str); 4] = [("wb-a1", "a"), ("wb-a2", "a"), ("wb-b1", "b"), ("wb-b2", "b")];

/// The directory `YH_GENIE_WHEREABOUTS` names, if set.
pub fn whereabouts_dir() -> Option<PathBuf> {
    std::env::var_os("YH_GENIE_WHEREABOUTS").map(PathBuf::from).filter(|p| !p.as_os_str().is_empty())
}

/// The allocations whereabouts' IPPool for RANGE holds: pod references (`namespace/name`).
fn allocations(cluster: &Cluster) -> Vec<String> {
    let pools = cluster.get_json(&["-n", "kube-system", "get", "ippools.whereabouts.cni.cncf.io"]);
    let pool = pools["items"].as_array().into_iter().flatten().find(|p| p["spec"]["range"] == RANGE);
    pool.and_then(|p| p["spec"]["allocations"].as_object())
        .map(|a| a.values().map(|v| v["podref"].as_str().unwrap_or_default().to_string()).collect())
        .unwrap_or_default()
}

/// A whereabouts NAD as its README writes one: pods on both nodes get distinct addresses of its
/// one range, reach each other over it, and when they go the range's IPPool holds nothing.
pub fn whereabouts_gives_pods_across_nodes_distinct_addresses(cluster: &mut Cluster) {
    let Some(dir) = whereabouts_dir() else {
        report("cluster: YH_GENIE_WHEREABOUTS unset: the whereabouts NAD is not tried");
        return;
    };
    install_whereabouts(cluster, &dir);
    // The admin lets NADs carry their configuration, and run macvlan with whereabouts.
    let namespace = TestNamespace::new(cluster, NS, |settings| {
        settings["allowInlineConfig"] = json!(true);
        settings["inlinePluginTypes"] = json!(["macvlan", "whereabouts"]);
    });
    let nad = json!({"cniVersion": "0.3.1", "type": "macvlan", "master": "ul0", "mode": "bridge",
        "ipam": {"type": "whereabouts", "range": RANGE}});
    cluster.apply_text(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: wb-macvlan, namespace: {NS}}}\nspec:\n  config: '{nad}'\n"
    ));
    for (name, slot) in PODS {
        cluster.apply_text(
            &web_server(NS, name).on_slot(slot).annotation("k8s.v1.cni.cncf.io/networks", "wb-macvlan").yaml(),
        );
    }
    let mut addresses = Vec::new();
    for (name, _) in PODS {
        cluster.wait_pod_ready(NS, name);
        let net1 = cluster.pod_addresses(NS, name, "net1");
        assert!(
            net1.len() == 1 && in_cidr(&net1[0], RANGE),
            "{name}: net1 holds {net1:?}, want one address in {RANGE}"
        );
        addresses.push(net1[0].clone());
    }
    let distinct: BTreeSet<&String> = addresses.iter().collect();
    assert_eq!(distinct.len(), PODS.len(), "whereabouts gave one address twice: {addresses:?}");
    let mut held = allocations(cluster);
    held.sort();
    let want: Vec<String> = PODS.iter().map(|(name, _)| format!("{NS}/{name}")).collect();
    assert_eq!(held, want, "whereabouts' IPPool for {RANGE}");
    // Across the nodes, over the macvlan network (the nodes share the underlay's bridge).
    assert_eq!(cluster.fetch(NS, "wb-a1", &addresses[2]), "wb-b1", "wb-a1 fetching wb-b1 at {}", addresses[2]);
    assert_eq!(cluster.fetch(NS, "wb-b2", &addresses[1]), "wb-a2", "wb-b2 fetching wb-a2 at {}", addresses[1]);

    for (name, _) in PODS {
        cluster.delete_pod(NS, name);
    }
    cluster.wait_for(&format!("whereabouts' IPPool for {RANGE} empty once the pods are gone"), || {
        allocations(cluster).is_empty().then_some(())
    });
    report(&format!("cluster: whereabouts under yh-genie gave {PODS:?} {addresses:?}, and took every one back"));

    drop(namespace);
    remove_whereabouts(cluster, &dir);
}

/// whereabouts installed as its docs install it: its CRDs, and on each node its binary, its
/// kubeconfig and the flat file naming it.
pub fn install_whereabouts(cluster: &Cluster, dir: &Path) {
    cluster.kubectl_ok(&["apply", "-f", &dir.join("crds").display().to_string()]);
    let kubeconfig = inline_kubeconfig(cluster, "whereabouts");
    let flat = json!({"datastore": "kubernetes",
        "kubernetes": {"kubeconfig": format!("{WHEREABOUTS_DIR}/whereabouts.kubeconfig")}});
    for worker in &cluster.workers {
        std::fs::copy(dir.join("whereabouts"), worker.node_path("/opt/cni/bin/whereabouts")).unwrap();
        let files = worker.node_path(WHEREABOUTS_DIR);
        std::fs::create_dir_all(&files).unwrap();
        std::fs::write(files.join("whereabouts.kubeconfig"), &kubeconfig).unwrap();
        std::fs::write(files.join("whereabouts.conf"), flat.to_string()).unwrap();
    }
}

/// What `install_whereabouts` installed, removed (what is already gone is left so).
pub fn remove_whereabouts(cluster: &Cluster, dir: &Path) {
    for worker in &cluster.workers {
        let _ = std::fs::remove_dir_all(worker.node_path(WHEREABOUTS_DIR));
        let _ = std::fs::remove_file(worker.node_path("/opt/cni/bin/whereabouts"));
    }
    let _ = cluster.kubectl(&["delete", "-f", &dir.join("crds").display().to_string(), "--ignore-not-found"]);
}
