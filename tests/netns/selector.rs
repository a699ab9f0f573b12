//! The selector end to end, as root: a node netns holds the plugins, the bridges and a fake API
//! server (`support::node`, `testkit::apiserver`); each pod gets its own netns. Networks are reference
//! `bridge` + `host-local` chains, one directory each under the sandbox's conf dir, on different
//! subnets, so an address tells which network a pod got, and a `yonghui` -> `yh-bridge` network.

use crate::support::driver::cnidrive_run;
use crate::support::node::{NetnsNode, Pod, pod_addresses};
use serde_json::{Value, json};
use testkit::apiserver::{ENV_VAR, Fault, from_config_map, literal};
use testkit::fake_plugin::{FakePlugin, Step};
use testkit::inspect::{link_names, list_dir};
use testkit::process::unique;

/// A reference network in `<confDir>/<name>/<file>`: bridge + host-local on `10.77.<n>.0/24`.
#[derive(Clone, Copy)]
struct Net {
    name: &'static str,
    file: &'static str,
    version: &'static str,
    subnet: u8,
}

const BLUE: Net = Net { name: "blue", file: "10-blue.conflist", version: "1.0.0", subnet: 1 };
/// A single-plugin `.conf` at 0.3.1: CHECK is skipped and DEL gets no prevResult.
const GREEN: Net = Net { name: "green", file: "green.conf", version: "0.3.1", subnet: 2 };
const RED: Net = Net { name: "red", file: "10-red.conflist", version: "0.4.0", subnet: 3 };
/// The default network.
const GREY: Net = Net { name: "grey", file: "10-grey.conflist", version: "1.0.0", subnet: 4 };
/// `yonghui` delegating to `yh-bridge` (with NAT), both in process; its subnet comes from `subnet.env`.
const YONGHUI: Net = Net { name: "yonghui", file: "10-yonghui.conflist", version: "1.0.0", subnet: 5 };

impl Net {
    fn prefix(&self) -> String {
        format!("10.77.{}.", self.subnet)
    }
}

/// A node with every network above, GREY the default.
fn node() -> NetnsNode {
    let mut node = NetnsNode::new();
    node.default_network = Some(GREY.name.to_string());
    for net in [BLUE, GREEN, RED, GREY] {
        node.add_network(net);
    }
    node.add_yonghui_network(YONGHUI.name, YONGHUI.subnet, json!({}));
    node
}

/// This file's reference networks on a `NetnsNode`.
trait Networks {
    /// The bridge + host-local plugin object of `net`.
    fn bridge_plugin(&self, net: Net) -> Value;
    fn add_network(&self, net: Net);
    /// ADD `pod` and check it got one address from `net`; returns the result.
    fn add_expecting(&self, pod: &Pod, conf: &str, net: Net) -> Value;
}

impl Networks for NetnsNode {
    fn bridge_plugin(&self, net: Net) -> Value {
        json!({
            "type": "bridge", "bridge": unique("yb"), "isGateway": true,
            "ipam": {"type": "host-local", "subnet": format!("10.77.{}.0/24", net.subnet),
                     "dataDir": self.ipam_dir()}
        })
    }

    fn add_network(&self, net: Net) {
        let conf = if net.file.ends_with(".conflist") {
            json!({"cniVersion": net.version, "name": net.name, "plugins": [self.bridge_plugin(net)]})
        } else {
            let mut plugin = self.bridge_plugin(net);
            plugin["cniVersion"] = net.version.into();
            plugin["name"] = net.name.into();
            plugin
        };
        self.write_conf(&format!("{}/{}", net.name, net.file), &conf);
    }

    fn add_expecting(&self, pod: &Pod, conf: &str, net: Net) -> Value {
        let result = self.call("ADD", pod, conf).ok();
        let addresses = pod_addresses(pod);
        assert_eq!(addresses.len(), 1, "one address on eth0: {addresses:?}");
        assert!(addresses[0].starts_with(&net.prefix()), "{} is not on network {}", addresses[0], net.name);
        assert_eq!(result["ips"][0]["address"], addresses[0].as_str(), "result names the address: {result}");
        result
    }
}

fn msg(err: &Value) -> &str {
    err["msg"].as_str().unwrap()
}

#[test]
fn every_way_of_choosing_gets_an_address_from_the_chosen_network() {
    let n = node();
    let seed = json!({"kubernetes": {"kubeconfig": n.conf_dir().join("blue/10-blue.conflist")}}).to_string();
    n.api.put_config_map("default", "by-json", json!({"cni_network_config": seed}));
    n.api.put_config_map("default", "by-name", json!({"net": "green"}));
    n.api.put_config_map("default", "by-path", json!({"net": "red/10-red.conflist"}));
    n.api.put_pod("default", "p-json", from_config_map("by-json", "cni_network_config"));
    n.api.put_pod("default", "p-name", from_config_map("by-name", "net"));
    n.api.put_pod("default", "p-path", from_config_map("by-path", "net"));
    n.api.put_pod("default", "p-literal", literal("blue"));
    n.api.put_pod("default", "p-none", json!([{"name": "app", "image": "nginx"}]));
    let conf = n.selector_conf("1.1.0", json!({}));
    for (name, net, requests) in
        [("p-json", BLUE, 2), ("p-name", GREEN, 2), ("p-path", RED, 2), ("p-literal", BLUE, 1), ("p-none", GREY, 1)]
    {
        let pod = n.pod(name);
        let before = n.api.requests();
        let result = n.add_expecting(&pod, &conf, net);
        assert_eq!(n.api.requests() - before, requests, "{name}: API requests of one ADD");
        assert_eq!(result["cniVersion"], "1.1.0", "{name}: result in the selector's version");
        assert_eq!(n.records(), [format!("{}:eth0", pod.cid)], "{name}");
        let record = n.record(&pod);
        assert_eq!(record["network"], net.name, "{name}");
        assert_eq!(record["pod"], json!({"namespace": "default", "name": name, "uid": format!("uid-default-{name}")}));
        assert_eq!(n.results(&pod)["result"]["ips"], result["ips"], "{name}: the result is kept beside the record");

        let before = n.api.requests();
        n.call("CHECK", &pod, &conf).ok();
        n.call("DEL", &pod, &conf).ok();
        assert_eq!(n.api.requests(), before, "{name}: CHECK and DEL work from the record");
        n.assert_nothing_left(&pod, name);
    }
}

#[test]
fn cnidrive_runs_the_selector_like_containerd() {
    let n = node();
    n.api.put_config_map("default", "net", json!({"cni_network_config": "red"}));
    n.api.put_pod("default", "web-0", from_config_map("net", "cni_network_config"));
    let list = n.selector_conflist("1.0.0");
    let pod = n.pod("web-0");
    let netns = pod.netns.path().display().to_string();
    let drive = |cmd: &str| cnidrive_run(&n.sb, cmd, &list, &netns, &pod.cid, "eth0", &pod.args);
    let result = drive("add").ok();
    let addresses = pod_addresses(&pod);
    assert_eq!(addresses.len(), 1);
    assert!(addresses[0].starts_with(&RED.prefix()), "{addresses:?}");
    assert_eq!(result["ips"][0]["address"], addresses[0].as_str());
    let before = n.api.requests();
    drive("check").ok();
    drive("del").ok();
    assert_eq!(n.api.requests(), before);
    n.assert_nothing_left(&pod, "cnidrive");
}

#[test]
fn api_server_down_after_add_does_not_stop_check_or_del() {
    let n = node();
    n.api.put_pod("default", "web-0", literal("blue"));
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("web-0");
    n.add_expecting(&pod, &conf, BLUE);
    n.api.down();
    n.call("CHECK", &pod, &conf).ok();
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "DEL with the API server down");
    // The record is gone and the API server too: the second DEL has nothing to go on, and succeeds.
    n.call("DEL", &pod, &conf).ok();
}

#[test]
fn api_server_down_during_add_is_try_again_later_leaving_nothing() {
    let n = node();
    n.api.put_pod("default", "web-0", literal("blue"));
    // Default time budget: this is what a node sees.
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("web-0");
    n.api.down();
    let err = n.call("ADD", &pod, &conf).err();
    assert_eq!(err["code"], 11, "{err}");
    assert!(msg(&err).contains(&n.api.url()) && msg(&err).contains("pod default/web-0"), "{err}");
    // And where to look: the kubeconfig, the host network, the installer's --api-server.
    assert!(msg(&err).contains("from the node's host network") && msg(&err).contains("--api-server"), "{err}");
    n.assert_failed_add_left_nothing(&pod, "ADD with the API server down");
    n.api.up();
    n.add_expecting(&pod, &conf, BLUE);
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "DEL after the API server came back");
}

#[test]
fn transient_api_failures_are_retried_within_the_budget() {
    let n = node();
    n.api.put_pod("default", "web-0", literal("blue"));
    let conf = n.selector_conf("1.0.0", json!({"apiTimeoutSeconds": 10, "apiAttemptTimeoutSeconds": 1}));
    let pod = n.pod("web-0");

    n.api.inject(Fault::Status(503), 1);
    n.api.inject(Fault::Status(429), 1);
    n.api.inject(Fault::Drop, 1);
    n.api.inject(Fault::Hang, 1);
    n.api.inject(Fault::Delay(std::time::Duration::from_millis(200)), 1);
    let before = n.api.requests();
    n.add_expecting(&pod, &conf, BLUE);
    assert_eq!(n.api.requests() - before, 5, "four failed attempts, then the slow answer");
    n.call("DEL", &pod, &conf).ok();

    for (fault, says) in [(Fault::Hang, "no answer within"), (Fault::Status(503), "503")] {
        n.api.inject_always(fault);
        let err = n.call("ADD", &pod, &conf).err();
        assert_eq!(err["code"], 11, "{err}");
        assert!(msg(&err).contains(says) && msg(&err).contains(&n.api.url()), "{err}");
        n.assert_failed_add_left_nothing(&pod, says);
        n.api.clear_faults();
    }
}

#[test]
fn bad_inputs_are_named_leaving_nothing_behind() {
    let n = node();
    let conf = n.selector_conf("1.0.0", json!({}));
    // A network dir with no configuration, an invalid configuration, a network outside confDir
    // reached by `..` and by a symlink, and a chain whose second plugin fails after the first
    // has made an interface and taken an address.
    n.sb.write("net.d/empty/README", "no configuration here");
    n.write_conf("invalid/10-invalid.conflist", &json!({"cniVersion": "1.0.0", "name": "invalid", "plugins": []}));
    n.sb.write(
        "outside/10-out.conflist",
        &json!({"cniVersion": "1.0.0", "name": "out", "plugins": [n.bridge_plugin(BLUE)]}).to_string(),
    );
    std::os::unix::fs::symlink(n.sb.path().join("outside"), n.conf_dir().join("sneaky")).unwrap();
    n.write_conf(
        "broken/10-broken.conflist",
        &json!({"cniVersion": "1.0.0", "name": "broken",
                "plugins": [n.bridge_plugin(BLUE), {"type": "tuning", "sysctl": {"kernel.hostname": "x"}}]}),
    );
    n.api.put_config_map("default", "netcm", json!({"other": "blue"}));
    n.api.put_pod("default", "p-nocm", from_config_map("absent", "net"));
    n.api.put_pod("default", "p-nokey", from_config_map("netcm", "net"));
    n.api.put_pod("default", "p-garbage", literal("{oops"));
    n.api.put_pod("default", "p-empty-dir", literal("empty"));
    n.api.put_pod("default", "p-invalid", literal("invalid"));
    n.api.put_pod("default", "p-dotdot", literal("../outside/10-out.conflist"));
    n.api.put_pod("default", "p-symlink", literal("sneaky"));
    n.api.put_pod("default", "p-broken", literal("broken"));
    n.api.put_pod(
        "default",
        "p-split",
        json!([{"name": "a", "env": [{"name": ENV_VAR, "value": "blue"}]},
               {"name": "b", "env": [{"name": ENV_VAR, "value": "green"}]}]),
    );
    n.api.put_raw_pod("default", "p-mangled", json!({"apiVersion": "v1", "kind": "Pod", "spec": "not a spec"}));
    n.api.put_pod("default", "p-token", literal("blue"));
    let wrong_token = n.selector_conf("1.0.0", json!({"kubeconfig": n.api.write_kubeconfig("wrong", "not-the-token")}));

    let cases: &[(&str, &str, u64, &[&str])] = &[
        ("p-nocm", &conf, 103, &["ConfigMap default/absent not found", "pod default/p-nocm"]),
        ("p-nokey", &conf, 103, &["ConfigMap default/netcm has no key \"net\"", "pod default/p-nokey"]),
        ("p-ghost", &conf, 103, &["pod default/p-ghost not found"]),
        ("p-garbage", &conf, 7, &["pod default/p-garbage", "\"app\"", "does not parse"]),
        ("p-empty-dir", &conf, 7, &["network empty", "has no *.conflist, *.conf or *.json file"]),
        ("p-invalid", &conf, 7, &["network invalid", "10-invalid.conflist", "'plugins' is empty"]),
        ("p-dotdot", &conf, 7, &["outside confDir", "pod default/p-dotdot"]),
        ("p-symlink", &conf, 7, &["network sneaky", "outside confDir"]),
        ("p-split", &conf, 7, &["pod default/p-split", "\"a\"", "\"b\"", "blue", "green"]),
        ("p-mangled", &conf, 103, &["pod default/p-mangled", "not a valid object"]),
        (
            "p-token",
            &wrong_token,
            103,
            &["rejected the credentials", "401", "pod default/p-token", "check that pod runs on this node"],
        ),
        ("p-broken", &conf, 0, &["network broken: plugin 2 of 2 (tuning) ADD", "invalid net sysctl key"]),
    ];
    for &(name, conf, code, wants) in cases {
        let pod = n.pod(name);
        let err = n.call("ADD", &pod, conf).err();
        if code != 0 {
            assert_eq!(err["code"], code, "{name}: {err}");
        }
        for want in wants {
            assert!(msg(&err).contains(want), "{name}: {err} lacks {want:?}");
        }
        n.assert_failed_add_left_nothing(&pod, name);
        // As a runtime does after a failed ADD.
        assert_eq!(n.call("DEL", &pod, conf).code, 0, "{name}: DEL after the failed ADD");
        n.assert_nothing_left(&pod, name);
    }
}

#[test]
fn gc_deletes_attachments_the_runtime_no_longer_lists() {
    let n = node();
    n.api.put_pod("default", "keep", literal("blue"));
    n.api.put_pod("default", "stale", literal("red"));
    let conf = n.selector_conf("1.1.0", json!({}));
    let keep = n.pod("keep");
    let stale = n.pod("stale");
    n.add_expecting(&keep, &conf, BLUE);
    n.add_expecting(&stale, &conf, RED);
    let gc_conf =
        n.selector_conf("1.1.0", json!({"cni.dev/valid-attachments": [{"containerID": keep.cid, "ifname": "eth0"}]}));
    let before = n.api.requests();
    n.call("GC", &keep, &gc_conf).ok();
    assert_eq!(n.api.requests(), before);
    assert_eq!(n.records(), [format!("{}:eth0", keep.cid)]);
    assert_eq!(n.allocations().len(), 1, "only the valid attachment keeps its address");
    assert_eq!(pod_addresses(&keep).len(), 1);
    assert_eq!(link_names(&stale.netns, ""), ["lo"], "the stale attachment's netns still existed: cleaned too");
    n.call("DEL", &keep, &conf).ok();
    n.assert_nothing_left(&keep, "after GC and DEL");
    // The tombstones of completed DELs go with the attachments the runtime no longer lists.
    n.call("DEL", &stale, &conf).ok();
    let mut both = vec![format!("{}:eth0", keep.cid), format!("{}:eth0", stale.cid)];
    both.sort();
    assert_eq!(n.tombstones(), both);
    n.call("GC", &keep, &gc_conf).ok();
    assert_eq!(n.tombstones(), [format!("{}:eth0", keep.cid)]);
}

#[test]
fn status_is_ready_only_with_what_add_needs() {
    let n = node();
    let pod = n.pod("any");
    n.call("STATUS", &pod, &n.selector_conf("1.1.0", json!({}))).ok();
    for extra in [json!({"confDir": n.sb.path().join("missing")}), json!({"kubeconfig": n.sb.path().join("missing")})] {
        let err = n.call("STATUS", &pod, &n.selector_conf("1.1.0", extra)).err();
        assert_eq!(err["code"], 50, "{err}");
        assert!(msg(&err).contains("missing"), "{err}");
    }
}

#[test]
fn explain_gives_the_network_with_its_reason() {
    let n = node();
    let seed = json!({"kubernetes": {"kubeconfig": n.conf_dir().join("blue/10-blue.conflist")}}).to_string();
    n.api.put_config_map("default", "canal-config-file", json!({"cni_network_config": seed}));
    n.api.put_pod("default", "two-containers2", from_config_map("canal-config-file", "cni_network_config"));
    n.api.put_pod("default", "nothing", json!([{"name": "app"}]));
    let config = n.selector_conflist("1.0.0");
    let explain = |pod: &str| {
        let out =
            n.sb.command(&n.sb.bin().join("yh-genie"))
                .args(["explain", "--namespace", "default", "--pod", pod, "--config"])
                .arg(&config)
                .output()
                .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, out) = explain("two-containers2");
    assert_eq!(code, Some(0), "{out}");
    let file = std::fs::canonicalize(n.conf_dir().join("blue/10-blue.conflist")).unwrap();
    for want in [
        "interface 1:   eth0, network blue".to_string(),
        format!("configuration: {}", file.display()),
        "plugins: bridge".to_string(),
        "container \"app\"".to_string(),
        "ConfigMap canal-config-file key \"cni_network_config\"".to_string(),
    ] {
        assert!(out.contains(&want), "lacks {want:?}:\n{out}");
    }
    let (code, out) = explain("nothing");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("eth0, network grey") && out.contains("defaultNetwork"), "{out}");
    let (code, out) = explain("ghost");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("pod default/ghost not found") && out.contains("103"), "{out}");
    assert!(n.node_veths().is_empty() && n.records().is_empty(), "explain changes nothing");
}

#[test]
fn a_yonghui_network_runs_in_process_through_yh_bridge() {
    let n = node();
    n.api.put_config_map("default", "fabric", json!({"cni_network_config": "yonghui"}));
    n.api.put_pod("default", "web-0", from_config_map("fabric", "cni_network_config"));
    let conf = n.selector_conf("1.1.0", json!({}));
    let pod = n.pod("web-0");
    let result = n.add_expecting(&pod, &conf, YONGHUI);
    assert_eq!(result["cniVersion"], "1.1.0");
    let routes = pod.netns.must("ip -j -4 route show");
    assert!(routes.contains("10.77.0.0/16"), "the fabric's network is routed through the bridge: {routes}");
    let chain = yh_genie::programs::plugins::firewall::Owner::new(YONGHUI.name, &pod.cid, "eth0").chain();
    assert!(n.nat_lines().iter().any(|l| l.contains(&chain)), "yh-bridge masquerades the pod: {:?}", n.nat_lines());
    assert_eq!(list_dir(&n.yonghui_dir()), [format!("{}:eth0", pod.cid)], "yonghui saved its delegate config");
    n.call("CHECK", &pod, &conf).ok();
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "yonghui");
    assert!(list_dir(&n.yonghui_dir()).is_empty(), "yonghui's saved delegate config is gone");
}

/// A network whose plugin is not run in process but exec'd, and itself execs one of ours (as the
/// reference flannel plugin execs its delegate): the plugin down the line has the attachment's
/// lock file open through its callers, and must see that its own operation holds the lock rather
/// than wait for it (60 s) and then kill its callers.
#[test]
fn a_yh_genie_plugin_exec_d_further_down_the_same_operation_does_not_wait_for_the_lock() {
    let n = node();
    let relay = n.sb.bin().join("relay");
    FakePlugin::new().otherwise([Step::Exec("yh-bridge".into())]).write(&relay);
    let mut plugin = n.bridge_plugin(BLUE);
    plugin["type"] = "relay".into();
    n.write_conf(
        "relayed/10-relayed.conflist",
        &json!({"cniVersion": "1.0.0", "name": "relayed", "plugins": [plugin]}),
    );
    n.api.put_pod("default", "p-relayed", literal("relayed"));
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("p-relayed");

    let add = n.call("ADD", &pod, &conf);
    assert_eq!(add.code, 0, "{add:?}");
    assert_eq!(pod_addresses(&pod).len(), 1, "{add:?}");
    let del = n.call("DEL", &pod, &conf);
    assert_eq!(del.code, 0, "{del:?}");
    for reply in [&add, &del] {
        assert!(
            !reply.stderr.contains("earlier operation") && !reply.stderr.contains("locked by"),
            "waited for its own lock: {}",
            reply.stderr
        );
    }
    n.assert_nothing_left(&pod, "relayed");
}
