//! DRA on the real cluster (resource.k8s.io/v1, Kubernetes 1.34 and later): the project's test DRA driver
//! (tests/support/dra-driver, built by scripts/cluster/dra-driver.sh) runs inside node-a as a
//! kubelet plugin and publishes its links as devices; a DeviceClass selects the driver, claims pick
//! devices by their `k8s.cni.cncf.io/resourceName` attribute, and pods get them. What the device
//! lookup finds for a pod is read with `yh-genie explain` on the node, from the API server and from
//! the node agent, and the agent's watches are read from the API server's audit log. A pod whose
//! claim takes a link, on a NetworkAttachmentDefinition of that resource name, gets the link moved
//! in by the test device CNI (tests/devices/), as an SR-IOV VF of dra-driver-sriov would be; from
//! Kubernetes 1.36 (DRAExtendedResource on by default; GA in 1.37) so does a pod that asks for the
//! link as an extended resource, whose claim the scheduler makes.

use super::YH_GENIE_USER;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use testkit::cluster::Cluster;
use testkit::cluster::control_plane::api_url;
use testkit::cluster::pods::sleeper;
use testkit::process::report;

const DRA_NS: &str = "yh-dra";
const DRIVER: &str = "net.yh-genie.test";
/// Where the driver writes its links' device-info files: the device plugins' place, the selector's default.
const DEVINFO: &str = "/var/run/k8s.cni.cncf.io/devinfo";

/// The driver's binary, built once per source and cached.
fn driver_binary() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cluster/dra-driver.sh");
    let out = Command::new(&script).output().unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}: {stdout}{}", script.display(), String::from_utf8_lossy(&out.stderr));
    report(&format!("cluster: {}", stdout.lines().next().unwrap_or_default()));
    stdout.lines().last().expect("the binary's path").to_string()
}

/// `yh-genie explain` for a pod of `DRA_NS`, run on node-a as an operator runs it there.
fn explain(cluster: &Cluster, pod: &str) -> String {
    let out = cluster
        .worker("node-a")
        .node_command("/opt/cni/bin/yh-genie")
        .args(["explain", "-n", DRA_NS, "--pod", pod])
        .output()
        .unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn manifests() -> String {
    // One request of a claim's `spec.devices.requests`, its lines indented by `indent`.
    let request = |indent: usize, name: &str, count: u32, expression: &str| {
        let lines = [
            format!("- name: {name}"),
            "  exactly:".to_string(),
            "    deviceClassName: yh-genie-test-net".to_string(),
            "    allocationMode: ExactCount".to_string(),
            format!("    count: {count}"),
            "    selectors:".to_string(),
            format!("    - cel: {{expression: '{expression}'}}"),
        ];
        lines.iter().map(|line| format!("{:indent$}{line}\n", "")).collect::<String>()
    };
    let resource = |name: &str| format!("device.attributes[\"k8s.cni.cncf.io\"].resourceName == \"{name}\"");
    let bare = format!("device.attributes[\"{DRIVER}\"].kind == \"bare\"");
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: {DRA_NS}}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: yh-genie-test-net}}
spec:
  selectors:
  - cel: {{expression: 'device.driver == \"{DRIVER}\"'}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: two-vfs-and-a-gpu, namespace: {DRA_NS}}}
spec:
  spec:
    devices:
      requests:
{}{}---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: red, namespace: {DRA_NS}}}
spec:
  devices:
    requests:
{}---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: five-vfs, namespace: {DRA_NS}}}
spec:
  spec:
    devices:
      requests:
{}---
{}---
{}",
        request(6, "vf", 2, &resource("yh-genie.test/vf")),
        request(6, "gpu", 1, &bare),
        request(4, "red", 1, &resource("yh-genie.test/red")),
        request(6, "vf", 5, &resource("yh-genie.test/vf")),
        sleeper(DRA_NS, "dra-a")
            .on_slot("a")
            .claim_from_template("nics", "two-vfs-and-a-gpu")
            .claim("red", "red")
            .yaml(),
        sleeper(DRA_NS, "dra-unallocated").on_slot("a").claim_from_template("nics", "five-vfs").yaml(),
    )
}

/// The driver publishes node-a's links in a ResourceSlice; a pod whose claims (one from a
/// template, one named) take two `vf` links, the `red` link and a device without the CNI
/// attributes runs; the device lookup gives it the links' device IDs by resource name, sorted,
/// passes over the bare device saying why, and the node agent's answer gives the same; a pod whose
/// claim cannot be allocated is named as such. The agent watched the claims by name and the node's
/// slices by node, and was refused nothing.
pub fn dra_claims_give_pods_the_devices_their_slices_publish(cluster: &mut Cluster) {
    let binary = driver_binary();
    let kubeconfig =
        cluster.control.pki.kubeconfig("dra-driver", "yh-genie-test-dra-driver", &["system:masters"], &api_url());
    let worker = cluster.worker("node-a");
    let mut command = worker.node_command(&binary);
    command.args([
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--node",
        "node-a",
        "--driver-name",
        DRIVER,
        "--devices",
        "yh-genie.test/vf=2,yh-genie.test/red=1,yh-genie.test/net=1,yh-genie.test/ext=1",
        "--bare",
        "1",
        "--devinfo",
        DEVINFO,
    ]);
    // Ended at the end of the test (and with the run's processes if the test fails first).
    let mut driver = cluster.run.spawn("node-a-dra-driver", &mut command);
    let slice = cluster.wait_for("the DRA driver's ResourceSlice of node-a", || {
        let slices = cluster.get_json(&["get", "resourceslices", "--field-selector", "spec.nodeName=node-a"]);
        slices["items"].as_array()?.iter().find(|s| s["spec"]["driver"] == DRIVER).cloned()
    });
    let devices: Vec<(String, Value)> = slice["spec"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (d["name"].as_str().unwrap().to_string(), d["attributes"]["k8s.cni.cncf.io/deviceID"]["string"].clone())
        })
        .collect();
    assert_eq!(devices.len(), 6, "{slice}");
    assert!(worker.must("ip -br link show vf0").contains("vf0"), "the driver made its links in the node");

    cluster.apply_text(&manifests());
    let pod = cluster.wait_pod_ready(DRA_NS, "dra-a");
    let statuses = &pod["status"]["resourceClaimStatuses"];
    let claim = statuses[0]["resourceClaimName"].as_str().unwrap_or_else(|| panic!("{statuses}")).to_string();

    let direct = explain(cluster, "dra-a");
    for line in [
        format!("DRA claims:    {claim}, red"),
        "DRA devices:   yh-genie.test/red: red0".to_string(),
        "DRA devices:   yh-genie.test/vf: vf0, vf1".to_string(),
        format!(
            "passed over:   device bare-0 of pool node-a (driver {DRIVER}) of ResourceClaim {DRA_NS}/{claim}: \
             its ResourceSlice gives it neither"
        ),
        "the same DRA devices as above".to_string(),
    ] {
        assert!(direct.contains(&line), "explain lacks {line:?}:\n{direct}");
    }

    cluster.wait_for("the unallocatable pod's claim made", || {
        let pod = cluster.get_json(&["-n", DRA_NS, "get", "pod", "dra-unallocated"]);
        pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"].as_str().map(String::from)
    });
    let unallocated = explain(cluster, "dra-unallocated");
    assert!(unallocated.contains("is not allocated yet") && unallocated.contains("CNI error code 11"), "{unallocated}");

    a_claimed_link_is_moved_into_the_pod_on_its_device_network(cluster);
    let extended_claim = an_extended_resource_backed_by_dra_is_moved_into_the_pod(cluster);

    let events = cluster.audit_events();
    let agent: Vec<&Value> = events
        .iter()
        .filter(|e| e["user"]["username"] == YH_GENIE_USER && e["objectRef"]["apiGroup"] == "resource.k8s.io")
        .collect();
    let uri = |e: &&Value| e["requestURI"].as_str().unwrap_or_default().to_string();
    let watched = |resource: &str, selector: &str| {
        agent
            .iter()
            .any(|e| e["verb"] == "watch" && e["objectRef"]["resource"] == resource && uri(e).contains(selector))
    };
    let uris: Vec<String> = agent.iter().map(uri).collect();
    assert!(watched("resourceslices", "fieldSelector=spec.nodeName%3Dnode-a"), "{uris:#?}");
    assert!(watched("resourceclaims", &format!("fieldSelector=metadata.name%3D{claim}")), "{uris:#?}");
    assert!(watched("resourceclaims", "fieldSelector=metadata.name%3Dred"), "{uris:#?}");
    if let Some(claim) = extended_claim {
        assert!(watched("resourceclaims", &format!("fieldSelector=metadata.name%3D{claim}")), "{uris:#?}");
    }
    let refused: Vec<String> =
        agent.iter().filter(|e| e["responseStatus"]["code"].as_u64().unwrap_or(200) >= 400).map(uri).collect();
    assert_eq!(refused, Vec::<String>::new(), "yh-genie's DRA requests refused");
    report(&format!("cluster: yh-genie's DRA requests: {uris:?}"));
    cluster.kubectl_ok(&["delete", "namespace", DRA_NS, "--wait=true"]);
    driver.kill().unwrap();
    driver.wait().unwrap();
}

/// The network `name` of the test device CNI on node-a: its conflist in the conf dir's `name/`.
fn install_device_network(cluster: &Cluster, name: &str) {
    let (_, cni) = testkit::devices::support_binaries();
    let worker = cluster.worker("node-a");
    std::fs::copy(&cni, worker.node_path("/opt/cni/bin/test-device-cni")).unwrap();
    let dir = worker.node_path(&format!("/etc/cni/net.d/{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = serde_json::json!({"cniVersion": "1.0.0", "name": name, "plugins": [
        {"type": "test-device-cni", "capabilities": {"CNIDeviceInfoFile": true}}]});
    std::fs::write(dir.join("10-device.conflist"), conf.to_string()).unwrap();
}

/// GETs and LISTs yh-genie made since audit event `before` (its watches excepted).
fn reads_since(cluster: &Cluster, before: usize) -> Vec<String> {
    cluster.audit_events()[before..]
        .iter()
        .filter(|e| {
            e["user"]["username"] == YH_GENIE_USER && ["get", "list"].contains(&e["verb"].as_str().unwrap_or(""))
        })
        .filter(|e| e["requestURI"].as_str().is_some_and(|uri| !uri.contains("watch=true")))
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect()
}

/// From Kubernetes 1.36: pod dra-ext asks for `yh-genie.test/ext: 1` in its limits, a resource no
/// node advertises but a DeviceClass stands for (`extendedResourceName`); the scheduler makes the
/// pod's claim for it (`status.extendedResourceClaimStatus`) from the class's `ext` link, and the
/// pod names NAD dra-ext of that resource. Its ADD, answered by the node agent, moves the link in
/// as for a claim the pod names; DEL gives it back. Returns the claim's name (none before 1.36,
/// where the feature is off by default: said, not run).
fn an_extended_resource_backed_by_dra_is_moved_into_the_pod(cluster: &Cluster) -> Option<String> {
    let minor = testkit::cluster::kubernetes_minor(&cluster.bin);
    if minor < 36 {
        report(&format!(
            "cluster: Kubernetes 1.{minor}: DRA's extended resources are off by default before 1.36; not run"
        ));
        return None;
    }
    install_device_network(cluster, "dra-ext");
    let before = cluster.audit_events().len();
    let class = format!(
        "device.driver == \"{DRIVER}\" && device.attributes[\"k8s.cni.cncf.io\"].resourceName == \"yh-genie.test/ext\""
    );
    cluster.apply_text(&format!(
        "apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: yh-genie-test-ext}}
spec:
  extendedResourceName: yh-genie.test/ext
  selectors:
  - cel: {{expression: '{class}'}}
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: dra-ext
  namespace: {DRA_NS}
  annotations: {{k8s.v1.cni.cncf.io/resourceName: yh-genie.test/ext}}
---
{}",
        sleeper(DRA_NS, "dra-ext")
            .on_slot("a")
            .annotation("k8s.v1.cni.cncf.io/networks", "dra-ext")
            .limit("yh-genie.test/ext", 1)
            .yaml()
    ));
    let pod = cluster.wait_pod_ready(DRA_NS, "dra-ext");
    let status = &pod["status"]["extendedResourceClaimStatus"];
    let claim = status["resourceClaimName"].as_str().unwrap_or_else(|| panic!("dra-ext: {status}")).to_string();
    let infos = super::devices::device_infos(cluster, DRA_NS, "dra-ext");
    assert_eq!(infos, [("net1".to_string(), "ext0".to_string())], "dra-ext's network-status");
    let links = super::devices::pod_links(cluster, DRA_NS, "dra-ext");
    assert!(links.contains(&"net1".to_string()), "dra-ext: no net1 in {links:?}");
    assert!(!super::devices::node_has(cluster, "ext0"), "ext0 is still in the node's namespace");
    // Before explain, which reads the pod and its objects from the API server as yh-genie.
    assert_eq!(reads_since(cluster, before), Vec::<String>::new(), "GETs and LISTs by yh-genie during dra-ext's ADD");
    let explained = explain(cluster, "dra-ext");
    assert!(explained.contains("DRA devices:   yh-genie.test/ext: ext0"), "{explained}");
    report(&format!("cluster: dra-ext got ext0 through its extended resource's claim {claim}"));
    cluster.delete_pod(DRA_NS, "dra-ext");
    assert!(super::devices::node_has(cluster, "ext0"), "dra-ext's DEL did not give ext0 back to the node");
    Some(claim)
}

/// Pod dra-net claims the `net` link (from a template) and names NAD dra-net, whose resourceName is
/// the link's: its ADD, answered by the node agent (no GET), hands the link's device ID to the test
/// device CNI, which moves it in; network-status carries the device-info file the driver wrote;
/// DEL gives the link back to the node.
fn a_claimed_link_is_moved_into_the_pod_on_its_device_network(cluster: &Cluster) {
    install_device_network(cluster, "dra-net");
    let before = cluster.audit_events().len();
    cluster.apply_text(&format!(
        "apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: dra-net
  namespace: {DRA_NS}
  annotations: {{k8s.v1.cni.cncf.io/resourceName: yh-genie.test/net}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: one-net, namespace: {DRA_NS}}}
spec:
  spec:
    devices:
      requests:
      - name: net
        exactly:
          deviceClassName: yh-genie-test-net
          selectors:
          - cel: {{expression: 'device.attributes[\"k8s.cni.cncf.io\"].resourceName == \"yh-genie.test/net\"'}}
---
{}",
        sleeper(DRA_NS, "dra-net")
            .on_slot("a")
            .annotation("k8s.v1.cni.cncf.io/networks", "dra-net")
            .claim_from_template("nic", "one-net")
            .yaml()
    ));
    cluster.wait_pod_ready(DRA_NS, "dra-net");
    let infos = super::devices::device_infos(cluster, DRA_NS, "dra-net");
    assert_eq!(infos, [("net1".to_string(), "net0".to_string())], "dra-net's network-status");
    let links = super::devices::pod_links(cluster, DRA_NS, "dra-net");
    assert!(links.contains(&"net1".to_string()), "dra-net: no net1 in {links:?}");
    assert!(!super::devices::node_has(cluster, "net0"), "net0 is still in the node's namespace");
    assert_eq!(reads_since(cluster, before), Vec::<String>::new(), "GETs and LISTs by yh-genie during dra-net's ADD");
    cluster.delete_pod(DRA_NS, "dra-net");
    assert!(super::devices::node_has(cluster, "net0"), "dra-net's DEL did not give net0 back to the node");
}
