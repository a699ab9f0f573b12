//! Networks attached to and detached from a running pod (docs/dynamic-networks.md), as root: the
//! attach worker (`yh-genie attach-worker`, a real process in the node netns) asked over its socket
//! as the node agent asks it, the agent itself (as the DaemonSet runs it) answering the worker with
//! the pod's objects from the fake API server. What is checked is what the pod and the node hold:
//! its interfaces and addresses, the records, host-local's leases, and the worker's answer (the
//! network-status and the events the agent writes).

use crate::support::agent::AgentAnswers;
use crate::support::node::{NetnsNode, Pod, addresses_on};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use testkit::agent::{Agent, METRICS_PORT};
use testkit::inspect::link_names;
use yh_genie::node::worker_protocol::{Answer, Notice, Request, VERSION};
use yh_genie::programs::selector::requests::annotation::NETWORKS;

const BLUE: (&str, u8) = ("blue", 41);
const RED: (&str, u8) = ("red", 42);
const GREEN: (&str, u8) = ("green", 43);

struct Worker {
    child: Child,
    socket: PathBuf,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Worker {
    /// The worker on `n`'s node, reading `conflist`, listening in the sandbox.
    fn start(n: &NetnsNode, conflist: &Path) -> Worker {
        let socket = n.sb.path().join("run/yh-genie/dynamic-networks.sock");
        let child =
            n.sb.command(&n.sb.bin().join("yh-genie"))
                .arg("attach-worker")
                .arg(format!("--config={}", conflist.display()))
                .arg(format!("--socket={}", socket.display()))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("the worker starts");
        // Dropped (killed and waited for) whether it comes up or not.
        let worker = Worker { child, socket };
        for _ in 0..200 {
            if UnixStream::connect(&worker.socket).is_ok() {
                return worker;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("the attach worker does not listen on {}", worker.socket.display());
    }

    /// Ask about the pod, as the agent does.
    fn reconcile(&self, pod: &str) -> Answer {
        let mut stream = UnixStream::connect(&self.socket).unwrap();
        let request = Request {
            version: VERSION,
            namespace: "default".into(),
            name: pod.into(),
            uid: format!("uid-default-{pod}"),
        };
        stream.write_all(&yh_genie::node::worker_protocol::to_line(&request)).unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }
}

fn node() -> (NetnsNode, PathBuf) {
    let n = NetnsNode::new();
    for (name, octet) in [BLUE, RED, GREEN] {
        n.add_yonghui_network(name, octet, json!({}));
        n.api.put_nad("default", name, None);
    }
    let mut plugin: Value = serde_json::from_str(&n.selector_conf("1.0.0", json!({"dynamicNetworks": true}))).unwrap();
    let plugin = plugin.as_object_mut().unwrap();
    plugin.remove("cniVersion");
    plugin.remove("name");
    let conflist =
        n.write_conf("00-yh-genie.conflist", &json!({"cniVersion": "1.0.0", "name": "yh-genie", "plugins": [plugin]}));
    (n, conflist)
}

/// Put the pod `hot` with the networks annotation `networks` (none: without it).
fn annotate(n: &NetnsNode, networks: Option<&str>) {
    let annotations = networks.map_or(json!({}), |v| json!({ NETWORKS: v }));
    n.api.put_annotated_pod("default", "hot", annotations, testkit::apiserver::literal("blue"));
}

fn reconciled(answer: Answer) -> (Vec<(String, String)>, Vec<Notice>) {
    let Answer::Reconciled { annotations, events } = answer else { panic!("{answer:?}") };
    let status: Vec<(String, String)> = annotations
        .get("k8s.v1.cni.cncf.io/network-status")
        .map(|s| serde_json::from_str::<Value>(s).unwrap())
        .map(|v| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|e| (e["interface"].as_str().unwrap().to_string(), e["name"].as_str().unwrap().to_string()))
                .collect()
        })
        .unwrap_or_default();
    (status, events)
}

fn on(pod: &Pod, dev: &str, (_, octet): (&str, u8)) -> bool {
    let addresses = addresses_on(pod, dev);
    addresses.len() == 1 && addresses[0].starts_with(&format!("10.77.{octet}."))
}

/// The pod's interfaces but `lo`, sorted.
fn links(pod: &Pod) -> Vec<String> {
    let mut names = link_names(&pod.netns, "");
    names.retain(|n| n != "lo");
    names.sort();
    names
}

fn wait_annotation(agent: &testkit::agent::Agent, n: &NetnsNode, want: Option<&str>) {
    agent.wait_holds(&n.agent_socket(), "hot", "uid-default-hot", |o| {
        o.pod.metadata.annotations.as_ref().and_then(|a| a.get(NETWORKS)).map(String::as_str) == want
    });
}

/// A node with pod `hot` annotated with `networks`, held by a running agent and ADDed through the
/// selector with `dynamicNetworks` on. Destructured in field order, the test's locals drop as
/// they would have been made: the pod first, the node last.
struct HotPod {
    n: NetnsNode,
    conflist: PathBuf,
    agent: Agent,
    conf: String,
    pod: Pod,
}

fn added_hot_pod(networks: Option<&str>) -> HotPod {
    let (n, conflist) = node();
    annotate(&n, networks);
    let agent = n.start_agent();
    agent.wait_ready();
    wait_annotation(&agent, &n, networks);
    let conf = n.selector_conf("1.0.0", json!({"dynamicNetworks": true}));
    let pod = n.pod("hot");
    assert_eq!(n.call("ADD", &pod, &conf).code, 0);
    HotPod { n, conflist, agent, conf, pod }
}

#[test]
fn a_running_pods_networks_follow_its_annotation_until_its_del() {
    let HotPod { n, conflist, agent, conf, pod } = added_hot_pod(None);
    let worker = Worker::start(&n, &conflist);

    // Nothing asked: nothing changes; the status is the pod's as it is (the agent writes it only
    // where the pod's differs).
    let (status, events) = reconciled(worker.reconcile("hot"));
    assert_eq!(status, [("eth0".to_string(), "blue".to_string())]);
    assert!(events.is_empty(), "{events:?}");

    // Added: red on net1, green on the interface asked for.
    annotate(&n, Some("red,green@data0"));
    wait_annotation(&agent, &n, Some("red,green@data0"));
    let (status, events) = reconciled(worker.reconcile("hot"));
    assert!(on(&pod, "net1", RED) && on(&pod, "data0", GREEN), "{:?}", links(&pod));
    assert_eq!(
        status,
        [("eth0", "blue"), ("net1", "default/red"), ("data0", "default/green")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    let messages: Vec<&str> = events.iter().map(|e| e.message.as_str()).collect();
    assert!(
        messages.iter().any(|m| m.starts_with("Add net1 [10.77.42.") && m.ends_with("from default/red")),
        "{messages:?}"
    );
    assert_eq!(n.record(&pod)["ifname"], "eth0");
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(n.data_dir().join(format!("attachments/{}:net1", pod.cid))).unwrap(),
    )
    .unwrap();
    assert_eq!(record["hotplugged"], true);
    assert_eq!(record["runtimeIfname"], "eth0");
    let red_lease = addresses_on(&pod, "net1")[0].clone();

    // Asked again for the same: nothing changes, the same status.
    let (again, events) = reconciled(worker.reconcile("hot"));
    assert_eq!(again, status);
    assert!(events.is_empty(), "{events:?}");

    // One edit that removes red from net1 (by network: no interface named) and puts red behind
    // data0 in green's place.
    annotate(&n, Some("red@data0"));
    wait_annotation(&agent, &n, Some("red@data0"));
    let (status, events) = reconciled(worker.reconcile("hot"));
    assert_eq!(links(&pod), ["data0", "eth0"]);
    assert!(on(&pod, "data0", RED), "{:?}", addresses_on(&pod, "data0"));
    assert_eq!(status.len(), 2, "{status:?}");
    let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["RemovedInterface", "RemovedInterface", "AddedInterface"], "{events:?}");
    assert!(!n.allocations().contains(&red_lease), "net1's lease {red_lease} is released");

    // Refused by the policy (another namespace's NAD): an event, nothing changes.
    annotate(&n, Some("red@data0,other/green"));
    wait_annotation(&agent, &n, Some("red@data0,other/green"));
    let (refused, events) = reconciled(worker.reconcile("hot"));
    assert_eq!(refused, status, "the status is as it was");
    assert!(events.len() == 1 && events[0].reason == "NetworkChangeFailed" && events[0].warning, "{events:?}");
    assert!(events[0].message.contains("other"), "{events:?}");
    assert_eq!(links(&pod), ["data0", "eth0"]);

    // The sandbox's DEL takes the hot-plugged interface too; then the worker finds nothing to do.
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    let left = n.leftovers_of_networks(&pod, &[BLUE.0, RED.0, GREEN.0]);
    assert!(left.is_empty(), "{left:#?}");
    assert!(matches!(worker.reconcile("hot"), Answer::NotAttached { .. }));
}

/// The NAT lines of `network`'s chain for the pod (yh-bridge's masquerade, shared by the
/// attachments of one network to one pod).
fn nat_of(n: &NetnsNode, pod: &Pod, network: &str) -> Vec<String> {
    let chain = yh_genie::programs::plugins::firewall::Owner::new(network, &pod.cid, "eth0").chain();
    n.nat_lines().into_iter().filter(|l| l.contains(&chain)).collect()
}

#[test]
fn an_edit_adds_then_removes_one_of_two_attachments_of_one_network() {
    let HotPod { n, conflist, agent, conf, pod } = added_hot_pod(Some("red@net1"));
    let worker = Worker::start(&n, &conflist);
    let net1 = addresses_on(&pod, "net1")[0].clone();

    // red once more, on net2: net1 keeps its address.
    annotate(&n, Some("red@net1,red@net2"));
    wait_annotation(&agent, &n, Some("red@net1,red@net2"));
    let (status, events) = reconciled(worker.reconcile("hot"));
    assert_eq!(links(&pod), ["eth0", "net1", "net2"]);
    assert!(on(&pod, "net2", RED), "{:?}", addresses_on(&pod, "net2"));
    assert_eq!(addresses_on(&pod, "net1"), std::slice::from_ref(&net1));
    let want = [("eth0", "blue"), ("net1", "default/red"), ("net2", "default/red")];
    assert_eq!(status, want.map(|(a, b)| (a.to_string(), b.to_string())));
    assert_eq!(events.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(), ["AddedInterface"], "{events:?}");
    let net2 = addresses_on(&pod, "net2")[0].clone();
    let source = |a: &str| format!("-s {}/32", a.split('/').next().unwrap());
    let nat = nat_of(&n, &pod, RED.0);
    assert!(
        nat.iter().any(|l| l.contains(&source(&net1))) && nat.iter().any(|l| l.contains(&source(&net2))),
        "{nat:#?}"
    );

    // net1's red dropped: net2's stays, with its address, its lease and its masquerade.
    annotate(&n, Some("red@net2"));
    wait_annotation(&agent, &n, Some("red@net2"));
    let (status, events) = reconciled(worker.reconcile("hot"));
    assert_eq!(links(&pod), ["eth0", "net2"]);
    assert_eq!(addresses_on(&pod, "net2"), std::slice::from_ref(&net2));
    assert_eq!(status, [("eth0", "blue"), ("net2", "default/red")].map(|(a, b)| (a.to_string(), b.to_string())));
    assert_eq!(events.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(), ["RemovedInterface"], "{events:?}");
    let leased = n.allocations();
    let bare = |a: &str| a.split('/').next().unwrap().to_string();
    assert!(!leased.contains(&bare(&net1)) && leased.contains(&bare(&net2)), "{leased:?}");
    let nat = nat_of(&n, &pod, RED.0);
    assert!(!nat.iter().any(|l| l.contains(&source(&net1))), "{nat:#?}");
    assert!(nat.iter().any(|l| l.contains(&source(&net2)) && l.starts_with("-A POSTROUTING")), "{nat:#?}");
    assert!(nat.iter().any(|l| l.contains("MASQUERADE")), "the shared chain keeps its rules: {nat:#?}");

    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    let left = n.leftovers_of_networks(&pod, &[BLUE.0, RED.0]);
    assert!(left.is_empty(), "{left:#?}");
}

#[test]
fn a_hot_plug_killed_midway_is_undone_by_the_next_reconcile() {
    // The agent runs throughout, as on a node, though the worker is asked directly here.
    let HotPod { n, conflist, agent: _agent, conf, pod } = added_hot_pod(Some("red"));
    // What a worker killed after writing green's record, before its chain, leaves.
    let mut record: Value = n.record(&pod);
    record["ifname"] = "net2".into();
    record["position"] = 2.into();
    record["network"] = "green".into();
    let green = n.conf_dir().join("green/10-green.conflist");
    record["confPath"] = green.display().to_string().into();
    record["conf"] = std::fs::read_to_string(&green).unwrap().into();
    record["source"] = json!({"from": "annotation", "element": "green", "nad": "default/green", "inline": false});
    record["hotplugged"] = true.into();
    record.as_object_mut().unwrap().remove("result");
    record.as_object_mut().unwrap().remove("furtherResults");
    let path = n.data_dir().join(format!("attachments/{}:net2", pod.cid));
    std::fs::write(&path, record.to_string()).unwrap();

    let worker = Worker::start(&n, &conflist);
    let (status, events) = reconciled(worker.reconcile("hot"));
    assert!(!path.exists(), "the half-made record is gone");
    assert_eq!(links(&pod), ["eth0", "net1"]);
    assert_eq!(status.iter().map(|(i, _)| i.as_str()).collect::<Vec<_>>(), ["eth0", "net1"]);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    let left = n.leftovers_of_networks(&pod, &[BLUE.0, RED.0, GREEN.0]);
    assert!(left.is_empty(), "{left:#?}");
}

#[test]
fn a_network_attached_at_creation_detaches_leaving_no_result() {
    let HotPod { n, conflist, agent, conf, pod } = added_hot_pod(Some("red"));
    assert!(on(&pod, "net1", RED), "{:?}", links(&pod));
    assert!(n.results(&pod)["furtherResults"].get("net1").is_some(), "{}", n.results(&pod));
    let lease = addresses_on(&pod, "net1")[0].clone();
    let worker = Worker::start(&n, &conflist);

    annotate(&n, None);
    wait_annotation(&agent, &n, None);
    let (status, events) = reconciled(worker.reconcile("hot"));
    assert_eq!(links(&pod), ["eth0"]);
    assert_eq!(status, [("eth0".to_string(), "blue".to_string())]);
    assert!(events.len() == 1 && events[0].reason == "RemovedInterface", "{events:?}");
    assert!(!n.allocations().contains(&lease), "net1's lease {lease} is released");
    // The runtime's record keeps no result of net1: a later hot-plug there that does not complete
    // is not taken for one that did.
    assert!(n.results(&pod)["furtherResults"].get("net1").is_none(), "{}", n.results(&pod));

    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    let left = n.leftovers_of_networks(&pod, &[BLUE.0, RED.0]);
    assert!(left.is_empty(), "{left:#?}");
}

#[test]
fn two_pods_edited_at_once_each_get_their_network() {
    let (n, conflist) = node();
    for name in ["one", "two"] {
        n.api.put_annotated_pod("default", name, json!({}), testkit::apiserver::literal("blue"));
    }
    let agent = n.start_agent();
    agent.wait_ready();
    let conf = n.selector_conf("1.0.0", json!({"dynamicNetworks": true}));
    let pods: Vec<Pod> = ["one", "two"]
        .into_iter()
        .map(|name| {
            agent.wait_holds(&n.agent_socket(), name, &format!("uid-default-{name}"), |_| true);
            let pod = n.pod(name);
            assert_eq!(n.call("ADD", &pod, &conf).code, 0);
            pod
        })
        .collect();
    for name in ["one", "two"] {
        n.api.put_annotated_pod("default", name, json!({ NETWORKS: "red" }), testkit::apiserver::literal("blue"));
        agent.wait_holds(&n.agent_socket(), name, &format!("uid-default-{name}"), |o| {
            o.pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(NETWORKS))
        });
    }
    let worker = Worker::start(&n, &conflist);
    let answers: Vec<Answer> = std::thread::scope(|s| {
        let asks: Vec<_> = ["one", "two"].into_iter().map(|name| s.spawn(|| worker.reconcile(name))).collect();
        asks.into_iter().map(|a| a.join().unwrap()).collect()
    });
    for answer in answers {
        let (status, _) = reconciled(answer);
        assert_eq!(status.len(), 2, "{status:?}");
    }
    let (a, b) = (addresses_on(&pods[0], "net1"), addresses_on(&pods[1], "net1"));
    assert!(on(&pods[0], "net1", RED) && on(&pods[1], "net1", RED) && a != b, "{a:?} {b:?}");
    for pod in &pods {
        assert_eq!(n.call("DEL", pod, &conf).code, 0);
        let left = n.leftovers_of_networks(pod, &[BLUE.0, RED.0]);
        assert!(left.is_empty(), "{left:#?}");
    }
}

/// The pod `hot`, running (the agent tells the worker only about running pods), with the networks
/// annotation `networks` (none: without it).
fn put_running(n: &NetnsNode, networks: Option<&str>) {
    let annotations = networks.map_or(json!({}), |v| json!({ NETWORKS: v }));
    n.api.put_raw_pod(
        "default",
        "hot",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "name": "hot", "uid": "uid-default-hot", "annotations": annotations},
            "spec": {"nodeName": testkit::apiserver::NODE_NAME, "containers": testkit::apiserver::literal("blue")},
            "status": {"phase": "Running"},
        }),
    );
}

/// The interfaces of the pod's network-status on the API server, in order.
fn status_on_server(n: &NetnsNode) -> Vec<String> {
    let pod = n.api.pod("default", "hot").unwrap();
    let Some(text) = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"].as_str() else {
        return Vec::new();
    };
    let status: Value = serde_json::from_str(text).unwrap();
    status.as_array().unwrap().iter().map(|e| e["interface"].as_str().unwrap().to_string()).collect()
}

fn event_messages(n: &NetnsNode, reason: &str) -> Vec<String> {
    n.api
        .events()
        .iter()
        .filter(|e| e["reason"] == reason)
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect()
}

/// The whole path on one node: the agent (`--dynamic-networks`) sees the edit on its pod watch,
/// asks the worker, and writes the status and the events on the API server.
#[test]
fn the_agent_applies_an_edit_through_the_worker_end_to_end() {
    let (n, conflist) = node();
    put_running(&n, None);
    let agent = Agent::start(&n.netns, &n.api, n.sb.path(), &n.agent_socket(), METRICS_PORT, &["--dynamic-networks"]);
    agent.wait_ready();
    agent.wait_holds(&n.agent_socket(), "hot", "uid-default-hot", |_| true);
    let conf = n.selector_conf("1.0.0", json!({"dynamicNetworks": true}));
    let pod = n.pod("hot");
    assert_eq!(n.call("ADD", &pod, &conf).code, 0);
    let _worker = Worker::start(&n, &conflist);

    put_running(&n, Some("red"));
    agent.wait_for("net1 in the pod's network-status", || status_on_server(&n) == ["eth0", "net1"]);
    assert!(on(&pod, "net1", RED), "{:?}", links(&pod));
    agent.wait_for("the AddedInterface event", || {
        event_messages(&n, "AddedInterface").iter().any(|m| m.starts_with("Add net1 [10.77.42."))
    });

    put_running(&n, None);
    agent.wait_for("net1 gone from the pod's network-status", || status_on_server(&n) == ["eth0"]);
    assert_eq!(links(&pod), ["eth0"]);
    agent.wait_for("the RemovedInterface event", || {
        event_messages(&n, "RemovedInterface").iter().any(|m| m.starts_with("Remove net1 [10.77.42."))
    });
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    let left = n.leftovers_of_networks(&pod, &[BLUE.0, RED.0, GREEN.0]);
    assert!(left.is_empty(), "{left:#?}");
}

/// The agent stopped after the worker attached, before the status was written (or the API server
/// refused it for longer than the agent retries): the agent that starts next asks about every running
/// pod and writes the status the records say, with no new event.
#[test]
fn a_status_not_written_after_an_attach_is_written_by_the_next_agent() {
    let (n, conflist) = node();
    put_running(&n, None);
    let conf = n.selector_conf("1.0.0", json!({"dynamicNetworks": true}));
    let pod = n.pod("hot");
    let worker = Worker::start(&n, &conflist);
    {
        // An agent that answers the worker but applies no edit: the attach below is the worker's
        // work for an agent killed before its status write.
        let agent = n.start_agent();
        agent.wait_ready();
        agent.wait_holds(&n.agent_socket(), "hot", "uid-default-hot", |_| true);
        assert_eq!(n.call("ADD", &pod, &conf).code, 0);
        put_running(&n, Some("red"));
        wait_annotation(&agent, &n, Some("red"));
        let (status, _) = reconciled(worker.reconcile("hot"));
        assert_eq!(status.len(), 2, "{status:?}");
        assert!(on(&pod, "net1", RED), "{:?}", links(&pod));
    }
    assert!(!status_on_server(&n).contains(&"net1".to_string()), "{:?}", status_on_server(&n));

    let agent = Agent::start(&n.netns, &n.api, n.sb.path(), &n.agent_socket(), METRICS_PORT, &["--dynamic-networks"]);
    agent.wait_ready();
    agent.wait_for("net1 in the pod's network-status", || status_on_server(&n) == ["eth0", "net1"]);
    let added = event_messages(&n, "AddedInterface");
    assert!(added.iter().all(|m| !m.starts_with("Add net1")), "nothing new was attached: {added:?}");
    assert_eq!(links(&pod), ["eth0", "net1"]);
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    let left = n.leftovers_of_networks(&pod, &[BLUE.0, RED.0]);
    assert!(left.is_empty(), "{left:#?}");
}

/// An edit made while the node's configuration has `dynamicNetworks` off (the ConfigMap edited, the
/// installer not yet through) is refused by the worker, and applied once it is on: the agent asks
/// again.
#[test]
fn an_edit_refused_while_switched_off_is_applied_once_switched_on() {
    let (n, conflist) = node();
    let switched = |on: bool| {
        let mut list: Value = serde_json::from_str(&std::fs::read_to_string(&conflist).unwrap()).unwrap();
        list["plugins"][0]["dynamicNetworks"] = on.into();
        std::fs::write(&conflist, list.to_string()).unwrap();
    };
    switched(false);
    put_running(&n, None);
    let agent = Agent::start(&n.netns, &n.api, n.sb.path(), &n.agent_socket(), METRICS_PORT, &["--dynamic-networks"]);
    agent.wait_ready();
    agent.wait_holds(&n.agent_socket(), "hot", "uid-default-hot", |_| true);
    let conf = n.selector_conf("1.0.0", json!({"dynamicNetworks": true}));
    let pod = n.pod("hot");
    assert_eq!(n.call("ADD", &pod, &conf).code, 0);
    let _worker = Worker::start(&n, &conflist);

    put_running(&n, Some("red"));
    agent.wait_for("the worker's refusal logged", || agent.logged().contains("dynamicNetworks is not true"));
    assert_eq!(links(&pod), ["eth0"]);
    switched(true);
    // The agent asks again every 30 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while status_on_server(&n) != ["eth0", "net1"] {
        assert!(std::time::Instant::now() < deadline, "net1 never attached; agent log:\n{}", agent.logged());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(on(&pod, "net1", RED), "{:?}", links(&pod));
    assert_eq!(n.call("DEL", &pod, &conf).code, 0);
    let left = n.leftovers_of_networks(&pod, &[BLUE.0, RED.0]);
    assert!(left.is_empty(), "{left:#?}");
}
