//! The node-density workload, as the cluster's admin and its kubelets would make it: per tenant
//! namespace a networks ConfigMap (the pods' `CNI_NETWORK_CONFIG`) and five
//! NetworkAttachmentDefinitions (the pods' networks annotation names all five); per node P pods of
//! one namespace (node i's pods are in namespace i mod N), created in a burst and each then given a
//! Running status as its kubelet would report it; churn: pods deleted (gracefully, then for good, as
//! a kubelet confirms) and created anew, the networks ConfigMaps edited, the NADs updated.

use ::kube::Api;
use ::kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use serde_json::json;
use std::time::Instant;
use yh_genie::platform::kube::NetworkAttachmentDefinition;

pub const NETWORKS_CONFIGMAP: &str = "networks";
pub const NETWORKS_KEY: &str = "network";
/// The network the ConfigMap names (the pod's first interface).
pub const PRIMARY: &str = "noop";
pub const NADS: [&str; 5] = ["net-a", "net-b", "net-c", "net-d", "net-e"];
/// Requests in flight at once.
const CONCURRENCY: usize = 32;

pub struct Layout {
    pub nodes: Vec<String>,
    pub namespaces: usize,
}

impl Layout {
    pub fn namespace(&self, node: usize) -> String {
        format!("tenant-{}", node % self.namespaces)
    }

    pub fn namespaces(&self) -> Vec<String> {
        (0..self.namespaces.min(self.nodes.len())).map(|i| format!("tenant-{i}")).collect()
    }
}

/// A pod the workload created.
#[derive(Debug, Clone)]
pub struct Created {
    pub node: usize,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// When its create returned: the pod exists.
    pub at: Instant,
}

/// Namespaces (with the default service account the ServiceAccount admission asks for), their
/// networks ConfigMap and NADs.
pub async fn objects(client: &::kube::Client, layout: &Layout) {
    let pp = PostParams::default();
    for namespace in layout.namespaces() {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(&pp, &serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap())
            .await
            .unwrap();
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
        accounts.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap()).await.unwrap();
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        let map = json!({"metadata": {"name": NETWORKS_CONFIGMAP}, "data": {NETWORKS_KEY: PRIMARY, "round": "0"}});
        maps.create(&pp, &serde_json::from_value(map).unwrap()).await.unwrap();
        let nads: Api<NetworkAttachmentDefinition> = Api::namespaced(client.clone(), &namespace);
        for nad in NADS {
            // No config: the node's network of that name, as Multus and yh-genie both read it.
            let object = json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                                "metadata": {"name": nad}, "spec": {}});
            nads.create(&pp, &serde_json::from_value(object).unwrap()).await.unwrap();
        }
    }
}

/// A pod of a Deployment-like workload: two containers, requests, a port, labels; the first
/// container's `CNI_NETWORK_CONFIG` from the namespace's networks ConfigMap, and every NAD in the
/// networks annotation.
pub fn pod(node: &str, name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"app": "web", "pod-template-hash": "5d8f7c9b6d", "tier": "frontend"},
            "annotations": {"k8s.v1.cni.cncf.io/networks": NADS.join(",")},
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {"name": "app", "image": "registry.invalid/web:1.4.2", "ports": [{"containerPort": 8080, "name": "http"}],
                 "env": [{"name": "CNI_NETWORK_CONFIG", "valueFrom": {"configMapKeyRef": {"name": NETWORKS_CONFIGMAP, "key": NETWORKS_KEY}}},
                         {"name": "LOG_LEVEL", "value": "info"}],
                 "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
                 "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}},
                {"name": "proxy", "image": "registry.invalid/proxy:2.0.1", "resources": {"requests": {"cpu": "5m", "memory": "16Mi"}}}
            ]
        }
    }))
    .unwrap()
}

/// The status a kubelet reports once the pod runs.
fn running(ip: &str) -> serde_json::Value {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let container = |name: &str, image: &str| {
        json!({"name": name, "image": image, "imageID": format!("{image}@sha256:0"), "ready": true, "restartCount": 0,
               "started": true, "containerID": format!("containerd://{}", name), "state": {"running": {"startedAt": now}}})
    };
    json!({"status": {
        "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.99.0.1", "startTime": now,
        "conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": now},
                       {"type": "Ready", "status": "True", "lastTransitionTime": now},
                       {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                       {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
        "containerStatuses": [container("app", "registry.invalid/web:1.4.2"), container("proxy", "registry.invalid/proxy:2.0.1")],
        "qosClass": "Burstable"
    }})
}

/// Create `pods` (node index, name), `CONCURRENCY` at a time, each then given its Running status;
/// `created` hears of each as soon as it exists.
pub async fn create_pods(
    client: &::kube::Client,
    layout: &Layout,
    pods: Vec<(usize, String)>,
    created: &(dyn Fn(Created) + Sync),
) {
    let creates = pods.into_iter().map(|(node, name)| {
        let namespace = layout.namespace(node);
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let object = pod(&layout.nodes[node], &name);
        async move {
            let made = api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("pod {name}: {e}"));
            let at = Instant::now();
            let uid = made.metadata.uid.clone().unwrap_or_default();
            created(Created { node, namespace, name: name.clone(), uid, at });
            let ip = format!(
                "10.{}.{}.{}",
                100 + node / 250,
                node % 250,
                1 + made.metadata.name.as_ref().map_or(0, |n| n.len()) % 250
            );
            let status = Patch::Merge(running(&ip));
            api.patch_status(&name, &PatchParams::default(), &status)
                .await
                .unwrap_or_else(|e| panic!("status of {name}: {e}"));
        }
    });
    futures::stream::iter(creates).buffer_unordered(CONCURRENCY).collect::<Vec<()>>().await;
}

/// Delete `pods` (namespace, name) as the kubelet sees it done: gracefully (the pod gets its
/// deletion timestamp), then for good once its containers are gone.
pub async fn delete_pods(client: &::kube::Client, pods: Vec<(String, String)>) {
    let deletes = pods.into_iter().map(|(namespace, name)| {
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        async move {
            api.delete(&name, &DeleteParams::default()).await.unwrap_or_else(|e| panic!("delete {name}: {e}"));
            let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
            api.delete(&name, &now).await.unwrap_or_else(|e| panic!("delete {name} for good: {e}"));
        }
    });
    futures::stream::iter(deletes).buffer_unordered(CONCURRENCY).collect::<Vec<()>>().await;
}

/// Edit every networks ConfigMap (the network it names stays; another key changes), and update
/// every NAD (a label), as round `round` of the churn.
pub async fn edit_networks(client: &::kube::Client, layout: &Layout, round: usize) {
    let pp = PatchParams::default();
    for namespace in layout.namespaces() {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        let edit = Patch::Merge(json!({"data": {"round": round.to_string()}}));
        maps.patch(NETWORKS_CONFIGMAP, &pp, &edit).await.unwrap();
        let nads: Api<NetworkAttachmentDefinition> = Api::namespaced(client.clone(), &namespace);
        for nad in NADS {
            let label = Patch::Merge(json!({"metadata": {"labels": {"round": round.to_string()}}}));
            nads.patch(nad, &pp, &label).await.unwrap();
        }
    }
}
