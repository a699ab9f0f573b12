//! manifests/kubernetes-1.30/: the ValidatingAdmissionPolicy that limits the token every node holds
//! (the installer pod's projected token, in the kubeconfig the plugin and the agent use) to the pods
//! of its own node, tried against the real API server with a node's own kubeconfig.

use super::NS;
use crate::common::cluster::Cluster;
use std::path::Path;

/// The kubeconfig the installer writes on every node, as the node sees it.
const NODE_KUBECONFIG: &str = "/etc/cni/net.d/yh-genie.d/yh-genie.kubeconfig";
const REFUSAL: &str = "yh-genie may only update pods on the node its token is bound to";

/// With the policy applied, node-a's credentials annotate a pod of node-a (what the plugin and the
/// agent do with them) and are refused a pod of node-b, and any change of a pod's spec.
pub fn node_credentials_update_only_their_own_nodes_pods(cluster: &mut Cluster) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let policy = repo.join("manifests/kubernetes-1.30").display().to_string();
    cluster.kubectl_ok(&["apply", "-f", &policy]);
    let pod_on = |node: &str| -> String {
        let pods = cluster.get_json(&["-n", NS, "get", "pods", "--field-selector", &format!("spec.nodeName={node}")]);
        let name = pods["items"].as_array().and_then(|items| items.first()).map(|p| p["metadata"]["name"].clone());
        name.and_then(|n| n.as_str().map(String::from)).unwrap_or_else(|| panic!("no pod of {NS} on {node}"))
    };
    let (own, other) = (pod_on("node-a"), pod_on("node-b"));
    let node_a = cluster.worker("node-a");
    let as_node_a = |pod: &str, patch: &str| {
        let out = node_a
            .node_command(&cluster.bin.join("kubectl").display().to_string())
            .args([
                &format!("--kubeconfig={NODE_KUBECONFIG}"),
                "-n",
                NS,
                "patch",
                "pod",
                pod,
                "--type=merge",
                "-p",
                patch,
            ])
            .output()
            .unwrap();
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let annotate = r#"{"metadata":{"annotations":{"yh-genie.test/policy":"tried"}}}"#;
    // The API server enforces a new policy once its informer has it: a moment after the apply.
    let refusal = cluster.wait_for("the policy to refuse node-a's token a pod of node-b", || {
        let (ok, text) = as_node_a(&other, annotate);
        (!ok && text.contains(REFUSAL)).then_some(text)
    });
    assert!(refusal.contains("Forbidden") || refusal.contains("forbidden"), "{refusal}");
    let (ok, text) = as_node_a(&own, annotate);
    assert!(ok, "node-a's token may annotate its own node's pod {own}: {text}");
    let (ok, text) = as_node_a(&own, r#"{"spec":{"activeDeadlineSeconds":36000}}"#);
    assert!(!ok && text.contains("never change their spec"), "a spec change by node-a's token: {text}");
    cluster.kubectl_ok(&["delete", "-f", &policy]);
}
