//! CNI 0.1.0, 0.2.0 and configurations without `cniVersion`, end to end through libcni (the
//! project's cnidrive), as root on real network namespaces, with Debian's reference plugins at
//! those versions beside ours. What is checked is what a runtime sees: the result's version and
//! shape (`ip4`/`ip6`), the pod's address, libcni's refusal of CHECK below 0.4.0, and a DEL (given
//! no prevResult at these versions) that leaves nothing on the node.

use crate::support::driver::cnidrive_run;
use crate::support::node::{NetnsNode, Pod, pod_addresses};
use crate::support::versions;
use serde_json::{Value, json};
use std::path::PathBuf;
use testkit::apiserver::literal;
use testkit::process::unique;
use yh_genie::platform::cni::CniVersion;

/// The ways a configuration can be legacy: no `cniVersion`, or a version of the suite's table
/// whose results have the `ip4`/`ip6` shape (0.1.0, 0.2.0).
fn legacy() -> impl Iterator<Item = Option<&'static str>> {
    std::iter::once(None).chain(versions::all().filter(|v| v.has_ip4_ip6_result()).map(|v| Some(v.as_str())))
}

/// No `cniVersion`, then every version of the suite's table that libcni (cnidrive, of the
/// reference plugins' release) speaks.
fn none_and_every_libcni_version() -> impl Iterator<Item = Option<&'static str>> {
    std::iter::once(None).chain(versions::with_reference().map(|v| Some(v.as_str())))
}

/// The version libcni and our plugins read `declared` as, and answer in.
fn read_as(declared: Option<&str>) -> &str {
    declared.unwrap_or("0.1.0")
}

/// `{"name", ["cniVersion"], "plugins"}`: a conflist whose version is `version`, or has none.
fn conflist(name: &str, version: Option<&str>, plugins: Value) -> Value {
    let mut list = json!({"name": name, "plugins": plugins});
    if let Some(version) = version {
        list["cniVersion"] = version.into();
    }
    list
}

/// The reference `bridge` with `host-local` on `10.77.<octet>.0/24`.
fn reference_bridge(n: &NetnsNode, octet: u8) -> Value {
    json!({
        "type": "bridge", "bridge": unique("lb"), "isGateway": true,
        "ipam": {"type": "host-local", "subnet": format!("10.77.{octet}.0/24"), "dataDir": n.ipam_dir()}
    })
}

/// `yonghui` on this node's subnet `10.77.<octet>.0/24` of the fabric 10.77.0.0/16, delegating to
/// `delegate` (a type) on a bridge of its own.
fn yonghui(n: &NetnsNode, octet: u8, delegate: &str) -> Value {
    let env = format!(
        "FLANNEL_NETWORK=10.77.0.0/16\nFLANNEL_SUBNET=10.77.{octet}.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
    );
    let subnet_file = n.sb.write(&format!("subnet-{octet}.env"), &env);
    json!({
        "type": "yonghui", "subnetFile": subnet_file, "dataDir": n.yonghui_dir(),
        "delegate": {"type": delegate, "bridge": unique("lb")}, "ipam": {"dataDir": n.ipam_dir()}
    })
}

/// The result a runtime got for `pod` is in `version`'s shape and names the pod's one address,
/// which is on `10.77.<octet>.0/24`, with the gateway `.1`.
fn assert_result_is(result: &Value, version: &str, pod: &Pod, octet: u8, case: &str) {
    let addresses = pod_addresses(pod);
    assert_eq!(addresses.len(), 1, "{case}: one address on eth0: {addresses:?}");
    assert!(addresses[0].starts_with(&format!("10.77.{octet}.")), "{case}: {addresses:?}");
    assert_eq!(result["cniVersion"], version, "{case}: {result}");
    let gateway = format!("10.77.{octet}.1");
    if CniVersion::parse(version).unwrap().has_ip4_ip6_result() {
        assert_eq!(result["ip4"]["ip"], addresses[0].as_str(), "{case}: {result}");
        assert_eq!(result["ip4"]["gateway"], gateway.as_str(), "{case}: {result}");
        assert!(result.get("ips").is_none() && result.get("interfaces").is_none(), "{case}: {result}");
        assert!(result["dns"].is_object(), "{case}: {result}");
    } else {
        assert_eq!(result["ips"][0]["address"], addresses[0].as_str(), "{case}: {result}");
        assert_eq!(result["ips"][0]["gateway"], gateway.as_str(), "{case}: {result}");
    }
}

/// libcni's own answer to CHECK below 0.4.0: no plugin is called (cnidrive's exit status 2).
fn assert_libcni_refuses_check(reply: &crate::support::driver::Reply, case: &str) {
    assert_eq!(reply.code, 2, "{case}: {reply:?}");
    let msg = reply.err()["msg"].as_str().unwrap().to_string();
    assert!(msg.contains("does not support the CHECK command"), "{case}: {msg}");
}

#[test]
fn yonghui_at_every_legacy_version_through_libcni() {
    let n = NetnsNode::new();
    let mut octet = 10;
    // yh-bridge runs in process; the reference bridge is exec'd and answers in the legacy shape.
    for delegate in ["yh-bridge", "bridge"] {
        for version in legacy() {
            octet += 1;
            let case = format!("yonghui -> {delegate} at {version:?}");
            let list = n.write_conf(
                &format!("yonghui-{octet}.conflist"),
                &conflist(&format!("yh{octet}"), version, json!([yonghui(&n, octet, delegate)])),
            );
            let pod = n.pod("web");
            let netns = pod.netns_path();
            let drive = |cmd: &str| cnidrive_run(&n.sb, cmd, &list, &netns, &pod.cid, "eth0", &pod.args);

            let result = drive("add").ok();
            assert_result_is(&result, read_as(version), &pod, octet, &case);
            assert!(result["ip4"]["routes"].as_array().unwrap().contains(&json!({"dst": "10.77.0.0/16"})), "{case}");
            // A missing version is handed on as missing, as the flannel plugin does.
            let saved: Value =
                serde_json::from_slice(&std::fs::read(n.yonghui_dir().join(format!("{}:eth0", pod.cid))).unwrap())
                    .unwrap();
            assert_eq!(saved.get("cniVersion").and_then(Value::as_str), version, "{case}");

            assert_libcni_refuses_check(&drive("check"), &case);
            drive("del").ok();
            n.assert_nothing_left(&pod, &case);
            drive("del").ok();
        }
    }
}

/// A reference bridge's 0.2.0 result (Go's own printing) is the prevResult of one of our plugins,
/// exec'd by libcni, which must read it and hand it on in the same shape.
#[test]
fn our_chained_plugin_reads_a_reference_plugins_0_2_0_result() {
    let n = NetnsNode::new();
    let veth = json!({"type": "veth", "skip_call": true, "data_dir": n.sb.path().join("veth"),
                      "log_options": {"log_file": n.sb.path().join("veth.log")},
                      "overlay_hijack_subnet": ["10.244.0.0/16"], "service_hijack_subnet": ["10.96.0.0/12"]});
    for (octet, version) in [(21, Some("0.2.0")), (22, None)] {
        let case = format!("bridge + veth at {version:?}");
        let list = n.write_conf(
            &format!("chain-{octet}.conflist"),
            &conflist("chain", version, json!([reference_bridge(&n, octet), veth])),
        );
        let pod = n.pod("web");
        let netns = pod.netns_path();
        let drive = |cmd: &str| cnidrive_run(&n.sb, cmd, &list, &netns, &pod.cid, "eth0", &pod.args);
        let result = drive("add").ok();
        assert_result_is(&result, read_as(version), &pod, octet, &case);
        assert_libcni_refuses_check(&drive("check"), &case);
        drive("del").ok();
        n.assert_nothing_left(&pod, &case);
    }
}

/// The networks of the selector tests: a conflist without a version (reference bridge), a 0.1.0
/// `.conf` (yonghui exec'ing the reference bridge), a 0.2.0 chain run in process (yh-bridge, whose
/// host-local answers in 0.2.0, then the reference `tuning`, which gets prevResult in 0.2.0), and
/// a 1.0.0 network, whose result a legacy selector must write in the 0.2.0 shape.
fn networks(n: &NetnsNode) -> [(&'static str, u8); 4] {
    n.write_conf("old-none/10-old-none.conflist", &conflist("old-none", None, json!([reference_bridge(n, 31)])));
    let mut conf = yonghui(n, 32, "bridge");
    conf["cniVersion"] = "0.1.0".into();
    conf["name"] = "old-010".into();
    n.write_conf("old-010/old-010.conf", &conf);
    let mut yh_bridge = reference_bridge(n, 33);
    yh_bridge["type"] = "yh-bridge".into();
    let tuning = json!({"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}});
    n.write_conf("old-020/10-old-020.conflist", &conflist("old-020", Some("0.2.0"), json!([yh_bridge, tuning])));
    n.write_conf("new-100/10-new-100.conflist", &conflist("new-100", Some("1.0.0"), json!([reference_bridge(n, 34)])));
    [("old-none", 31), ("old-010", 32), ("old-020", 33), ("new-100", 34)]
}

/// `00-yh-genie.conflist` at `version`, or without one.
fn selector_conflist(n: &NetnsNode, version: Option<&str>) -> PathBuf {
    let mut plugin: Value = serde_json::from_str(&n.selector_conf("", json!({}))).unwrap();
    let plugin = plugin.as_object_mut().unwrap();
    plugin.remove("cniVersion");
    plugin.remove("name");
    n.write_conf("00-yh-genie.conflist", &conflist("yh-genie", version, json!([plugin])))
}

#[test]
fn the_selector_at_every_version_answers_in_its_own_whatever_the_networks() {
    let n = NetnsNode::new();
    let networks = networks(&n);
    for (network, _) in networks {
        n.api.put_pod("default", &format!("p-{network}"), literal(network));
    }
    for selector_version in none_and_every_libcni_version() {
        let list = selector_conflist(&n, selector_version);
        for (network, octet) in networks {
            let case = format!("selector at {selector_version:?}, network {network}");
            let pod = n.pod(&format!("p-{network}"));
            let netns = pod.netns_path();
            let drive = |cmd: &str| cnidrive_run(&n.sb, cmd, &list, &netns, &pod.cid, "eth0", &pod.args);

            // The result is in the version the runtime asked the selector for, whatever the network's.
            let result = drive("add").ok();
            assert_result_is(&result, read_as(selector_version), &pod, octet, &case);
            assert_eq!(n.record(&pod)["network"], network, "{case}");
            if network == "old-020" {
                let sysctl = pod.netns.must("cat /proc/sys/net/ipv4/conf/eth0/arp_notify");
                assert_eq!(sysctl.trim(), "1", "{case}: tuning ran after yh-bridge with its prevResult");
            }
            if CniVersion::of_config(selector_version).unwrap().has_check() {
                // A legacy network has no CHECK, so only the selector's record is checked.
                drive("check").ok();
            } else {
                assert_libcni_refuses_check(&drive("check"), &case);
            }
            drive("del").ok();
            n.assert_nothing_left(&pod, &case);
        }
    }
}

/// Through the suite's own driver, a selector configuration without a version: the runtime hands
/// it over as is, and the answer is a 0.1.0 result; CHECK is refused as libcni's skel refuses it.
#[test]
fn the_selector_called_without_a_version_answers_in_0_1_0() {
    let n = NetnsNode::new();
    let [(network, octet), ..] = networks(&n);
    n.api.put_pod("default", "web", literal(network));
    let mut conf: Value = serde_json::from_str(&n.selector_conf("", json!({}))).unwrap();
    conf.as_object_mut().unwrap().remove("cniVersion");
    let conf = conf.to_string();
    let pod = n.pod("web");
    let result = n.call("ADD", &pod, &conf).ok();
    assert_result_is(&result, "0.1.0", &pod, octet, "no version");
    let check = n.call("CHECK", &pod, &conf).err();
    assert_eq!((check["code"].as_u64(), check["msg"].as_str()), (Some(1), Some("config version does not allow CHECK")));
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "no version");
}
