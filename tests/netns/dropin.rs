//! Users of Multus and CNI-Genie switch without touching their pods, as root: the keys and pod
//! annotations of both, through the fake HTTPS API server and the node agent, on real netns with
//! real plugins. Networks are `yonghui` -> `yh-bridge` on subnets of their own, so an address tells
//! which network an interface got.

use crate::support::node::{NetnsNode, Pod, addresses_on};
use serde_json::{Value, json};
use testkit::apiserver::literal;
use yh_genie::programs::selector::NETWORK_STATUS;
use yh_genie::programs::selector::requests::annotation::{GENIE_CNI, MULTUS_DEFAULT_NETWORK, NETWORKS};

const BLUE: (&str, u8) = ("blue", 41);
const RED: (&str, u8) = ("red", 42);
const GREEN: (&str, u8) = ("green", 43);

fn node() -> NetnsNode {
    let n = NetnsNode::new();
    for (name, octet) in [BLUE, RED, GREEN] {
        n.add_yonghui_network(name, octet, json!({}));
    }
    n
}

/// The third octet of the pod's address on `dev`, which says the network (none: no address).
fn network_on(pod: &Pod, dev: &str) -> Option<u8> {
    let addresses = addresses_on(pod, dev);
    assert!(addresses.len() <= 1, "{dev}: {addresses:?}");
    addresses.first().map(|a| a.split('.').nth(2).unwrap().parse().unwrap())
}

/// A sandbox of the pod `namespace/name`.
fn pod_in(n: &NetnsNode, namespace: &str, name: &str) -> Pod {
    let mut pod = n.pod(name);
    pod.args = pod
        .args
        .replace("K8S_POD_NAMESPACE=default", &format!("K8S_POD_NAMESPACE={namespace}"))
        .replace("uid-default-", &format!("uid-{namespace}-"));
    pod
}

fn status_of(n: &NetnsNode, namespace: &str, name: &str) -> Option<Value> {
    let pod = n.api.pod(namespace, name).unwrap();
    let text = pod["metadata"]["annotations"].get(NETWORK_STATUS)?.as_str()?.to_string();
    Some(serde_json::from_str(&text).unwrap())
}

/// The selector's keys a Multus and CNI-Genie user brings along.
fn keys() -> Value {
    json!({"defaultNetwork": "blue", "defaultNetworks": ["green"], "networkStatus": "always"})
}

/// Put the pods of `expectations` and their NADs.
fn put_pods(n: &NetnsNode) {
    // defaultNetworks' NAD lives in multusNamespace (kube-system), naming the confDir network green.
    n.api.put_nad("kube-system", "green", None);
    // Multus's default-network annotation overrides the env (its bare name is in multusNamespace,
    // as with Multus); defaultNetworks come after eth0.
    n.api.put_nad("kube-system", "red", None);
    n.api.put_annotated_pod("default", "multus", json!({MULTUS_DEFAULT_NETWORK: "red"}), literal("blue"));
    // Genie's cni annotation: eth0, then Genie's eth1; defaultNetworks after, net2.
    n.api.put_annotated_pod("default", "genie", json!({GENIE_CNI: "red,blue"}), json!([{"name": "app"}]));
    // systemNamespaces: no defaultNetworks (green would be net1), but its own annotation's NAD (as
    // Multus), so green once, on net1, and nothing on net2.
    n.api.put_annotated_pod("kube-system", "coredns", json!({NETWORKS: "green"}), json!([{"name": "dns"}]));
}

/// A pod (namespace, name) and, per interface, the network octet it must have (`ip addr`).
type Expected = (&'static str, &'static str, Vec<(&'static str, Option<u8>)>);

fn expectations() -> Vec<Expected> {
    vec![
        ("default", "multus", vec![("eth0", Some(RED.1)), ("net1", Some(GREEN.1)), ("net2", None)]),
        ("default", "genie", vec![("eth0", Some(RED.1)), ("eth1", Some(BLUE.1)), ("net2", Some(GREEN.1))]),
        ("kube-system", "coredns", vec![("eth0", Some(BLUE.1)), ("net1", Some(GREEN.1)), ("net2", None)]),
    ]
}

fn add_and_check(n: &NetnsNode, conf: &str, path: &str) {
    for (namespace, name, want) in expectations() {
        let pod = pod_in(n, namespace, name);
        let reply = n.call("ADD", &pod, conf);
        assert_eq!(reply.code, 0, "{path} {name}: {reply:?}");
        assert!(reply.stderr.contains(&format!("selection=\"{path}")), "{path} {name}: {}", reply.stderr);
        for (dev, octet) in &want {
            assert_eq!(network_on(&pod, dev), *octet, "{path} {name} {dev}");
        }
        // The runtime gets eth0's address.
        let ips = reply.json()["ips"].clone();
        assert_eq!(ips.as_array().unwrap().len(), 1, "{ips}");
        n.call("DEL", &pod, conf).ok();
        n.assert_nothing_left(&pod, &format!("{path} {name}"));
    }
}

#[test]
fn multus_or_genie_ways_of_choosing_give_the_same_networks_with_or_without_the_agent() {
    let n = node();
    put_pods(&n);
    let direct = keys();
    let mut direct_keys = direct.clone();
    // The agent's socket stays empty here: the direct path, and explain without the agent.
    direct_keys["agentSocket"] = "".into();
    add_and_check(&n, &n.selector_conf("1.0.0", direct_keys.clone()), "api");

    // The status, as Multus writes it: the NAD's namespace/name, gateway, default on eth0.
    let status = status_of(&n, "default", "multus").expect("written for a pod of one network too");
    assert_eq!(status[0]["name"], "kube-system/red");
    assert_eq!((status[0]["interface"].as_str(), status[0]["default"].as_bool()), (Some("eth0"), Some(true)));
    assert_eq!(status[0]["gateway"], json!([format!("10.77.{}.1", RED.1)]), "{status}");
    assert_eq!(status[1]["name"], "kube-system/green");
    assert_eq!(status[1]["interface"], "net1");
    assert!(status[1]["ips"][0].as_str().unwrap().starts_with(&format!("10.77.{}.", GREEN.1)), "{status}");
    assert_eq!(status_of(&n, "default", "genie").unwrap()[1]["interface"], "eth1");

    assert!(n.api.events().is_empty(), "without the agent, no events (they would cost every ADD a request)");

    // explain says the same, and what the precedence ignored.
    let mut plugin: Value = serde_json::from_str(&n.selector_conf("1.0.0", direct_keys.clone())).unwrap();
    plugin.as_object_mut().unwrap().retain(|k, _| k != "cniVersion" && k != "name");
    let conflist =
        n.write_conf("00-yh-genie.conflist", &json!({"cniVersion": "1.0.0", "name": "yh-genie", "plugins": [plugin]}));
    let explain = |pod: &str| {
        let out =
            n.sb.command(&n.sb.bin().join("yh-genie"))
                .arg("explain")
                .args(["--pod", pod, "--config"])
                .arg(&conflist)
                .output();
        let out = out.unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = explain("multus");
    for want in [
        "why:           annotation v1.multus-cni.io/default-network = \"red\"",
        "interface 1:   eth0, network red",
        "chosen by:     annotation v1.multus-cni.io/default-network element \"red\": NetworkAttachmentDefinition kube-system/red",
        "interface 2:   net1, network green",
        "chosen by:     defaultNetworks element \"green\": NetworkAttachmentDefinition kube-system/green",
        "note:          container \"app\" env CNI_NETWORK_CONFIG is ignored: annotation v1.multus-cni.io/default-network decides first",
    ] {
        assert!(out.contains(want), "lacks {want:?}:\n{out}");
    }
    let out = explain("genie");
    assert!(
        out.contains("interface 2:   eth1, network blue") && out.contains("annotation cni element \"blue\""),
        "{out}"
    );

    // The agent watches the NADs of defaultNetworks and the default-network annotation.
    let selector_config = n.sb.write("selector-config.json", &direct.to_string());
    let agent = testkit::agent::Agent::start(
        &n.netns,
        &n.api,
        n.sb.path(),
        &n.agent_socket(),
        testkit::agent::METRICS_PORT,
        &[&format!("--selector-config={}", selector_config.display())],
    );
    agent.wait_ready();
    for (namespace, name, _) in expectations() {
        let uid = format!("uid-{namespace}-{name}");
        agent.wait_for("the agent to hold the pod and its NADs", || {
            matches!(
                crate::support::agent::answer(&n.agent_socket(), namespace, name, Some(&uid)),
                Ok(yh_genie::node::agent_socket::protocol::Answer::Objects(_))
            )
        });
    }
    let before = n.api.plugin_requests();
    add_and_check(&n, &n.selector_conf("1.0.0", direct), "agent");
    assert_eq!(n.api.plugin_requests(), before, "no API request through the agent");

    // The agent creates an AddedInterface event per interface, as Multus words them.
    agent.wait_for("the AddedInterface events", || n.api.events().len() == 7);
    let events = n.api.events();
    let about = |name: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["involvedObject"]["name"] == name)
            .map(|e| e["message"].as_str().unwrap().to_string())
            .collect()
    };
    let multus = about("multus");
    assert_eq!(multus.len(), 2, "{multus:?}");
    assert!(
        multus[0].starts_with(&format!("Add eth0 [10.77.{}.", RED.1))
            && multus[0].ends_with("/24] from kube-system/red")
    );
    assert!(multus[1].starts_with("Add net1 [10.77.") && multus[1].ends_with("] from kube-system/green"), "{multus:?}");
    assert!(about("genie")[1].starts_with("Add eth1 ["), "{:?}", about("genie"));
    assert_eq!(about("coredns").len(), 2);
    for e in &events {
        assert_eq!((e["reason"].as_str(), e["type"].as_str()), (Some("AddedInterface"), Some("Normal")), "{e}");
        let pod = e["involvedObject"]["name"].as_str().unwrap();
        let namespace = e["involvedObject"]["namespace"].as_str().unwrap();
        assert_eq!(e["involvedObject"]["uid"], format!("uid-{namespace}-{pod}"), "{e}");
        assert_eq!(e["metadata"]["namespace"], namespace, "{e}");
        assert_eq!(e["source"]["host"], testkit::apiserver::NODE_NAME, "{e}");
    }
    assert!(n.api.calls().iter().filter(|c| c.resource == "events").all(|c| c.client == "agent" && c.verb == "create"));
    drop(agent);
}

#[test]
fn the_readiness_indicator_file_holds_operations_back_until_it_exists() {
    let n = node();
    n.api.put_pod("default", "web", literal("blue"));
    let ready = n.sb.path().join("run/ready");
    let conf = n.selector_conf("1.1.0", json!({"readinessindicatorfile": ready, "agentSocket": ""}));
    let pod = n.pod("web");
    let before = n.api.plugin_requests();
    let e = n.call("ADD", &pod, &conf).err();
    assert_eq!(e["code"], 11, "{e}");
    assert!(
        e["msg"].as_str().unwrap().contains("readinessindicatorfile")
            && e["msg"].as_str().unwrap().contains("run/ready")
    );
    assert_eq!(n.api.plugin_requests(), before, "nothing asked before the network is ready");
    n.assert_failed_add_left_nothing(&pod, "not ready");
    let e = n.call("STATUS", &pod, &conf).err();
    assert_eq!(e["code"], 50, "{e}");
    // DEL is never held back.
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);

    std::fs::create_dir_all(ready.parent().unwrap()).unwrap();
    std::fs::write(&ready, "").unwrap();
    assert_eq!(n.call("STATUS", &pod, &conf).code, 0);
    let pod = pod.renew("web");
    assert_eq!(n.call("ADD", &pod, &conf).code, 0);
    assert_eq!(network_on(&pod, "eth0"), Some(BLUE.1));
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "ready");
}
