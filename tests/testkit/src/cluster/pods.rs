//! What a user checks about pods with kubectl: Ready, status.podIP, addresses seen from inside,
//! annotations, and an HTTP fetch from one pod to another.

use super::Cluster;
use serde_json::Value;
use std::net::Ipv4Addr;

pub const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";

impl Cluster {
    /// The pod object, once it is Ready.
    pub fn wait_pod_ready(&self, namespace: &str, name: &str) -> Value {
        self.wait_for(&format!("pod {namespace}/{name} Ready"), || {
            let (ok, out, _) = self.kubectl(&["-n", namespace, "get", "pod", name, "-o", "json"]);
            let pod: Value = if ok { serde_json::from_str(&out).ok()? } else { return None };
            let ready =
                pod["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True");
            ready.then_some(pod)
        })
    }

    /// The pod's network-status annotation (of the pod with `uid`, when given: a pod recreated
    /// under its name), once it is there: (interface, its first address) per entry, in order.
    pub fn network_status(&self, namespace: &str, pod: &str, uid: Option<&str>) -> Vec<(String, String)> {
        let status = self.wait_for(&format!("{namespace}/{pod}'s {NETWORK_STATUS}"), || {
            let object = self.get_json(&["-n", namespace, "get", "pod", pod]);
            uid.is_none_or(|uid| object["metadata"]["uid"] == uid).then_some(())?;
            object["metadata"]["annotations"][NETWORK_STATUS].as_str().map(String::from)
        });
        let status: Value = serde_json::from_str(&status).unwrap();
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        status.as_array().unwrap().iter().map(|s| (text(&s["interface"]), text(&s["ips"][0]))).collect()
    }

    /// `kubectl exec` in the pod's first container; its stdout, or a panic.
    pub fn exec(&self, namespace: &str, pod: &str, command: &[&str]) -> String {
        let mut args = vec!["-n", namespace, "exec", pod, "--"];
        args.extend_from_slice(command);
        self.kubectl_ok(&args)
    }

    /// The IPv4 addresses on `device` inside the pod (from `ip -4 -o addr`).
    pub fn pod_addresses(&self, namespace: &str, pod: &str, device: &str) -> Vec<String> {
        self.exec(namespace, pod, &["ip", "-4", "-o", "addr", "show", "dev", device])
            .lines()
            .filter_map(|l| l.split_whitespace().nth(3))
            .map(|cidr| cidr.split('/').next().unwrap().to_string())
            .collect()
    }

    /// GET http://`ip`:8080/ from `from`: the body (each e2e pod serves its own name). With `nc`:
    /// Debian's static busybox's `wget` crashes (SIGSEGV), wherever it runs.
    pub fn fetch(&self, namespace: &str, from: &str, ip: &str) -> String {
        let request = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {ip} 8080");
        let response = self.exec(namespace, from, &["sh", "-c", &request]);
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{from} -> {ip}: {response:?}"));
        assert!(head.starts_with("HTTP/1.1 200"), "{from} -> {ip}: {head}");
        body.trim().to_string()
    }

    /// The podCIDR the controller-manager gave `node`.
    pub fn pod_cidr(&self, node: &str) -> String {
        self.kubectl_ok(&["get", "node", node, "-o", "jsonpath={.spec.podCIDR}"]).trim().to_string()
    }

    /// Delete a pod and wait until the API server no longer has it.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.kubectl_ok(&["-n", namespace, "delete", "pod", name, "--wait=true", "--timeout=90s"]);
    }
}

/// Whether `ip` is in the IPv4 network `cidr`.
pub fn in_cidr(ip: &str, cidr: &str) -> bool {
    let (net, bits) = cidr.split_once('/').expect("a CIDR");
    let (Ok(ip), Ok(net), Ok(bits)) = (ip.parse::<Ipv4Addr>(), net.parse::<Ipv4Addr>(), bits.parse::<u32>()) else {
        return false;
    };
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    u32::from(ip) & mask == u32::from(net) & mask
}

/// How a test pod names its network in `CNI_NETWORK_CONFIG`: the value itself, or the `network`
/// key of a ConfigMap of its namespace.
pub enum Network<'a> {
    Named(&'a str),
    FromConfigMap(&'a str),
}

/// A busybox pod that sleeps for an hour, as YAML: on the node with the e2e `slot` label when one
/// is given (none: any node, or a static pod's manifest), its network chosen as `network` says.
pub fn sleeper(namespace: &str, name: &str, slot: Option<&str>, network: Network) -> String {
    let node = slot.map(|s| format!("  nodeSelector: {{yh-genie-e2e/slot: {s}}}\n")).unwrap_or_default();
    let choice = match network {
        Network::Named(n) => format!("value: {n}"),
        Network::FromConfigMap(map) => format!("valueFrom: {{configMapKeyRef: {{name: {map}, key: network}}}}"),
    };
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
{node}  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox:1.36
    command: [sleep, '3600']
    env:
    - {{name: CNI_NETWORK_CONFIG, {choice}}}
"
    )
}
