//! The cluster suite's test of docs/migrate.md: a node that runs Multus moves to yh-genie, step by
//! step as the page says, and no address leaks.
//!
//! Multus is not part of this repository. With `YH_GENIE_MULTUS_BIN` naming a Multus (thin)
//! binary, built by whoever runs the test from Multus's own source, the node runs it and pods are
//! attached by it before the move. Without it, the node starts from Multus's files alone (its
//! `00-multus.conf`, its kubeconfig, the cluster network's conflist beside them) and the test
//! skips, saying so, what needs Multus to attach pods.

use base64::Engine;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::PathBuf;
use testkit::cluster::Cluster;
use testkit::cluster::control_plane::api_url;
use testkit::cluster::pods::{in_cidr, sleeper};
use testkit::inspect::walk;
use testkit::process::report;

const NS: &str = "yh-migrate";
/// The NAD's network, inline in its spec.config as Multus users write them.
const STORAGE: &str = "10.247.0.0/24";
const CONF_DIR: &str = "/etc/cni/net.d";

fn multus_binary() -> Option<PathBuf> {
    std::env::var_os("YH_GENIE_MULTUS_BIN").map(PathBuf::from).filter(|p| !p.as_os_str().is_empty())
}

/// A pod on node-a that chooses nothing itself (the cluster's default network), and with `nad` a
/// second network by the networks annotation, as pods written for Multus are.
fn pod(name: &str, nad: Option<&str>) -> String {
    let pod = sleeper(NS, name).on_slot("a");
    match nad {
        Some(nad) => pod.annotation("k8s.v1.cni.cncf.io/networks", nad).yaml(),
        None => pod.yaml(),
    }
}

/// Multus's kubeconfig on the node, with its credentials inline (the node's mount namespace does
/// not see the test's files): a client certificate of the cluster's CA.
fn multus_kubeconfig(cluster: &Cluster) -> String {
    cluster.control.pki.kubeconfig("multus", "multus-test", &["system:masters"], &api_url());
    let data = |file: &str| {
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(cluster.control.pki.path(file)).unwrap())
    };
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {{server: '{server}', certificate-authority-data: {ca}}}
users:
- name: multus
  user: {{client-certificate-data: {crt}, client-key-data: {key}}}
contexts:
- name: test
  context: {{cluster: test, user: multus}}
current-context: test
",
        server = api_url(),
        ca = data("ca.crt"),
        crt = data("multus.crt"),
        key = data("multus.key"),
    )
}

/// `00-multus.conf` as Multus's thin entrypoint writes it: the cluster network's configuration as
/// its one delegate.
fn multus_conf(cluster_network: &Value) -> Value {
    json!({"cniVersion": cluster_network["cniVersion"], "name": "multus-cni-network", "type": "multus",
        "kubeconfig": format!("{CONF_DIR}/multus.d/multus.kubeconfig"), "cniDir": "/var/lib/cni/multus",
        "delegates": [cluster_network]})
}

/// Leases on node-a: (file, owning container id).
fn leases(cluster: &Cluster) -> BTreeSet<(String, String)> {
    let worker = cluster.worker("node-a");
    let mut leases = BTreeSet::new();
    walk(&worker.node_path("/var/lib/cni/networks"), &mut |p| {
        if p.file_name().unwrap().to_string_lossy().parse::<std::net::Ipv4Addr>().is_ok() {
            let owner = std::fs::read_to_string(p).unwrap_or_default();
            leases.insert((p.display().to_string(), owner.lines().next().unwrap_or_default().trim().to_string()));
        }
    });
    leases
}

/// The ids of node-a's running tasks (sandboxes and containers).
fn running_tasks(cluster: &Cluster) -> BTreeSet<String> {
    let tasks = cluster.worker("node-a").ctr(&["tasks", "ls"]);
    tasks.lines().skip(1).filter_map(|l| l.split_whitespace().next()).map(String::from).collect()
}

fn sandbox_of(cluster: &Cluster, pod: &str) -> String {
    let sandboxes = cluster.worker("node-a").running_sandboxes(pod);
    assert_eq!(sandboxes.len(), 1, "{pod}: {sandboxes:?}");
    sandboxes[0].clone()
}

/// What node-a's containerd logged about `sandboxes`: its CRI calls and the plugins' log lines
/// (yh-genie's, and through Multus its delegates'), for a failure to show who did what.
fn containerd_about(cluster: &Cluster, sandboxes: &[&str]) -> String {
    let log = std::fs::read_to_string(cluster.run.log("node-a-containerd")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().filter(|l| sandboxes.iter().any(|s| l.contains(s))).collect();
    format!("node-a's containerd about {sandboxes:?}:\n{}", lines.join("\n"))
}

/// Each step of docs/migrate.md's "From Multus", on node-a: the Multus node, yh-genie installed
/// beside it, `00-multus.conf` removed, the pods Multus attached deleted.
pub fn a_node_moves_from_multus_without_leaking_an_address(cluster: &mut Cluster) {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = |rel: &str| repo.join(rel).display().to_string();
    let worker = cluster.worker("node-a");
    let multus = multus_binary();

    // The Multus node: the cluster network's own conflist, Multus's kubeconfig and 00-multus.conf
    // delegating to that network, and Multus's binary (or not).
    let cluster_network: Value = serde_json::from_str(
        &std::fs::read_to_string(worker.node_path("/etc/cni/net.d/yonghui/yonghui.conflist")).unwrap(),
    )
    .unwrap();
    let conf_dir = worker.node_path(CONF_DIR);
    std::fs::write(conf_dir.join("10-yonghui.conflist"), cluster_network.to_string()).unwrap();
    std::fs::create_dir_all(conf_dir.join("multus.d")).unwrap();
    std::fs::write(conf_dir.join("multus.d/multus.kubeconfig"), multus_kubeconfig(cluster)).unwrap();
    if let Some(binary) = &multus {
        let target = worker.node_path("/opt/cni/bin/multus");
        std::fs::copy(binary, &target).unwrap();
    }
    std::fs::write(conf_dir.join("00-multus.conf"), multus_conf(&cluster_network).to_string()).unwrap();
    cluster.kubectl_ok(&["create", "namespace", NS]);
    let nad = json!({"cniVersion": "1.0.0", "name": "storage", "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local", "ranges": [[{"subnet": STORAGE}]]}}]});
    cluster.apply_text(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: storage, namespace: {NS}}}\nspec:\n  config: '{nad}'\n"
    ));

    // Pods Multus attached: on the cluster network, and with the NAD on net1.
    let mut multus_pods = Vec::new();
    if multus.is_some() {
        for (name, nad) in [("by-multus", None), ("by-multus-nad", Some("storage@net1"))] {
            cluster.apply_text(&pod(name, nad));
            cluster.wait_pod_ready(NS, name);
            let sandbox = sandbox_of(cluster, name);
            assert!(
                worker.node_path(&format!("/var/lib/cni/multus/{sandbox}")).exists(),
                "{name}: Multus keeps no cache of sandbox {sandbox}"
            );
            multus_pods.push((name, sandbox));
        }
        let net1 = cluster.pod_addresses(NS, "by-multus-nad", "net1");
        assert!(net1.len() == 1 && in_cidr(&net1[0], STORAGE), "{net1:?}");
    } else {
        report(
            "cluster: YH_GENIE_MULTUS_BIN unset: node-a starts from Multus's files alone; no pod attached by Multus",
        );
    }
    let multus_leases: BTreeSet<(String, String)> = leases(cluster)
        .into_iter()
        .filter(|(_, owner)| multus_pods.iter().any(|(_, sandbox)| sandbox == owner))
        .collect();
    assert_eq!(multus_leases.len(), 3 * multus.iter().count(), "{multus_leases:?}");

    // yh-genie installed beside Multus, its configuration settled first (the NAD's inline
    // configuration allowed, what it may run listed): node-a still runs Multus.
    cluster.kubectl_ok(&["apply", "-f", &path("manifests/")]);
    let settled =
        json!({"defaultNetwork": "yonghui", "allowInlineConfig": true, "inlinePluginTypes": ["ptp", "host-local"]});
    let patch = json!({"data": {"selector.json": settled.to_string()}}).to_string();
    cluster.kubectl_ok(&["-n", "kube-system", "patch", "configmap", "yh-genie-config", "--type=merge", "-p", &patch]);
    let ours = conf_dir.join("00-yh-genie.conflist");
    cluster.wait_for("node-a's 00-yh-genie.conflist with the settled keys", || {
        let conflist: Value = serde_json::from_str(&std::fs::read_to_string(&ours).ok()?).ok()?;
        (conflist["plugins"][0]["allowInlineConfig"] == true).then_some(())
    });
    cluster.apply_text(&pod("still-multus", Some("storage@net1")));
    if multus.is_some() {
        cluster.wait_pod_ready(NS, "still-multus");
        let sandbox = sandbox_of(cluster, "still-multus");
        assert!(worker.node_path(&format!("/var/lib/cni/multus/{sandbox}")).exists(), "00-multus.conf sorts first");
        multus_pods.push(("still-multus", sandbox));
    } else {
        // The runtime still takes 00-multus.conf, whose plugin this node does not have.
        cluster.wait_for("still-multus's sandbox failing on Multus's plugin", || {
            let events = cluster.kubectl_ok(&[
                "-n",
                NS,
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=still-multus",
            ]);
            events.contains("multus").then_some(())
        });
    }

    // The move: 00-multus.conf removed. New pods, with the same annotation, are yh-genie's.
    std::fs::remove_file(conf_dir.join("00-multus.conf")).unwrap();
    if multus.is_none() {
        cluster.wait_pod_ready(NS, "still-multus");
    }
    cluster.apply_text(&pod("by-yh-genie", Some("storage@net1")));
    cluster.wait_pod_ready(NS, "by-yh-genie");
    let sandbox = sandbox_of(cluster, "by-yh-genie");
    for ifname in ["eth0", "net1"] {
        let record = worker.node_path(&format!("/var/lib/cni/yh-genie/attachments/{sandbox}:{ifname}"));
        assert!(record.exists(), "by-yh-genie: no record of {ifname}: {}", record.display());
    }
    assert!(!worker.node_path(&format!("/var/lib/cni/multus/{sandbox}")).exists());
    let status = cluster.network_status(NS, "by-yh-genie", None);
    let interfaces: Vec<&str> = status.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(interfaces, ["eth0", "net1"], "{status:?}");
    assert!(in_cidr(&status[1].1, STORAGE), "{status:?}");

    // The pods Multus attached kept their sandboxes; deleted now, through yh-genie, they leave
    // nothing: their leases are free, Multus's cache of them is gone.
    for (name, sandbox) in &multus_pods {
        assert_eq!(&sandbox_of(cluster, name), sandbox, "{name}'s sandbox changed in the move");
        cluster.delete_pod(NS, name);
    }
    let deadline = std::time::Instant::now() + testkit::cluster::PATIENCE;
    while multus_leases.iter().any(|lease| leases(cluster).contains(lease)) {
        if std::time::Instant::now() > deadline {
            let left: Vec<_> = multus_leases.iter().filter(|l| leases(cluster).contains(l)).collect();
            let sandboxes: Vec<&str> = multus_pods.iter().map(|(_, s)| s.as_str()).collect();
            panic!("leases of Multus's pods left: {left:?}\n{}", containerd_about(cluster, &sandboxes));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for (name, sandbox) in &multus_pods {
        let cache = worker.node_path(&format!("/var/lib/cni/multus/{sandbox}"));
        assert!(
            !cache.exists(),
            "{name}: Multus's cache {} is left\n{}",
            cache.display(),
            containerd_about(cluster, &[sandbox.as_str()])
        );
    }
    if multus.is_some() {
        let results =
            std::fs::read_dir(worker.node_path("/var/lib/cni/multus/results")).map(|d| d.count()).unwrap_or(0);
        assert_eq!(results, 0, "libcni's results of Multus's delegates are left");
    }
    let running = running_tasks(cluster);
    let orphans: Vec<_> = leases(cluster).into_iter().filter(|(_, owner)| !running.contains(owner)).collect();
    assert!(orphans.is_empty(), "leases of no running sandbox on node-a: {orphans:?}");
    report(&format!(
        "cluster: node-a moved from Multus ({}): {} pod(s) Multus attached deleted through yh-genie, {} lease(s) freed; by-yh-genie got {status:?}",
        if multus.is_some() { "its binary from YH_GENIE_MULTUS_BIN" } else { "its files alone" },
        multus_pods.len(),
        multus_leases.len()
    ));
    cluster.kubectl_ok(&["delete", "namespace", NS, "--wait=true", "--timeout=120s"]);
}
