//! A node that ran Multus or CNI-Genie, now running yh-genie, as root (docs/migrate.md): the
//! runtime's DEL of a pod the old plugin attached releases everything it made.
//!
//! From Multus, the DEL reads Multus's own cache, without the API server. The pod is attached as
//! Multus attaches one: each delegate ADDed through the current
//! libcni (`cnidrive11`) with Multus's `cniDir` as libcni's cache (so libcni keeps each ADD's
//! configuration, arguments and result there, as under Multus), and Multus's list of the pod's
//! delegates written beside them in Multus's format (`DelegateNetConf`, JSON, the configuration
//! base64 in `Bytes`).
//!
//! From CNI-Genie, which keeps no cache, the DEL asks the node agent, which holds the pod and its
//! `cni` annotation: the pod is attached as Genie attaches one, each network of the annotation
//! through libcni, the first on eth0 and the next on eth1.

use crate::support::agent::AgentAnswers;
use crate::support::driver::{Reply, cnidrive11};
use crate::support::node::{NetnsNode as Node, Pod, addresses_on};
use base64::Engine;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use testkit::inspect::link_names;
use testkit::process::unique;

const HOST_PORT: u16 = 18471;

/// The cluster network: ptp and host-local, portmap chained (as a Multus cluster's flannel or
/// ptp conflist chains it).
fn cluster_network(n: &Node) -> Value {
    json!({"cniVersion": "1.0.0", "name": "cbr0", "plugins": [
        {"type": "ptp", "ipam": {"type": "host-local", "dataDir": n.ipam_dir(),
            "ranges": [[{"subnet": "10.80.1.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": true}}]})
}

/// A NAD's network, one plugin (a `.conf`, as many NADs are written).
fn nad_network(n: &Node) -> Value {
    json!({"cniVersion": "1.0.0", "name": "storage", "type": "ptp",
        "ipam": {"type": "host-local", "dataDir": n.ipam_dir(), "ranges": [[{"subnet": "10.80.2.0/24"}]]}})
}

/// ADD `config` for `pod` on `ifname` through libcni with `cache` as its cache dir, as Multus
/// runs a delegate.
fn libcni_add(n: &Node, pod: &Pod, config: &Value, ifname: &str, cache: &Path, cap_args: Option<&Value>) {
    let file = n.sb.write(&format!("multus-delegates/{}-{ifname}.conflist", pod.cid), &to_list(config).to_string());
    let mut command = n.sb.command(&cnidrive11());
    command
        .args(["add", &file.display().to_string(), &pod.netns_path(), &pod.cid, ifname, &pod.args])
        .env("CNI_PATH", n.sb.bin())
        .env("CNI_CACHE_DIR", cache);
    if let Some(cap_args) = cap_args {
        command.env("CNI_CAP_ARGS", cap_args.to_string());
    }
    Reply::from(command.output().unwrap()).ok();
}

/// A single-plugin configuration as the list of one libcni runs it as (`ConfListFromConf`).
fn to_list(config: &Value) -> Value {
    if config.get("plugins").is_some() {
        return config.clone();
    }
    let mut plugin = config.clone();
    let plugin_map = plugin.as_object_mut().unwrap();
    let (name, version) = (plugin_map.remove("name").unwrap(), plugin_map.remove("cniVersion").unwrap());
    json!({"cniVersion": version, "name": name, "plugins": [plugin]})
}

/// One entry of Multus's delegate list, as Multus's `saveDelegates` writes it.
fn delegate(config: &Value, name: &str, ifname_request: Option<&str>) -> Value {
    let bytes = base64::engine::general_purpose::STANDARD.encode(config.to_string());
    let is_list = config.get("plugins").is_some();
    let mut d = json!({
        "Conf": if is_list { json!({}) } else { config.clone() },
        "ConfList": if is_list { config.clone() } else { json!({"plugins": null}) },
        "Name": name, "IsFilterV4Gateway": false, "IsFilterV6Gateway": false, "Bytes": bytes,
    });
    if let Some(ifname) = ifname_request {
        d["ifnameRequest"] = ifname.into();
    }
    d
}

/// The pod as Multus attaches it: the cluster network on eth0 (with the runtime's hostPort) and
/// a NAD's network on net1. Returns Multus's cache dir.
fn attached_by_multus(n: &Node, pod: &Pod) -> PathBuf {
    let cache = n.sb.path().join("multus");
    let (cluster, nad) = (cluster_network(n), nad_network(n));
    let delegates = json!([delegate(&cluster, "cbr0", None), delegate(&nad, "default/storage", None)]);
    n.sb.write(&format!("multus/{}", pod.cid), &delegates.to_string());
    let ports = json!({"portMappings": [{"hostPort": HOST_PORT, "containerPort": 80, "protocol": "tcp"}]});
    libcni_add(n, pod, &cluster, "eth0", &cache, Some(&ports));
    libcni_add(n, pod, &nad, "net1", &cache, None);
    cache
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for sub in ["", "results"] {
        if let Ok(entries) = std::fs::read_dir(dir.join(sub)) {
            for e in entries.flatten().filter(|e| e.path().is_file()) {
                files.push(Path::new(sub).join(e.file_name()).display().to_string());
            }
        }
    }
    files.sort();
    files
}

/// What a pod can leave on the node, but the chains portmap shares between pods and never removes.
fn left_on_node(n: &Node) -> Vec<String> {
    n.leftovers().into_iter().filter(|l| !l.contains("CNI-HOSTPORT-")).collect()
}

#[test]
fn del_releases_what_multus_made_from_its_cache_without_the_api_server() {
    // With the cluster network as yh-genie's default as a network directory would hold it, or
    // named in place (docs/migrate.md): its file in the conf dir, where its owner writes it.
    for in_place in [false, true] {
        let n = Node::new();
        let pod = n.pod(&unique("web"));
        let cache = attached_by_multus(&n, &pod);
        assert_eq!(
            (addresses_on(&pod, "eth0").len(), addresses_on(&pod, "net1").len()),
            (1, 1),
            "Multus's eth0 and net1"
        );
        assert_eq!(n.leases().len(), 2);
        assert!(n.nat_lines().iter().any(|l| l.contains(&format!("--dport {HOST_PORT}"))), "{:?}", n.nat_lines());
        assert_eq!(files_in(&cache).len(), 3, "the delegate list and libcni's two results: {:?}", files_in(&cache));

        // The runtime's DEL, now through yh-genie, with the API server down: the pod has no record of
        // yh-genie's, and the runtime hands no runtimeConfig on this DEL.
        n.api.down();
        let mut keys = json!({"cniDir": cache});
        if in_place {
            n.write_conf("10-cbr0.conflist", &cluster_network(&n));
            keys["defaultNetwork"] = "10-cbr0.conflist".into();
        }
        let conf = n.selector_conf("1.0.0", keys);
        n.call("DEL", &pod, &conf).ok();
        assert_eq!(link_names(&pod.netns, ""), ["lo"], "in place {in_place}: both of Multus's interfaces go");
        assert!(left_on_node(&n).is_empty(), "in place {in_place}: left on the node: {:#?}", left_on_node(&n));
        assert!(files_in(&cache).is_empty(), "Multus's cache of the pod goes with it: {:?}", files_in(&cache));
        // As the runtime repeats it: nothing to do.
        n.call("DEL", &pod, &conf).ok();
        n.api.up();
    }
}

#[test]
fn a_failed_del_keeps_multus_cache_for_the_next() {
    let n = Node::new();
    let pod = n.pod(&unique("web"));
    let cache = attached_by_multus(&n, &pod);
    let conf = n.selector_conf("1.0.0", json!({"cniDir": cache}));
    // host-local cannot release while its lease directory is unreadable to it: a DEL that fails.
    let leases = n.ipam_dir().join("storage");
    std::fs::rename(&leases, n.ipam_dir().join("storage.away")).unwrap();
    std::fs::write(&leases, "not a directory").unwrap();
    let err = n.call("DEL", &pod, &conf).err();
    assert!(err["msg"].as_str().unwrap().contains("network storage on interface net1 (attached by Multus)"), "{err}");
    assert_eq!(files_in(&cache).len(), 3, "kept for the runtime's next DEL: {:?}", files_in(&cache));
    std::fs::remove_file(&leases).unwrap();
    std::fs::rename(n.ipam_dir().join("storage.away"), &leases).unwrap();
    n.call("DEL", &pod, &conf).ok();
    assert!(left_on_node(&n).is_empty(), "left on the node: {:#?}", left_on_node(&n));
    assert!(files_in(&cache).is_empty(), "{:?}", files_in(&cache));
}

#[test]
fn del_of_a_pod_genie_attached_releases_its_networks_through_the_agent() {
    let n = Node::new();
    // Genie's networks, as the move installs them: each under confDir/<name>/, its `name` kept.
    let network = |name: &str, octet: u8| {
        let list = json!({"cniVersion": "1.0.0", "name": name, "plugins": [{"type": "ptp", "ipam": {"type": "host-local",
            "dataDir": n.ipam_dir(), "ranges": [[{"subnet": format!("10.80.{octet}.0/24")}]]}}]});
        n.write_conf(&format!("{name}/{name}.conflist"), &list)
    };
    let (blue, red) = (network("blue", 41), network("red", 42));
    let name = unique("genie");
    n.api.put_annotated_pod("default", &name, json!({"cni": "blue,red"}), json!([{"name": "main"}]));
    let agent = n.start_agent();
    agent.wait_holds(&n.agent_socket(), &name, &format!("uid-default-{name}"), |_| true);
    let pod = n.pod(&name);
    let no_multus = n.sb.path().join("no-multus");
    for (conflist, ifname) in [(&blue, "eth0"), (&red, "eth1")] {
        let config: Value = serde_json::from_str(&std::fs::read_to_string(conflist).unwrap()).unwrap();
        libcni_add(&n, &pod, &config, ifname, &n.sb.path().join("genie-cache"), None);
    }
    assert_eq!((addresses_on(&pod, "eth0").len(), addresses_on(&pod, "eth1").len()), (1, 1), "Genie's eth0 and eth1");
    assert_eq!(n.leases().len(), 2);
    let conf = n.selector_conf("1.0.0", json!({"cniDir": no_multus}));
    let before = n.api.plugin_requests();
    n.call("DEL", &pod, &conf).ok();
    assert_eq!(link_names(&pod.netns, ""), ["lo"], "both of Genie's interfaces go");
    let left = n.leftovers_of_networks(&pod, &["blue", "red"]);
    assert!(left.is_empty(), "left of the pod: {left:#?}");
    assert_eq!(n.api.plugin_requests(), before, "the agent answered: {:#?}", n.api.calls());
}
