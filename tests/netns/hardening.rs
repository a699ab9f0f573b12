//! What a pod author writes cannot break the node (root): interface names the kernel would not
//! take literally, `cni-args` standing in for `ips`, types a Go plugin reads as `type` and huge
//! values are refused before anything is written or made; a record whose configuration cannot run
//! does not make every DEL of the pod fail for ever, nor pile up one per sandbox retry.

use crate::support::node::NetnsNode;
use serde_json::{Value, json};
use testkit::apiserver::{from_config_map, literal};
use testkit::fake_plugin::{FakePlugin, Step};
use yh_genie::programs::selector::requests::annotation::{GENIE_CNI, MULTUS_DEFAULT_NETWORK, NETWORKS};

/// A bridge network `name` (reference bridge + host-local) with `extra` plugins after the bridge.
fn bridge_network(n: &NetnsNode, name: &str, octet: u8, extra: &[Value]) {
    let mut plugins = vec![json!({"type": "bridge", "bridge": testkit::process::unique("yb"), "isGateway": true,
        "ipam": {"type": "host-local", "subnet": format!("10.81.{octet}.0/24"), "dataDir": n.ipam_dir()}})];
    plugins.extend_from_slice(extra);
    n.write_conf(&format!("{name}/{name}.conflist"), &json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins}));
}

/// How the fake plugins here refuse a command.
fn refuse() -> Step {
    Step::Fail(7, "this configuration is refused".into())
}

#[test]
fn a_record_whose_configuration_cannot_run_is_forgotten_once_nothing_of_it_is_left() {
    testkit::require_root();
    let n = NetnsNode::new();
    // The bridge attaches, then a plugin refuses ADD and DEL alike: undoing the ADD fails, so its
    // records stay for the runtime's DEL, which must not fail for ever.
    FakePlugin::new().otherwise([refuse()]).write(&n.sb.bin().join("refuser"));
    bridge_network(&n, "refused", 1, &[json!({"type": "refuser"})]);
    n.api.put_pod("default", "p", literal("refused"));
    let conf = n.selector_conf("1.0.0", json!({}));
    let mut pod = n.pod("p");
    for retry in 0..3 {
        let add = n.call("ADD", &pod, &conf);
        assert_ne!(add.code, 0, "retry {retry}: {add:?}");
        assert!(add.stdout.contains("this configuration is refused"), "{add:?}");
        assert_eq!(n.records().len(), 1, "retry {retry}: the failed undo leaves the record for DEL");
        let del = n.call("DEL", &pod, &conf);
        assert_eq!(del.code, 0, "retry {retry}: DEL forgets what cannot run and is not in the kernel: {del:?}");
        assert!(del.stderr.contains("is forgotten"), "the log says so: {}", del.stderr);
        n.assert_nothing_left(&pod, &format!("retry {retry}"));
        assert_eq!(n.call("DEL", &pod, &conf).code, 0);
        pod = pod.renew("p");
    }
    assert!(n.records().is_empty(), "no pile-up over sandbox retries: {:?}", n.records());
}

#[test]
fn a_network_naming_a_plugin_the_node_lacks_is_refused_before_any_record() {
    testkit::require_root();
    let n = NetnsNode::new();
    bridge_network(&n, "missing", 9, &[json!({"type": "no-such-plugin"})]);
    n.api.put_pod("default", "m", literal("missing"));
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("m");
    let err = n.call("ADD", &pod, &conf).err();
    let msg = err["msg"].as_str().unwrap();
    assert!(
        err["code"] == 7 && msg.contains("plugin 2 of 2 (no-such-plugin)") && msg.contains("failed to find"),
        "{err}"
    );
    n.assert_failed_add_left_nothing(&pod, "missing plugin");
    assert!(n.records().is_empty());
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
}

#[test]
fn a_record_is_kept_while_its_interface_is_in_the_netns_or_its_add_completed() {
    testkit::require_root();
    let n = NetnsNode::new();
    // Makes the interface, then refuses; its DEL refuses too and never removes it.
    let make = Step::Shell(r#"nsenter --net="$CNI_NETNS" ip link add "$CNI_IFNAME" type veth peer name "m$$""#.into());
    FakePlugin::new().on("ADD", [make, refuse()]).otherwise([refuse()]).write(&n.sb.bin().join("maker"));
    n.write_conf("made/made.conflist", &json!({"cniVersion": "1.0.0", "name": "made", "plugins": [{"type": "maker"}]}));
    n.api.put_pod("default", "made", literal("made"));
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("made");
    assert_ne!(n.call("ADD", &pod, &conf).code, 0);
    assert_ne!(n.call("DEL", &pod, &conf).code, 0, "eth0 is in the netns: the record is not forgotten");
    assert_eq!(n.records().len(), 1);
    pod.netns.delete();
    let del = n.call("DEL", &pod, &conf);
    assert_eq!(del.code, 0, "the netns is gone, and nothing of the record with it: {del:?}");
    assert!(n.records().is_empty());

    // A completed ADD's record stays while its DEL fails, whatever the netns holds.
    let marker = n.sb.path().join("fail-del");
    FakePlugin::new()
        .on("ADD", [Step::Answer(json!({"cniVersion": "1.0.0"}))])
        .on("DEL", [Step::FailWhileExists(marker.clone(), 7, "this configuration is refused".into())])
        .write(&n.sb.bin().join("flaky"));
    bridge_network(&n, "flaky", 2, &[json!({"type": "flaky"})]);
    n.api.put_pod("default", "q", literal("flaky"));
    let pod = n.pod("q");
    n.call("ADD", &pod, &conf).ok();
    std::fs::write(&marker, "").unwrap();
    assert_ne!(n.call("DEL", &pod, &conf).code, 0);
    assert_eq!(n.records().len(), 1, "a completed ADD's record is never forgotten");
    pod.netns.delete();
    assert_ne!(n.call("DEL", &pod, &conf).code, 0, "not even with the netns gone: its lease is still held");
    std::fs::remove_file(&marker).unwrap();
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    assert!(n.records().is_empty() && n.leases().is_empty(), "{:?} {:?}", n.records(), n.leases());
}

/// Where a pod author writes an interface name or a MAC address.
enum Written {
    /// The container's `CNI_NETWORK_CONFIG`, literally.
    Value(&'static str),
    /// The same, from a ConfigMap's key.
    ConfigMap(&'static str),
    /// A pod annotation: the networks annotation (JSON), CNI-Genie's `cni`, Multus's default-network.
    Annotation(&'static str, Value),
}

#[test]
fn interface_names_a_pod_writes_are_refused_before_anything_is_made() {
    testkit::require_root();
    let n = NetnsNode::new();
    bridge_network(&n, "first", 3, &[]);
    bridge_network(&n, "second", 4, &[]);
    n.api.put_nad("default", "second", None);
    // Multus's default-network annotation names NADs of multusNamespace.
    n.api.put_nad("kube-system", "second", None);
    let conf = n.selector_conf("1.0.0", json!({}));
    let cases = [
        ("value @net%d", Written::Value("first,second@net%d"), "interface name"),
        ("value @lo", Written::Value("first,second@lo"), "interface name"),
        ("value control character", Written::Value("first,second@n\u{1b}1"), "interface name"),
        ("ConfigMap value %d", Written::ConfigMap("first,second@eth%d"), "interface name"),
        (
            "annotation lo",
            Written::Annotation(NETWORKS, json!([{"name": "second", "interface": "lo"}])),
            "interface name",
        ),
        (
            "annotation %d",
            Written::Annotation(NETWORKS, json!([{"name": "second", "interface": "x%d"}])),
            "interface name",
        ),
        (
            "annotation NUL",
            Written::Annotation(NETWORKS, json!([{"name": "second", "interface": "n\u{0}"}])),
            "interface name",
        ),
        ("Genie's cni @lo", Written::Annotation(GENIE_CNI, json!("first,second@lo")), "interface name"),
        (
            "Multus default-network %d",
            Written::Annotation(MULTUS_DEFAULT_NETWORK, json!("second@e%d")),
            "interface name",
        ),
        (
            "annotation multicast mac",
            Written::Annotation(NETWORKS, json!([{"name": "second", "mac": "01:00:5e:00:00:01"}])),
            "multicast",
        ),
        (
            "cni-args broadcast mac",
            Written::Annotation(NETWORKS, json!([{"name": "second", "cni-args": {"MAC": "ff:ff:ff:ff:ff:ff"}}])),
            "multicast",
        ),
    ];
    for (case, written, why) in cases {
        let name = testkit::process::unique("p");
        match written {
            Written::Value(value) => n.api.put_pod("default", &name, literal(value)),
            Written::ConfigMap(value) => {
                n.api.put_config_map("default", &name, json!({"net": value}));
                n.api.put_pod("default", &name, from_config_map(&name, "net"))
            }
            Written::Annotation(key, value) => {
                let text = value.as_str().map_or_else(|| value.to_string(), String::from);
                // Genie's annotation counts only where no container chooses (the precedence).
                let containers = if key == GENIE_CNI { json!([{"name": "app"}]) } else { literal("first") };
                n.api.put_annotated_pod("default", &name, json!({key: text}), containers)
            }
        };
        let pod = n.pod(&name);
        let err = n.call("ADD", &pod, &conf).err();
        assert_eq!(err["code"], 7, "{case}: {err}");
        assert!(err["msg"].as_str().unwrap().contains(why), "{case}: {err}");
        n.assert_failed_add_left_nothing(&pod, case);
        assert!(n.records().is_empty(), "{case}: nothing recorded");
        assert_eq!(n.call("DEL", &pod, &conf).code, 0, "{case}");
    }
}

/// A node with two bridge networks, `first` and `second` (a NAD names it), neither declaring a
/// capability; and the selector's configuration.
fn two_plain_networks() -> (NetnsNode, String) {
    testkit::require_root();
    let n = NetnsNode::new();
    bridge_network(&n, "first", 5, &[]);
    bridge_network(&n, "second", 6, &[]);
    n.api.put_nad("default", "second", None);
    let conf = n.selector_conf("1.0.0", json!({}));
    (n, conf)
}

#[test]
fn a_huge_value_comes_back_cut() {
    let (n, conf) = two_plain_networks();
    n.api.put_config_map("default", "huge", json!({"net": "x".repeat(1 << 20)}));
    n.api.put_pod("default", "huge", from_config_map("huge", "net"));
    let pod = n.pod("huge");
    let reply = n.call("ADD", &pod, &conf);
    assert_eq!(reply.err()["code"], 7);
    assert!(reply.stdout.len() < 8192, "the error is bounded: {} bytes", reply.stdout.len());
    assert!(reply.stdout.contains("cut: too long to show whole"), "and says it was cut");
    n.assert_failed_add_left_nothing(&pod, "huge value");
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
}

/// `ips` is refused on a network whose plugins declare no `ips` capability; so is its stand-in.
#[test]
fn cni_args_cannot_stand_in_for_ips() {
    let (n, conf) = two_plain_networks();
    let annotation = json!([{"name": "second", "cni-args": {"IPs": ["10.81.6.50/24"]}}]).to_string();
    n.api.put_annotated_pod("default", "ips", json!({NETWORKS: annotation}), literal("first"));
    let pod = n.pod("ips");
    let err = n.call("ADD", &pod, &conf).err();
    assert!(err["code"] == 7 && err["msg"].as_str().unwrap().contains("\"ips\" capability"), "{err}");
    n.assert_failed_add_left_nothing(&pod, "cni-args ips");
}

#[test]
fn an_inline_type_a_go_plugin_reads_must_be_listed() {
    testkit::require_root();
    let n = NetnsNode::new();
    bridge_network(&n, "first", 7, &[]);
    let sneaky = json!({"cniVersion": "1.0.0", "name": "sneaky", "type": "bridge",
        "ipam": {"type": "host-local", "Type": "dhcp", "subnet": "10.81.8.0/24"}});
    n.api.put_nad("default", "sneaky", Some(&sneaky.to_string()));
    n.api.put_annotated_pod("default", "s", json!({NETWORKS: "sneaky"}), literal("first"));
    let conf =
        n.selector_conf("1.0.0", json!({"allowInlineConfig": true, "inlinePluginTypes": ["bridge", "host-local"]}));
    let pod = n.pod("s");
    let err = n.call("ADD", &pod, &conf).err();
    assert!(err["msg"].as_str().unwrap().contains("ipam.Type is \"dhcp\""), "{err}");
    n.assert_failed_add_left_nothing(&pod, "ipam Type");
    assert_eq!(n.call("DEL", &pod, &conf).code, 0, "the runtime's DEL after the failed ADD");

    // yonghui (built in) reads `type` exactly: a delegate `Type` leaves its default delegate,
    // yh-bridge, which runs only if listed, whatever `Type` names. And a key only Go 1.21's fold
    // reads as a path (`dataDİr`: dotted capital I) is a path all the same.
    let subnet_file = n.sb.path().join("policy.subnet.env");
    let cases = [
        (
            "yonghui's default delegate",
            json!({"cniVersion": "1.0.0", "name": "folded", "type": "yonghui", "subnetFile": subnet_file,
                   "delegate": {"Type": "bridge"}}),
            json!({"allowInlineConfig": true, "inlinePluginTypes": ["yonghui", "bridge", "host-local"],
                   "inlinePathPrefixes": [n.sb.path()]}),
            "yh-bridge",
        ),
        (
            "a path key by Go's fold",
            json!({"cniVersion": "1.0.0", "name": "folded", "type": "bridge",
                   "ipam": {"type": "host-local", "subnet": "10.81.9.0/24", "dataD\u{130}r": "etc"}}),
            json!({"allowInlineConfig": true, "inlinePluginTypes": ["bridge", "host-local"]}),
            "dataD\u{130}r",
        ),
    ];
    for (case, config, policy, named) in cases {
        let name = testkit::process::unique("f");
        n.api.put_nad("default", &name, Some(&config.to_string()));
        n.api.put_annotated_pod("default", &name, json!({NETWORKS: name.clone()}), literal("first"));
        let conf = n.selector_conf("1.0.0", policy);
        let pod = n.pod(&name);
        let err = n.call("ADD", &pod, &conf).err();
        assert_eq!(err["code"], 7, "{case}: {err}");
        assert!(err["msg"].as_str().unwrap().contains(named), "{case}: {err}");
        n.assert_failed_add_left_nothing(&pod, case);
        assert_eq!(n.call("DEL", &pod, &conf).code, 0, "{case}");
    }
}
