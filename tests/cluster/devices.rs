//! Device networks on the real cluster: the project's test device plugin (tests/devices/) registers
//! with node-a's kubelet and advertises "VFs" (one end of veth pairs made in the node's network
//! namespace) of two resources; NADs annotated with those resources lead to the test device CNI,
//! which, like sriov-cni, fails without `deviceID` and moves the link it names into the pod.

use super::{NS, YH_GENIE_USER};
use serde_json::Value;
use std::process::Child;
use testkit::cluster::Cluster;
use testkit::cluster::pods::sleeper;

const VF: &str = "example.com/vf";
const VF_B: &str = "example.com/vf-b";
const VFS: [&str; 3] = ["yhvf0", "yhvf1", "yhvf2"];
const VFS_B: [&str; 1] = ["yhvfb0"];
/// NAD (and node network) name, resource.
const NETWORKS: [(&str, &str); 3] = [("vf-a1", VF), ("vf-a2", VF), ("vf-b", VF_B)];

/// What the test set up on node-a, undone even when it fails.
struct Devices<'a> {
    cluster: &'a Cluster,
    plugins: Vec<Child>,
}

impl Drop for Devices<'_> {
    fn drop(&mut self) {
        for pod in ["dev-one", "dev-two", "dev-mixed", "dev-none"] {
            let _ = self.cluster.kubectl(&["-n", NS, "delete", "pod", pod, "--ignore-not-found", "--wait=true"]);
        }
        for (nad, _) in NETWORKS {
            let _ =
                self.cluster.kubectl(&["-n", NS, "delete", "network-attachment-definition", nad, "--ignore-not-found"]);
        }
        for plugin in &mut self.plugins {
            let _ = plugin.kill();
            let _ = plugin.wait();
        }
        let worker = self.cluster.worker("node-a");
        for vf in VFS.iter().chain(&VFS_B) {
            let _ = worker.node_command("ip").args(["link", "del", vf]).status();
        }
    }
}

/// A pod on slot a asking for `networks` in its networks annotation, with `limits` of the device
/// plugins' resources.
fn pod(name: &str, networks: &str, limits: &[(&str, u32)]) -> String {
    let pod = sleeper(NS, name).on_slot("a").annotation("k8s.v1.cni.cncf.io/networks", networks);
    limits.iter().fold(pod, |pod, (resource, count)| pod.limit(resource, *count)).yaml()
}

/// Each device interface of the pod's network-status: (interface, device-info's PCI address).
pub(super) fn device_infos(cluster: &Cluster, namespace: &str, pod: &str) -> Vec<(String, String)> {
    cluster.wait_for(&format!("{pod}'s network-status with its device-info"), || {
        let object = cluster.get_json(&["-n", namespace, "get", "pod", pod]);
        let text = object["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"].as_str()?.to_string();
        let entries: Vec<Value> = serde_json::from_str(&text).ok()?;
        let devices: Vec<(String, String)> = entries
            .iter()
            .filter(|e| e.get("device-info").is_some())
            .map(|e| {
                let address = e["device-info"]["pci"]["pci-address"].as_str().unwrap_or_default().to_string();
                (e["interface"].as_str().unwrap_or_default().to_string(), address)
            })
            .collect();
        (!devices.is_empty()).then_some(devices)
    })
}

/// The links of the pod's network namespace.
pub(super) fn pod_links(cluster: &Cluster, namespace: &str, pod: &str) -> Vec<String> {
    let out = cluster.exec(namespace, pod, &["cat", "/proc/net/dev"]);
    out.lines().skip(2).filter_map(|l| l.split(':').next()).map(|l| l.trim().to_string()).collect()
}

pub(super) fn node_has(cluster: &Cluster, link: &str) -> bool {
    cluster.worker("node-a").node_command("ip").args(["link", "show", link]).output().unwrap().status.success()
}

pub fn device_networks_get_the_devices_the_kubelet_gave_the_pod(cluster: &mut Cluster) {
    // The agent answers the ADDs below only once it runs (when this test runs alone).
    super::daemonset_ready_on_every_node(cluster);
    // The e2e's namespace, when this test runs alone (the workloads' tests make it otherwise).
    cluster.apply_text(&format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"));
    let (plugin, cni) = testkit::devices::support_binaries();
    let mut devices = Devices { cluster, plugins: Vec::new() };
    let cluster = devices.cluster;
    let worker = cluster.worker("node-a");
    for vf in VFS.iter().chain(&VFS_B) {
        worker.must(&format!("ip link add {vf} type veth peer name {vf}p"));
    }
    std::fs::copy(&cni, worker.node_path("/opt/cni/bin/test-device-cni")).unwrap();
    for (network, _) in NETWORKS {
        let dir = worker.node_path(&format!("/etc/cni/net.d/{network}"));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = serde_json::json!({"cniVersion": "1.0.0", "name": network, "plugins": [
            {"type": "test-device-cni", "capabilities": {"CNIDeviceInfoFile": true}}]});
        std::fs::write(dir.join("10-device.conflist"), conf.to_string()).unwrap();
        cluster.apply_text(&format!(
            "apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: {network}
  namespace: {NS}
  annotations: {{k8s.v1.cni.cncf.io/resourceName: {}}}
",
            NETWORKS.iter().find(|(n, _)| *n == network).unwrap().1
        ));
    }
    for (resource, vfs) in [(VF, &VFS[..]), (VF_B, &VFS_B[..])] {
        let child = worker.node_command(plugin.to_str().unwrap()).args([resource, &vfs.join(",")]).spawn().unwrap();
        devices.plugins.push(child);
    }
    cluster.wait_for("node-a's kubelet advertising the test devices", || {
        let node = cluster.get_json(&["get", "node", "node-a"]);
        let allocatable = &node["status"]["allocatable"];
        (allocatable[VF] == "3" && allocatable[VF_B] == "1").then_some(())
    });
    let before = cluster.audit_events().len();

    // One device; then two of one resource, handed out in sorted order.
    cluster.apply_text(&pod("dev-one", "vf-a1", &[(VF, 1)]));
    cluster.apply_text(&pod("dev-two", "vf-a1@net1, vf-a2@net2", &[(VF, 2)]));
    cluster.wait_pod_ready(NS, "dev-one");
    cluster.wait_pod_ready(NS, "dev-two");
    let one = device_infos(cluster, NS, "dev-one");
    let two = device_infos(cluster, NS, "dev-two");
    assert_eq!(one.len(), 1, "dev-one: {one:?}");
    assert_eq!(one[0].0, "net1");
    assert_eq!(two.iter().map(|(i, _)| i.as_str()).collect::<Vec<_>>(), ["net1", "net2"], "{two:?}");
    assert!(two[0].1 < two[1].1, "dev-two's devices are not in sorted order: {two:?}");
    let mut given: Vec<&str> = one.iter().chain(&two).map(|(_, d)| d.as_str()).collect();
    given.sort();
    assert_eq!(given, VFS, "each VF goes to one attachment: {one:?} {two:?}");
    for (pod, infos) in [("dev-one", &one), ("dev-two", &two)] {
        let links = pod_links(cluster, NS, pod);
        for (ifname, device) in infos.iter() {
            assert!(links.contains(ifname), "{pod}: no {ifname} in {links:?}");
            assert!(!node_has(cluster, device), "{pod}: {device} is still in the node's namespace");
        }
    }

    // Devices of two resources, once dev-one has given its VF back.
    cluster.delete_pod(NS, "dev-one");
    assert!(node_has(cluster, &one[0].1), "dev-one's DEL did not give {} back to the node", one[0].1);
    cluster.apply_text(&pod("dev-mixed", "vf-a1, vf-b", &[(VF, 1), (VF_B, 1)]));
    cluster.wait_pod_ready(NS, "dev-mixed");
    let mixed = device_infos(cluster, NS, "dev-mixed");
    assert_eq!(mixed, [("net1".to_string(), one[0].1.clone()), ("net2".to_string(), VFS_B[0].to_string())]);

    // A pod that asks for no device of a device network's resource is refused, naming the resource.
    cluster.apply_text(&pod("dev-none", "vf-b", &[]));
    let why = cluster.wait_for("dev-none's failed sandbox event", || {
        let list = cluster.get_json(&["-n", NS, "get", "events", "--field-selector", "involvedObject.name=dev-none"]);
        list["items"]
            .as_array()?
            .iter()
            .filter_map(|e| e["message"].as_str())
            .find(|m| m.contains(VF_B))
            .map(String::from)
    });
    assert!(why.contains("no container of the pod requests that resource"), "{why}");

    // The plugin asked the API server nothing for these ADDs (the agent held the NADs and pods).
    let gets: Vec<String> = cluster.audit_events()[before..]
        .iter()
        .filter(|e| e["user"]["username"] == YH_GENIE_USER && e["verb"] == "get")
        .filter(|e| {
            ["pods", "configmaps", "network-attachment-definitions"]
                .contains(&e["objectRef"]["resource"].as_str().unwrap_or(""))
        })
        .map(|e| format!("{} {}/{}", e["objectRef"]["resource"], e["objectRef"]["namespace"], e["objectRef"]["name"]))
        .collect();
    assert_eq!(gets, Vec::<String>::new(), "GETs by yh-genie during the device pods' ADDs");

    // Every DEL gives its devices back and removes the attachments' device-info files.
    for pod in ["dev-two", "dev-mixed", "dev-none"] {
        cluster.delete_pod(NS, pod);
    }
    for vf in VFS.iter().chain(&VFS_B) {
        assert!(node_has(cluster, vf), "{vf} was not given back to the node");
    }
    let left: Vec<_> = std::fs::read_dir(worker.node_path("/run/k8s.cni.cncf.io/devinfo/cni"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "device-info files left: {left:?}");
}
