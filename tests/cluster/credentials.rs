//! manifests/kubernetes-1.30/: the ValidatingAdmissionPolicy that limits the token every node holds
//! (the installer pod's projected token, in the kubeconfig the plugin and the agent use) to the pods
//! of its own node, tried against the real API server with a node's own kubeconfig.

use super::NS;
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use testkit::cluster::Cluster;
use testkit::cluster::pods::{NETWORK_STATUS, Network, sleeper};

/// The kubeconfig the installer writes on every node, as the node sees it.
const NODE_KUBECONFIG: &str = "/etc/cni/net.d/yh-genie.d/yh-genie.kubeconfig";
const REFUSAL: &str = "yh-genie may only update pods on the node its token is bound to";

/// With the policies applied, node-a's credentials write the network-status annotation of a pod
/// of node-a (what the plugin and the agent do with them; the real plugin's and agent's writes
/// for a new pod pass too) and are refused: a pod of node-b, any other annotation, a label, a
/// change of the spec; an Event reported as node-b, or of a reason other than AddedInterface,
/// RemovedInterface and NetworkChangeFailed.
pub fn node_credentials_update_only_their_own_nodes_pods(cluster: &mut Cluster) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let policy = repo.join("manifests/kubernetes-1.30").display().to_string();
    cluster.kubectl_ok(&["apply", "-f", &policy]);
    let pod_on = |node: &str| -> String {
        let pods = cluster.get_json(&["-n", NS, "get", "pods", "--field-selector", &format!("spec.nodeName={node}")]);
        let name = pods["items"].as_array().and_then(|items| items.first()).map(|p| p["metadata"]["name"].clone());
        name.and_then(|n| n.as_str().map(String::from)).unwrap_or_else(|| panic!("no pod of {NS} on {node}"))
    };
    let other = pod_on("node-b");
    let node_a = cluster.worker("node-a");
    let kubectl_as_node_a = |args: &[&str], stdin: &str| {
        let mut child = node_a
            .node_command(&cluster.bin.join("kubectl").display().to_string())
            .arg(format!("--kubeconfig={NODE_KUBECONFIG}"))
            .args(["-n", NS])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let patch = |pod: &str, patch: &str| kubectl_as_node_a(&["patch", "pod", pod, "--type=merge", "-p", patch], "");
    let status = |value: &str| json!({"metadata": {"annotations": {NETWORK_STATUS: value}}}).to_string();
    // The API server enforces a new policy once its informer has it: a moment after the apply.
    let refusal = cluster.wait_for("the policy to refuse node-a's token a pod of node-b", || {
        let (ok, text) = patch(&other, &status("[]"));
        (!ok && text.contains(REFUSAL)).then_some(text)
    });
    assert!(refusal.contains("Forbidden") || refusal.contains("forbidden"), "{refusal}");

    // A pod of two networks started now: the plugin's or agent's network-status write and the
    // agent's AddedInterface events pass the policies.
    let own = "policed";
    cluster.apply_text(&sleeper(NS, own).on_slot("a").network(Network::FromConfigMap("net-multi")).yaml());
    cluster.wait_pod_ready(NS, own);
    let interfaces: Vec<String> = cluster.network_status(NS, own, None).into_iter().map(|(i, _)| i).collect();
    assert_eq!(interfaces, ["eth0", "net1"], "{own}'s network-status under the policy");
    cluster.wait_for(&format!("{own}'s two AddedInterface events under the policy"), || {
        let selector = format!("involvedObject.name={own},reason=AddedInterface");
        let events = cluster.get_json(&["-n", NS, "get", "events", "--field-selector", &selector]);
        (events["items"].as_array()?.len() == 2).then_some(())
    });

    let current = cluster.get_json(&["-n", NS, "get", "pod", own])["metadata"]["annotations"][NETWORK_STATUS].clone();
    let (ok, text) = patch(own, &status(current.as_str().unwrap()));
    assert!(ok, "node-a's token may write the network-status of its own node's pod {own}: {text}");
    let (ok, text) = patch(own, r#"{"metadata":{"annotations":{"yh-genie.test/policy":"tried"}}}"#);
    assert!(!ok && text.contains("only write the k8s.v1.cni.cncf.io/network-status"), "another annotation: {text}");
    let (ok, text) = patch(own, r#"{"metadata":{"labels":{"yh-genie.test/policy":"tried"}}}"#);
    assert!(!ok && text.contains("never change their labels"), "a label by node-a's token: {text}");
    let (ok, text) = patch(own, r#"{"spec":{"activeDeadlineSeconds":36000}}"#);
    assert!(!ok && text.contains("never change their spec"), "a spec change by node-a's token: {text}");

    let event = |reporter: &str, reason: &str| {
        json!({"apiVersion": "v1", "kind": "Event",
               "metadata": {"generateName": format!("{own}."), "namespace": NS},
               "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": NS, "name": own},
               "reason": reason, "message": "tried", "type": "Normal",
               "source": {"component": "yh-genie", "host": reporter},
               "reportingComponent": "yh-genie", "reportingInstance": reporter})
        .to_string()
    };
    let (ok, text) = kubectl_as_node_a(&["create", "-f", "-"], &event("node-a", "AddedInterface"));
    assert!(ok, "node-a's token may report an AddedInterface event as node-a: {text}");
    let (ok, text) = kubectl_as_node_a(&["create", "-f", "-"], &event("node-b", "AddedInterface"));
    assert!(!ok && text.contains("as the node its token is bound to"), "an event reported as node-b: {text}");
    let (ok, text) = kubectl_as_node_a(&["create", "-f", "-"], &event("node-a", "Killing"));
    assert!(
        !ok && text.contains("only create AddedInterface, RemovedInterface and NetworkChangeFailed events"),
        "another reason: {text}"
    );
    cluster.kubectl_ok(&["delete", "-f", &policy]);
    cluster.delete_pod(NS, own);
}
