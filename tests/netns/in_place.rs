//! The cluster's own network as the default, read in place, as root: a kindnet-like conflist
//! (Debian's reference ptp, host-local and portmap, CNI 0.3.1) written directly in the conf dir
//! beside `00-yh-genie.conflist`, named by `defaultNetwork` (its file name, or `auto`). Also the
//! pods that network attached before yh-genie was installed (ADDed by libcni from its file alone),
//! and the pods left running when yh-genie is uninstalled, with `yh-genie cleanup`.

use crate::support::driver::{cnidrive, libcni_run};
use crate::support::node::{NetnsNode, addresses_on};
use serde_json::{Value, json};
use testkit::apiserver::literal;

/// kindnetd's conflist on this node's pod range `10.<octet>.0.0/24`.
fn kindnet(n: &NetnsNode, octet: u8) -> Value {
    json!({"cniVersion": "0.3.1", "name": "kindnet", "plugins": [
        {"type": "ptp", "ipMasq": false, "mtu": 1500, "ipam": {"type": "host-local", "dataDir": n.ipam_dir(),
            "ranges": [[{"subnet": format!("10.{octet}.0.0/24")}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": true}}]})
}

/// A node whose cluster network wrote `10-kindnet.conflist`, and the selector's conf with
/// `defaultNetwork` set to `default`.
fn node(default: &str) -> (NetnsNode, String) {
    let n = NetnsNode::new();
    n.write_conf("10-kindnet.conflist", &kindnet(&n, 61));
    n.selector_conflist("1.1.0");
    let conf = n.selector_conf("1.1.0", json!({"defaultNetwork": default, "agentSocket": ""}));
    (n, conf)
}

fn pod_range(pod: &crate::support::node::Pod) -> Vec<String> {
    addresses_on(pod, "eth0").iter().map(|a| a.split('.').take(2).collect::<Vec<_>>().join(".")).collect()
}

#[test]
fn pods_get_the_cluster_network_in_place_and_its_owners_updates() {
    for default in ["10-kindnet.conflist", "auto"] {
        let (n, conf) = node(default);
        n.api.put_pod("default", "web", json!([{"name": "app", "image": "nginx"}]));
        assert_eq!(n.call("STATUS", &n.pod("web"), &conf).code, 0, "{default}: a 0.3.1 network is ready");
        let pod = n.pod("web");
        n.call("ADD", &pod, &conf).ok();
        assert_eq!(pod_range(&pod), ["10.61"], "{default}");
        assert_eq!(n.record(&pod)["network"], "10-kindnet.conflist", "{default}");
        // The owner rewrites its file: the next pod follows it, nothing was copied.
        n.write_conf("10-kindnet.conflist", &kindnet(&n, 62));
        let next = n.pod("web");
        n.call("ADD", &next, &conf).ok();
        assert_eq!(pod_range(&next), ["10.62"], "{default}");
        // DEL undoes what the record holds, whatever the file says now.
        n.write_conf("10-kindnet.conflist", &kindnet(&n, 63));
        for p in [&pod, &next] {
            assert_eq!(n.call("DEL", p, &conf).code, 0, "{default}");
        }
        n.assert_nothing_left(&next, default);
        n.assert_nothing_left(&pod, default);
    }
}

#[test]
fn a_pod_cannot_name_the_file_in_the_conf_dir_itself() {
    let (n, conf) = node("10-kindnet.conflist");
    for (name, value) in [("by-file", "10-kindnet.conflist"), ("by-auto", "auto"), ("own", "00-yh-genie.conflist")] {
        n.api.put_pod("default", name, literal(value));
        let pod = n.pod(name);
        let e = n.call("ADD", &pod, &conf).err();
        assert_eq!(e["code"], 7, "{name}: {e}");
        n.assert_failed_add_left_nothing(&pod, name);
        n.call("DEL", &pod, &conf).ok();
    }
}

#[test]
fn auto_waits_for_the_network_and_status_waits_for_its_plugins() {
    let n = NetnsNode::new();
    n.selector_conflist("1.1.0");
    let conf = n.selector_conf("1.1.0", json!({"defaultNetwork": "auto", "agentSocket": ""}));
    n.api.put_pod("default", "web", json!([{"name": "app", "image": "nginx"}]));
    let pod = n.pod("web");
    let e = n.call("STATUS", &pod, &conf).err();
    assert_eq!(e["code"], 50, "not ready before the network writes its file: {e}");
    let e = n.call("ADD", &pod, &conf).err();
    assert_eq!(e["code"], 11, "try again later: {e}");
    assert!(e["msg"].as_str().unwrap().contains("waiting for the cluster's network"), "{e}");
    n.call("DEL", &pod, &conf).ok();

    n.write_conf("10-kindnet.conflist", &kindnet(&n, 64));
    assert_eq!(n.call("STATUS", &pod, &conf).code, 0);
    // Its plugin not installed yet: not ready, naming it.
    std::fs::remove_file(n.sb.bin().join("ptp")).unwrap();
    let e = n.call("STATUS", &pod, &conf).err();
    assert_eq!(e["code"], 50, "{e}");
    assert!(e["msg"].as_str().unwrap().contains("ptp (plugins[0].type)"), "{e}");
}

/// The runtime's port mapping for the pods below, as it passes it to every network that declares
/// `portMappings`: to kindnet's portmap before the install, to the selector after.
fn port_mapping() -> Value {
    json!({"portMappings": [{"hostPort": 8061, "containerPort": 80, "protocol": "tcp"}]})
}

/// A pod the cluster's network attached before yh-genie was installed: the runtime ran
/// `10-kindnet.conflist` directly (libcni, with its port mapping); then the installer wrote
/// `00-yh-genie.conflist` with `defaultNetwork` naming that file.
fn attached_before_the_install(n: &NetnsNode, version: &str) -> (crate::support::node::Pod, String) {
    let mut list = kindnet(n, 65);
    list["cniVersion"] = version.into();
    let file = n.write_conf("10-kindnet.conflist", &list);
    let pod = n.pod("old");
    let netns = pod.netns_path();
    let args = ["add", file.to_str().unwrap(), netns.as_str(), pod.cid.as_str(), "eth0", pod.args.as_str()];
    libcni_run(&n.sb, &cnidrive(), &args, Some(&port_mapping())).ok();
    assert_eq!(pod_range(&pod), ["10.65"]);
    assert_eq!(n.leases().iter().map(|(_, cid)| cid.as_str()).collect::<Vec<_>>(), [pod.cid.as_str()]);
    assert!(n.nat_lines().iter().any(|l| l.contains("8061")), "portmap's rules: {:?}", n.nat_lines());
    n.selector_conflist("1.1.0");
    let conf = n.selector_conf(
        "1.1.0",
        json!({"defaultNetwork": "10-kindnet.conflist", "agentSocket": "", "runtimeConfig": port_mapping()}),
    );
    (pod, conf)
}

/// `assert_nothing_left`, but for the chains portmap shares between all pods and never removes
/// (`CNI-HOSTPORT-*` and the jumps to them): the pod's own chain and its port's rules must be gone.
fn assert_nothing_left_but_portmaps_chains(n: &NetnsNode, pod: &crate::support::node::Pod, case: &str) {
    assert_eq!(testkit::inspect::link_names(&pod.netns, ""), ["lo"], "{case}: pod netns interfaces");
    let left: Vec<String> = n.leftovers().into_iter().filter(|l| !l.contains("CNI-HOSTPORT-")).collect();
    assert!(left.is_empty(), "{case}: left on the node: {left:#?}");
    assert!(n.nat_lines().iter().all(|l| !l.contains("8061")), "{case}: {:#?}", n.nat_lines());
}

#[test]
fn pods_from_before_the_install_are_checked_collected_and_deleted_by_the_network_in_place() {
    let n = NetnsNode::new();
    let (pod, conf) = attached_before_the_install(&n, "0.3.1");
    assert!(n.records().is_empty(), "yh-genie never saw this pod: {:?}", n.records());
    // CNI 0.3.1 has no CHECK: nothing of the network's to ask, as for a pod yh-genie attached.
    let check = n.call("CHECK", &pod, &conf);
    assert_eq!(check.code, 0, "{check:?}");
    // Nor GC: the runtime's list (which omits the pod) is not passed to a 0.3.1 network, whose
    // host-local would refuse the command; the pod keeps its address.
    let gc = n.selector_conf(
        "1.1.0",
        json!({"defaultNetwork": "10-kindnet.conflist", "agentSocket": "", "cni.dev/valid-attachments": []}),
    );
    let collected = n.call("GC", &pod, &gc);
    assert_eq!(collected.code, 0, "{collected:?}");
    assert_eq!(n.leases().len(), 1, "GC sent nothing to the network");
    // DEL goes to the network as the runtime would have sent it: its address, its veth and its
    // port mapping (which portmap finds in the runtime's capability arguments) are released.
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    assert_nothing_left_but_portmaps_chains(&n, &pod, "DEL of a pod from before the install");
    assert_eq!(n.call("DEL", &pod, &conf).code, 0, "the runtime's DEL again");
}

#[test]
fn a_pod_from_before_the_install_on_a_network_with_check_cannot_be_checked_without_its_result() {
    let n = NetnsNode::new();
    let (pod, conf) = attached_before_the_install(&n, "1.0.0");
    let e = n.call("CHECK", &pod, &conf).err();
    assert_eq!(e["code"], 3, "{e}");
    assert!(e["msg"].as_str().unwrap().contains("before yh-genie was installed"), "{e}");
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    assert_nothing_left_but_portmaps_chains(&n, &pod, "DEL of a pod from before the install, CNI 1.0.0");
}

/// `blue`, a further network in a network directory (reference ptp and host-local), and a NAD
/// naming it.
fn add_blue(n: &NetnsNode) {
    let list = json!({"cniVersion": "1.0.0", "name": "blue", "plugins": [{"type": "ptp", "ipam": {
        "type": "host-local", "dataDir": n.ipam_dir(), "ranges": [[{"subnet": "10.66.0.0/24"}]]}}]});
    n.write_conf("blue/blue.conflist", &list);
    n.api.put_nad("default", "blue", None);
}

/// `yh-genie cleanup` on the node, with its sandbox's directories.
fn cleanup(n: &NetnsNode) -> crate::support::driver::Reply {
    let out =
        n.sb.command(&n.sb.bin().join("yh-genie"))
            .arg("cleanup")
            .arg("--conf-dir")
            .arg(n.conf_dir())
            .arg("--data-dir")
            .arg(n.data_dir())
            .arg("--bin-dir")
            .arg(n.sb.bin())
            .output()
            .unwrap();
    crate::support::driver::Reply::from(out)
}

#[test]
fn after_uninstall_the_runtimes_del_leaves_the_further_networks_to_cleanup() {
    let (n, conf) = node("10-kindnet.conflist");
    add_blue(&n);
    let annotations = json!({ yh_genie::programs::selector::requests::annotation::NETWORKS: "blue" });
    for name in ["gone", "running"] {
        n.api.put_annotated_pod("default", name, annotations.clone(), json!([{"name": "app", "image": "nginx"}]));
    }
    let gone = n.pod("gone");
    let running = n.pod("running");
    for pod in [&gone, &running] {
        n.call("ADD", pod, &conf).ok();
        assert_eq!(pod_range(pod), ["10.61"]);
        assert_eq!(addresses_on(pod, "net1").len(), 1, "{}", pod.name);
    }
    let refused = cleanup(&n);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("still installed"), "{refused:?}");

    // Uninstall: the installer removes its conflist; the runtime now loads kindnet's file and sends
    // the pod's DEL there alone.
    std::fs::remove_file(n.conf_dir().join("00-yh-genie.conflist")).unwrap();
    let kindnet_file = n.conf_dir().join("10-kindnet.conflist");
    let netns = gone.netns_path();
    let args = ["del", kindnet_file.to_str().unwrap(), netns.as_str(), gone.cid.as_str(), "eth0", gone.args.as_str()];
    libcni_run(&n.sb, &cnidrive(), &args, None).ok();
    let crate::support::node::Pod { netns, cid, .. } = gone;
    drop(netns);
    let leaked: Vec<String> = n.leases().into_iter().filter(|(_, c)| *c == cid).map(|(ip, _)| ip).collect();
    assert_eq!(leaked.len(), 1, "net1's address stays leased: {leaked:?}");
    assert!(leaked[0].starts_with("10.66."), "{leaked:?}");
    assert!(n.records().iter().any(|r| r.starts_with(&cid)), "{:?}", n.records());

    // `yh-genie cleanup` DELs what the records hold of the pod that is gone, keeps the running one.
    let cleaned = cleanup(&n);
    assert_eq!(cleaned.code, 3, "{cleaned:?}");
    assert!(
        cleaned.stdout.contains(&format!("released container {cid} (pod default/gone) interface eth0")),
        "{cleaned:?}"
    );
    assert!(cleaned.stdout.contains(&format!("kept container {} (pod default/running)", running.cid)), "{cleaned:?}");
    assert!(n.leases().iter().all(|(_, c)| *c != cid), "{:?}", n.leases());
    assert!(n.records().iter().all(|r| !r.starts_with(&cid)), "{:?}", n.records());
    assert_eq!(addresses_on(&running, "net1").len(), 1, "the running pod keeps its further network");

    // The running pod is deleted later, as the other: then nothing of either is left on the node.
    let netns = running.netns_path();
    let args =
        ["del", kindnet_file.to_str().unwrap(), netns.as_str(), running.cid.as_str(), "eth0", running.args.as_str()];
    libcni_run(&n.sb, &cnidrive(), &args, None).ok();
    drop(running);
    let cleaned = cleanup(&n);
    assert_eq!(cleaned.code, 0, "{cleaned:?}");
    let left = n.leftovers();
    assert!(left.is_empty(), "left on the node: {left:#?}");
}
