//! NetworkAttachmentDefinitions and pods written for Multus, as Multus v4.3.0's own e2e suite
//! (`e2e/templates/`) and its how-to (`docs/how-to-use.md`) write them, run unchanged through the
//! selector with the policy an admin coming from Multus sets (docs/migrate.md): inline
//! configurations allowed for the plugin types they use, and `annotationIps: "inline"`. What is
//! checked is what those e2e scripts and a user check: the pod's addresses, its default route, the
//! network-status annotation; and what the node keeps: the configurations as recorded, the leases,
//! nothing left after DEL.
//!
//! The node netns has `eth1`, the NADs' macvlan `master`: one end of a veth pair whose other end
//! stays in the node netns. NADs whose host-local names no `dataDir` keep their leases in
//! `/var/lib/cni/networks`, so the selector runs in a mount namespace of its own in which that
//! directory is the sandbox's (`PRIVATE_MOUNTS`): the machine's own `/var/lib` is never written.

use crate::support::driver::{Call, Reply, cni_env};
use crate::support::lan::RouterNetworks;
use crate::support::node::{NetnsNode, Pod, addresses_on};
use serde_json::{Value, json};
use testkit::inspect::link_names;
use yh_genie::programs::selector::NETWORK_STATUS;
use yh_genie::programs::selector::requests::annotation::NETWORKS;

/// The selector, run by a script that gives it a mount namespace of its own whose
/// `/var/lib/cni/networks` is its first argument.
const PRIVATE_MOUNTS: &str = "yh-genie-private-mounts";

/// The selector's keys an admin coming from Multus sets for these NADs.
fn multus_admin_keys() -> Value {
    json!({"allowInlineConfig": true, "annotationIps": "inline",
           "inlinePluginTypes": ["macvlan", "static", "tuning", "bridge", "host-local"]})
}

/// A node whose pods get `ptpnet` (reference ptp + host-local, a default route by the node) on eth0,
/// with `eth1` for macvlan parents and the selector wrapped as `PRIVATE_MOUNTS`.
fn node() -> NetnsNode {
    let mut n = NetnsNode::new();
    n.add_ptpnet();
    n.default_network = Some("ptpnet".into());
    n.fixtures.lock().unwrap().extend(["eth1".to_string(), "eth1p".to_string()]);
    n.netns.must("ip link add eth1 type veth peer name eth1p && ip link set eth1 up && ip link set eth1p up");
    let script = format!(
        "#!/bin/sh\nexec unshare --mount --propagation private /bin/sh -c \
         'mount -t tmpfs tmpfs /var/lib && mkdir -p /var/lib/cni/networks && \
         mount --bind \"$0\" /var/lib/cni/networks && exec \"$1\"' {} {}\n",
        n.ipam_dir().display(),
        n.sb.bin().join(yh_genie::programs::selector::NAME).display()
    );
    std::fs::create_dir_all(n.ipam_dir()).unwrap();
    let wrapper = n.sb.write(&format!("bin/{PRIVATE_MOUNTS}"), &script);
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    n
}

/// The selector's `command` for `pod`, as the runtime calls it, in its private mounts.
fn call(n: &NetnsNode, command: &str, pod: &Pod, conf: &str) -> Reply {
    let netns = pod.netns_path();
    let empty = n.sb.path().join("empty-path").display().to_string();
    let call = Call {
        plugin: PRIVATE_MOUNTS,
        command,
        container_id: &pod.cid,
        netns: &netns,
        ifname: "eth0",
        args: &pod.args,
        config: conf,
    };
    cni_env(&n.sb, &call, &[("CNI_PATH", empty.as_str())])
}

fn conf(n: &NetnsNode) -> String {
    n.selector_conf("1.0.0", multus_admin_keys())
}

/// The pod's network-status annotation, as the API server holds it.
fn status(n: &NetnsNode, pod: &str) -> Vec<Value> {
    let object = n.api.pod("default", pod).unwrap();
    let text = object["metadata"]["annotations"][NETWORK_STATUS].as_str().unwrap_or_else(|| panic!("{object}"));
    serde_json::from_str::<Value>(text).unwrap().as_array().unwrap().clone()
}

/// The record of the pod's attachment on `ifname`.
fn record(n: &NetnsNode, pod: &Pod, ifname: &str) -> Value {
    let path = n.data_dir().join("attachments").join(format!("{}:{ifname}", pod.cid));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The pod's IPv4 default routes, as `ip route` prints them.
fn default_routes(pod: &Pod) -> String {
    pod.netns.must("ip -4 route show default").trim().to_string()
}

/// The pod's interfaces but `lo`, sorted.
fn interfaces(pod: &Pod) -> Vec<String> {
    let mut names = link_names(&pod.netns, "");
    names.retain(|l| l != "lo");
    names.sort();
    names
}

/// `e2e/templates/default-route1.yml.j2`, rendered at CNI 0.3.1: a macvlan with static IPAM that
/// names no network and declares no capability.
const DEFAULT_ROUTE_CONFIG: &str = r#"{
    "cniVersion": "0.3.1",
    "plugins": [
        {
            "type": "macvlan",
            "master": "eth1",
            "mode": "bridge",
            "ipam": {
                "type": "static"
            }
        }
    ]
}"#;

#[test]
fn multus_e2e_default_route_pods_get_their_addresses_and_the_default_route_they_ask_for() {
    let n = node();
    n.api.put_nad("default", "default-route-config", Some(DEFAULT_ROUTE_CONFIG));
    for (pod, networks) in [
        (
            "default-route-worker1",
            r#"[{"name":"default-route-config","ips":["10.1.1.21/24"],"default-route":["10.1.1.254"]}]"#,
        ),
        ("default-route-worker2", r#"[{"name":"default-route-config","ips":["10.1.1.22/24"]}]"#),
    ] {
        n.api.put_annotated_pod("default", pod, json!({ NETWORKS: networks }), json!([{"name": "c", "image": "x"}]));
    }
    let conf = conf(&n);

    let worker1 = n.pod("default-route-worker1");
    call(&n, "ADD", &worker1, &conf).ok();
    assert_eq!(addresses_on(&worker1, "net1"), ["10.1.1.21/24"]);
    assert_eq!(default_routes(&worker1), "default via 10.1.1.254 dev net1");
    let net1 = &status(&n, "default-route-worker1")[1];
    assert_eq!(
        (&net1["name"], &net1["interface"], &net1["ips"]),
        (&json!("default/default-route-config"), &json!("net1"), &json!(["10.1.1.21"]))
    );
    // static got the address as Multus gives it, and the record keeps the configuration named.
    let recorded = record(&n, &worker1, "net1");
    assert!(recorded["cniArgs"].as_str().unwrap().contains("IP=10.1.1.21/24"), "{recorded}");
    let given: Value = serde_json::from_str(recorded["conf"].as_str().unwrap()).unwrap();
    assert_eq!(given["name"], "default-route-config");

    let worker2 = n.pod("default-route-worker2");
    call(&n, "ADD", &worker2, &conf).ok();
    assert_eq!(addresses_on(&worker2, "net1"), ["10.1.1.22/24"]);
    assert_eq!(default_routes(&worker2), "default via 10.244.5.1 dev eth0", "the default stays on eth0");

    for pod in [&worker1, &worker2] {
        call(&n, "CHECK", pod, &conf).ok();
        call(&n, "DEL", pod, &conf).ok();
    }
    n.assert_nothing_left(&worker2, "default-route pods");
    assert_eq!(link_names(&worker1.netns, ""), ["lo"]);
}

#[test]
fn by_default_the_e2e_default_route_pod_is_refused_naming_the_key_an_admin_sets() {
    let n = node();
    n.api.put_nad("default", "default-route-config", Some(DEFAULT_ROUTE_CONFIG));
    let networks = r#"[{"name":"default-route-config","ips":["10.1.1.21/24"],"default-route":["10.1.1.254"]}]"#;
    n.api.put_annotated_pod("default", "p", json!({ NETWORKS: networks }), json!([{"name": "c", "image": "x"}]));
    let pod = n.pod("p");
    let refused = call(&n, "ADD", &pod, &n.selector_conf("1.0.0", json!({"allowInlineConfig": true}))).err();
    assert_eq!(refused["code"], 7, "{refused}");
    assert!(refused["msg"].as_str().unwrap().contains("\"annotationIps\""), "{refused}");
    n.assert_failed_add_left_nothing(&pod, "annotationIps declared");
    call(&n, "DEL", &pod, &conf(&n)).ok();
}

#[test]
fn multus_e2e_simple_macvlan_pods_get_the_addresses_they_ask_for() {
    let n = node();
    // `e2e/templates/simple-macvlan1.yml.j2` at CNI 0.4.0: no name, the ips capability declared.
    let macvlan1 = r#"{
        "cniVersion": "0.4.0",
        "plugins": [
            {
                "type": "macvlan",
                "capabilities": { "ips": true },
                "master": "eth1",
                "mode": "bridge",
                "ipam": {
                    "type": "static"
                }
            }, {
                "type": "tuning"
            } ]
    }"#;
    n.api.put_nad("default", "macvlan1-config", Some(macvlan1));
    let conf = conf(&n);
    for (name, ip) in [("macvlan1-worker1", "10.1.1.11/24"), ("macvlan1-worker2", "10.1.1.12/24")] {
        let networks = format!(r#"[{{"name":"macvlan1-config","ips":["{ip}"]}}]"#);
        n.api.put_annotated_pod("default", name, json!({ NETWORKS: networks }), json!([{"name": "c", "image": "x"}]));
        let pod = n.pod(name);
        call(&n, "ADD", &pod, &conf).ok();
        assert_eq!(addresses_on(&pod, "net1"), [ip], "{name}");
        assert_eq!(status(&n, name)[1]["name"], "default/macvlan1-config");
        call(&n, "CHECK", &pod, &conf).ok();
        call(&n, "DEL", &pod, &conf).ok();
        n.assert_nothing_left(&pod, name);
    }
}

#[test]
fn multus_how_to_macvlan_nads_attach_in_every_annotation_form() {
    let n = node();
    // docs/how-to-use.md's macvlan-conf-1, without a name; and macvlan-conf-2, a NAD without a
    // configuration whose network is installed on the node (Multus read it from its own confDir).
    let conf_1 = r#"{
      "cniVersion": "0.3.0",
      "type": "macvlan",
      "master": "eth1",
      "mode": "bridge",
      "ipam": {
        "type": "host-local",
        "ranges": [
          [ {
            "subnet": "10.10.0.0/16",
            "rangeStart": "10.10.1.20",
            "rangeEnd": "10.10.3.50",
            "gateway": "10.10.0.254"
          } ]
        ]
      }
    }"#;
    n.api.put_nad("default", "macvlan-conf-1", Some(conf_1));
    n.api.put_nad("default", "macvlan-conf-2", None);
    n.write_conf(
        "macvlan-conf-2/macvlan2.conf",
        &json!({"cniVersion": "0.3.0", "type": "macvlan", "name": "macvlan-conf-2", "master": "eth1", "mode": "bridge",
                "ipam": {"type": "host-local", "ranges": [[{"subnet": "11.10.0.0/16", "rangeStart": "11.10.1.20",
                         "rangeEnd": "11.10.3.50"}]]}}),
    );
    let conf = conf(&n);
    let in_conf_1 = |a: &str| a.starts_with("10.10.") && a.ends_with("/16");
    let in_conf_2 = |a: &str| a.starts_with("11.10.") && a.ends_with("/16");
    for (name, networks, on) in [
        (
            "pod-case-01",
            "macvlan-conf-1, macvlan-conf-2",
            [("net1", "default/macvlan-conf-1"), ("net2", "default/macvlan-conf-2")],
        ),
        ("pod-case-03", "macvlan-conf-1@macvlan1", [("macvlan1", "default/macvlan-conf-1"), ("", "")]),
        (
            "pod-case-04",
            r#"[{"name":"macvlan-conf-1"},{"name":"macvlan-conf-2"}]"#,
            [("net1", "default/macvlan-conf-1"), ("net2", "default/macvlan-conf-2")],
        ),
        (
            "pod-case-06",
            r#"[{"name":"macvlan-conf-1","interface":"macvlan1"},{"name":"macvlan-conf-2"}]"#,
            [("macvlan1", "default/macvlan-conf-1"), ("net2", "default/macvlan-conf-2")],
        ),
    ] {
        n.api.put_annotated_pod("default", name, json!({ NETWORKS: networks }), json!([{"name": "c", "image": "x"}]));
        let pod = n.pod(name);
        call(&n, "ADD", &pod, &conf).ok();
        let on: Vec<(&str, &str)> = on.into_iter().filter(|(i, _)| !i.is_empty()).collect();
        let entries: Vec<(String, String)> = status(&n, name)
            .iter()
            .skip(1)
            .map(|e| (e["interface"].as_str().unwrap().into(), e["name"].as_str().unwrap().into()))
            .collect();
        assert_eq!(entries, on.iter().map(|(i, nad)| (i.to_string(), nad.to_string())).collect::<Vec<_>>(), "{name}");
        for (ifname, nad) in on {
            let addresses = addresses_on(&pod, ifname);
            let within = if nad.ends_with("conf-1") { in_conf_1(&addresses[0]) } else { in_conf_2(&addresses[0]) };
            assert!(addresses.len() == 1 && within, "{name} {ifname}: {addresses:?}");
        }
        call(&n, "DEL", &pod, &conf).ok();
        n.assert_nothing_left(&pod, name);
    }
}

/// `e2e/static-pod-nad.yml`: a reference bridge whose network (`testnet`) is not the NAD's name.
const BRIDGE_NAD: &str = r#"{
    "cniVersion": "0.3.1",
    "name": "testnet",
    "type": "bridge",
    "bridge": "testnet0",
    "ipam": {
        "type": "host-local",
        "subnet": "10.10.0.0/16"
    }
}"#;

#[test]
fn multus_e2e_bridge_nad_attaches_to_a_static_pods_mirror() {
    let n = node();
    n.api.put_nad("default", "bridge-nad", Some(BRIDGE_NAD));
    // The kubelet runs a static pod under a uid of its own, which its mirror pod carries.
    let mirror = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "default", "name": "static-web", "uid": "uid-of-the-mirror",
                     "annotations": {NETWORKS: "bridge-nad", "kubernetes.io/config.mirror": "uid-default-static-web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}});
    n.api.put_raw_pod("default", "static-web", mirror);
    let conf = conf(&n);
    let pod = n.pod("static-web");
    call(&n, "ADD", &pod, &conf).ok();
    assert_eq!(interfaces(&pod), ["eth0", "net1"]);
    let net1 = addresses_on(&pod, "net1");
    assert!(net1.len() == 1 && net1[0].starts_with("10.10.") && net1[0].ends_with("/16"), "{net1:?}");
    assert_eq!(status(&n, "static-web")[1]["name"], "default/bridge-nad");
    let given: Value = serde_json::from_str(record(&n, &pod, "net1")["conf"].as_str().unwrap()).unwrap();
    assert_eq!(given["name"], "testnet", "a configuration's own name is kept");
    assert_eq!(n.leases().len(), 2, "eth0's and net1's: {:?}", n.leases());
    call(&n, "DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "static pod");
}

#[test]
fn the_e2e_bridge_nad_attached_twice_gives_each_interface_its_own_address_lease_and_status() {
    let n = node();
    n.api.put_nad("default", "bridge-nad", Some(BRIDGE_NAD));
    n.api.put_annotated_pod(
        "default",
        "twice",
        json!({ NETWORKS: "bridge-nad@net1, bridge-nad@net2" }),
        json!([{"name": "c", "image": "x"}]),
    );
    let conf = conf(&n);
    let pod = n.pod("twice");
    call(&n, "ADD", &pod, &conf).ok();
    assert_eq!(interfaces(&pod), ["eth0", "net1", "net2"]);
    let (net1, net2) = (addresses_on(&pod, "net1"), addresses_on(&pod, "net2"));
    assert!(net1.len() == 1 && net2.len() == 1 && net1 != net2, "{net1:?} {net2:?}");
    // host-local's leases, each the container's and its interface's.
    let leases_dir = n.ipam_dir().join("testnet");
    let mut owners: Vec<String> = std::fs::read_dir(&leases_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<std::net::IpAddr>().is_ok())
        .map(|e| std::fs::read_to_string(e.path()).unwrap().replace("\r\n", " "))
        .collect();
    owners.sort();
    assert_eq!(owners, [format!("{} net1", pod.cid), format!("{} net2", pod.cid)]);
    // A record and a result per interface, and a network-status entry each.
    for ifname in ["net1", "net2"] {
        assert_eq!(record(&n, &pod, ifname)["ifname"], ifname);
        assert!(n.results(&pod)["furtherResults"].get(ifname).is_some(), "{}", n.results(&pod));
    }
    let entries: Vec<(Value, Value, Value)> = status(&n, "twice")
        .into_iter()
        .skip(1)
        .map(|e| (e["name"].clone(), e["interface"].clone(), e["ips"].clone()))
        .collect();
    let ip = |a: &[String]| json!([a[0].split('/').next().unwrap()]);
    assert_eq!(
        entries,
        [
            (json!("default/bridge-nad"), json!("net1"), ip(&net1)),
            (json!("default/bridge-nad"), json!("net2"), ip(&net2)),
        ]
    );
    call(&n, "CHECK", &pod, &conf).ok();
    call(&n, "DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "a network twice");
}
