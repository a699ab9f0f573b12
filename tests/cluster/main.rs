//! yh-genie on a real Kubernetes (testkit::cluster): an API server, two nodes each with
//! containerd, the kubelet and kube-proxy. Installed as users install it (`kubectl apply -f
//! manifests/`, the image the manifest names), with the e2e's networks and workloads, and checked
//! as a user would check it: with kubectl, and the API server's own audit log.
//!
//! One cluster serves every test here, started before the first and stopped after the last, even
//! when one fails. The tests run one after another, in the order below (later ones use what
//! earlier ones made). Needs root and scripts/cluster/build.sh's Kubernetes build (it runs it).

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use testkit::cluster::Cluster;
use testkit::cluster::cni::condition;
use testkit::cluster::pods::{Network, in_cidr, sleeper};
use testkit::process::report;

/// The tests that stop things: the API server, a static pod's node files, the whole install.
mod disruptions;
use disruptions::*;
/// The node credentials' admission policy (Kubernetes >= 1.30).
mod credentials;
use credentials::*;

/// docs/migrate.md's move from Multus, on a node left without a CNI by the uninstall.
mod migrate;
use migrate::*;

/// Device networks: the test device plugin and device CNI (tests/devices/).
mod devices;
use devices::*;
/// Networks attached to and detached from running pods (docs/dynamic-networks.md).
mod dynamic;
use dynamic::*;

/// The tests of a hostPort, a pod deleted mid-ADD, a DaemonSet rolled while pods start.
mod races;
use races::*;

/// A namespace of a test's own and the selector's policy it opens, undone pass or fail.
mod test_namespace;

/// whereabouts as the IPAM of a NAD, set up as its docs say.
mod whereabouts;
use whereabouts::*;

/// yh-ipam, yh-genie's cluster-wide IPAM, as the IPAM of a macvlan NAD.
mod yh_ipam;
use yh_ipam::*;
/// yh-ipam's fixed addresses: a StatefulSet's, an IPAMClaim's, those asked for in `ips`.
mod yh_ipam_fixed;
use yh_ipam_fixed::*;
/// yh-ipam when an agent is killed mid-burst, and when a node is gone for good.
mod yh_ipam_failures;
use yh_ipam_failures::*;
/// docs/migrate.md's move from whereabouts: a NAD's IPAM edited to yh-ipam while its pods run.
mod yh_ipam_migrate;
use yh_ipam_migrate::*;

/// DRA: the project's test driver's devices, found for the pods whose claims they were allocated to.
mod dra;
use dra::*;

const NS: &str = "yh-e2e";
/// e2e/networks.yaml's ranges.
const PTPNET: &str = "10.248.0.0/24";
const PTPLAN: &str = "10.249.0.0/24";
/// examples/networks/yh-bridgenet.conflist's range.
const YH_BRIDGENET: &str = "10.251.0.0/24";
/// Who the DaemonSet's pod is to the API server: the installer, the agent and the plugin all use
/// its service account's token.
const YH_GENIE_USER: &str = "system:serviceaccount:kube-system:yh-genie";

type Shared = Arc<Mutex<Cluster>>;
type Test = fn(&mut Cluster);

/// Tests that fail today or have not passed yet, run with `--include-ignored`: why.
const IGNORED: &[(&str, &str)] = &[];

const TESTS: &[(&str, Test)] = &[
    ("daemonset_ready_on_every_node", daemonset_ready_on_every_node),
    ("pods_get_the_network_their_configmap_names_in_every_form", pods_get_the_network_of_every_form),
    ("pods_reach_each_other_wherever_they_run", pods_reach_each_other_wherever_they_run),
    ("a_pod_gets_two_networks_by_configmap_list_or_by_nad", a_pod_gets_two_networks_by_configmap_list_or_by_nad),
    (
        "device_networks_get_the_devices_the_kubelet_gave_the_pod",
        device_networks_get_the_devices_the_kubelet_gave_the_pod,
    ),
    ("no_request_from_the_plugin_in_a_pods_life", no_request_from_the_plugin_in_a_pods_life),
    ("a_uid_guarded_patch_of_a_replaced_pod_gets_422", a_uid_guarded_patch_of_a_replaced_pod_gets_422),
    ("api_server_down_a_pod_the_agent_holds_gets_its_network_again", api_server_down_a_held_pod_gets_its_network_again),
    (
        "api_server_down_an_unknown_pod_is_retried_until_the_api_is_back",
        api_server_down_an_unknown_pod_is_retried_until_the_api_is_back,
    ),
    ("static_pod_on_a_pod_network_gets_its_network", static_pod_on_a_pod_network_gets_its_network),
    ("node_credentials_update_only_their_own_nodes_pods", node_credentials_update_only_their_own_nodes_pods),
    ("a_host_port_answers_on_the_node_while_its_pod_lives", a_host_port_answers_on_the_node_while_its_pod_lives),
    ("bandwidth_annotations_shape_the_pod_while_it_lives", bandwidth_annotations_shape_the_pod_while_it_lives),
    ("a_pod_recreated_mid_add_gets_its_network", a_pod_recreated_mid_add_gets_its_network),
    ("daemonset_rolled_while_pods_start_loses_nothing", daemonset_rolled_while_pods_start_loses_nothing),
    ("dra_claims_give_pods_the_devices_their_slices_publish", dra_claims_give_pods_the_devices_their_slices_publish),
    ("dynamic_networks_follow_a_running_pods_annotation", dynamic_networks_follow_a_running_pods_annotation),
    (
        "dynamic_networks_survive_what_goes_wrong_around_an_edit",
        dynamic_networks_survive_what_goes_wrong_around_an_edit,
    ),
    ("dynamic_networks_latency_from_edit_to_answering_interface", dynamic_networks_latency),
    ("dynamic_networks_switch_off_with_the_plain_manifest", dynamic_networks_switch_off_with_the_plain_manifest),
    ("whereabouts_gives_pods_across_nodes_distinct_addresses", whereabouts_gives_pods_across_nodes_distinct_addresses),
    (
        "yh_ipam_gives_pods_across_nodes_distinct_addresses_and_frees_them",
        yh_ipam_gives_pods_across_nodes_distinct_addresses_and_frees_them,
    ),
    (
        "yh_ipam_shares_the_last_free_address_of_another_nodes_block",
        yh_ipam_shares_the_last_free_address_of_another_nodes_block,
    ),
    (
        "yh_ipam_keeps_a_statefulset_pods_address_across_nodes_until_scaled_down",
        yh_ipam_keeps_a_statefulset_pods_address_across_nodes_until_scaled_down,
    ),
    (
        "yh_ipam_gives_two_pods_of_one_ipam_claim_its_address_until_the_claim_is_gone",
        yh_ipam_gives_two_pods_of_one_ipam_claim_its_address_until_the_claim_is_gone,
    ),
    (
        "yh_ipam_gives_a_pod_the_address_it_asks_for_only_once_it_is_free",
        yh_ipam_gives_a_pod_the_address_it_asks_for_only_once_it_is_free,
    ),
    (
        "yh_ipam_loses_and_duplicates_nothing_when_an_agent_is_killed_mid_burst",
        yh_ipam_loses_and_duplicates_nothing_when_an_agent_is_killed_mid_burst,
    ),
    (
        "yh_ipam_releases_a_gone_nodes_blocks_and_keeps_a_renewing_ones",
        yh_ipam_releases_a_gone_nodes_blocks_and_keeps_a_renewing_ones,
    ),
    (
        "yh_ipam_keeps_the_addresses_of_pods_whereabouts_attached",
        yh_ipam_keeps_the_addresses_of_pods_whereabouts_attached,
    ),
    ("uninstall_leaves_the_nodes_as_the_docs_say", uninstall_leaves_the_nodes_as_the_docs_say),
    // After the uninstall: it starts from a node without yh-genie.
    ("a_node_moves_from_multus_without_leaking_an_address", a_node_moves_from_multus_without_leaking_an_address),
];

/// A kubeconfig for a plugin on a node (Multus, whereabouts), with its credentials inline (the
/// node's mount namespace does not see the test's files): a client certificate of the cluster's
/// CA for `user`, in `system:masters`.
pub fn inline_kubeconfig(cluster: &Cluster, user: &str) -> String {
    use base64::Engine;
    use testkit::cluster::control_plane::api_url;
    cluster.control.pki.kubeconfig(user, &format!("{user}-test"), &["system:masters"], &api_url());
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
- name: {user}
  user: {{client-certificate-data: {crt}, client-key-data: {key}}}
contexts:
- name: test
  context: {{cluster: test, user: {user}}}
current-context: test
",
        server = api_url(),
        ca = data("ca.crt"),
        crt = data(&format!("{user}.crt")),
        key = data(&format!("{user}.key")),
    )
}

fn main() {
    let mut args = Arguments::from_args();
    // One cluster: the tests take turns.
    args.test_threads = Some(1);
    let listing = args.list;
    let cluster: Option<Shared> = if listing { None } else { Some(Arc::new(Mutex::new(start()))) };
    let trials = TESTS
        .iter()
        .map(|&(name, test)| {
            let cluster = cluster.clone();
            Trial::test(name, move || {
                let cluster = cluster.expect("a cluster");
                let mut cluster = cluster.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                test(&mut cluster);
                Ok::<(), Failed>(())
            })
            .with_ignored_flag(IGNORED.iter().any(|(ignored, _)| *ignored == name))
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    drop(cluster);
    conclusion.exit();
}

/// The cluster with yh-genie installed the way docs/install.md says, plus the e2e's networks.
fn start() -> Cluster {
    let cluster = Cluster::start();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = |rel: &str| repo.join(rel).display().to_string();
    cluster.install_yh_genie();
    cluster.kubectl_ok(&["apply", "-f", &path("e2e/networks.yaml")]);
    // And the example yh-bridgenet, with bandwidth chained as an admin adds it for the pods'
    // bandwidth annotations: the nodes' bin dir has Debian's plugin (kind's node image has not, so
    // the example and e2e/networks.yaml, which kind runs too, leave it out).
    let mut shaped: Value =
        serde_json::from_str(&std::fs::read_to_string(path("examples/networks/yh-bridgenet.conflist")).unwrap())
            .unwrap();
    let plugins = shaped["plugins"].as_array_mut().expect("yh-bridgenet is a conflist");
    plugins.push(serde_json::json!({"type": "bandwidth", "capabilities": {"bandwidth": true}}));
    let patch = serde_json::json!({"data": {"yh-bridgenet.conflist": shaped.to_string()}}).to_string();
    cluster.kubectl_ok(&["-n", "kube-system", "patch", "configmap", "yh-genie-networks", "--type=merge", "-p", &patch]);
    // The e2e's networks replaced the shipped ConfigMap after the installer pods may have mounted
    // it: the edit reaches them at the kubelet's next sync of the pod.
    let applied = Instant::now();
    for worker in &cluster.workers {
        cluster.wait_for(&format!("the e2e's networks installed on {}", worker.name), || {
            let installed = ["yonghui", "ptpnet", "ptplan", "yh-bridgenet"]
                .iter()
                .all(|n| worker.node_path(&format!("/etc/cni/net.d/{n}/{n}.conflist")).exists());
            installed.then_some(())
        });
    }
    report(&format!("cluster: the networks ConfigMap reached both nodes within {:.1?}", applied.elapsed()));
    cluster
}

/// The DaemonSet's pod runs on both nodes and is Ready: the agent has listed its node's pods
/// (the readiness probe), the installer has put binary, links and conflist on the host paths.
fn daemonset_ready_on_every_node(cluster: &mut Cluster) {
    let ds = cluster.wait_for("the DaemonSet Ready on both nodes", || {
        let ds = cluster.get_json(&["-n", "kube-system", "get", "daemonset", "yh-genie"]);
        let status = &ds["status"];
        (status["numberReady"] == 2 && status["desiredNumberScheduled"] == 2).then_some(ds)
    });
    assert_eq!(ds["status"]["numberAvailable"], 2, "{}", ds["status"]);
    for worker in &cluster.workers {
        let conflist = std::fs::read_to_string(worker.node_path("/etc/cni/net.d/00-yh-genie.conflist"))
            .unwrap_or_else(|e| panic!("{} has no conflist: {e}", worker.name));
        let conflist: Value = serde_json::from_str(&conflist).unwrap();
        assert_eq!(conflist["plugins"][0]["type"], "yh-genie", "{conflist}");
        for name in std::iter::once(yh_genie::programs::selector::NAME).chain(yh_genie::programs::plugins::NAMES) {
            assert!(
                worker.node_path(&format!("/opt/cni/bin/{name}")).exists(),
                "{}: no /opt/cni/bin/{name}",
                worker.name
            );
        }
        for network in ["yonghui", "ptpnet", "ptplan"] {
            assert!(
                worker.node_path(&format!("/etc/cni/net.d/{network}/{network}.conflist")).exists(),
                "{}: network {network} not installed",
                worker.name
            );
        }
    }
}

/// e2e/workload.yaml: a bare network name, a JSON value whose `kubernetes.kubeconfig` path names
/// the network's directory, a path relative to confDir (ConfigMaps), a literal env value, and no choice (the default network). Each pod is
/// Ready (the kubelet probes it from the node) with status.podIP in its network, held by eth0.
fn pods_get_the_network_of_every_form(cluster: &mut Cluster) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    cluster.kubectl_ok(&["apply", "-f", &repo.join("e2e/workload.yaml").display().to_string()]);
    let cidr_a = cluster.pod_cidr("node-a");
    let cidr_b = cluster.pod_cidr("node-b");
    for (pod, network) in [
        ("yh-a", &cidr_a),
        ("yh-b", &cidr_b),
        ("yh-default", &cidr_b),
        ("ptp-a", &PTPNET.to_string()),
        ("ptp-b", &PTPNET.to_string()),
    ] {
        let object = cluster.wait_pod_ready(NS, pod);
        let ip = object["status"]["podIP"].as_str().unwrap_or_default();
        assert!(in_cidr(ip, network), "{pod}: status.podIP {ip:?} is not in {network}");
        assert_eq!(cluster.pod_addresses(NS, pod, "eth0"), vec![ip.to_string()], "{pod}: eth0 does not hold {ip}");
    }
}

/// Each pod serves its own name: a fetch proves which pod answered. Across nodes on the fabric,
/// within a node on the fabric, and within a node from one network to another.
fn pods_reach_each_other_wherever_they_run(cluster: &mut Cluster) {
    let ip = |pod: &str| cluster.wait_pod_ready(NS, pod)["status"]["podIP"].as_str().expect("a pod IP").to_string();
    for (from, to) in
        [("yh-a", "yh-b"), ("yh-b", "yh-a"), ("yh-b", "yh-default"), ("ptp-a", "yh-a"), ("ptp-a", "ptp-b")]
    {
        let target = ip(to);
        assert_eq!(cluster.fetch(NS, from, &target), to, "{from} fetching {to} at {target}");
    }
}

/// e2e/multinet.yaml: `yonghui,ptplan@net1` from a ConfigMap, and ptplan on net1 by the networks
/// annotation naming a NetworkAttachmentDefinition of the real CRD. Both pods get eth0 (the pod IP,
/// on yonghui) and net1 (in ptplan), both listed in the network-status annotation on the pod, and
/// reach each other over net1.
fn a_pod_gets_two_networks_by_configmap_list_or_by_nad(cluster: &mut Cluster) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    cluster.kubectl_ok(&["apply", "-f", &repo.join("e2e/multinet.yaml").display().to_string()]);
    let cidr_a = cluster.pod_cidr("node-a");
    let mut net1 = Vec::new();
    for pod in ["multi-cm", "multi-nad"] {
        let object = cluster.wait_pod_ready(NS, pod);
        let ip = object["status"]["podIP"].as_str().unwrap_or_default().to_string();
        assert!(in_cidr(&ip, &cidr_a), "{pod}: status.podIP {ip:?} is not in node-a's {cidr_a}");
        let second = cluster.pod_addresses(NS, pod, "net1");
        assert!(
            second.len() == 1 && in_cidr(&second[0], PTPLAN),
            "{pod}: net1 holds {second:?}, want one address in {PTPLAN}"
        );
        let listed = cluster.network_status(NS, pod, None);
        let want = vec![("eth0".to_string(), ip.clone()), ("net1".to_string(), second[0].clone())];
        assert_eq!(listed, want, "{pod}: its network-status");
        let routes = cluster.exec(NS, pod, &["ip", "route"]);
        let defaults: Vec<&str> = routes.lines().filter(|l| l.starts_with("default")).collect();
        assert!(defaults.len() == 1 && defaults[0].contains("dev eth0"), "{pod}: default routes {routes}");
        net1.push(second[0].clone());
    }
    assert_eq!(cluster.fetch(NS, "multi-cm", &net1[1]), "multi-nad");
    assert_eq!(cluster.fetch(NS, "multi-nad", &net1[0]), "multi-cm");
}

/// The API server's audit log: the ADDs of every pod so far took the agent's answer (no GET of a
/// pod, ConfigMap or NAD by yh-genie's service account). Then one pod's whole life, from create to
/// the runtime's last DEL: the requests yh-genie made for it, counted.
fn no_request_from_the_plugin_in_a_pods_life(cluster: &mut Cluster) {
    let gets = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["user"]["username"] == YH_GENIE_USER && e["verb"] == "get")
            .filter(|e| {
                ["pods", "configmaps", "network-attachment-definitions"]
                    .contains(&e["objectRef"]["resource"].as_str().unwrap_or(""))
            })
            .map(|e| {
                format!("{} {}/{}", e["objectRef"]["resource"], e["objectRef"]["namespace"], e["objectRef"]["name"])
            })
            .collect()
    };
    let events = cluster.audit_events();
    assert!(!events.is_empty(), "the API server's audit log is empty");
    assert_eq!(gets(&events), Vec::<String>::new(), "GETs by the plugin during the workloads' ADDs");
    assert!(
        events.iter().any(|e| e["user"]["username"] == YH_GENIE_USER && e["verb"] == "watch"),
        "the agent never watched: the audit log does not show yh-genie's requests"
    );

    let before = events.len();
    cluster.apply_text(&sleeper(NS, "lifecycle").on_slot("a").network(Network::FromConfigMap("net-yonghui")).yaml());
    cluster.wait_pod_ready(NS, "lifecycle");
    let after_add = cluster.audit_events();
    let add_requests: Vec<&Value> = after_add[before..]
        .iter()
        .filter(|e| e["user"]["username"] == YH_GENIE_USER && e["verb"] != "watch" && e["verb"] != "list")
        .collect();
    cluster.delete_pod(NS, "lifecycle");
    let worker = cluster.worker("node-a");
    cluster.wait_for("the lifecycle pod's sandbox removed from node-a's containerd", || {
        let left = worker.ctr(&["containers", "ls", "-q", "labels.\"io.kubernetes.pod.name\"==lifecycle"]);
        left.trim().is_empty().then_some(())
    });
    // The node agent creates Multus's AddedInterface Event for the pod's one interface, off the ADD
    // path and whenever its queue gets to it (before or after the pod is Ready or gone).
    let added = cluster.wait_for("the lifecycle pod's AddedInterface event", || {
        let selector = "involvedObject.name=lifecycle,reason=AddedInterface";
        let list = cluster.get_json(&["-n", NS, "get", "events", "--field-selector", selector]);
        let messages: Vec<String> =
            list["items"].as_array()?.iter().filter_map(|e| e["message"].as_str().map(String::from)).collect();
        (!messages.is_empty()).then_some(messages)
    });
    assert!(
        added.len() == 1 && added[0].starts_with("Add eth0 [") && added[0].ends_with("from yonghui"),
        "one AddedInterface event, for eth0 on yonghui: {added:?}"
    );
    std::thread::sleep(std::time::Duration::from_secs(2));
    let all = cluster.audit_events();
    let describe = |e: &&Value| {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        format!("{} {}/{}", text(&e["verb"]), text(&e["objectRef"]["resource"]), text(&e["objectRef"]["name"]))
    };
    let deletion: Vec<String> = all[after_add.len()..]
        .iter()
        .filter(|e| e["user"]["username"] == YH_GENIE_USER && e["verb"] != "watch" && e["verb"] != "list")
        .map(|e| describe(&e))
        .collect();
    let add: Vec<String> = add_requests.iter().map(describe).collect();
    report(&format!("cluster: yh-genie's API requests for one pod: ADD {add:?}, deletion {deletion:?}"));
    // That event's create is the only request of the pod's whole life, and not the plugin's.
    let lifecycle: Vec<&String> = add.iter().chain(&deletion).collect();
    let (events, others): (Vec<&String>, Vec<&String>) = lifecycle.into_iter().partition(|r| *r == "create events/");
    assert_eq!(others, Vec::<&String>::new(), "requests by yh-genie for the pod's ADD and every DEL");
    assert_eq!(events.len(), 1, "one AddedInterface event's create for one interface: {events:?}");
}

/// The plugin's and the agent's status write is a JSON merge patch carrying the uid the pod must
/// still have (src/platform/kube/client.rs). A real API server answers it, for a pod since replaced under
/// the same name, with 422 Unprocessable Entity ("metadata.uid ... field is immutable"), not 409.
fn a_uid_guarded_patch_of_a_replaced_pod_gets_422(cluster: &mut Cluster) {
    let patch = |uid: &str| {
        let body = serde_json::json!({"metadata": {"uid": uid, "annotations": {"yh-genie.test/patched": "yes"}}});
        cluster.kubectl(&["-n", NS, "patch", "pod", "yh-a", "--type=merge", "-p", &body.to_string(), "-v=6"])
    };
    let uid = cluster.kubectl_ok(&["-n", NS, "get", "pod", "yh-a", "-o", "jsonpath={.metadata.uid}"]);
    let (ok, out, err) = patch(uid.trim());
    assert!(ok, "the patch with the pod's own uid is refused: {err}{out}");
    let (ok, out, err) = patch("00000000-0000-0000-0000-000000000000");
    assert!(!ok, "a patch with another uid was accepted: {out}");
    // kubectl -v=6 logs each response: `"Response" verb="PATCH" url="https://..." status="422 ..."`.
    let answered_422 =
        err.lines().any(|l| l.contains("PATCH") && l.contains("https://") && l.contains("422 Unprocessable Entity"));
    assert!(answered_422, "want 422: {err}");
    assert!(err.contains("metadata.uid: Invalid value") && err.contains("field is immutable"), "{err}");
}
