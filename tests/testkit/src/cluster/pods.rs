//! What a user checks about pods with kubectl: Ready, status.podIP, addresses seen from inside,
//! annotations, and an HTTP fetch from one pod to another; and the manifests of the test pods
//! (`TestPod`: a sleeper or a web server, with only what a test asks of it).

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

/// The manifest of a busybox pod, built by saying only what matters to the test: where it runs,
/// its annotations, its network, what it asks of the node. Every pod gets a one-second grace
/// period, so that deleting it is quick. [`TestPod::yaml`] gives the text to apply (or to write
/// into a kubelet's static-pod dir); every string in it is quoted, so any value is taken as text.
pub struct TestPod {
    namespace: String,
    name: String,
    container: &'static str,
    command: &'static str,
    slot: Option<String>,
    annotations: Vec<(String, String)>,
    network: Option<String>,
    host_port: Option<u16>,
    limits: Vec<(String, u32)>,
    claims: Vec<String>,
}

/// A pod that sleeps for an hour (its container `main`).
pub fn sleeper(namespace: &str, name: &str) -> TestPod {
    TestPod::new(namespace, name, "main", "[sleep, '3600']")
}

/// A pod that serves its own name over HTTP on :8080 (its container `web`), as
/// [`Cluster::fetch`] asks.
pub fn web_server(namespace: &str, name: &str) -> TestPod {
    TestPod::new(
        namespace,
        name,
        "web",
        "[sh, -c, 'mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www']",
    )
}

/// `text` as a YAML double-quoted scalar (JSON's string syntax is a subset of it).
fn quoted(text: &str) -> String {
    Value::from(text).to_string()
}

impl TestPod {
    fn new(namespace: &str, name: &str, container: &'static str, command: &'static str) -> TestPod {
        TestPod {
            namespace: namespace.to_string(),
            name: name.to_string(),
            container,
            command,
            slot: None,
            annotations: Vec::new(),
            network: None,
            host_port: None,
            limits: Vec::new(),
            claims: Vec::new(),
        }
    }

    /// On the node with the e2e `slot` label (without: any node, or the node of a static pod).
    pub fn on_slot(mut self, slot: &str) -> TestPod {
        self.slot = Some(slot.to_string());
        self
    }

    /// Its network chosen in `CNI_NETWORK_CONFIG` as `network` says (without: none chosen, the
    /// selector's default).
    pub fn network(mut self, network: Network) -> TestPod {
        self.network = Some(match network {
            Network::Named(n) => format!("value: {}", quoted(n)),
            Network::FromConfigMap(map) => {
                format!("valueFrom: {{configMapKeyRef: {{name: {}, key: network}}}}", quoted(map))
            }
        });
        self
    }

    /// The annotation `key` set to `value`.
    pub fn annotation(mut self, key: &str, value: &str) -> TestPod {
        self.annotations.push((key.to_string(), value.to_string()));
        self
    }

    /// Its container's port 8080 published on the node's `port`.
    pub fn host_port(mut self, port: u16) -> TestPod {
        self.host_port = Some(port);
        self
    }

    /// A limit of `count` of the extended resource `resource` (a device plugin's).
    pub fn limit(mut self, resource: &str, count: u32) -> TestPod {
        self.limits.push((resource.to_string(), count));
        self
    }

    /// A resource claim `name` made from the ResourceClaimTemplate `template`.
    pub fn claim_from_template(mut self, name: &str, template: &str) -> TestPod {
        self.claims.push(format!("{{name: {}, resourceClaimTemplateName: {}}}", quoted(name), quoted(template)));
        self
    }

    /// A resource claim `name` that is the ResourceClaim `claim`.
    pub fn claim(mut self, name: &str, claim: &str) -> TestPod {
        self.claims.push(format!("{{name: {}, resourceClaimName: {}}}", quoted(name), quoted(claim)));
        self
    }

    /// The pod as YAML.
    pub fn yaml(&self) -> String {
        let mut out = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n  namespace: {}\n",
            quoted(&self.name),
            quoted(&self.namespace)
        );
        if !self.annotations.is_empty() {
            out.push_str("  annotations:\n");
            for (key, value) in &self.annotations {
                out.push_str(&format!("    {}: {}\n", quoted(key), quoted(value)));
            }
        }
        out.push_str("spec:\n");
        if let Some(slot) = &self.slot {
            out.push_str(&format!("  nodeSelector: {{yh-genie-e2e/slot: {}}}\n", quoted(slot)));
        }
        out.push_str("  terminationGracePeriodSeconds: 1\n  containers:\n");
        out.push_str(&format!(
            "  - name: {}\n    image: busybox:1.36\n    command: {}\n",
            self.container, self.command
        ));
        if let Some(port) = self.host_port {
            out.push_str(&format!("    ports: [{{containerPort: 8080, hostPort: {port}}}]\n"));
        }
        if let Some(choice) = &self.network {
            out.push_str(&format!("    env:\n    - {{name: CNI_NETWORK_CONFIG, {choice}}}\n"));
        }
        if !self.limits.is_empty() {
            out.push_str("    resources:\n      limits:\n");
            for (resource, count) in &self.limits {
                out.push_str(&format!("        {}: {}\n", quoted(resource), quoted(&count.to_string())));
            }
        }
        if !self.claims.is_empty() {
            out.push_str("  resourceClaims:\n");
            for claim in &self.claims {
                out.push_str(&format!("  - {claim}\n"));
            }
        }
        out
    }
}
