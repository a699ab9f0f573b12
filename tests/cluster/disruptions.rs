//! The cluster suite's tests that stop or take away something: the API server, a static pod's
//! manifest, the whole install.

use super::{NS, YH_GENIE_USER, condition};
use serde_json::Value;
use std::path::Path;
use testkit::cluster::Cluster;
use testkit::cluster::pods::{Network, in_cidr, sleeper, web_server};
use testkit::process::report;

/// docs/install.md's uninstall: workloads first, then both manifests. Every installer pod removes
/// the conflist and its kubeconfig (containerd reports the network not ready again), and leaves
/// the binaries and the network files; the workloads' leases and records went with their pods.
pub fn uninstall_leaves_the_nodes_as_the_docs_say(cluster: &mut Cluster) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = |rel: &str| repo.join(rel).display().to_string();
    cluster.kubectl_ok(&["delete", "namespace", NS, "--wait=true", "--timeout=120s"]);
    cluster.kubectl_ok(&["delete", "-f", &path("manifests/yh-genie.yaml"), "--wait=true", "--timeout=60s"]);
    cluster.kubectl_ok(&["delete", "-f", &path("manifests/config.yaml"), "--wait=true", "--timeout=60s"]);
    cluster.wait_for("the installer pods gone", || {
        let pods = cluster.get_json(&["-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=yh-genie"]);
        pods["items"].as_array()?.is_empty().then_some(())
    });
    for worker in &cluster.workers {
        let gone = ["/etc/cni/net.d/00-yh-genie.conflist", "/etc/cni/net.d/yh-genie.d/yh-genie.kubeconfig"];
        for file in gone {
            assert!(!worker.node_path(file).exists(), "{}: {file} is left", worker.name);
        }
        for file in ["/opt/cni/bin/yh-genie", "/opt/cni/bin/yonghui", "/etc/cni/net.d/yonghui/yonghui.conflist"] {
            assert!(worker.node_path(file).exists(), "{}: {file} is gone, the docs say it stays", worker.name);
        }
        let mut leases = Vec::new();
        testkit::inspect::walk(&worker.node_path("/var/lib/cni/networks"), &mut |p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.parse::<std::net::Ipv4Addr>().is_ok() {
                leases.push(p.display().to_string());
            }
        });
        assert_eq!(leases, Vec::<String>::new(), "{}: leases of deleted pods", worker.name);
    }
    // containerd asks for the network's status on every CRI Status and reports the node NotReady
    // without a conflist; CRI-O asks only until its first success (its `cni_status_grace_period`
    // is 0 unless set), so a CRI-O node stays Ready, as docs/cni.md says.
    let on = |crio: bool| -> Vec<&str> {
        cluster.workers.iter().filter(|w| (w.runtime.name() == "crio") == crio).map(|w| w.name.as_str()).collect()
    };
    let (crio, containerd) = (on(true), on(false));
    cluster.wait_for("the containerd nodes NotReady: no CNI configuration", || {
        let nodes = cluster.get_json(&["get", "nodes"]);
        let items = nodes["items"].as_array()?;
        let ready =
            |name: &str| items.iter().find(|n| n["metadata"]["name"] == name).is_some_and(|n| condition(n, "Ready"));
        containerd.iter().all(|name| !ready(name)).then_some(())
    });
    let nodes = cluster.get_json(&["get", "nodes"]);
    for name in crio {
        let node = nodes["items"].as_array().unwrap().iter().find(|n| n["metadata"]["name"] == name).unwrap();
        assert!(condition(node, "Ready"), "{name} on CRI-O is NotReady after the uninstall: {node}");
    }
}

/// The API server stops. A pod whose sandbox dies meanwhile (its pause process killed) gets a new
/// one from the kubelet: the new sandbox runs (containerd starts a sandbox only after the CNI ADD
/// succeeded) with no API server, the agent's cache answering. Once the API server is back the
/// pod is Ready with an address of its node, and no GET was made for it.
pub fn api_server_down_a_held_pod_gets_its_network_again(cluster: &mut Cluster) {
    let pod = "outage-held";
    cluster.apply_text(&sleeper(NS, pod).on_slot("a").network(Network::FromConfigMap("net-yonghui")).yaml());
    cluster.wait_pod_ready(NS, pod);
    let sandboxes_before = cluster.worker("node-a").running_sandboxes(pod);
    assert_eq!(sandboxes_before.len(), 1, "{pod}: {sandboxes_before:?}");
    let before = cluster.audit_events().len();
    cluster.stop_apiserver();
    let (ok, _, _) = cluster.kubectl(&["get", "--raw", "/readyz", "--request-timeout=2s"]);
    assert!(!ok, "the API server still answers");
    let worker = cluster.worker("node-a");
    worker.kill_sandbox(&sandboxes_before[0]);
    let new = cluster.wait_for(&format!("a new sandbox of {pod} running with the API server down"), || {
        let now = worker.running_sandboxes(pod);
        now.into_iter().find(|id| !sandboxes_before.contains(id))
    });
    let address = worker.sandbox_address(&new);
    report(&format!("cluster: {pod}'s new sandbox {new} runs with eth0 {address}, the API server down"));
    cluster.restart_apiserver();
    let cidr = cluster.pod_cidr("node-a");
    assert!(in_cidr(&address, &cidr), "{pod}'s new sandbox has eth0 {address:?}, not in {cidr}");
    let ip = cluster.wait_for(&format!("{pod} Ready with the new sandbox's address"), || {
        let object = cluster.get_json(&["-n", NS, "get", "pod", pod]);
        let ip = object["status"]["podIP"].as_str()?.to_string();
        (condition(&object, "Ready") && ip == address).then_some(ip)
    });
    let events = cluster.audit_events();
    let gets: Vec<&Value> = events[before.min(events.len())..]
        .iter()
        .filter(|e| e["user"]["username"] == YH_GENIE_USER && e["verb"] == "get" && e["objectRef"]["name"] == pod)
        .collect();
    assert!(gets.is_empty(), "{pod} ({ip}): GETs by the plugin: {gets:?}");
}

/// A static pod (a file in the kubelet's manifest dir, as control-plane components run) on a pod
/// network: the kubelet makes its sandbox with the file's uid as K8S_POD_UID, while the API
/// server's mirror pod has a uid of its own. It should get its network like any pod.
pub fn static_pod_on_a_pod_network_gets_its_network(cluster: &mut Cluster) {
    let worker = cluster.worker("node-b");
    let manifest = web_server(NS, "static-web").network(Network::Named("yonghui")).yaml();
    std::fs::write(worker.node_path("/etc/kubernetes/manifests/static-web.yaml"), manifest).unwrap();
    let mirror = format!("static-web-{}", worker.name);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cluster.wait_pod_ready(NS, &mirror)));
    let events =
        cluster.kubectl(&["-n", NS, "get", "events", "--field-selector", &format!("involvedObject.name={mirror}")]).1;
    std::fs::remove_file(worker.node_path("/etc/kubernetes/manifests/static-web.yaml")).unwrap();
    let pod = result.unwrap_or_else(|_| panic!("the static pod {mirror} is not Ready; its events:\n{events}"));
    let cidr = cluster.pod_cidr("node-b");
    let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
    assert!(in_cidr(ip, &cidr), "{mirror}: status.podIP {ip:?} is not in {cidr}");
}

/// The API server stops, and a pod appears that the agent has never seen: a static pod, the one
/// kind of pod a node starts with no API server. Its ADD cannot learn the pod's network choice (no
/// mirror pod, no API server to ask), so it fails, with a message saying why, and nothing runs; the
/// kubelet retries. Once the API server is back (and the kubelet has made the mirror pod) a retry
/// gets the pod its network.
pub fn api_server_down_an_unknown_pod_is_retried_until_the_api_is_back(cluster: &mut Cluster) {
    let worker_name = "node-a";
    let mirror = format!("outage-static-{worker_name}");
    let manifest_path = cluster.worker(worker_name).node_path("/etc/kubernetes/manifests/outage-static.yaml");
    cluster.stop_apiserver();
    std::fs::write(&manifest_path, sleeper(NS, "outage-static").network(Network::Named("yonghui")).yaml()).unwrap();
    let kubelet_log = cluster.run.log(&format!("{worker_name}-kubelet"));
    let refused = cluster.wait_for(&format!("{mirror}'s ADD refused while the API server is down"), || {
        let log = std::fs::read_to_string(&kubelet_log).unwrap_or_default();
        log.lines().find(|l| l.contains(&mirror) && l.contains("failed to setup network")).map(String::from)
    });
    let message = refused.split("yh-genie").nth(1).unwrap_or(&refused).chars().take(300).collect::<String>();
    report(&format!("cluster: {mirror}'s ADD with the API server down: ...yh-genie{message}..."));
    let running = cluster.worker(worker_name).running_sandboxes(&mirror);
    cluster.restart_apiserver();
    assert_eq!(running, Vec::<String>::new(), "{mirror}: a sandbox ran with no network choice known");
    let cidr = cluster.pod_cidr(worker_name);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // What yh-genie owes: a try of the kubelet's after the API server is back gets the
        // network, on the node, with nobody's help. The pace is the kubelet's (its sandbox retries
        // back off) and kube-proxy's (the Service address answers once it has the API server's
        // endpoint again), so the wait is theirs, not PATIENCE.
        let back = std::time::Instant::now();
        let worker = cluster.worker(worker_name);
        let within = std::time::Duration::from_secs(300);
        let address = cluster.wait_for_within(within, &format!("{mirror}'s sandbox running with eth0"), || {
            let id = worker.running_sandboxes(&mirror).into_iter().next()?;
            Some(worker.sandbox_address(&id)).filter(|a| !a.is_empty())
        });
        report(&format!("cluster: {mirror} has eth0 {address}, {:.0?} after the API server came back", back.elapsed()));
        assert!(in_cidr(&address, &cidr), "{mirror}: eth0 {address} is not in {cidr}");
        wait_mirror_pod_ready(cluster, worker_name, &mirror)
    }));
    std::fs::remove_file(&manifest_path).unwrap();
    let pod = result.unwrap_or_else(|_| panic!("{mirror} is not Ready after the API server came back"));
    let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
    assert!(in_cidr(ip, &cidr), "{mirror}: status.podIP {ip:?} is not in {cidr}");
}

/// The static pod's mirror pod, once the kubelet reports it Ready. A kubelet whose pod watch
/// missed the mirror pod it created as the API server came back keeps trying to create it
/// ("Failed creating a mirror pod ... already exists") and never writes its status; Kubernetes'
/// remedy is to delete the mirror pod, which the kubelet then creates afresh. The static pod
/// itself, and its network, are untouched by that.
fn wait_mirror_pod_ready(cluster: &Cluster, worker_name: &str, mirror: &str) -> Value {
    let ready = || std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cluster.wait_pod_ready(NS, mirror))).ok();
    if let Some(pod) = ready() {
        return pod;
    }
    let kubelet_log = std::fs::read_to_string(cluster.run.log(&format!("{worker_name}-kubelet"))).unwrap_or_default();
    let stale = kubelet_log.lines().any(|l| l.contains("Failed creating a mirror pod") && l.contains(mirror));
    assert!(stale, "{mirror} is not Ready and the kubelet did not lose track of its mirror pod");
    report(&format!("cluster: the kubelet lost track of {mirror}'s mirror pod; deleted so that it makes it again"));
    cluster.kubectl_ok(&["-n", NS, "delete", "pod", mirror, "--grace-period=0", "--force"]);
    cluster.wait_pod_ready(NS, mirror)
}
