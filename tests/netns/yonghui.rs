//! Root integration tests of the `yonghui` plugin: run by a runtime (libcni through cnidrive, and
//! this suite's own driver) inside a throwaway node netns, delegating to Debian's reference
//! `bridge` and `host-local`, with the pod in its own netns. Everything on disk lives in the sandbox.

use crate::support::driver::{Call, PLUGINS, Reply, cni, cnidrive_run};
use crate::support::versions;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use testkit::netns::Netns;
use testkit::process::unique;
use testkit::require_root;
use testkit::sandbox::Sandbox;
use yh_genie::platform::cni::CniVersion;

const NETWORK: &str = "10.1.0.0/16";
const SUBNET_ENV: &str =
    "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1400\nFLANNEL_IPMASQ=true\n";
const MTU: u64 = 1400;

/// Debian's bridge 1.1.1 CHECK only finds routes that name their gateway (containernetworking/
/// plugins#886, fixed in 1.3.0), and yonghui's route to the network names none. Tests that CHECK
/// therefore route the network via the bridge in the `ipam` base, which yonghui keeps and does not
/// duplicate.
fn route_via_bridge() -> Value {
    json!([{"dst": NETWORK, "gw": "10.1.17.1"}])
}

/// A node netns with a sandbox whose plugins run in it, a subnet.env, and a yonghui network that
/// delegates to the reference bridge (on a bridge named for this test).
struct YonghuiNode {
    netns: Netns,
    sb: Sandbox,
    name: String,
    bridge: String,
    /// `routes` of the yonghui `ipam` base.
    base_routes: Value,
}

impl YonghuiNode {
    fn new() -> Self {
        Self::with_base_routes(json!([]))
    }

    fn with_base_routes(base_routes: Value) -> Self {
        require_root();
        let netns = Netns::new("yhnode");
        let sb = Sandbox::on_node(&netns, &PLUGINS);
        sb.write("subnet.env", SUBNET_ENV);
        YonghuiNode { netns, sb, name: unique("yhnet"), bridge: unique("yhbr"), base_routes }
    }

    fn data_dir(&self) -> PathBuf {
        self.sb.path().join("yonghui")
    }

    fn ipam_dir(&self) -> PathBuf {
        self.sb.path().join("ipam")
    }

    /// The yonghui plugin entry of the network (the runtime adds `name` and `cniVersion`).
    fn plugin(&self) -> Value {
        json!({
            "type": "yonghui",
            "subnetFile": self.sb.path().join("subnet.env"),
            "dataDir": self.data_dir(),
            "delegate": {"type": "bridge", "bridge": self.bridge},
            "ipam": {"dataDir": self.ipam_dir(), "routes": self.base_routes}
        })
    }

    fn conflist(&self, version: &str) -> PathBuf {
        let list = json!({"cniVersion": version, "name": self.name, "plugins": [self.plugin()]});
        self.sb.write(&format!("{}.conflist", self.name), &list.to_string())
    }

    /// The plugin's stdin as a runtime builds it, with `prevResult` for CHECK and DEL.
    fn stdin(&self, version: &str, prev: Option<&Value>) -> String {
        let mut conf = self.plugin();
        conf["name"] = self.name.clone().into();
        conf["cniVersion"] = version.into();
        if let Some(prev) = prev {
            conf["prevResult"] = prev.clone();
        }
        conf.to_string()
    }

    fn call(&self, command: &str, cid: &str, pod: &Path, config: &str) -> Reply {
        cni(
            &self.sb,
            &Call {
                plugin: "yonghui",
                command,
                container_id: cid,
                netns: &pod.display().to_string(),
                ifname: "eth0",
                args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web",
                config,
            },
        )
    }

    fn saved(&self, cid: &str) -> PathBuf {
        self.data_dir().join(format!("{cid}:eth0"))
    }

    /// host-local's lease file for `ip` in this network.
    fn lease(&self, ip: &str) -> PathBuf {
        self.ipam_dir().join(&self.name).join(ip)
    }

    /// Files left in the yonghui data dir (none if it was never made).
    fn saved_files(&self) -> Vec<String> {
        files_in(&self.data_dir())
    }
}

fn files_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

fn ip_json(netns: &Netns, args: &str) -> Value {
    serde_json::from_str(&netns.must(&format!("ip -j {args}"))).unwrap()
}

/// The pod's IPv4 address on eth0 (`10.1.17.x`), after checking it is in FLANNEL_SUBNET, the pod
/// has a route to FLANNEL_NETWORK, and eth0 has FLANNEL_MTU.
fn assert_pod_is_on_the_yonghui_network(pod: &Netns) -> String {
    let link = &ip_json(pod, "addr show dev eth0")[0];
    assert_eq!(link["mtu"].as_u64(), Some(MTU), "{link}");
    let addr = link["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["family"] == "inet")
        .unwrap_or_else(|| panic!("no IPv4 address on eth0: {link}"));
    let ip = addr["local"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.1.17.") && addr["prefixlen"] == 24, "{addr}");
    let routes = ip_json(pod, "route show");
    let to_network = routes.as_array().unwrap().iter().find(|r| r["dst"] == NETWORK);
    let to_network = to_network.unwrap_or_else(|| panic!("no route to {NETWORK}: {routes}"));
    assert_eq!((to_network["gateway"].as_str(), to_network["dev"].as_str()), (Some("10.1.17.1"), Some("eth0")));
    ip
}

fn assert_no_eth0(pod: &Netns) {
    let (exists, out) = pod.exec("ip link show dev eth0");
    assert!(!exists, "eth0 still in the pod: {out}");
}

fn assert_no_panic(reply: &Reply) {
    assert!(!reply.stderr.contains("panicked"), "{reply:?}");
}

/// The addresses (with prefix length) of a result of `version`, in its shape.
fn result_addresses(result: &Value, version: CniVersion) -> Vec<String> {
    let text = |v: &Value| v.as_str().map(String::from);
    if version.has_ip4_ip6_result() {
        ["ip4", "ip6"].iter().filter_map(|family| text(&result[family]["ip"])).collect()
    } else {
        result["ips"].as_array().unwrap().iter().filter_map(|ip| text(&ip["address"])).collect()
    }
}

/// A pod's life at every version yonghui's delegate (the reference bridge) speaks, on one node
/// and one pod netns: ADD, CHECK where the version has it, DEL (with the ADD's result as
/// `prevResult` where the version gives DEL one), DEL again, and CHECK of a forgotten container.
#[test]
fn pod_lifecycle_through_the_suite_driver() {
    let node = YonghuiNode::with_base_routes(route_via_bridge());
    let pod = Netns::new("yhpod");
    let mut last_del = None;
    for version in versions::with_reference() {
        let case = format!("at {version}");
        let v = version.as_str();
        let cid = unique("cid");
        let result = node.call("ADD", &cid, &pod.path(), &node.stdin(v, None)).ok();
        assert_eq!(result["cniVersion"], v, "{case}");
        let ip = assert_pod_is_on_the_yonghui_network(&pod);
        assert!(result_addresses(&result, version).contains(&format!("{ip}/24")), "{case}: {result}");
        assert!(std::fs::read_to_string(node.lease(&ip)).unwrap().starts_with(&cid), "{case}");
        let saved: Value = serde_json::from_slice(&std::fs::read(node.saved(&cid)).unwrap()).unwrap();
        assert_eq!(
            (saved["type"].as_str(), saved["ipam"]["subnet"].as_str()),
            (Some("bridge"), Some("10.1.17.0/24")),
            "{case}"
        );
        assert_eq!(saved["cniVersion"], v, "{case}: the delegate speaks the network's version");
        assert_eq!(saved["ipam"]["routes"], route_via_bridge(), "{case}");
        assert_eq!(std::fs::metadata(node.saved(&cid)).unwrap().permissions().mode() & 0o777, 0o600, "{case}");
        // The delegate's bridge is the pod's gateway, in the node netns.
        let bridge = &ip_json(&node.netns, &format!("addr show dev {}", node.bridge))[0];
        assert!(bridge["addr_info"].as_array().unwrap().iter().any(|a| a["local"] == "10.1.17.1"), "{case}: {bridge}");

        if version.has_check() {
            node.call("CHECK", &cid, &pod.path(), &node.stdin(v, Some(&result))).ok();
        }

        let del = node.stdin(v, version.del_gets_prev_result().then_some(&result));
        node.call("DEL", &cid, &pod.path(), &del).ok();
        assert_no_eth0(&pod);
        assert!(!node.lease(&ip).exists(), "{case}: host-local still holds {ip}");
        assert!(node.saved_files().is_empty(), "{case}");
        let again = node.call("DEL", &cid, &pod.path(), &del);
        again.ok();
        assert_no_panic(&again);
        if version.has_check() {
            // CHECK of a container yonghui does not know is code 3.
            let check = node.call("CHECK", &cid, &pod.path(), &node.stdin(v, Some(&result))).err();
            assert_eq!(check["code"], 3, "{case}");
        }
        last_del = Some((cid, del));
    }
    // DEL again once the pod's netns is gone.
    let (cid, del) = last_del.expect("the reference bridge speaks a version yh-genie supports");
    let pod_path = pod.path();
    drop(pod);
    node.call("DEL", &cid, &pod_path, &del).ok();
}

#[test]
fn pod_lifecycle_through_libcni() {
    let node = YonghuiNode::with_base_routes(route_via_bridge());
    let list = node.conflist("1.0.0");
    let pod = Netns::new("yhpod");
    let pod_path = pod.path().display().to_string();
    let cid = unique("cid");
    let drive = |cmd: &str, netns: &str| {
        let reply = cnidrive_run(&node.sb, cmd, &list, netns, &cid, "eth0", "");
        assert_eq!(reply.code, 0, "cnidrive {cmd} failed: {reply:?}");
        reply.stdout
    };

    let result: Value = serde_json::from_str(&drive("add", &pod_path)).unwrap();
    let ip = assert_pod_is_on_the_yonghui_network(&pod);
    assert!(result["ips"].as_array().unwrap().iter().any(|i| i["address"] == format!("{ip}/24")), "{result}");
    drive("check", &pod_path);

    // The pod's netns goes first, as when a node reboots or the runtime cleans up late: DEL must
    // still release the address and forget the container.
    drop(pod);
    drive("del", &pod_path);
    assert!(!node.lease(&ip).exists(), "host-local still holds {ip}");
    assert!(node.saved_files().is_empty());
    drive("del", &pod_path);

    // A second pod, deleted the ordinary way.
    let pod = Netns::new("yhpod");
    let pod_path = pod.path().display().to_string();
    drive("add", &pod_path);
    let ip = assert_pod_is_on_the_yonghui_network(&pod);
    drive("del", &pod_path);
    assert_no_eth0(&pod);
    assert!(!node.lease(&ip).exists());
    assert!(node.saved_files().is_empty());
}

#[test]
fn the_generated_delegate_routes_the_pod_to_the_network() {
    let node = YonghuiNode::new();
    let pod = Netns::new("yhpod");
    let cid = unique("cid");
    let result = node.call("ADD", &cid, &pod.path(), &node.stdin("1.0.0", None)).ok();
    let ip = assert_pod_is_on_the_yonghui_network(&pod);
    let saved: Value = serde_json::from_slice(&std::fs::read(node.saved(&cid)).unwrap()).unwrap();
    assert_eq!(
        saved,
        json!({
            "cniVersion": "1.0.0",
            "name": node.name,
            "type": "bridge",
            "bridge": node.bridge,
            "ipMasq": false,
            "isGateway": true,
            "mtu": MTU,
            "ipam": {"type": "host-local", "dataDir": node.ipam_dir(), "subnet": "10.1.17.0/24", "routes": [{"dst": NETWORK}]}
        })
    );
    node.call("DEL", &cid, &pod.path(), &node.stdin("1.0.0", Some(&result))).ok();
    assert_no_eth0(&pod);
    assert!(!node.lease(&ip).exists());
    assert!(node.saved_files().is_empty());
}

#[test]
fn a_failing_delegate_add_is_rolled_back() {
    let node = YonghuiNode::new();
    // A /32 passes yonghui's checks but host-local cannot allocate from it, so the reference bridge
    // fails after it has made the veth pair: yonghui's rollback DEL must remove it.
    node.sb.write("subnet.env", &SUBNET_ENV.replace("10.1.17.1/24", "10.1.17.1/32"));
    let pod = Netns::new("yhpod");
    let cid = unique("cid");
    let reply = node.call("ADD", &cid, &pod.path(), &node.stdin("1.0.0", None));
    let e = reply.err();
    assert!(e["msg"].as_str().unwrap().starts_with("delegate bridge ADD: "), "{e}");
    assert_no_panic(&reply);
    assert_no_eth0(&pod);
    assert!(node.saved_files().is_empty());
    assert!(files_in(&node.ipam_dir().join(&node.name)).iter().all(|f| !f.starts_with("10.")));
}

#[test]
fn bad_input_is_a_cni_error_naming_the_fault_leaving_nothing() {
    let node = YonghuiNode::new();
    let pod = Netns::new("yhpod");
    let subnet_file = node.sb.path().join("subnet.env").display().to_string();
    let good = node.plugin();
    let with = |patch: Value| {
        let mut conf = good.clone();
        conf.as_object_mut().unwrap().extend(patch.as_object().unwrap().clone());
        conf["name"] = node.name.clone().into();
        conf["cniVersion"] = "1.0.0".into();
        conf.to_string()
    };
    let bad_env = |from: &str, to: &str| Some(SUBNET_ENV.replace(from, to));
    let missing_file = node.sb.path().join("absent/subnet.env").display().to_string();

    struct Case<'a> {
        what: &'a str,
        config: String,
        subnet_env: Option<String>,
        container_id: &'a str,
        code: u64,
        msg: Vec<String>,
    }
    let case = |what, config, subnet_env, code, msg: &[&str]| Case {
        what,
        config,
        subnet_env,
        container_id: "c1",
        code,
        msg: msg.iter().map(|s| s.to_string()).collect(),
    };
    let sf = subnet_file.as_str();
    let cases = [
        case("malformed JSON", "{\"type\": \"yonghui\",".into(), None, 6, &["not valid JSON"]),
        case(
            "missing subnet.env keys",
            with(json!({})),
            Some("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\n".into()),
            6,
            &[sf, "is missing FLANNEL_MTU, FLANNEL_IPMASQ"],
        ),
        case(
            "duplicate subnet.env key",
            with(json!({})),
            Some(format!("{SUBNET_ENV}FLANNEL_MTU=1500\n")),
            6,
            &[sf, "line 5: FLANNEL_MTU is set twice"],
        ),
        case(
            "unparsable bool",
            with(json!({})),
            bad_env("IPMASQ=true", "IPMASQ=yes"),
            6,
            &[sf, "FLANNEL_IPMASQ", "true or false"],
        ),
        case(
            "bad CIDR",
            with(json!({})),
            bad_env("10.1.17.1/24", "10.1.17.1"),
            6,
            &[sf, "FLANNEL_SUBNET", "not a CIDR"],
        ),
        case("bad MTU", with(json!({})), bad_env("MTU=1400", "MTU=big"), 6, &[sf, "FLANNEL_MTU", "not an MTU"]),
        case(
            "missing subnet.env",
            with(json!({"subnetFile": missing_file})),
            None,
            5,
            &[&missing_file, "cannot read yonghui subnet file"],
        ),
        case(
            "delegate with name",
            with(json!({"delegate": {"type": "bridge", "name": "x"}})),
            None,
            7,
            &["'delegate' must not have 'name'"],
        ),
        case(
            "delegate with ipam",
            with(json!({"delegate": {"ipam": {}}})),
            None,
            7,
            &["'delegate' must not have 'ipam'"],
        ),
        case(
            "delegate type not a string",
            with(json!({"delegate": {"type": ["bridge"]}})),
            None,
            7,
            &["'delegate.type' must be a plugin name"],
        ),
        case(
            "unknown delegate binary",
            with(json!({"delegate": {"type": "no-such-plugin"}})),
            None,
            7,
            &[
                "delegate no-such-plugin ADD",
                "failed to find plugin \"no-such-plugin\"",
                &node.sb.bin().display().to_string(),
            ],
        ),
        Case { container_id: "", ..case("missing CNI env", with(json!({})), None, 4, &["CNI_CONTAINERID"]) },
    ];

    for c in cases {
        node.sb.write("subnet.env", c.subnet_env.as_deref().unwrap_or(SUBNET_ENV));
        let reply = node.call("ADD", c.container_id, &pod.path(), &c.config);
        let e = reply.err();
        assert_no_panic(&reply);
        assert_eq!(e["code"].as_u64(), Some(c.code), "{}: {e}", c.what);
        let msg = e["msg"].as_str().unwrap();
        for want in &c.msg {
            assert!(msg.contains(want.as_str()), "{}: {msg:?} does not contain {want:?}", c.what);
        }
        assert!(node.saved_files().is_empty(), "{}: left {:?}", c.what, node.saved_files());
        assert_no_eth0(&pod);
    }
}
