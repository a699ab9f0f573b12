//! Device networks on real netns, as root: a fake kubelet's PodResources API (testkit::grpc) says
//! which "VFs" (veth ends in the node netns) it allocated to the pod, or a node agent's answer
//! holds the pod's DRA claim and what its node's ResourceSlices publish of the claimed device; the
//! test device CNI (tests/devices/), which fails without `deviceID`, moves the one it is given into
//! the pod.

use crate::support::node::NetnsNode;
use prost::Message;
use serde_json::{Value, json};
use std::sync::Arc;
use testkit::inspect::link_names;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, Held, PodObjects, PublishedDevice, Reply, Request};
use yh_genie::programs::selector::NETWORK_STATUS;
use yh_genie::programs::selector::devices::podresources::{
    ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
};
use yh_genie::programs::selector::requests::annotation::NETWORKS;

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
        "/v1.PodResourcesLister/List" => testkit::grpc::Answer::Message(answer.clone()),
        _ => testkit::grpc::Answer::Status(12, format!("unknown method {path}")),
    };
    testkit::grpc::serve_in_thread(socket, Arc::new(handler));
}

#[test]
fn a_device_network_lends_the_pod_its_devices_in_sorted_order() {
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
    assert!(link_names(&pod.netns, "").contains(&"net1".to_string()), "{:?}", link_names(&pod.netns, ""));
    let node_links = link_names(&n.netns, "");
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
    assert!(link_names(&n.netns, "").contains(&"yhvf0".to_string()), "DEL gave the device back");
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

/// The device each of the pod's attachments was given, by interface, from its records.
fn devices_by_interface(n: &NetnsNode, pod: &crate::support::node::Pod, ifnames: &[&str]) -> Vec<(String, String)> {
    ifnames
        .iter()
        .map(|ifname| {
            let path = n.data_dir().join("attachments").join(format!("{}:{ifname}", pod.cid));
            let record: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            (ifname.to_string(), record["device"]["id"].as_str().unwrap().to_string())
        })
        .collect()
}

#[test]
fn a_device_network_attached_twice_takes_two_devices_of_its_pool_the_same_on_a_retry() {
    let (_, cni) = testkit::devices::support_binaries();
    let n = NetnsNode::new();
    n.add_yonghui_network("blue", 62, json!({}));
    std::fs::copy(&cni, n.sb.dir.path().join("bin/test-device-cni")).unwrap();
    n.write_conf(
        "vfnet/10-vf.conflist",
        &json!({"cniVersion": "1.0.0", "name": "vfnet",
                "plugins": [{"type": "test-device-cni", "capabilities": {"CNIDeviceInfoFile": true}}]}),
    );
    let vfs = ["yhvf1", "yhvf0"];
    let socket = n.sb.dir.path().join("kubelet.sock");
    fake_kubelet(&socket, "twovfs", &vfs);
    let devinfo = n.sb.dir.path().join("devinfo");
    std::fs::create_dir_all(devinfo.join("dp")).unwrap();
    let info = |vf: &str| json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": vf}});
    for vf in vfs {
        std::fs::write(devinfo.join(format!("dp/example.com-vf-{vf}-device.json")), info(vf).to_string()).unwrap();
    }
    n.api.put_device_nad("default", "vfnet", VF);
    let containers = json!([{"name": "app", "image": "x", "resources": {"limits": {VF: "2"}}}]);
    n.api.put_annotated_pod("default", "twovfs", json!({NETWORKS: "vfnet@net1, vfnet@net2"}), containers);
    let conf = n.selector_conf(
        "1.0.0",
        json!({"defaultNetwork": "blue", "podResourcesSocket": socket, "deviceInfoDir": devinfo, "agentSocket": ""}),
    );

    // The second VF is not there yet: its CNI fails, and the first attachment is undone.
    n.netns.must("ip link add yhvf0 type veth peer name yhvf0p");
    n.fixtures.lock().unwrap().extend(["yhvf0".to_string(), "yhvf0p".to_string()]);
    let pod = n.pod("twovfs");
    let failed = n.call("ADD", &pod, &conf).err();
    assert!(failed["msg"].as_str().unwrap().contains("interface net2"), "{failed}");
    n.assert_failed_add_left_nothing(&pod, "the second device missing");
    assert!(link_names(&n.netns, "").contains(&"yhvf0".to_string()), "the first device is back on the node");
    n.call("DEL", &pod, &conf).ok();

    // The runtime's retry, once the device is there: each attachment its own device, in sorted order.
    n.netns.must("ip link add yhvf1 type veth peer name yhvf1p");
    n.fixtures.lock().unwrap().extend(["yhvf1".to_string(), "yhvf1p".to_string()]);
    n.call("ADD", &pod, &conf).ok();
    let mut links = link_names(&pod.netns, "");
    links.sort();
    assert_eq!(links, ["eth0", "lo", "net1", "net2"]);
    let node_links = link_names(&n.netns, "");
    assert!(!node_links.iter().any(|l| vfs.contains(&l.as_str())), "{node_links:?}");
    let given = devices_by_interface(&n, &pod, &["net1", "net2"]);
    let want = [("net1", "yhvf0"), ("net2", "yhvf1")].map(|(i, d)| (i.to_string(), d.to_string()));
    assert_eq!(given, want);
    // A result kept per interface, which CHECK and DEL hand back to each attachment's own call.
    let results = n.results(&pod);
    for ifname in ["net1", "net2"] {
        assert!(results["furtherResults"].get(ifname).is_some(), "{ifname}'s result: {results}");
    }
    // Each attachment's device-info file, and its entry of network-status.
    for ifname in ["net1", "net2"] {
        assert!(devinfo.join(format!("cni/vfnet-{}_{ifname}", pod.cid)).exists(), "{ifname}'s device-info file");
    }
    let object = n.api.pod("default", "twovfs").unwrap();
    let status: Value =
        serde_json::from_str(object["metadata"]["annotations"][NETWORK_STATUS].as_str().unwrap()).unwrap();
    let entries: Vec<(&str, &str, &Value)> = status
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|e| (e["name"].as_str().unwrap(), e["interface"].as_str().unwrap(), &e["device-info"]))
        .collect();
    assert_eq!(entries, [("default/vfnet", "net1", &info("yhvf0")), ("default/vfnet", "net2", &info("yhvf1"))]);

    n.call("DEL", &pod, &conf).ok();
    let node_links = link_names(&n.netns, "");
    assert!(vfs.iter().all(|vf| node_links.contains(&vf.to_string())), "DEL gave both back: {node_links:?}");
    assert_eq!(std::fs::read_dir(devinfo.join("cni")).unwrap().count(), 0, "both device-info files removed");
    n.assert_nothing_left(&pod, "two devices of one pool");
    for vf in vfs {
        n.netns.exec(&format!("ip link del {vf}"));
    }
}

/// A node agent that answers every selection with `objects` and takes every annotation (whose
/// asks it keeps), on `socket`.
fn fake_agent(socket: &std::path::Path, objects: PodObjects) -> Arc<std::sync::Mutex<Vec<Ask>>> {
    use std::io::{BufRead, Write};
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut line = Vec::new();
            if std::io::BufReader::new(&stream).read_until(b'\n', &mut line).is_err() {
                continue;
            }
            let Ok(request) = Request::parse(&line) else { continue };
            let answer = match &request.ask {
                Ask::Selection { .. } => Answer::Objects(Box::new(objects.clone())),
                Ask::Annotate { .. } => Answer::Accepted,
                Ask::Allocate { .. } | Ask::AllocateFromPoolObject { .. } | Ask::Release { .. } => {
                    Answer::Refused { why: "not this fake's".into() }
                }
            };
            kept.lock().unwrap().push(request.ask);
            let _ = (&stream).write_all(&Reply::new(answer).line());
        }
    });
    asked
}

/// The agent's answer for pod `name` (uid as the netns node's CNI_ARGS say), whose claim
/// `<name>-nics` is allocated the test driver's device `device` (published with `published`'s
/// attributes), networks annotation `networks`.
fn dra_answer(name: &str, networks: &str, claim: Value, published: PublishedDevice) -> PodObjects {
    let pod = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name, "uid": format!("uid-default-{name}"),
                     "annotations": {NETWORKS: networks}},
        "spec": {"nodeName": "node-a", "containers": [{"name": "app", "resources": {"claims": [{"name": "nics"}]}}],
                 "resourceClaims": [{"name": "nics", "resourceClaimName": format!("{name}-nics")}]},
    }))
    .unwrap();
    let nad = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "dranet", "annotations": {"k8s.v1.cni.cncf.io/resourceName": DRA_VF}},
    }))
    .unwrap();
    PodObjects {
        pod,
        config_maps: vec![],
        network_attachments: vec![Held { namespace: "default".into(), name: "dranet".into(), object: Some(nad) }],
        resource_claims: vec![Held {
            namespace: "default".into(),
            name: format!("{name}-nics"),
            object: Some(serde_json::from_value(claim).unwrap()),
        }],
        node_devices: Some(vec![published]),
    }
}

const DRA_VF: &str = "dra.example.com/vf";

/// A claim of pod `name` allocated `device` of the test driver's pool on node-a (`None`: not allocated yet).
fn claim(name: &str, device: Option<&str>) -> Value {
    let mut claim = json!({"metadata": {"namespace": "default", "name": format!("{name}-nics")}, "spec": {}});
    if let Some(device) = device {
        claim["status"] = json!({
            "allocation": {"devices": {"results": [
                {"request": "nic", "driver": "dra.example.com", "pool": "node-a", "device": device}]}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": format!("uid-default-{name}")}],
        });
    }
    claim
}

fn published(device: &str, resource_name: Option<&str>, device_id: &str) -> PublishedDevice {
    PublishedDevice {
        driver: "dra.example.com".into(),
        pool: "node-a".into(),
        device: device.into(),
        device_id: Some(device_id.into()),
        resource_name: resource_name.map(String::from),
    }
}

#[test]
fn a_dra_claims_device_is_moved_into_the_pod_without_asking_the_kubelet_or_the_api_server() {
    let (_, cni) = testkit::devices::support_binaries();
    let n = NetnsNode::new();
    n.add_yonghui_network("blue", 62, json!({}));
    std::fs::copy(&cni, n.sb.dir.path().join("bin/test-device-cni")).unwrap();
    n.write_conf(
        "dranet/10-vf.conflist",
        &json!({"cniVersion": "1.0.0", "name": "dranet",
                "plugins": [{"type": "test-device-cni", "capabilities": {"CNIDeviceInfoFile": true}}]}),
    );
    n.netns.must("ip link add yhdra0 type veth peer name yhdra0p");
    n.fixtures.lock().unwrap().extend(["yhdra0".to_string(), "yhdra0p".to_string()]);
    let devinfo = n.sb.dir.path().join("devinfo");
    // As a DRA driver that writes the device plugins' device-info file (the test driver does).
    std::fs::create_dir_all(devinfo.join("dp")).unwrap();
    let info = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "yhdra0"}});
    std::fs::write(devinfo.join("dp/dra.example.com-vf-yhdra0-device.json"), info.to_string()).unwrap();
    // No kubelet: a pod whose device networks all take DRA devices does not need its socket.
    let keys = json!({"defaultNetwork": "blue", "deviceInfoDir": devinfo, "networkStatus": "always",
                      "podResourcesSocket": n.sb.dir.path().join("no-kubelet.sock")});
    let conf = n.selector_conf("1.0.0", keys);
    let answer = |name: &str, device: Option<&str>, resource_name: Option<&str>| {
        dra_answer(name, "dranet", claim(name, device), published("nic-0", resource_name, "yhdra0"))
    };
    let objects = [
        answer("drapod", Some("nic-0"), Some(DRA_VF)),
        answer("unallocated", None, Some(DRA_VF)),
        answer("unnamed", Some("nic-0"), None),
    ];
    let agent_dir = tempfile::tempdir().unwrap();
    for objects in objects {
        let name = objects.pod.metadata.name.clone().unwrap();
        let socket = agent_dir.path().join(format!("{name}.sock"));
        let asked = fake_agent(&socket, objects);
        let conf: Value = serde_json::from_str(&conf).unwrap();
        let mut conf = conf;
        conf["agentSocket"] = json!(socket);
        let conf = conf.to_string();
        let pod = n.pod(&name);
        let api_before = n.api.requests();
        let reply = n.call("ADD", &pod, &conf);
        assert_eq!(n.api.requests(), api_before, "{name}: the ADD asked the API server: {:?}", n.api.request_log());
        match name.as_str() {
            "drapod" => {
                reply.ok();
                assert!(link_names(&pod.netns, "").contains(&"net1".to_string()), "{:?}", link_names(&pod.netns, ""));
                assert!(!link_names(&n.netns, "").contains(&"yhdra0".to_string()), "the claimed device left the node");
                let record = n.data_dir().join("attachments").join(format!("{}:net1", pod.cid));
                let record: Value = serde_json::from_str(&std::fs::read_to_string(record).unwrap()).unwrap();
                let given: Value = serde_json::from_str(record["conf"].as_str().unwrap()).unwrap();
                assert_eq!(given["plugins"][0]["deviceID"], "yhdra0", "{given}");
                assert_eq!(record["device"]["resource"], DRA_VF, "{record}");
                // The status goes to the agent, with the device-info the device CNI wrote.
                let asked = asked.lock().unwrap().clone();
                let status = asked.iter().find_map(|ask| match ask {
                    Ask::Annotate { annotations, .. } => annotations.get(NETWORK_STATUS).cloned(),
                    _ => None,
                });
                let status: Value = serde_json::from_str(&status.expect("a status handed to the agent")).unwrap();
                let net1 = status.as_array().unwrap().iter().find(|e| e["interface"] == "net1").unwrap();
                assert_eq!(net1["device-info"], info, "{status}");
                n.call("DEL", &pod, &conf).ok();
                assert!(link_names(&n.netns, "").contains(&"yhdra0".to_string()), "DEL gave the device back");
            }
            "unallocated" => {
                let refused = reply.err();
                assert_eq!(refused["code"], 11, "{refused}");
                let msg = refused["msg"].as_str().unwrap();
                assert!(msg.contains("ResourceClaim default/unallocated-nics is not allocated yet"), "{refused}");
                n.assert_failed_add_left_nothing(&pod, "claim not allocated");
                n.call("DEL", &pod, &conf).ok();
            }
            _ => {
                let refused = reply.err();
                assert_eq!(refused["code"], 7, "{refused}");
                let msg = refused["msg"].as_str().unwrap();
                assert!(
                    msg.contains("gives it k8s.cni.cncf.io/deviceID \"yhdra0\" but no k8s.cni.cncf.io/resourceName"),
                    "{refused}"
                );
                n.assert_failed_add_left_nothing(&pod, "slice without the resource name");
                n.call("DEL", &pod, &conf).ok();
            }
        }
    }
    n.netns.exec("ip link del yhdra0");
}

#[test]
fn without_the_agent_or_when_its_answer_lacks_the_claim_the_api_server_gives_the_dra_device() {
    let (_, cni) = testkit::devices::support_binaries();
    let n = NetnsNode::new();
    n.add_yonghui_network("blue", 63, json!({}));
    std::fs::copy(&cni, n.sb.dir.path().join("bin/test-device-cni")).unwrap();
    n.write_conf(
        "dranet/10-vf.conflist",
        &json!({"cniVersion": "1.0.0", "name": "dranet",
                "plugins": [{"type": "test-device-cni", "capabilities": {"CNIDeviceInfoFile": true}}]}),
    );
    n.netns.must("ip link add yhdra1 type veth peer name yhdra1p");
    n.fixtures.lock().unwrap().extend(["yhdra1".to_string(), "yhdra1p".to_string()]);
    let node = testkit::apiserver::NODE_NAME;
    n.api.put_device_nad("default", "dranet", DRA_VF);
    let mut pod_object =
        serde_json::to_value(dra_answer("drapod", "dranet", json!({}), published("x", None, "x")).pod).unwrap();
    pod_object["spec"]["nodeName"] = json!(node);
    n.api.put_raw_pod("default", "drapod", pod_object);
    n.api.put_resource_claim("default", "drapod-nics", claim("drapod", Some("nic-0")));
    let attributes =
        json!({"k8s.cni.cncf.io/resourceName": {"string": DRA_VF}, "k8s.cni.cncf.io/deviceID": {"string": "yhdra1"}});
    n.api.put_resource_slice(
        "node-slice",
        json!({"metadata": {"name": "node-slice"},
               "spec": {"driver": "dra.example.com", "nodeName": node,
                        "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
                        "devices": [{"name": "nic-0", "attributes": attributes}]}}),
    );
    // An agent whose answer holds the pod and its NAD, but not (yet) its claim nor the node's slices.
    let mut lacking =
        dra_answer("drapod", "dranet", claim("drapod", Some("nic-0")), published("nic-0", Some(DRA_VF), "yhdra1"));
    lacking.resource_claims.clear();
    lacking.node_devices = None;
    lacking.pod.spec.as_mut().unwrap().node_name = Some(node.to_string());
    let agent_dir = tempfile::tempdir().unwrap();
    let socket = agent_dir.path().join("agent.sock");
    fake_agent(&socket, lacking);
    let keys = |agent: &std::path::Path| {
        json!({"defaultNetwork": "blue", "deviceInfoDir": n.sb.dir.path().join("devinfo"), "agentSocket": agent,
               "podResourcesSocket": n.sb.dir.path().join("no-kubelet.sock")})
    };
    for (case, agent, asked) in [
        (
            "direct",
            std::path::PathBuf::new(),
            ["get pods", "get network-attachment-definitions", "get resourceclaims", "list resourceslices"].as_slice(),
        ),
        ("agent lacking the claim", socket.clone(), ["get resourceclaims", "list resourceslices"].as_slice()),
    ] {
        let conf = n.selector_conf("1.0.0", keys(&agent));
        let pod = n.pod("drapod");
        let before = n.api.calls().len();
        n.call("ADD", &pod, &conf).ok();
        let calls: Vec<String> = n.api.calls()[before..]
            .iter()
            .filter(|c| c.client == "plugin" && ["get", "list"].contains(&c.verb))
            .map(|c| format!("{} {}", c.verb, c.resource))
            .collect();
        assert_eq!(calls, asked, "{case}: the plugin's reads");
        assert!(link_names(&pod.netns, "").contains(&"net1".to_string()), "{case}: {:?}", link_names(&pod.netns, ""));
        let record = n.data_dir().join("attachments").join(format!("{}:net1", pod.cid));
        let record: Value = serde_json::from_str(&std::fs::read_to_string(record).unwrap()).unwrap();
        assert_eq!(record["device"]["id"], "yhdra1", "{case}: {record}");
        n.call("DEL", &pod, &conf).ok();
        assert!(link_names(&n.netns, "").contains(&"yhdra1".to_string()), "{case}: DEL gave the device back");
    }
    n.netns.exec("ip link del yhdra1");
}
