//! The cluster's CNI, installed on the nodes after the start: yh-genie as users install it
//! (`kubectl apply -f manifests/`), or, as the baseline Kubernetes' e2e suite is compared with,
//! the reference `bridge` plugin written by hand as each node's only network configuration; and
//! the cluster's DNS, on the pod network the CNI gives it.

use super::Cluster;
use serde_json::{Value, json};
use std::time::Instant;

impl Cluster {
    /// yh-genie from the repository's manifests (the DaemonSet, its RBAC, the shipped networks
    /// ConfigMap with the yonghui network as the default); returns once both nodes are Ready.
    pub fn install_yh_genie(&self) {
        let started = Instant::now();
        let manifests = crate::repository().join("manifests/");
        self.kubectl_ok(&["apply", "-f", &manifests.display().to_string()]);
        self.wait_nodes_ready("yh-genie's conflist installed");
        crate::process::report(&format!("cluster: yh-genie installed, both nodes Ready in {:.1?}", started.elapsed()));
    }

    /// Debian's reference plugins, as a cluster without yh-genie would run them: on each node a
    /// conflist of `bridge` (gateway on `cni0`) with `host-local` on the node's podCIDR, and
    /// `portmap` for hostPorts; returns once both nodes are Ready. No masquerade, as the fabric's
    /// subnet.env tells yh-genie's yonghui network (`FLANNEL_IPMASQ=false`): the same wire.
    pub fn install_reference_bridge(&self) {
        for worker in &self.workers {
            let conflist = reference_bridge(&self.pod_cidr(&worker.name));
            let dir = worker.node_path("/etc/cni/net.d");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("10-bridge.conflist"), serde_json::to_string_pretty(&conflist).unwrap()).unwrap();
        }
        self.wait_nodes_ready("the reference bridge's conflist written");
    }

    /// CoreDNS as the cluster's DNS (coredns.yaml); returns once it answers (its pod Ready).
    pub fn install_coredns(&self) {
        self.apply_text(include_str!("coredns.yaml"));
        self.wait_for("CoreDNS Ready", || {
            let deployment = self.get_json(&["-n", "kube-system", "get", "deployment", "coredns"]);
            (deployment["status"]["readyReplicas"] == 1).then_some(())
        });
    }

    /// Waits until every node reports Ready (its runtime has found a network configuration).
    pub fn wait_nodes_ready(&self, after: &str) {
        self.wait_for(&format!("every node Ready ({after})"), || {
            let nodes = self.get_json(&["get", "nodes"]);
            let ready = nodes["items"].as_array()?.iter().filter(|n| condition(n, "Ready")).count();
            (ready == self.workers.len()).then_some(())
        });
    }
}

/// Whether `object`'s status has condition `kind` True.
pub fn condition(object: &Value, kind: &str) -> bool {
    object["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

fn reference_bridge(pod_cidr: &str) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "bridge-baseline",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": false,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}
