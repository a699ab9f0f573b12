//! The cluster's objects before any node runs: the NetworkAttachmentDefinition CRD, each system's
//! RBAC (yh-genie's from manifests/, its node restriction policies included), the K Node objects,
//! and per node the credentials a DaemonSet pod on it would have: a pod object bound to the node
//! and a ServiceAccount token bound to that pod, which the API server stamps with the node's name
//! (so the node-scoped admission policies apply, and the audit log names the node).

use ::kube::Api;
use ::kube::api::PostParams;
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use serde_json::json;
use std::path::Path;
use testkit::cluster::control_plane::ControlPlane;

/// Multus thick's RBAC, as its own DaemonSet manifest grants it: NADs, pods (and their status),
/// events.
const MULTUS_RBAC: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: multus, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: multus}
rules:
- apiGroups: ["k8s.cni.cncf.io"]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [""]
  resources: ["pods", "pods/status"]
  verbs: ["get", "list", "update", "watch"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: multus}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: multus}
subjects:
- {kind: ServiceAccount, name: multus, namespace: kube-system}
"#;

/// The CRD, yh-genie's manifests (its DaemonSet stays without pods: no controller runs) and
/// Multus's RBAC.
pub fn apply_manifests(cp: &ControlPlane, root: &Path) {
    let file = |rel: &str| root.join(rel).display().to_string();
    cp.kubectl_ok(&["apply", "-f", &file("manifests/nad-crd.yaml")]);
    cp.kubectl_ok(&["apply", "-f", &file("manifests/yh-genie.yaml")]);
    cp.kubectl_ok(&["apply", "-f", &file("manifests/kubernetes-1.30/node-restriction.yaml")]);
    let rbac = cp.dir.join("multus-rbac.yaml");
    std::fs::write(&rbac, MULTUS_RBAC).unwrap();
    cp.kubectl_ok(&["apply", "-f", &rbac.display().to_string()]);
    cp.kubectl_ok(&[
        "wait",
        "--for=condition=established",
        "--timeout=60s",
        "crd/network-attachment-definitions.k8s.cni.cncf.io",
    ]);
}

/// Create the Node objects.
pub async fn nodes(client: &::kube::Client, names: &[String]) {
    let api: Api<Node> = Api::all(client.clone());
    let creates = names.iter().map(|name| {
        let api = api.clone();
        async move {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}}
            }))
            .unwrap();
            api.create(&PostParams::default(), &node).await.unwrap_or_else(|e| panic!("node {name}: {e}"));
        }
    });
    futures::stream::iter(creates).buffer_unordered(32).collect::<Vec<()>>().await;
}

/// Per node, the token of `service_account` bound to a pod of it on that node (`<prefix>-<node>`
/// in kube-system), as the DaemonSet's pod there would hold it.
pub async fn node_tokens(
    client: &::kube::Client,
    names: &[String],
    service_account: &str,
    prefix: &str,
) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    let requests = names.iter().map(|node| {
        let (pods, accounts) = (pods.clone(), accounts.clone());
        async move {
            let name = format!("{prefix}-{node}");
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "kube-system", "labels": {"app": prefix}},
                "spec": {"nodeName": node, "serviceAccountName": service_account,
                         "containers": [{"name": "agent", "image": "registry.invalid/agent:bench"}]}
            }))
            .unwrap();
            let pod = pods.create(&PostParams::default(), &pod).await.unwrap_or_else(|e| panic!("pod {name}: {e}"));
            let request = TokenRequest {
                spec: TokenRequestSpec {
                    audiences: Vec::new(),
                    bound_object_ref: Some(BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(name.clone()),
                        uid: pod.metadata.uid.clone(),
                    }),
                    expiration_seconds: Some(24 * 3600),
                },
                ..Default::default()
            };
            let answer = accounts
                .create_token_request(service_account, &PostParams::default(), &request)
                .await
                .unwrap_or_else(|e| panic!("token for {name}: {e}"));
            answer.status.expect("a token request's answer has a status").token
        }
    });
    futures::stream::iter(requests).buffered(32).collect().await
}
