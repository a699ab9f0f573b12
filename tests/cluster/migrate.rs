//! The cluster suite's test of docs/migrate.md: nodes that run Multus move to yh-genie, step by
//! step as the page says, and no address leaks. node-a runs thin Multus (`multus`, its
//! `00-multus.conf` written as its entrypoint writes it), node-b thick Multus (`multus-shim`, and
//! `multus-daemon` running on the node with a service account's token, writing its own
//! `00-multus.conf`).
//!
//! Multus is not part of this repository. `YH_GENIE_MULTUS_BIN` names a directory with Multus's
//! `multus`, `multus-shim` and `multus-daemon`, built from its source (`scripts/cluster/multus.sh`
//! builds them from the Go module proxy; scripts/test.sh's cluster tier sets it). Without it,
//! node-a starts from thin Multus's files alone (its `00-multus.conf`, its kubeconfig, the cluster
//! network's conflist beside them), node-b is left out, and the test skips, saying so, what needs
//! Multus to attach pods.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Child;
use testkit::cluster::Cluster;
use testkit::cluster::control_plane::api_url;
use testkit::cluster::pods::{in_cidr, sleeper};

use crate::inline_kubeconfig;
use testkit::inspect::walk;
use testkit::process::report;

const NS: &str = "yh-migrate";
/// The NAD's network, inline in its spec.config as Multus users write them.
const STORAGE: &str = "10.247.0.0/24";
const CONF_DIR: &str = "/etc/cni/net.d";
/// Where thick Multus's daemon listens, and where its shim asks (Multus's default).
const MULTUS_SOCKET_DIR: &str = "/run/multus";

fn multus_bin_dir() -> Option<PathBuf> {
    std::env::var_os("YH_GENIE_MULTUS_BIN").map(PathBuf::from).filter(|p| !p.as_os_str().is_empty())
}

/// Which Multus a node runs.
#[derive(Clone, Copy, PartialEq)]
enum Flavor {
    Thin,
    Thick,
}

struct MultusNode {
    node: &'static str,
    slot: &'static str,
    flavor: Flavor,
}

impl MultusNode {
    fn label(&self) -> &'static str {
        match self.flavor {
            Flavor::Thin => "thin",
            Flavor::Thick => "thick",
        }
    }
}

/// A pod on `slot`'s node that chooses nothing itself (the cluster's default network), and with
/// `nad` a second network by the networks annotation, as pods written for Multus are.
fn pod(name: &str, slot: &str, nad: Option<&str>) -> String {
    let pod = sleeper(NS, name).on_slot(slot);
    match nad {
        Some(nad) => pod.annotation("k8s.v1.cni.cncf.io/networks", nad).yaml(),
        None => pod.yaml(),
    }
}

/// `00-multus.conf` as Multus's thin entrypoint writes it: the cluster network's configuration as
/// its one delegate.
fn multus_conf(cluster_network: &Value) -> Value {
    json!({"cniVersion": cluster_network["cniVersion"], "name": "multus-cni-network", "type": "multus",
        "kubeconfig": format!("{CONF_DIR}/multus.d/multus.kubeconfig"), "cniDir": "/var/lib/cni/multus",
        "delegates": [cluster_network]})
}

/// Thick Multus's daemon on a node, as its DaemonSet runs it: its configuration (the cluster
/// network's file as the master, `00-multus.conf` generated from it), the service account's token
/// where client-go's in-cluster configuration reads it, the API server's address in its
/// environment. Stopped with SIGTERM, as a DaemonSet's deletion stops it; killed if the test ends
/// first.
struct MultusDaemon {
    child: Option<Child>,
}

impl MultusDaemon {
    fn start(cluster: &Cluster, node: &str, bin_dir: &Path, cluster_network: &Value) -> Self {
        let worker = cluster.worker(node);
        let settings = json!({
            "chrootDir": "", "cniVersion": cluster_network["cniVersion"], "logLevel": "verbose",
            "logToStderr": true, "cniConfigDir": CONF_DIR, "multusAutoconfigDir": CONF_DIR,
            "multusConfigFile": "auto", "multusMasterCNI": "10-yonghui.conflist",
            "socketDir": MULTUS_SOCKET_DIR, "binDir": "/opt/cni/bin"});
        std::fs::write(worker.node_path(&format!("{CONF_DIR}/multus.d/daemon-config.json")), settings.to_string())
            .unwrap();
        let account = worker.node_path("/run/secrets/kubernetes.io/serviceaccount");
        std::fs::create_dir_all(&account).unwrap();
        let token = cluster.kubectl_ok(&["-n", "kube-system", "create", "token", "multus", "--duration=2h"]);
        std::fs::write(account.join("token"), token.trim()).unwrap();
        std::fs::copy(cluster.control.pki.path("ca.crt"), account.join("ca.crt")).unwrap();
        std::fs::write(account.join("namespace"), "kube-system").unwrap();
        let url = api_url();
        let (host, port) = url.trim_start_matches("https://").split_once(':').unwrap();
        let mut daemon = worker.node_command(&bin_dir.join("multus-daemon").display().to_string());
        daemon
            .arg("-config")
            .arg(format!("{CONF_DIR}/multus.d/daemon-config.json"))
            .env("KUBERNETES_SERVICE_HOST", host)
            .env("KUBERNETES_SERVICE_PORT", port)
            .env("MULTUS_NODE_NAME", node);
        let child = cluster.run.spawn(&format!("{node}-multus-daemon"), &mut daemon);
        MultusDaemon { child: Some(child) }
    }

    /// SIGTERM, and its exit waited for.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            testkit::process::must(&format!("kill -TERM {}", child.id()));
            child.wait().unwrap();
        }
    }
}

impl Drop for MultusDaemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Leases on `node`: (file, owning container id).
fn leases(cluster: &Cluster, node: &str) -> BTreeSet<(String, String)> {
    let worker = cluster.worker(node);
    let mut leases = BTreeSet::new();
    walk(&worker.node_path("/var/lib/cni/networks"), &mut |p| {
        if p.file_name().unwrap().to_string_lossy().parse::<std::net::Ipv4Addr>().is_ok() {
            let owner = std::fs::read_to_string(p).unwrap_or_default();
            leases.insert((p.display().to_string(), owner.lines().next().unwrap_or_default().trim().to_string()));
        }
    });
    leases
}

/// The ids of `node`'s running sandboxes and containers.
fn running_tasks(cluster: &Cluster, node: &str) -> BTreeSet<String> {
    cluster.worker(node).running_ids()
}

fn sandbox_of(cluster: &Cluster, node: &str, pod: &str) -> String {
    let sandboxes = cluster.worker(node).running_sandboxes(pod);
    assert_eq!(sandboxes.len(), 1, "{pod}: {sandboxes:?}");
    sandboxes[0].clone()
}

/// What `node`'s runtime logged about `sandboxes`: its CRI calls and the plugins' log lines
/// (yh-genie's, and through Multus its delegates'), for a failure to show who did what.
fn runtime_about(cluster: &Cluster, node: &str, sandboxes: &[&str]) -> String {
    let runtime = cluster.worker(node).runtime.name();
    let log = std::fs::read_to_string(cluster.run.log(&format!("{node}-{runtime}"))).unwrap_or_default();
    let lines: Vec<&str> = log.lines().filter(|l| sandboxes.iter().any(|s| l.contains(s))).collect();
    format!("{node}'s {runtime} about {sandboxes:?}:\n{}", lines.join("\n"))
}

/// Each step of docs/migrate.md's "From Multus", on node-a (thin Multus) and node-b (thick): the
/// Multus nodes, yh-genie installed beside them, Multus stopped and `00-multus.conf` gone, the pods
/// Multus attached deleted.
pub fn a_node_moves_from_multus_without_leaking_an_address(cluster: &mut Cluster) {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = |rel: &str| repo.join(rel).display().to_string();
    let bin_dir = multus_bin_dir();
    let mut nodes = vec![MultusNode { node: "node-a", slot: "a", flavor: Flavor::Thin }];
    if bin_dir.is_some() {
        nodes.push(MultusNode { node: "node-b", slot: "b", flavor: Flavor::Thick });
    }

    // The Multus nodes: the cluster network's own conflist, and Multus's files beside it.
    cluster.kubectl_ok(&["create", "namespace", NS]);
    cluster.kubectl_ok(&["-n", "kube-system", "create", "serviceaccount", "multus"]);
    cluster.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "multus-test",
        "--clusterrole=cluster-admin",
        "--serviceaccount=kube-system:multus",
    ]);
    let mut daemons = Vec::new();
    for n in &nodes {
        let worker = cluster.worker(n.node);
        let cluster_network: Value = serde_json::from_str(
            &std::fs::read_to_string(worker.node_path("/etc/cni/net.d/yonghui/yonghui.conflist")).unwrap(),
        )
        .unwrap();
        let conf_dir = worker.node_path(CONF_DIR);
        std::fs::write(conf_dir.join("10-yonghui.conflist"), cluster_network.to_string()).unwrap();
        std::fs::create_dir_all(conf_dir.join("multus.d")).unwrap();
        match (n.flavor, &bin_dir) {
            (Flavor::Thin, bin_dir) => {
                std::fs::write(conf_dir.join("multus.d/multus.kubeconfig"), inline_kubeconfig(cluster, "multus"))
                    .unwrap();
                if let Some(bin_dir) = bin_dir {
                    std::fs::copy(bin_dir.join("multus"), worker.node_path("/opt/cni/bin/multus")).unwrap();
                }
                std::fs::write(conf_dir.join("00-multus.conf"), multus_conf(&cluster_network).to_string()).unwrap();
            }
            (Flavor::Thick, Some(bin_dir)) => {
                std::fs::copy(bin_dir.join("multus-shim"), worker.node_path("/opt/cni/bin/multus-shim")).unwrap();
                daemons.push((n.node, MultusDaemon::start(cluster, n.node, bin_dir, &cluster_network)));
                let conf = conf_dir.join("00-multus.conf");
                cluster.wait_for(&format!("{}'s multus-daemon writing 00-multus.conf", n.node), || {
                    let conf: Value = serde_json::from_str(&std::fs::read_to_string(&conf).ok()?).ok()?;
                    (conf["type"] == "multus-shim").then_some(())
                });
            }
            (Flavor::Thick, None) => unreachable!("thick Multus only with its binaries"),
        }
    }
    let nad = json!({"cniVersion": "1.0.0", "name": "storage", "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local", "ranges": [[{"subnet": STORAGE}]]}}]});
    cluster.apply_text(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: storage, namespace: {NS}}}\nspec:\n  config: '{nad}'\n"
    ));

    // Pods Multus attached: on the cluster network, and with the NAD on net1.
    let mut multus_pods = Vec::new();
    if bin_dir.is_some() {
        for n in &nodes {
            for (name, nad) in [("by-multus", None), ("by-multus-nad", Some("storage@net1"))] {
                let name = format!("{name}-{}", n.label());
                cluster.apply_text(&pod(&name, n.slot, nad));
                cluster.wait_pod_ready(NS, &name);
                let sandbox = sandbox_of(cluster, n.node, &name);
                assert!(
                    cluster.worker(n.node).node_path(&format!("/var/lib/cni/multus/{sandbox}")).exists(),
                    "{name}: {} Multus keeps no cache of sandbox {sandbox}",
                    n.label()
                );
                multus_pods.push((n.node, name, sandbox));
            }
            let name = format!("by-multus-nad-{}", n.label());
            let net1 = cluster.pod_addresses(NS, &name, "net1");
            assert!(net1.len() == 1 && in_cidr(&net1[0], STORAGE), "{name}: {net1:?}");
        }
    } else {
        report(
            "cluster: YH_GENIE_MULTUS_BIN unset: node-a starts from thin Multus's files alone, node-b is left out; no pod attached by Multus",
        );
    }
    let multus_leases = |cluster: &Cluster, multus_pods: &[(&str, String, String)]| -> BTreeSet<(String, String)> {
        nodes
            .iter()
            .flat_map(|n| leases(cluster, n.node))
            .filter(|(_, owner)| multus_pods.iter().any(|(_, _, sandbox)| sandbox == owner))
            .collect()
    };
    let before_install = multus_leases(cluster, &multus_pods);
    // host-local's lease of eth0 (yonghui's pool) and of net1 (the NAD's), and eth0's alone.
    assert_eq!(before_install.len(), 3 * nodes.len() * bin_dir.iter().count(), "{before_install:?}");

    // yh-genie installed beside Multus, its configuration settled first (the NAD's inline
    // configuration allowed, what it may run listed): the nodes still run Multus.
    cluster.kubectl_ok(&["apply", "-f", &path("manifests/")]);
    let settled =
        json!({"defaultNetwork": "yonghui", "allowInlineConfig": true, "inlinePluginTypes": ["ptp", "host-local"]});
    let patch = json!({"data": {"selector.json": settled.to_string()}}).to_string();
    cluster.kubectl_ok(&["-n", "kube-system", "patch", "configmap", "yh-genie-config", "--type=merge", "-p", &patch]);
    for n in &nodes {
        let ours = cluster.worker(n.node).node_path(&format!("{CONF_DIR}/00-yh-genie.conflist"));
        cluster.wait_for(&format!("{}'s 00-yh-genie.conflist with the settled keys", n.node), || {
            let conflist: Value = serde_json::from_str(&std::fs::read_to_string(&ours).ok()?).ok()?;
            (conflist["plugins"][0]["allowInlineConfig"] == true).then_some(())
        });
        let name = format!("still-multus-{}", n.label());
        cluster.apply_text(&pod(&name, n.slot, Some("storage@net1")));
        if bin_dir.is_some() {
            cluster.wait_pod_ready(NS, &name);
            let sandbox = sandbox_of(cluster, n.node, &name);
            assert!(
                cluster.worker(n.node).node_path(&format!("/var/lib/cni/multus/{sandbox}")).exists(),
                "{name}: 00-multus.conf sorts first"
            );
            multus_pods.push((n.node, name, sandbox));
        } else {
            // The runtime still takes 00-multus.conf, whose plugin this node does not have.
            cluster.wait_for(&format!("{name}'s sandbox failing on Multus's plugin"), || {
                let field = format!("involvedObject.name={name}");
                let events = cluster.kubectl_ok(&["-n", NS, "get", "events", "--field-selector", &field]);
                events.contains("multus").then_some(())
            });
        }
    }
    let multus_leases_held = multus_leases(cluster, &multus_pods);

    // The move. Thick: the daemon stopped as the DaemonSet's deletion stops it, and it removes
    // the 00-multus.conf it wrote. Thin: 00-multus.conf removed by hand. New pods, with the same
    // annotation, are yh-genie's.
    for (node, daemon) in &mut daemons {
        daemon.stop();
        let conf = cluster.worker(node).node_path(&format!("{CONF_DIR}/00-multus.conf"));
        assert!(!conf.exists(), "{node}: thick Multus's daemon stopped and left {}", conf.display());
    }
    for n in nodes.iter().filter(|n| n.flavor == Flavor::Thin) {
        std::fs::remove_file(cluster.worker(n.node).node_path(&format!("{CONF_DIR}/00-multus.conf"))).unwrap();
        if bin_dir.is_none() {
            cluster.wait_pod_ready(NS, &format!("still-multus-{}", n.label()));
        }
    }
    let mut statuses = Vec::new();
    for n in &nodes {
        let name = format!("by-yh-genie-{}", n.label());
        cluster.apply_text(&pod(&name, n.slot, Some("storage@net1")));
        cluster.wait_pod_ready(NS, &name);
        let worker = cluster.worker(n.node);
        let sandbox = sandbox_of(cluster, n.node, &name);
        for ifname in ["eth0", "net1"] {
            let record = worker.node_path(&format!("/var/lib/cni/yh-genie/attachments/{sandbox}:{ifname}"));
            assert!(record.exists(), "{name}: no record of {ifname}: {}", record.display());
        }
        assert!(!worker.node_path(&format!("/var/lib/cni/multus/{sandbox}")).exists());
        let status = cluster.network_status(NS, &name, None);
        let interfaces: Vec<&str> = status.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(interfaces, ["eth0", "net1"], "{name}: {status:?}");
        assert!(in_cidr(&status[1].1, STORAGE), "{name}: {status:?}");
        statuses.push((name, status));
    }

    // The pods Multus attached kept their sandboxes; deleted now, through yh-genie, they leave
    // nothing: their leases are free, Multus's cache of them is gone.
    for (node, name, sandbox) in &multus_pods {
        assert_eq!(&sandbox_of(cluster, node, name), sandbox, "{name}'s sandbox changed in the move");
        cluster.delete_pod(NS, name);
    }
    let deadline = std::time::Instant::now() + testkit::cluster::PATIENCE;
    loop {
        let left: Vec<_> = multus_leases(cluster, &multus_pods).into_iter().collect();
        if left.is_empty() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let about: Vec<String> = nodes
                .iter()
                .map(|n| {
                    let sandboxes: Vec<&str> =
                        multus_pods.iter().filter(|(node, _, _)| *node == n.node).map(|(_, _, s)| s.as_str()).collect();
                    runtime_about(cluster, n.node, &sandboxes)
                })
                .collect();
            panic!("leases of Multus's pods left: {left:?}\n{}", about.join("\n"));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for (node, name, sandbox) in &multus_pods {
        let cache = cluster.worker(node).node_path(&format!("/var/lib/cni/multus/{sandbox}"));
        assert!(
            !cache.exists(),
            "{name}: Multus's cache {} is left\n{}",
            cache.display(),
            runtime_about(cluster, node, &[sandbox.as_str()])
        );
    }
    for n in &nodes {
        let worker = cluster.worker(n.node);
        if bin_dir.is_some() {
            let results =
                std::fs::read_dir(worker.node_path("/var/lib/cni/multus/results")).map(|d| d.count()).unwrap_or(0);
            assert_eq!(results, 0, "{}: libcni's results of {} Multus's delegates are left", n.node, n.label());
        }
        let running = running_tasks(cluster, n.node);
        let orphans: Vec<_> =
            leases(cluster, n.node).into_iter().filter(|(_, owner)| !running.contains(owner)).collect();
        assert!(orphans.is_empty(), "leases of no running sandbox on {}: {orphans:?}", n.node);
    }
    report(&format!(
        "cluster: {} moved from Multus ({}): {} pod(s) Multus attached deleted through yh-genie, {} lease(s) freed; {statuses:?}",
        nodes.iter().map(|n| format!("{} ({})", n.node, n.label())).collect::<Vec<_>>().join(" and "),
        if bin_dir.is_some() { "its binaries from YH_GENIE_MULTUS_BIN" } else { "thin Multus's files alone" },
        multus_pods.len(),
        multus_leases_held.len()
    ));
    cluster.kubectl_ok(&["delete", "namespace", NS, "--wait=true", "--timeout=120s"]);
    cluster.kubectl_ok(&["delete", "clusterrolebinding", "multus-test"]);
    cluster.kubectl_ok(&["-n", "kube-system", "delete", "serviceaccount", "multus"]);
}
