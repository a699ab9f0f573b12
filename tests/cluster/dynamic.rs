//! docs/dynamic-networks.md on the real cluster: networks attached to and detached from running
//! pods as their networks annotation is edited.

use super::{NS, PTPLAN};
use serde_json::Value;
use std::time::{Duration, Instant};
use testkit::cluster::Cluster;
use testkit::cluster::pods::{TestPod, in_cidr, web_server};
use testkit::process::report;

/// e2e/networks.yaml's ptpnet range.
const PTPNET: &str = "10.248.0.0/24";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";

/// A pod serving its name on :8080, on slot a (where multi-nad, on ptplan too, fetches from).
fn server(name: &str) -> TestPod {
    web_server(NS, name).on_slot("a")
}

/// docs/dynamic-networks.md's switch: `dynamicNetworks` in the selector's configuration (waited
/// for in node-a's conflist), then the overlay applied (`kubectl apply -k
/// overlays/dynamic-networks/`): the DaemonSet with the attach worker, rolled out.
fn switch_on(cluster: &Cluster) {
    // multi-nad (e2e/multinet.yaml, on ptplan) is the pod the hot-plugged interfaces answer; run
    // alone, this test makes it itself.
    cluster.apply_text(&format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"));
    let multinet = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/multinet.yaml");
    cluster.kubectl_ok(&["apply", "-f", &multinet.display().to_string()]);
    cluster.wait_pod_ready(NS, "multi-nad");
    let config = cluster.get_json(&["-n", "kube-system", "get", "configmap", "yh-genie-config"]);
    let mut selector: Value = serde_json::from_str(config["data"]["selector.json"].as_str().unwrap()).unwrap();
    selector["dynamicNetworks"] = Value::Bool(true);
    let patch = serde_json::json!({"data": {"selector.json": selector.to_string()}});
    cluster.kubectl_ok(&[
        "-n",
        "kube-system",
        "patch",
        "configmap",
        "yh-genie-config",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
    let overlay = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("overlays/dynamic-networks");
    cluster.kubectl_ok(&["apply", "-k", &overlay.display().to_string()]);
    cluster.rollout_yh_genie("300s");
    let conflist = cluster.worker("node-a").node_path("/etc/cni/net.d/00-yh-genie.conflist");
    cluster.wait_for_within(Duration::from_secs(150), "dynamicNetworks in node-a's conflist", || {
        let list: Value = serde_json::from_str(&std::fs::read_to_string(&conflist).ok()?).ok()?;
        (list["plugins"][0]["dynamicNetworks"] == true).then_some(())
    });
}

/// Set the pod's networks annotation (`""`: remove it).
fn annotate(cluster: &Cluster, pod: &str, networks: &str) {
    let value = if networks.is_empty() { format!("{NETWORKS}-") } else { format!("{NETWORKS}={networks}") };
    cluster.kubectl_ok(&["-n", NS, "annotate", "pod", pod, "--overwrite", &value]);
}

/// The pod's network-status as it is now: (interface, first address) per entry.
fn status_now(cluster: &Cluster, pod: &str) -> Vec<(String, String)> {
    let object = cluster.get_json(&["-n", NS, "get", "pod", pod]);
    let Some(text) = object["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"].as_str() else {
        return Vec::new();
    };
    let status: Value = serde_json::from_str(text).unwrap();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    status.as_array().unwrap().iter().map(|s| (text(&s["interface"]), text(&s["ips"][0]))).collect()
}

/// Wait until the pod's network-status lists exactly `interfaces` (eth0 first); their addresses.
fn wait_status(cluster: &Cluster, pod: &str, interfaces: &[&str]) -> Vec<(String, String)> {
    cluster.wait_for(&format!("{pod}'s network-status listing {interfaces:?}"), || {
        let status = status_now(cluster, pod);
        (status.iter().map(|(i, _)| i.as_str()).collect::<Vec<_>>() == interfaces).then_some(status)
    })
}

fn address_of<'a>(status: &'a [(String, String)], ifname: &str) -> &'a str {
    &status.iter().find(|(i, _)| i == ifname).unwrap_or_else(|| panic!("no {ifname} in {status:?}")).1
}

/// The pod's interfaces, as `ip -o link` names them inside it.
fn links(cluster: &Cluster, pod: &str) -> Vec<String> {
    let out = cluster.exec(NS, pod, &["ip", "-o", "link"]);
    let mut names: Vec<String> = out
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap().to_string())
        .filter(|n| n != "lo")
        .collect();
    names.sort();
    names
}

/// host-local's lease of `ip` on node-a's `network`.
fn leased(cluster: &Cluster, network: &str, ip: &str) -> bool {
    cluster.worker("node-a").node_path(&format!("/var/lib/cni/networks/{network}/{ip}")).exists()
}

/// The events of `pod` with `reason`: their messages.
fn events(cluster: &Cluster, pod: &str, reason: &str) -> Vec<String> {
    let selector = format!("involvedObject.name={pod},reason={reason}");
    let list = cluster.get_json(&["-n", NS, "get", "events", "--field-selector", &selector]);
    list["items"].as_array().unwrap().iter().map(|e| e["message"].as_str().unwrap_or_default().to_string()).collect()
}

/// docs/dynamic-networks.md on the real cluster: switched on as the docs say, then a running pod's
/// networks annotation edited with kubectl: a network added answers over its new interface within
/// seconds and network-status lists it; a network removed goes, its address returned; one edit
/// that adds and removes does both; a named interface gets another network behind it; a network
/// the policy refuses is an event and changes nothing; deleting the pod takes every interface,
/// hot-plugged ones included.
pub fn dynamic_networks_follow_a_running_pods_annotation(cluster: &mut Cluster) {
    switch_on(cluster);
    cluster.apply_text(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: ptpnet, namespace: {NS}}}\n"
    ));
    cluster.apply_text(&server("dyn-a").yaml());
    cluster.wait_pod_ready(NS, "dyn-a");
    assert_eq!(links(cluster, "dyn-a"), ["eth0"]);

    // Added: net1 on ptplan, answering multi-nad over ptplan.
    let edited = Instant::now();
    annotate(cluster, "dyn-a", "ptplan");
    let status = wait_status(cluster, "dyn-a", &["eth0", "net1"]);
    let net1 = address_of(&status, "net1").to_string();
    assert!(in_cidr(&net1, PTPLAN), "net1 {net1} is not in {PTPLAN}");
    assert_eq!(cluster.fetch(NS, "multi-nad", &net1), "dyn-a");
    report(&format!("dynamic networks: ptplan added, answering on {net1} in {:.1?}", edited.elapsed()));
    assert_eq!(cluster.pod_addresses(NS, "dyn-a", "net1"), std::slice::from_ref(&net1));
    assert!(events(cluster, "dyn-a", "AddedInterface").iter().any(|m| m.starts_with("Add net1 [10.249.")));

    // A second network: net2 on ptpnet; the first stays as it is.
    annotate(cluster, "dyn-a", "ptplan,ptpnet");
    let status = wait_status(cluster, "dyn-a", &["eth0", "net1", "net2"]);
    let net2 = address_of(&status, "net2").to_string();
    assert!(in_cidr(&net2, PTPNET), "net2 {net2} is not in {PTPNET}");
    assert_eq!(address_of(&status, "net1"), net1);

    // Removed, named by network only: net1 goes and its address is returned; net2 keeps its name.
    annotate(cluster, "dyn-a", "ptpnet");
    let status = wait_status(cluster, "dyn-a", &["eth0", "net2"]);
    assert_eq!(address_of(&status, "net2"), net2);
    assert_eq!(links(cluster, "dyn-a"), ["eth0", "net2"]);
    assert!(!leased(cluster, "ptplan", &net1), "ptplan's lease of {net1} is still held");
    assert!(
        events(cluster, "dyn-a", "RemovedInterface").iter().any(|m| m.starts_with(&format!("Remove net1 [{net1}")))
    );

    // One edit that adds and removes: ptpnet goes, ptplan comes on the lowest free netN.
    annotate(cluster, "dyn-a", "ptplan");
    let status = wait_status(cluster, "dyn-a", &["eth0", "net1"]);
    assert!(in_cidr(address_of(&status, "net1"), PTPLAN), "{status:?}");
    assert_eq!(links(cluster, "dyn-a"), ["eth0", "net1"]);
    assert!(!leased(cluster, "ptpnet", &net2), "ptpnet's lease of {net2} is still held");

    // The network behind a named interface swapped in one edit.
    annotate(cluster, "dyn-a", "ptplan@data0");
    let status = wait_status(cluster, "dyn-a", &["eth0", "data0"]);
    assert!(in_cidr(address_of(&status, "data0"), PTPLAN), "{status:?}");
    annotate(cluster, "dyn-a", "ptpnet@data0");
    let swapped = cluster.wait_for("data0 on ptpnet", || {
        let status = status_now(cluster, "dyn-a");
        let on_ptpnet = status.len() == 2 && status[1].0 == "data0" && in_cidr(&status[1].1, PTPNET);
        on_ptpnet.then_some(status)
    });
    assert_eq!(links(cluster, "dyn-a"), ["data0", "eth0"], "{swapped:?}");

    // Refused by the policy (another namespace's NAD, namespaceIsolation): an event, no change.
    annotate(cluster, "dyn-a", "ptpnet@data0,kube-system/ptplan");
    let failed = cluster.wait_for("a NetworkChangeFailed event", || {
        let found = events(cluster, "dyn-a", "NetworkChangeFailed");
        (!found.is_empty()).then_some(found)
    });
    assert!(failed[0].contains("kube-system"), "{failed:?}");
    assert_eq!(status_now(cluster, "dyn-a"), swapped);
    assert_eq!(links(cluster, "dyn-a"), ["data0", "eth0"]);

    // The pod deleted: its hot-plugged interface's lease goes with it.
    let data0 = swapped[1].1.clone();
    cluster.delete_pod(NS, "dyn-a");
    cluster
        .wait_for("the hot-plugged lease released with the pod", || (!leased(cluster, "ptpnet", &data0)).then_some(()));
}

/// The sandbox of `pod` running on node-a.
fn sandbox_of(cluster: &Cluster, pod: &str) -> String {
    let sandboxes = cluster.worker("node-a").running_sandboxes(pod);
    assert_eq!(sandboxes.len(), 1, "{pod}'s sandboxes on node-a: {sandboxes:?}");
    sandboxes[0].clone()
}

/// The addresses host-local holds on node-a's `network` for `sandbox`.
fn leases_of(cluster: &Cluster, network: &str, sandbox: &str) -> Vec<String> {
    let dir = cluster.worker("node-a").node_path(&format!("/var/lib/cni/networks/{network}"));
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut ips: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|owner| owner.lines().next() == Some(sandbox)))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    ips.sort();
    ips
}

/// The attachment records node-a holds for `sandbox`: (interface, whether it has its own result,
/// as the runtime's interface and hot-plugged ones have once complete; kept in the node's
/// `/run/yh-genie`, where the attach worker writes them too).
fn records_of(cluster: &Cluster, sandbox: &str) -> Vec<(String, bool)> {
    let node = cluster.worker("node-a");
    let dir = node.node_path("/var/lib/cni/yh-genie/attachments");
    let results = node.node_path("/run/yh-genie/results/var/lib/cni/yh-genie");
    let mut records: Vec<(String, bool)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let ifname = name.strip_prefix(&format!("{sandbox}:"))?.to_string();
            let own: Option<Value> =
                std::fs::read_to_string(results.join(&name)).ok().and_then(|text| serde_json::from_str(&text).ok());
            Some((ifname, own.is_some_and(|own| own.get("result").is_some())))
        })
        .collect();
    records.sort();
    records
}

/// The restarts of the attach worker on node-a.
fn worker_restarts(cluster: &Cluster) -> u64 {
    let pods = cluster.get_json(&[
        "-n",
        "kube-system",
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=yh-genie",
        "--field-selector",
        "spec.nodeName=node-a",
    ]);
    pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["status"]["containerStatuses"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["name"] == "attach-worker")
        .map(|c| c["restartCount"].as_u64().unwrap_or(0))
        .sum()
}

/// What goes wrong around an edit, on the real cluster: two pods edited at once each get their
/// network; the attach worker killed in the middle of a hot-plug (the interface up and its address
/// leased, the record not complete), then the DaemonSet's pod replaced, the agent with it: nothing is
/// left half made and the edit completes; a pod deleted right after an edit leaves no record and no
/// lease.
pub fn dynamic_networks_survive_what_goes_wrong_around_an_edit(cluster: &mut Cluster) {
    switch_on(cluster);
    cluster.apply_text(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: ptpnet, namespace: {NS}}}\n"
    ));
    for pod in ["dyn-c", "dyn-d"] {
        cluster.apply_text(&server(pod).yaml());
    }
    for pod in ["dyn-c", "dyn-d"] {
        cluster.wait_pod_ready(NS, pod);
    }

    // Two pods edited at once: each gets ptplan on net1, its own address, and answers over it.
    annotate(cluster, "dyn-c", "ptplan");
    annotate(cluster, "dyn-d", "ptplan");
    let c = address_of(&wait_status(cluster, "dyn-c", &["eth0", "net1"]), "net1").to_string();
    let d = address_of(&wait_status(cluster, "dyn-d", &["eth0", "net1"]), "net1").to_string();
    assert!(c != d && in_cidr(&c, PTPLAN) && in_cidr(&d, PTPLAN), "{c} {d}");
    assert_eq!(cluster.fetch(NS, "multi-nad", &c), "dyn-c");
    assert_eq!(cluster.fetch(NS, "multi-nad", &d), "dyn-d");

    // The attach worker killed once ptpnet's chain has run for dyn-c, before its record has the
    // result; then the DaemonSet's pod replaced (the agent and the worker restarted).
    let crash = "YH_GENIE_CRASH_AT=dynamic.attach.chain-done";
    let set_env = |value: &str| {
        cluster.kubectl_ok(&["-n", "kube-system", "set", "env", "daemonset/yh-genie", "-c", "attach-worker", value]);
        cluster.rollout_yh_genie("300s");
    };
    set_env(crash);
    let sandbox = sandbox_of(cluster, "dyn-c");
    let restarts = worker_restarts(cluster);
    annotate(cluster, "dyn-c", "ptplan,ptpnet");
    cluster.wait_for("the attach worker killed mid hot-plug", || (worker_restarts(cluster) > restarts).then_some(()));
    assert_eq!(status_now(cluster, "dyn-c").len(), 2, "the status says nothing of the hot-plug that did not complete");
    set_env("YH_GENIE_CRASH_AT-");
    let status = wait_status(cluster, "dyn-c", &["eth0", "net1", "net2"]);
    let net2 = address_of(&status, "net2").to_string();
    assert!(in_cidr(&net2, PTPNET), "net2 {net2} is not in {PTPNET}");
    assert_eq!(address_of(&status, "net1"), c);
    assert_eq!(links(cluster, "dyn-c"), ["eth0", "net1", "net2"]);
    assert_eq!(
        leases_of(cluster, "ptpnet", &sandbox),
        std::slice::from_ref(&net2),
        "one ptpnet address, the one it shows"
    );
    assert_eq!(leases_of(cluster, "ptplan", &sandbox), std::slice::from_ref(&c));
    let records = records_of(cluster, &sandbox);
    assert_eq!(records, ["eth0", "net1", "net2"].map(|i| (i.to_string(), true)), "every record of {sandbox} complete");
    assert_eq!(cluster.fetch(NS, "multi-nad", &c), "dyn-c");

    // A pod deleted right after an edit: whatever the edit made goes with it.
    let sandbox = sandbox_of(cluster, "dyn-d");
    annotate(cluster, "dyn-d", "ptplan,ptpnet");
    cluster.delete_pod(NS, "dyn-d");
    cluster.wait_for("no record and no lease of the deleted pod", || {
        let records = records_of(cluster, &sandbox);
        let leases = [leases_of(cluster, "ptplan", &sandbox), leases_of(cluster, "ptpnet", &sandbox)].concat();
        (records.is_empty() && leases.is_empty()).then_some(())
    });
    cluster.delete_pod(NS, "dyn-c");
}

/// Wait until `pod`'s network-status lists `ifname` and the pod answers multi-nad over it.
fn wait_answering(cluster: &Cluster, pod: &str, ifname: &str) {
    let ip = cluster.wait_for(&format!("{ifname} in {pod}'s network-status"), || {
        let status = status_now(cluster, pod);
        status.iter().find(|(i, _)| i == ifname).map(|(_, ip)| ip.clone())
    });
    cluster.wait_for(&format!("{pod} answering on {ifname}"), || {
        let request = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 1 {ip} 8080");
        let (ok, out, _) = cluster.kubectl(&["-n", NS, "exec", "multi-nad", "--", "sh", "-c", &request]);
        (ok && out.contains(pod)).then_some(())
    });
}

/// "p50 1.23s, p95 2.34s, max 3.45s" of `took`.
fn percentiles(took: &mut [Duration]) -> String {
    took.sort();
    let p = |q: f64| took[((took.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    format!("p50 {:.2?}, p95 {:.2?}, max {:.2?}", p(0.50), p(0.95), took[took.len() - 1])
}

/// The time from a `kubectl annotate` to the new interface answering, over 20 edits (every other
/// edit adds ptplan, timed; the next removes it), beside the same network given at creation: the
/// time from `kubectl apply` of a pod with ptplan in its annotation to it answering there, over 10
/// pods (the scheduler, the sandbox, the image's start and the runtime's ADD).
pub fn dynamic_networks_latency(cluster: &mut Cluster) {
    switch_on(cluster);
    cluster.apply_text(&server("dyn-b").yaml());
    cluster.wait_pod_ready(NS, "dyn-b");
    let mut edits = Vec::new();
    for _ in 0..20 {
        let edited = Instant::now();
        annotate(cluster, "dyn-b", "ptplan");
        wait_answering(cluster, "dyn-b", "net1");
        edits.push(edited.elapsed());
        annotate(cluster, "dyn-b", "");
        wait_status(cluster, "dyn-b", &["eth0"]);
    }
    cluster.delete_pod(NS, "dyn-b");
    let mut creations = Vec::new();
    for n in 0..10 {
        let name = format!("dyn-created-{n}");
        let pod = server(&name).annotation(NETWORKS, "ptplan").yaml();
        let created = Instant::now();
        cluster.apply_text(&pod);
        wait_answering(cluster, &name, "net1");
        creations.push(created.elapsed());
        cluster.delete_pod(NS, &name);
    }
    report(&format!(
        "dynamic networks: to an answering ptplan interface: {} edits of a running pod: {}; {} pods created with it: {}",
        edits.len(),
        percentiles(&mut edits),
        creations.len(),
        percentiles(&mut creations)
    ));
}

/// docs/dynamic-networks.md's switch off, after the tests above switched it on with the overlay:
/// `dynamicNetworks` false, then the plain manifest applied (`kubectl apply -f
/// manifests/yh-genie.yaml`): the DaemonSet rolls out without the attach worker, its host root or
/// hostPID, and the installer without --dynamic-networks; the node's pods still get their networks,
/// and an edit of a running pod's networks annotation is no longer applied.
pub fn dynamic_networks_switch_off_with_the_plain_manifest(cluster: &mut Cluster) {
    switch_on(cluster);
    let ds = cluster.get_json(&["-n", "kube-system", "get", "daemonset", "yh-genie"]);
    let containers = |ds: &Value| -> Vec<String> {
        let list = ds["spec"]["template"]["spec"]["containers"].as_array().cloned().unwrap_or_default();
        list.iter().map(|c| c["name"].as_str().unwrap_or_default().to_string()).collect()
    };
    assert_eq!(containers(&ds), ["install", "attach-worker"], "switched on");
    assert_eq!(
        ds["spec"]["template"]["spec"]["containers"][1]["image"],
        ds["spec"]["template"]["spec"]["containers"][0]["image"],
        "the worker runs the installer's image"
    );

    let config = cluster.get_json(&["-n", "kube-system", "get", "configmap", "yh-genie-config"]);
    let mut selector: Value = serde_json::from_str(config["data"]["selector.json"].as_str().unwrap()).unwrap();
    selector["dynamicNetworks"] = Value::Bool(false);
    let patch = serde_json::json!({"data": {"selector.json": selector.to_string()}});
    cluster.kubectl_ok(&[
        "-n",
        "kube-system",
        "patch",
        "configmap",
        "yh-genie-config",
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
    let plain = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/yh-genie.yaml");
    cluster.kubectl_ok(&["apply", "-f", &plain.display().to_string()]);
    cluster.rollout_yh_genie("300s");
    let ds = cluster.get_json(&["-n", "kube-system", "get", "daemonset", "yh-genie"]);
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(containers(&ds), ["install"], "switched off: {pod}");
    assert_ne!(pod["hostPID"], true, "{pod}");
    let volumes: Vec<&str> = pod["volumes"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
    assert!(!volumes.contains(&"host-root"), "{volumes:?}");
    let env = pod["containers"][0]["env"].as_array().cloned().unwrap_or_default();
    assert!(env.iter().all(|e| e["name"] != "YH_GENIE_DYNAMIC_NETWORKS"), "{env:?}");
    let conflist = cluster.worker("node-a").node_path("/etc/cni/net.d/00-yh-genie.conflist");
    cluster.wait_for_within(Duration::from_secs(150), "dynamicNetworks off in node-a's conflist", || {
        let list: Value = serde_json::from_str(&std::fs::read_to_string(&conflist).ok()?).ok()?;
        (list["plugins"][0]["dynamicNetworks"] != true).then_some(())
    });

    // The node works as before; a running pod's annotation edit is left alone.
    cluster.apply_text(&server("dyn-off").yaml());
    cluster.wait_pod_ready(NS, "dyn-off");
    annotate(cluster, "dyn-off", "ptplan");
    std::thread::sleep(Duration::from_secs(10));
    assert_eq!(links(cluster, "dyn-off"), ["eth0"], "an edit applied with dynamic networks off");
    cluster.delete_pod(NS, "dyn-off");
}
