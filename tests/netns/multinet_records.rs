//! Several networks per pod, the node's side, as root: records per attachment and what works from
//! them (DEL with the API server down or the pod gone, CHECK, GC), records and yonghui state written
//! by the release before several networks still DELeted, two yonghui networks in one pod, what the
//! networks annotation asks beyond a network (ips, mac, default-route), the status write's
//! safeguards, and `explain`.

use crate::support::lan::{LAN_GATEWAY, Lan, RouterNetworks};
use crate::support::node::{NetnsNode, addresses_on as addresses};
use serde_json::{Value, json};
use std::time::Duration;
use testkit::apiserver::literal;
use testkit::fake_plugin::{FakePlugin, Step};
use testkit::inspect::{link_names, list_dir};

use yh_genie::programs::selector::NETWORK_STATUS as STATUS;
use yh_genie::programs::selector::requests::annotation::NETWORKS;

/// A node with a LAN, `ptpnet` and a plain macvlan network `lan` (capabilities `ips` and `mac`).
fn node() -> (NetnsNode, Lan) {
    let n = NetnsNode::new();
    let lan = Lan::beside(&n);
    n.add_ptpnet();
    n.add_macvlan("lan", json!({"capabilities": {"ips": true, "mac": true}}));
    (n, lan)
}

fn msg(reply: &Value) -> &str {
    reply["msg"].as_str().unwrap()
}

#[test]
fn del_takes_every_attachment_with_the_api_server_down_or_the_pod_gone() {
    let (n, _lan) = node();
    n.api.put_pod("default", "p", literal("ptpnet,lan"));
    let conf = n.selector_conf("1.0.0", json!({}));
    for case in ["API server down", "pod gone"] {
        let pod = n.pod("p");
        n.call("ADD", &pod, &conf).ok();
        assert_eq!((addresses(&pod, "eth0").len(), addresses(&pod, "net1").len()), (1, 1), "{case}");
        match case {
            "API server down" => n.api.down(),
            _ => n.api.remove_pod("default", "p"),
        }
        n.call("CHECK", &pod, &conf).ok();
        n.call("DEL", &pod, &conf).ok();
        n.assert_nothing_left(&pod, case);
        n.call("DEL", &pod, &conf).ok();
        n.api.up();
        n.api.put_pod("default", "p", literal("ptpnet,lan"));
    }
}

/// A pod attached by the release before several networks: its record exactly as that release
/// wrote it (format 1, no owner or position), made here for a real attachment of the reference
/// bridge. The upgraded selector's DEL must undo it from that record alone.
#[test]
fn a_record_written_by_the_earlier_release_is_deleted_after_the_upgrade() {
    let n = NetnsNode::new();
    let list = json!({"cniVersion": "1.0.0", "name": "old", "plugins": [{"type": "bridge", "bridge": testkit::process::unique("yb"),
        "isGateway": true, "ipam": {"type": "host-local", "subnet": "10.79.0.0/24", "dataDir": n.ipam_dir()}}]});
    let path = n.write_conf("old/old.conflist", &list);
    let pod = n.pod("p");
    let mut plugin = list["plugins"][0].clone();
    plugin["cniVersion"] = "1.0.0".into();
    plugin["name"] = "old".into();
    let call = crate::support::driver::Call {
        plugin: "bridge",
        command: "ADD",
        container_id: &pod.cid,
        netns: &pod.netns_path(),
        ifname: "eth0",
        args: &pod.args,
        config: &plugin.to_string(),
    };
    let result = crate::support::driver::cni(&n.sb, &call).ok();
    assert_eq!(addresses(&pod, "eth0").len(), 1);
    let record = format!(
        r#"{{
  "format": 1,
  "containerId": "{cid}",
  "ifname": "eth0",
  "netns": "{netns}",
  "cniArgs": "{args}",
  "network": "old",
  "confPath": "{path}",
  "conf": {conf},
  "pod": {{
    "namespace": "default",
    "name": "p",
    "uid": "uid-default-p"
  }},
  "result": {result}
}}"#,
        cid = pod.cid,
        netns = pod.netns_path(),
        args = pod.args,
        path = path.canonicalize().unwrap().display(),
        conf = Value::String(list.to_string()),
    );
    std::fs::create_dir_all(n.data_dir().join("attachments")).unwrap();
    std::fs::write(n.data_dir().join("attachments").join(format!("{}:eth0", pod.cid)), record).unwrap();
    n.api.down();
    let conf = n.selector_conf("1.0.0", json!({}));
    n.call("CHECK", &pod, &conf).ok();
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "a record of the earlier release");
}

/// A node with two yonghui networks, `fabric` and `storage`, and the selector's configuration.
fn two_yonghui_networks() -> (NetnsNode, String) {
    let n = NetnsNode::new();
    n.add_yonghui_network("fabric", 61, json!({}));
    n.add_yonghui_network("storage", 62, json!({}));
    let conf = n.selector_conf("1.0.0", json!({}));
    (n, conf)
}

#[test]
fn two_yonghui_networks_in_one_pod_keep_their_state_apart() {
    let (n, conf) = two_yonghui_networks();
    n.api.put_pod("default", "p", literal("fabric,storage@stor0"));
    let pod = n.pod("p");
    n.call("ADD", &pod, &conf).ok();
    assert!(addresses(&pod, "eth0")[0].starts_with("10.77.61."));
    assert!(addresses(&pod, "stor0")[0].starts_with("10.77.62."));
    assert_eq!(list_dir(&n.yonghui_dir()), [format!("{}:eth0", pod.cid), format!("{}:stor0", pod.cid)]);
    n.call("CHECK", &pod, &conf).ok();
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "two yonghui networks");
}

/// What the earlier release saved for a pod's one yonghui network, `<dataDir>/<containerID>`, is
/// deleted by that network's DEL.
#[test]
fn yonghui_state_saved_under_the_container_alone_is_deleted_by_its_network() {
    let (n, conf) = two_yonghui_networks();
    n.api.put_pod("default", "old", literal("fabric"));
    let pod = n.pod("old");
    n.call("ADD", &pod, &conf).ok();
    let keyed = n.yonghui_dir().join(format!("{}:eth0", pod.cid));
    std::fs::rename(&keyed, n.yonghui_dir().join(&pod.cid)).unwrap();
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "yonghui state of the earlier release");
}

#[test]
fn check_names_the_interface_that_changed() {
    let (n, _lan) = node();
    n.api.put_pod("default", "keep", literal("ptpnet,lan"));
    let conf = n.selector_conf("1.1.0", json!({}));
    let keep = n.pod("keep");
    n.call("ADD", &keep, &conf).ok();
    n.call("CHECK", &keep, &conf).ok();
    keep.netns.must("ip link del net1");
    let err = n.call("CHECK", &keep, &conf).err();
    assert!(msg(&err).starts_with("interface net1: network lan"), "{err}");
    n.call("DEL", &keep, &conf).ok();
    n.assert_nothing_left(&keep, "after CHECK and DEL");
}

#[test]
fn gc_collects_whole_pods() {
    let (n, _lan) = node();
    n.api.put_pod("default", "keep", literal("ptpnet,lan"));
    n.api.put_pod("default", "stale", literal("ptpnet,lan@lan0"));
    let conf = n.selector_conf("1.1.0", json!({}));
    let keep = n.pod("keep");
    let stale = n.pod("stale");
    n.call("ADD", &keep, &conf).ok();
    n.call("ADD", &stale, &conf).ok();

    let gc =
        n.selector_conf("1.1.0", json!({"cni.dev/valid-attachments": [{"containerID": keep.cid, "ifname": "eth0"}]}));
    n.call("GC", &keep, &gc).ok();
    let mut records = n.records();
    records.sort();
    assert_eq!(
        records,
        [format!("{}:eth0", keep.cid), format!("{}:net1", keep.cid)],
        "a valid pod keeps every network"
    );
    assert_eq!(link_names(&stale.netns, ""), ["lo"], "both of the stale pod's interfaces went");
    assert!(n.leftovers_of(&stale, "ptpnet").is_empty());
    n.call("DEL", &keep, &conf).ok();
    n.assert_nothing_left(&keep, "after GC and DEL");
}

/// A runtime that attaches one container through the selector a second time, under another
/// `CNI_IFNAME`, while the pod's further network takes `net1` both times: the second ADD is refused
/// (code 106) saying why and what to do, and makes nothing; the first attachment stays whole.
#[test]
fn a_second_attachment_taking_a_further_networks_interface_is_refused_saying_why() {
    let (n, _lan) = node();
    n.api.put_pod("default", "p", literal("ptpnet,lan"));
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("p");
    n.call("ADD", &pod, &conf).ok();
    let (eth0, net1) = (addresses(&pod, "eth0"), addresses(&pod, "net1"));
    let as_eth1 = |command: &str| {
        let mut child = n.command(command, &pod, &[("CNI_IFNAME", "eth1")]).spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), conf.as_bytes()).unwrap();
        crate::support::driver::Reply::from(child.wait_with_output().unwrap())
    };
    let err = as_eth1("ADD").err();
    assert_eq!(err["code"], 106, "{err}");
    for want in [
        &format!("interface net1 of container {} is already attached, for the runtime's interface eth0", pod.cid),
        "attaches this container through yh-genie a second time (now as eth1)",
        "network lan would take net1 again",
        "NAME@IFNAME in CNI_NETWORK_CONFIG",
        "or DEL the container's eth0 first",
    ] {
        assert!(msg(&err).contains(want), "{err} lacks {want:?}");
    }
    assert!(!link_names(&pod.netns, "").contains(&"eth1".to_string()), "the refused ADD made eth1");
    assert_eq!((addresses(&pod, "eth0"), addresses(&pod, "net1")), (eth0, net1), "the first attachment changed");
    as_eth1("DEL").ok();
    assert_eq!(n.records().len(), 2, "the runtime's DEL of eth1 took eth0's records: {:?}", n.records());
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "after both DELs");
}

#[test]
fn the_annotation_asks_each_network_for_its_addresses_mac_default_route() {
    let (n, _lan) = node();
    n.api.put_nad("default", "lan", None);
    let networks = json!([{"name": "lan", "interface": "lan0", "ips": ["192.168.77.77/24"],
        "mac": "02:00:00:aa:bb:cc", "default-route": [LAN_GATEWAY]}]);
    n.api.put_annotated_pod("default", "p", json!({NETWORKS: networks.to_string()}), literal("ptpnet"));
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("p");
    let result = n.call("ADD", &pod, &conf).ok();
    assert_eq!(addresses(&pod, "lan0"), ["192.168.77.77/24"]);
    let mac = pod.netns.must("cat /sys/class/net/lan0/address");
    assert_eq!(mac.trim(), "02:00:00:aa:bb:cc");
    let defaults = pod.netns.must("ip -4 route show default");
    assert_eq!(defaults.trim(), format!("default via {LAN_GATEWAY} dev lan0"), "the only default");
    let routes: Vec<&str> =
        result["routes"].as_array().into_iter().flatten().map(|r| r["dst"].as_str().unwrap()).collect();
    assert!(!routes.contains(&"0.0.0.0/0"), "the runtime's result no longer claims the default: {result}");
    n.call("CHECK", &pod, &conf).ok();
    let status: Value =
        serde_json::from_str(n.api.pod("default", "p").unwrap()["metadata"]["annotations"][STATUS].as_str().unwrap())
            .unwrap();
    assert_eq!((&status[1]["ips"], &status[1]["mac"]), (&json!(["192.168.77.77"]), &json!("02:00:00:aa:bb:cc")));
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "extras");
}

#[test]
fn the_status_is_written_only_when_asked_on_the_pod_it_describes() {
    let (n, _lan) = node();
    n.api.put_pod("default", "p", literal("ptpnet,lan"));
    // The pod was deleted and created again under its name since the runtime started this sandbox:
    // the pod object is another pod's, and the old sandbox does not get its networks.
    n.api.recreate_pod("default", "p", "uid-of-the-new-pod");
    let pod = n.pod("p");
    let conf = n.selector_conf("1.0.0", json!({}));
    let e = n.call("ADD", &pod, &conf).err();
    assert_eq!(e["code"], 103);
    assert!(msg(&e).contains("uid-of-the-new-pod") && msg(&e).contains("uid-default-p"), "{e}");
    n.assert_failed_add_left_nothing(&pod, "another pod's object");
    assert!(n.api.patches().is_empty(), "nothing written on the new pod");
    n.call("DEL", &pod, &conf).ok();

    // Recreated while the ADD runs (between its GET and its status write): the write carries the
    // uid, the API server refuses it (422: the uid is immutable), the plugin says the pod was
    // replaced, and the ADD still succeeds.
    let gate = n.sb.path().join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    let started = [Step::Touch(gate.join("started")), Step::WaitFor(gate.join("go"), Duration::from_secs(10))];
    let answer = Step::Answer(json!({"cniVersion": "1.0.0"}));
    FakePlugin::new().on("ADD", started.into_iter().chain([answer])).write(&n.sb.bin().join("gate"));
    n.write_conf("gate/gate.conflist", &json!({"cniVersion": "1.0.0", "name": "gate", "plugins": [{"type": "gate"}]}));
    n.api.put_pod("default", "q", literal("ptpnet,gate"));
    let pod = n.pod("q");
    let add = std::thread::scope(|s| {
        let add = s.spawn(|| n.call("ADD", &pod, &conf));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !gate.join("started").exists() {
            assert!(std::time::Instant::now() < deadline, "the gate plugin never ran");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        n.api.recreate_pod("default", "q", "uid-of-the-new-q");
        std::fs::write(gate.join("go"), "").unwrap();
        add.join().unwrap()
    });
    assert_eq!(add.code, 0, "a status that cannot be written never fails the ADD: {add:?}");
    assert!(add.stderr.contains(STATUS) && add.stderr.contains("was replaced by another pod"), "{}", add.stderr);
    assert!(n.api.pod("default", "q").unwrap()["metadata"]["annotations"].get(STATUS).is_none(), "not on another pod");
    n.call("DEL", &pod, &conf).ok();

    for (mode, pod_value, written) in
        [("never", "ptpnet,lan", false), ("always", "ptpnet", true), ("auto", "ptpnet", false)]
    {
        n.api.put_pod("default", "q", literal(pod_value));
        let conf = n.selector_conf("1.0.0", json!({"networkStatus": mode}));
        let pod = n.pod("q");
        n.call("ADD", &pod, &conf).ok();
        let annotated = n.api.pod("default", "q").unwrap()["metadata"]["annotations"].get(STATUS).is_some();
        assert_eq!(annotated, written, "networkStatus {mode}, {pod_value}");
        n.call("DEL", &pod, &conf).ok();
        n.assert_nothing_left(&pod, mode);
    }
}

#[test]
fn explain_shows_where_every_attachment_came_from() {
    let (n, _lan) = node();
    n.api.put_nad("default", "lan", None);
    n.api.put_config_map("default", "nets", json!({"k": "ptpnet"}));
    n.api.put_annotated_pod(
        "default",
        "p",
        json!({NETWORKS: r#"[{"name": "lan", "interface": "lan0", "ips": ["192.168.77.70/24"]}]"#}),
        testkit::apiserver::from_config_map("nets", "k"),
    );
    let config = n.selector_conflist("1.0.0");
    let out =
        n.sb.command(&n.sb.bin().join("yh-genie"))
            .args(["explain", "--pod", "p", "--config"])
            .arg(&config)
            .output()
            .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for want in [
        "interface 1:   eth0, network ptpnet",
        "chosen by:     env CNI_NETWORK_CONFIG element \"ptpnet\"",
        "interface 2:   lan0, network lan",
        "NetworkAttachmentDefinition default/lan, the confDir network of its name",
        "asks for:      ips 192.168.77.70/24",
        "ConfigMap nets key \"k\"",
    ] {
        assert!(text.contains(want), "lacks {want:?}:\n{text}");
    }
}
