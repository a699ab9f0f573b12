//! Device networks on real netns, as root: a fake kubelet's PodResources API (testkit::grpc) says
//! which "VFs" (veth ends in the node netns) it allocated to the pod, and the test device CNI
//! (tests/devices/), which fails without `deviceID`, moves the one it is given into the pod.

use crate::support::node::NetnsNode;
use prost::Message;
use serde_json::{Value, json};
use std::sync::Arc;
use testkit::grpc::Answer;
use yh_genie::devices::podresources::{ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources};
use yh_genie::selector::NETWORK_STATUS;
use yh_genie::selector::requests::annotation::NETWORKS;

const VF: &str = "example.com/vf";

/// A kubelet that answers List only (no `KubeletPodResourcesGet`), the pod holding `devices` of VF.
fn fake_kubelet(socket: &std::path::Path, pod: &str, devices: &[&str]) {
    let answer = ListPodResourcesResponse {
        pod_resources: vec![PodResources {
            name: pod.into(),
            namespace: "default".into(),
            containers: vec![ContainerResources {
                name: "app".into(),
                devices: vec![ContainerDevices {
                    resource_name: VF.into(),
                    device_ids: devices.iter().map(|d| d.to_string()).collect(),
                }],
            }],
        }],
    }
    .encode_to_vec();
    let handler = move |path: &str, _: bytes::Bytes| match path {
        "/v1.PodResourcesLister/List" => Answer::Message(answer.clone()),
        _ => Answer::Status(12, format!("unknown method {path}")),
    };
    testkit::grpc::serve_in_thread(socket, Arc::new(handler));
}

fn links_of(netns: &testkit::netns::Netns) -> Vec<String> {
    let shown: Value = serde_json::from_str(&netns.must("ip -j link show")).unwrap();
    shown.as_array().unwrap().iter().map(|l| l["ifname"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_device_network_gets_the_pods_device_in_sorted_order_and_gives_it_back() {
    let (_, cni) = testkit::devices::support_binaries();
    let n = NetnsNode::new();
    n.add_yonghui_network("blue", 61, json!({}));
    std::fs::copy(&cni, n.sb.dir.path().join("bin/test-device-cni")).unwrap();
    n.write_conf(
        "vfnet/10-vf.conflist",
        &json!({"cniVersion": "1.0.0", "name": "vfnet",
                "plugins": [{"type": "test-device-cni", "capabilities": {"CNIDeviceInfoFile": true}}]}),
    );
    let vfs = ["yhvf1", "yhvf0"];
    for vf in vfs {
        n.netns.must(&format!("ip link add {vf} type veth peer name {vf}p"));
        n.fixtures.lock().unwrap().extend([vf.to_string(), format!("{vf}p")]);
    }
    let socket = n.sb.dir.path().join("kubelet.sock");
    fake_kubelet(&socket, "vfpod", &vfs);
    let devinfo = n.sb.dir.path().join("devinfo");
    // As the SR-IOV device plugin writes it on Allocate.
    std::fs::create_dir_all(devinfo.join("dp")).unwrap();
    let info = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "yhvf0"}});
    std::fs::write(devinfo.join("dp/example.com-vf-yhvf0-device.json"), info.to_string()).unwrap();
    n.api.put_device_nad("default", "vfnet", VF);
    let limits = json!({"limits": {VF: "2"}});
    for (pod, resources) in [("vfpod", limits), ("nodevice", json!({}))] {
        let containers = json!([{"name": "app", "image": "x", "resources": resources}]);
        n.api.put_annotated_pod("default", pod, json!({NETWORKS: "vfnet"}), containers);
    }
    let keys = json!({"defaultNetwork": "blue", "podResourcesSocket": socket, "deviceInfoDir": devinfo, "networkStatus": "always",
                      "agentSocket": ""});
    let conf = n.selector_conf("1.0.0", keys.clone());

    let pod = n.pod("vfpod");
    n.call("ADD", &pod, &conf).ok();
    // The first of the sorted devices, moved into the pod as net1; the other stays on the node.
    assert!(links_of(&pod.netns).contains(&"net1".to_string()), "{:?}", links_of(&pod.netns));
    let node_links = links_of(&n.netns);
    assert!(!node_links.contains(&"yhvf0".to_string()) && node_links.contains(&"yhvf1".to_string()), "{node_links:?}");
    // net1's record: the configuration as its plugins got it, and the device.
    let record = n.data_dir().join("attachments").join(format!("{}:net1", pod.cid));
    let record: Value = serde_json::from_str(&std::fs::read_to_string(record).unwrap()).unwrap();
    let given: Value = serde_json::from_str(record["conf"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&given["plugins"][0]["deviceID"], &given["plugins"][0]["pciBusID"]),
        (&json!("yhvf0"), &json!("yhvf0"))
    );
    let info_file = given["plugins"][0]["runtimeConfig"]["CNIDeviceInfoFile"].as_str().unwrap().to_string();
    assert_eq!(info_file, devinfo.join(format!("cni/vfnet-{}_net1", pod.cid)).display().to_string());
    assert_eq!(record["device"]["id"], "yhvf0", "{record}");
    let object = n.api.pod("default", "vfpod").unwrap();
    let status: Value =
        serde_json::from_str(object["metadata"]["annotations"][NETWORK_STATUS].as_str().unwrap()).unwrap();
    let net1 = status.as_array().unwrap().iter().find(|e| e["interface"] == "net1").unwrap();
    assert_eq!(net1["device-info"], info, "{status}");
    let cni_files: Vec<_> = std::fs::read_dir(devinfo.join("cni")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(cni_files.len(), 1, "{cni_files:?}");

    n.call("DEL", &pod, &conf).ok();
    assert!(links_of(&n.netns).contains(&"yhvf0".to_string()), "DEL gave the device back");
    assert_eq!(
        std::fs::read_dir(devinfo.join("cni")).unwrap().count(),
        0,
        "the attachment's device-info file is removed"
    );

    // A pod that requests no device of the resource is refused before anything is made.
    let pod = n.pod("nodevice");
    let refused = n.call("ADD", &pod, &conf).err();
    assert_eq!(refused["code"], 7, "{refused}");
    assert!(refused["msg"].as_str().unwrap().contains("no container of the pod requests that resource"), "{refused}");
    n.assert_failed_add_left_nothing(&pod, "no device requested");
    n.call("DEL", &pod, &conf).ok();
    // Without the kubelet's socket: try again later, naming the socket.
    let absent = json!({"podResourcesSocket": n.sb.dir.path().join("absent.sock")});
    let mut keys = keys;
    keys.as_object_mut().unwrap().extend(absent.as_object().unwrap().clone());
    let pod = n.pod("vfpod");
    let refused = n.call("ADD", &pod, &n.selector_conf("1.0.0", keys)).err();
    assert_eq!(refused["code"], 11, "{refused}");
    assert!(refused["msg"].as_str().unwrap().contains("absent.sock is absent"), "{refused}");
    n.assert_failed_add_left_nothing(&pod, "no PodResources socket");
    n.call("DEL", &pod, &conf).ok();
    for vf in vfs {
        n.netns.exec(&format!("ip link del {vf}"));
    }
}
