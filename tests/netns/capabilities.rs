//! Runtime capabilities and CNI 1.1 end to end, through libcni as runtimes call the selector: the
//! Debian-packaged libcni (`cnidrive`, CNI up to 1.0.0) and the current one (`cnidrive11`: version
//! lists, GC, STATUS), with the selector's conflist as the installer writes it (every capability
//! declared, `cniVersion` 1.0.0 and `cniVersions` [1.0.0, 1.1.0]). As root, on a node netns with
//! the reference `bridge`, `host-local`, `portmap` and `bandwidth` plugins.

use crate::support::driver::{Reply, cnidrive, cnidrive11, libcni_run};
use crate::support::node::{NetnsNode, Pod, pod_addresses};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use testkit::apiserver::literal;
use testkit::fake_plugin::{FakePlugin, Step};
use testkit::inspect::cni_nat_lines;
use testkit::process::unique;
use yh_genie::programs::selector::requests::annotation::NETWORKS;

/// The selector's conflist as `yh-genie install` writes it, for this node.
fn installed_conflist(n: &NetnsNode) -> PathBuf {
    let mut plugin: Value = serde_json::from_str(&n.selector_conf("1.0.0", json!({}))).unwrap();
    let plugin = plugin.as_object_mut().unwrap();
    plugin.remove("cniVersion");
    plugin.remove("name");
    let capabilities: serde_json::Map<String, Value> = yh_genie::programs::selector::netconf::capabilities::DECLARED
        .iter()
        .map(|c| (c.to_string(), Value::Bool(true)))
        .collect();
    plugin.insert("capabilities".into(), capabilities.into());
    n.write_conf(
        "00-yh-genie.conflist",
        &json!({"cniVersion": "1.0.0", "cniVersions": ["1.0.0", "1.1.0"], "name": "yh-genie", "plugins": [plugin]}),
    )
}

/// `web`: bridge + host-local on 10.78.<octet>.0/24, then portmap and bandwidth, as the shipped
/// example networks chain them.
fn add_web_network(n: &NetnsNode, name: &str, octet: u8) {
    let list = json!({"cniVersion": "1.0.0", "name": name, "plugins": [
        {"type": "bridge", "bridge": unique("yc"), "isGateway": true,
         "ipam": {"type": "host-local", "dataDir": n.ipam_dir(), "ranges": [[{"subnet": format!("10.78.{octet}.0/24")}]]}},
        {"type": "portmap", "capabilities": {"portMappings": true}},
        {"type": "bandwidth", "capabilities": {"bandwidth": true}}]});
    n.write_conf(&format!("{name}/10-{name}.conflist"), &list);
}

/// `assert_nothing_left`, but for the chains portmap shares between all pods and never removes
/// (`CNI-HOSTPORT-*` and the jumps to them): every pod's own chain and rule must be gone.
fn assert_nothing_left_but_portmaps_chains(n: &NetnsNode, pod: &Pod, case: &str) {
    assert_eq!(testkit::inspect::link_names(&pod.netns, ""), ["lo"], "{case}: pod netns interfaces");
    let left: Vec<String> = n.leftovers().into_iter().filter(|l| !l.contains("CNI-HOSTPORT-")).collect();
    assert!(left.is_empty(), "{case}: left on the node: {left:#?}");
}

fn drive(n: &NetnsNode, driver: &Path, cmd: &str, list: &Path, pod: &Pod, cap_args: Option<&Value>) -> Reply {
    let args = [cmd, &list.display().to_string(), &pod.netns_path(), &pod.cid, "eth0", &pod.args];
    libcni_run(&n.sb, driver, &args.iter().map(|s| s.as_ref()).collect::<Vec<&str>>(), cap_args)
}

/// `nc` from busybox answering one connection on `port` inside `pod`'s netns.
fn serve_once(pod: &Pod, port: u16, answer: &str) -> std::process::Child {
    let child = std::process::Command::new("ip")
        .args(["netns", "exec", &pod.netns.name, "busybox", "nc", "-l", "-p", &port.to_string(), "-e", "echo", answer])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Until it listens.
    for _ in 0..100 {
        if pod.netns.exec(&format!("ss -Hltn 'sport = :{port}'")).1.contains("LISTEN") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

#[test]
fn the_runtimes_capability_arguments_reach_the_first_networks_plugins() {
    let mut n = NetnsNode::new();
    n.default_network = Some("web".into());
    add_web_network(&n, "web", 1);
    let list = installed_conflist(&n);
    let pod = n.pod("hostport");
    n.api.put_pod("default", "hostport", literal("web"));
    let ports = json!([{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]);
    let cap_args = json!({"portMappings": ports, "bandwidth": {"egressRate": 1000000, "egressBurst": 100000},
                          "io.kubernetes.cri.pod-annotations": {"a": "b"}});
    // The Debian libcni runs the selector at 1.0.0 (it does not read cniVersions).
    let result = drive(&n, &cnidrive(), "add", &list, &pod, Some(&cap_args)).ok();
    assert_eq!(result["cniVersion"], "1.0.0");
    let pod_ip = pod_addresses(&pod)[0].split('/').next().unwrap().to_string();

    // portmap got the mappings: the DNAT rule to the pod is there, and the host port answers on the
    // node's address (the bridge's gateway) with the pod's server.
    let dnat =
        |n: &NetnsNode| cni_nat_lines(&n.netns).into_iter().filter(|l| l.contains("--dport 18080")).collect::<Vec<_>>();
    assert!(dnat(&n).iter().any(|l| l.contains(&format!("{pod_ip}:80"))), "{:#?}", cni_nat_lines(&n.netns));
    let mut server = serve_once(&pod, 80, "from-the-pod");
    let gateway = "10.78.1.1";
    let (_, answer) = n.netns.exec(&format!("busybox nc -w 3 {gateway} 18080 </dev/null"));
    let _ = server.kill();
    let _ = server.wait();
    assert!(answer.contains("from-the-pod"), "hostPort 18080 on {gateway}: {answer:?}");
    // bandwidth got its shaping: egress is a tbf on the ifb device the plugin made.
    let (_, qdiscs) = n.netns.exec("tc qdisc show");
    assert!(qdiscs.lines().any(|l| l.contains("tbf") && l.contains("bwp")), "{qdiscs}");
    // What the plugins got is in the record, for the DEL.
    let record = n.record(&pod);
    let conf: Value = serde_json::from_str(record["conf"].as_str().unwrap()).unwrap();
    assert_eq!(conf["plugins"][1]["runtimeConfig"], json!({"portMappings": ports}));
    assert!(conf["plugins"][0].get("runtimeConfig").is_none(), "bridge declares nothing");

    // (No CHECK: Debian's portmap 1.1.1 fails CHECK of any IPv4-only pod, looking for an IPv6
    // chain it never made, run by libcni directly just the same.)
    // DEL, even without the runtime's values, removes the rule and the shaping.
    drive(&n, &cnidrive(), "del", &list, &pod, None).ok();
    assert!(dnat(&n).is_empty(), "{:#?}", cni_nat_lines(&n.netns));
    let (_, qdiscs) = n.netns.exec("tc qdisc show");
    assert!(!qdiscs.contains("tbf"), "{qdiscs}");
    assert_nothing_left_but_portmaps_chains(&n, &pod, "after the hostPort pod");
}

#[test]
fn a_further_networks_port_mappings_come_from_the_annotation() {
    let mut n = NetnsNode::new();
    n.default_network = Some("web".into());
    add_web_network(&n, "web", 2);
    add_web_network(&n, "side", 3);
    let list = installed_conflist(&n);
    n.api.put_nad("default", "side", None);
    let annotation = r#"[{"name":"side","portMappings":[{"hostPort":18081,"containerPort":81}]}]"#;
    n.api.put_annotated_pod("default", "two", json!({NETWORKS: annotation}), literal("web"));
    let pod = n.pod("two");
    // The runtime's port goes to eth0's network only; the annotation's to net1's.
    let cap_args = json!({"portMappings": [{"hostPort": 18082, "containerPort": 82, "protocol": "tcp"}]});
    drive(&n, &cnidrive(), "add", &list, &pod, Some(&cap_args)).ok();
    let ip_of = |dev: &str| crate::support::node::addresses_on(&pod, dev)[0].split('/').next().unwrap().to_string();
    let nat = cni_nat_lines(&n.netns);
    let rule = |port: u16| {
        let dnat = |l: &&String| l.contains(&format!("--dport {port}")) && l.contains("--to-destination");
        nat.iter().find(dnat).cloned().unwrap_or_default()
    };
    assert!(rule(18082).contains(&format!("{}:82", ip_of("eth0"))), "{nat:#?}");
    assert!(rule(18081).contains(&format!("{}:81", ip_of("net1"))), "{nat:#?}");
    assert_eq!(nat.iter().filter(|l| l.contains("DNAT") && l.contains("--to-destination")).count(), 2, "{nat:#?}");
    drive(&n, &cnidrive(), "del", &list, &pod, None).ok();
    assert_nothing_left_but_portmaps_chains(&n, &pod, "after the two-network pod");
}

/// A 1.1.0 network of one script plugin that answers ADD with an address and writes what each
/// command got on stdin to `<sandbox>/watch/<command>.<network>.<container id>`; its plugin
/// declares `capabilities`.
fn add_watched_network(n: &NetnsNode, name: &str, octet: u8, capabilities: Value) {
    let log = n.sb.path().join("watch");
    std::fs::create_dir_all(&log).unwrap();
    let result = json!({"cniVersion": "1.1.0", "ips": [{"address": format!("10.79.{octet}.2/24")}]});
    FakePlugin::new()
        .record_stdin(&log, name)
        .on("ADD", [Step::Answer(result)])
        .write(&n.sb.bin().join(format!("watch-{name}")));
    let plugin = json!({"type": format!("watch-{name}"), "capabilities": capabilities});
    let list = json!({"cniVersion": "1.1.0", "name": name, "plugins": [plugin]});
    n.write_conf(&format!("{name}/10-{name}.conflist"), &list);
}

/// What `command` of `network`'s plugin got, for `container` (none: GC and STATUS).
fn watched(n: &NetnsNode, command: &str, network: &str, container: &str) -> Value {
    let path = n.sb.path().join("watch").join(format!("{command}.{network}.{container}"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// The runtime hands its capability arguments at ADD only (containerd and CRI-O send them again at
/// DEL, libcni's own callers need not; GC and a CHECK may have none): the plugins of the pod's
/// network get the values of the ADD at CHECK and DEL too, from the selector's record, as they
/// must to check or remove what they made by them.
#[test]
fn later_commands_give_the_plugins_the_capability_arguments_of_the_add() {
    let mut n = NetnsNode::new();
    n.default_network = Some("blue".into());
    add_watched_network(&n, "blue", 3, json!({"portMappings": true, "bandwidth": true}));
    let list = installed_conflist(&n);
    let pod = n.pod("checked");
    n.api.put_pod("default", "checked", literal("blue"));
    let ports = json!([{"hostPort": 18083, "containerPort": 83, "protocol": "tcp"}]);
    let bandwidth = json!({"ingressRate": 2000000, "ingressBurst": 200000});
    // `dns` is handed over too, but no plugin of blue declares it: nobody gets it.
    let cap_args = json!({"portMappings": ports, "bandwidth": bandwidth, "dns": {"servers": ["10.96.0.10"]}});
    drive(&n, &cnidrive11(), "add", &list, &pod, Some(&cap_args)).ok();
    drive(&n, &cnidrive11(), "check", &list, &pod, None).ok();
    drive(&n, &cnidrive11(), "del", &list, &pod, None).ok();
    for command in ["ADD", "CHECK", "DEL"] {
        let got = watched(&n, command, "blue", &pod.cid);
        assert_eq!(got["runtimeConfig"], json!({"portMappings": ports, "bandwidth": bandwidth}), "{command}: {got}");
    }
}

#[test]
fn cni_1_1_commands_through_libcni() {
    let mut n = NetnsNode::new();
    n.default_network = Some("overlay".into());
    // yonghui at 1.1.0, whose subnet.env the daemon has not written yet.
    let subnet_file = n.sb.path().join("overlay.subnet.env");
    let overlay = json!({"cniVersion": "1.1.0", "name": "overlay", "plugins": [{"type": "yonghui",
        "subnetFile": subnet_file, "dataDir": n.yonghui_dir(), "delegate": {"bridge": unique("yb")}}]});
    n.write_conf("overlay/10-overlay.conflist", &overlay);
    add_watched_network(&n, "blue", 1, json!({}));
    add_watched_network(&n, "idle", 2, json!({}));
    let list = installed_conflist(&n);
    let list_arg = list.display().to_string();

    // STATUS: the default network's chain answers: not ready (50) until subnet.env exists.
    let status = libcni_run(&n.sb, &cnidrive11(), &["status", &list_arg], None);
    let err = status.err();
    assert_eq!(err["code"], 50, "{status:?}");
    assert!(status.stderr.contains("default network overlay") || err["msg"].as_str().unwrap().contains("overlay"));
    std::fs::write(
        &subnet_file,
        "FLANNEL_NETWORK=10.80.0.0/16\nFLANNEL_SUBNET=10.80.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
    )
    .unwrap();
    let ready = libcni_run(&n.sb, &cnidrive11(), &["status", &list_arg], None);
    ready.ok();
    assert!(ready.stderr.contains("at CNI 1.1.0"), "libcni ran the selector at 1.1.0: {}", ready.stderr);

    // Two pods on blue; the new libcni runs the selector (and blue) at 1.1.0.
    let (a, b) = (n.pod("a"), n.pod("b"));
    for pod in [&a, &b] {
        n.api.put_pod("default", &pod.name, literal("blue"));
        let result = drive(&n, &cnidrive11(), "add", &list, pod, None).ok();
        assert_eq!(result["cniVersion"], "1.1.0");
    }
    // GC with only a: b is DELeted, and each network's plugins hear exactly their live attachments.
    let valid = format!("{}:eth0", a.cid);
    libcni_run(&n.sb, &cnidrive11(), &["gc", &list_arg, &valid], None).ok();
    let records = testkit::inspect::list_dir(&n.data_dir().join("attachments"));
    assert_eq!(records, [format!("{}:eth0", a.cid)]);
    assert!(n.sb.path().join("watch").join(format!("DEL.blue.{}", b.cid)).exists(), "b was DELeted on blue");
    let blue = watched(&n, "GC", "blue", "");
    assert_eq!(blue["cni.dev/valid-attachments"], json!([{"containerID": a.cid, "ifname": "eth0"}]));
    assert_eq!(blue["cniVersion"], "1.1.0");
    assert_eq!(watched(&n, "GC", "idle", "")["cni.dev/valid-attachments"], json!([]));
    drive(&n, &cnidrive11(), "del", &list, &a, None).ok();
}
