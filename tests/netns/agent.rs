//! The node agent end to end, as root: the agent runs as the DaemonSet runs it (`yh-genie install
//! --agent`, a real process in the node netns, `testkit::agent`), watching the fake HTTPS API server
//! (streaming lists, or a list and a watch where they are refused, resourceVersions, `testkit::apiserver`);
//! always, on real netns, and through libcni. Networks are `yonghui` -> `yh-bridge` on two subnets,
//! so an address tells which network a pod got. The API requests of the plugin (its token) and of
//! the agent (its own) are counted apart.

use crate::support::agent::{AgentAnswers, answer};
use crate::support::driver::{Reply, cnidrive_run};
use crate::support::node::{NetnsNode, Pod, addresses_on, pod_addresses};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};
use testkit::agent::{Agent, METRICS_PORT};
use testkit::apiserver::{Call, StreamingList, from_config_map, literal};
use testkit::fake_plugin::{FakePlugin, Step};
use yh_genie::node::agent_socket::client::exchange;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, PodObjects, Reply as AgentReply, Request};

const BLUE: (&str, u8) = ("blue", 31);
const RED: (&str, u8) = ("red", 32);

fn node() -> NetnsNode {
    let n = NetnsNode::new();
    for (name, octet) in [BLUE, RED] {
        n.add_yonghui_network(name, octet, json!({}));
    }
    n
}

fn on(pod: &Pod, (_, octet): (&str, u8)) -> bool {
    let addresses = pod_addresses(pod);
    addresses.len() == 1 && addresses[0].starts_with(&format!("10.77.{octet}."))
}

fn uid(name: &str) -> String {
    format!("uid-default-{name}")
}

/// ADD `pod`, which must succeed; returns the reply (stderr holds the operation's log line).
fn add(n: &NetnsNode, pod: &Pod, conf: &str) -> Reply {
    let reply = n.call("ADD", pod, conf);
    assert_eq!(reply.code, 0, "ADD failed: {reply:?}");
    reply
}

/// The `selection` field of the operation's log line.
fn selection(reply: &Reply) -> String {
    let line = reply.stderr.lines().find(|l| l.contains("command=\"ADD\"")).unwrap_or_else(|| panic!("{reply:?}"));
    let rest = line.split("selection=").nth(1).unwrap_or_else(|| panic!("no selection in {line}"));
    let value: String = serde_json::Deserializer::from_str(rest).into_iter::<String>().next().unwrap().unwrap();
    value
}

/// Nothing of `pod` is left on the node (other pods may be).
fn assert_gone(n: &NetnsNode, pod: &Pod, case: &str) {
    let left = n.leftovers_of_networks(pod, &[BLUE.0, RED.0]);
    assert!(left.is_empty(), "{case}: left of pod {}: {left:#?}", pod.cid);
}

fn config_map_value(objects: &PodObjects) -> Option<String> {
    objects.config_maps.first()?.object.as_ref()?.data.as_ref()?.get("k").cloned()
}

#[test]
fn with_the_agent_add_records_what_the_direct_path_records_without_an_api_request() {
    let n = node();
    n.api.put_config_map("default", "nets", json!({"k": "blue"}));
    n.api.put_pod("default", "web-0", from_config_map("nets", "k"));
    n.api.put_pod("default", "two", literal("blue,red@net1"));
    // A pod of another node is not this agent's.
    n.api.put_pod_spec("default", "elsewhere", json!({"nodeName": "other-node", "containers": literal("red")}));
    let agent = n.start_agent();
    agent.wait_ready();
    let socket = n.agent_socket();
    agent.wait_holds(&socket, "web-0", &uid("web-0"), |_| true);
    assert!(matches!(answer(&socket, "default", "elsewhere", None), Ok(Answer::Unknown { .. })));
    let conf = n.selector_conf("1.0.0", json!({}));

    let pod = n.pod("web-0");
    let before = n.api.plugin_requests();
    let reply = add(&n, &pod, &conf);
    assert!(on(&pod, BLUE), "{:?}", pod_addresses(&pod));
    assert_eq!(n.api.plugin_requests(), before, "ADD with the agent makes no API request");
    assert_eq!(selection(&reply), "agent");
    let by_agent = n.record(&pod);

    // The same pod's next sandbox without the agent: the direct path records the same choice.
    let direct = n.pod("web-0");
    let reply = add(&n, &direct, &n.selector_conf("1.0.0", json!({"agentSocket": ""})));
    assert_eq!(n.api.plugin_requests() - before, 2, "the direct path: GET pod, GET ConfigMap");
    assert_eq!(selection(&reply), "api");
    let by_api = n.record(&direct);
    for key in ["pod", "network", "path", "config", "source", "runtimeIfname"] {
        assert_eq!(by_agent[key], by_api[key], "record key {key}");
    }
    assert_eq!(by_agent["pod"]["uid"], uid("web-0"));
    assert_eq!(by_agent["source"]["from"], "value");

    for p in [&pod, &direct] {
        let before = n.api.plugin_requests();
        n.call("CHECK", p, &conf).ok();
        n.call("DEL", p, &conf).ok();
        assert_eq!(n.api.plugin_requests(), before, "CHECK and DEL work from the records");
    }
    assert!(n.leftovers().is_empty(), "{:#?}", n.leftovers());

    // Two networks: the status annotation is handed to the agent, which writes it.
    let pod = n.pod("two");
    agent.wait_holds(&socket, "two", &uid("two"), |_| true);
    let before = n.api.plugin_requests();
    add(&n, &pod, &conf);
    assert!(on(&pod, BLUE) && addresses_on(&pod, "net1")[0].starts_with("10.77.32."));
    assert_eq!(n.api.plugin_requests(), before, "no status write by the plugin either");
    agent.wait_for("the agent to write the network-status annotation", || {
        n.api.pod("default", "two").unwrap()["metadata"]["annotations"]
            .get(yh_genie::programs::selector::NETWORK_STATUS)
            .is_some()
    });
    let patch = n.api.patches().pop().unwrap().2;
    assert_eq!(patch["metadata"]["uid"], uid("two"), "written only while the pod is the sandbox's");
    assert_eq!(agent.metric("yh_genie_agent_status_writes_total{outcome=\"written\"}"), 1);
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "two");

    // Through libcni, as containerd drives it.
    n.api.put_pod("default", "cri", literal("red"));
    agent.wait_holds(&socket, "cri", &uid("cri"), |_| true);
    // The conflist names the node's agent socket, as the installer writes it.
    let list_path = n.selector_conflist("1.0.0");
    let pod = n.pod("cri");
    let netns = pod.netns_path();
    let before = n.api.plugin_requests();
    let drive = |cmd: &str| cnidrive_run(&n.sb, cmd, &list_path, &netns, &pod.cid, "eth0", &pod.args);
    let result = drive("add").ok();
    assert!(on(&pod, RED), "{result}");
    drive("check").ok();
    drive("del").ok();
    assert_eq!(n.api.plugin_requests(), before, "through libcni too");
    n.assert_nothing_left(&pod, "cri");

    assert!(agent.metric("yh_genie_agent_answers_total{outcome=\"hit\"}") >= 3);
    // The agent's own requests: streaming lists from the watch cache (this server serves them, so
    // no list at all), watches, the status patch, the AddedInterface events; nothing else.
    let calls: Vec<_> = n.api.calls().into_iter().filter(|c| c.client == "agent").collect();
    for call in &calls {
        let group = if call.resource == "network-attachment-definitions" { "k8s.cni.cncf.io" } else { "" };
        assert!(yh_genie::platform::kube::AGENT_API_CALLS.contains(&(group, call.resource, call.verb)), "{call:?}");
        assert_ne!(call.verb, "list", "{call:?}");
        if call.streaming_list {
            assert_eq!(call.resource_version.as_deref(), Some("0"), "answered from the watch cache: {call:?}");
        }
    }
    // One request per watch at start: the node's pods, the one ConfigMap its pods used.
    let streamed: Vec<&str> = calls.iter().filter(|c| c.streaming_list).map(|c| c.resource).collect();
    assert_eq!(streamed, ["pods", "configmaps"], "{calls:#?}");
}

/// `yh-genie agent` runs the same agent as `install --agent`, alone: it answers the plugin, and
/// removes its socket when stopped.
#[test]
fn the_agent_command_runs_the_agent_alone_until_sigterm() {
    let n = node();
    n.api.put_pod("default", "web-0", literal("blue"));
    let socket = n.agent_socket();
    let mut agent = Agent::start_alone(&n.netns, &n.api, n.sb.path(), &socket, METRICS_PORT, &[]);
    agent.wait_ready();
    agent.wait_holds(&socket, "web-0", &uid("web-0"), |_| true);
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("web-0");
    let before = n.api.plugin_requests();
    let reply = add(&n, &pod, &conf);
    assert!(on(&pod, BLUE), "{:?}", pod_addresses(&pod));
    assert_eq!((n.api.plugin_requests(), selection(&reply)), (before, "agent".to_string()));
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "web-0");
    agent.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(agent.wait_exit().success(), "{}", agent.logged());
    assert!(!socket.exists(), "the socket outlived the agent");
}

#[test]
fn a_pod_the_agent_holds_gets_its_networks_while_the_api_server_is_down() {
    let n = node();
    n.api.put_config_map("default", "nets", json!({"k": "blue,red@net1"}));
    n.api.put_pod("default", "web-0", from_config_map("nets", "k"));
    let agent = n.start_agent();
    agent.wait_ready();
    agent.wait_holds(&n.agent_socket(), "web-0", &uid("web-0"), |o| config_map_value(o).is_some());

    n.api.down();
    let pod = n.pod("web-0");
    let conf = n.selector_conf("1.0.0", json!({}));
    let reply = add(&n, &pod, &conf);
    assert_eq!(selection(&reply), "agent");
    assert!(on(&pod, BLUE) && addresses_on(&pod, "net1")[0].starts_with("10.77.32."));
    n.call("CHECK", &pod, &conf).ok();
    // The status waits in the agent for the API server.
    std::thread::sleep(Duration::from_millis(500));
    assert!(n.api.patches().is_empty());
    n.api.up();
    agent.wait_for("the status written once the API server is back", || !n.api.patches().is_empty());
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "outage");
    assert!(agent.metric("yh_genie_agent_watch_restarts_total{resource=\"pods\"}") >= 1);
}

/// The agent took the pod's status (answered `accepted`, so the plugin does not write it) and is
/// killed before the API server answers: started again, it writes it.
#[test]
fn a_status_the_agent_took_is_written_by_the_agent_started_again_after_a_kill() {
    let n = node();
    n.api.put_config_map("default", "nets", json!({"k": "blue,red@net1"}));
    n.api.put_pod("default", "web-0", from_config_map("nets", "k"));
    let mut agent = n.start_agent();
    agent.wait_ready();
    agent.wait_holds(&n.agent_socket(), "web-0", &uid("web-0"), |o| config_map_value(o).is_some());

    n.api.down();
    let pod = n.pod("web-0");
    let conf = n.selector_conf("1.0.0", json!({}));
    let reply = add(&n, &pod, &conf);
    assert_eq!(selection(&reply), "agent");
    assert!(!reply.stderr.contains("did not take"), "the agent took the status: {}", reply.stderr);
    std::thread::sleep(Duration::from_millis(500));
    assert!(n.api.patches().is_empty());
    agent.kill();
    n.api.up();
    let again = n.start_agent();
    again.wait_for("the status written by the agent started again", || !n.api.patches().is_empty());
    let patches = n.api.patches();
    assert_eq!(patches.len(), 1, "{patches:?}");
    let status = &patches[0].2["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"];
    assert!(status.as_str().is_some_and(|s| s.contains("net1")), "{patches:?}");
    assert!(again.logged().contains("1 network-status annotations taken before the agent started again"));
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "a status kept through a kill");
}

#[test]
fn without_a_usable_agent_add_takes_the_direct_path_saying_why() {
    let n = node();
    n.api.put_config_map("default", "nets", json!({"k": "red"}));
    n.api.put_pod("default", "web-0", from_config_map("nets", "k"));
    let conf = n.selector_conf("1.0.0", json!({}));
    let direct = |case: &str, why: &str| {
        let pod = n.pod("web-0");
        let before = n.api.plugin_requests();
        let started = Instant::now();
        let reply = add(&n, &pod, &conf);
        let took = started.elapsed();
        assert!(on(&pod, RED), "{case}");
        assert_eq!(n.api.plugin_requests() - before, 2, "{case}: GET pod, GET ConfigMap");
        let said = selection(&reply);
        assert!(said.starts_with("api: ") && said.contains(why), "{case}: {said}");
        n.call("DEL", &pod, &conf).ok();
        n.assert_nothing_left(&pod, case);
        took
    };
    direct("no agent ever", "there is no agent socket");

    let mut agent = n.start_agent();
    agent.wait_ready();
    agent.wait_holds(&n.agent_socket(), "web-0", &uid("web-0"), |_| true);
    // Hung (its thread stopped): connections wait in the backlog, no answer comes.
    agent.signal(nix::sys::signal::Signal::SIGSTOP);
    let took = direct("agent hung", "in time");
    assert!(took < Duration::from_secs(5), "the wait for the agent is bounded: {took:?}");
    agent.signal(nix::sys::signal::Signal::SIGCONT);
    // Killed: its socket stays, nobody listens.
    agent.kill();
    assert!(n.agent_socket().exists());
    direct("agent killed", "no agent is listening");

    // A runtime that does not say the pod's uid: the agent cannot tell this pod from another.
    let agent = n.start_agent();
    agent.wait_holds(&n.agent_socket(), "web-0", &uid("web-0"), |_| true);
    let mut pod = n.pod("web-0");
    pod.args = pod.args.replace(&format!(";K8S_POD_UID={}", uid("web-0")), "");
    let reply = add(&n, &pod, &conf);
    assert!(selection(&reply).contains("no K8S_POD_UID"), "{reply:?}");
    n.call("DEL", &pod, &conf).ok();

    // Up, but its watch does not deliver the pod (bound to another node here, as a pod the watch
    // has not delivered in time looks to it): the direct path chooses, and the agent, which
    // answered, still takes the status and the AddedInterface event: no PATCH by the plugin.
    let spec = json!({"nodeName": "another-node", "containers": from_config_map("nets", "k")});
    n.api.put_pod_spec("default", "elsewhere", spec);
    let pod = n.pod("elsewhere");
    let always = n.selector_conf("1.0.0", json!({"networkStatus": "always"}));
    let before = n.api.plugin_requests();
    let reply = add(&n, &pod, &always);
    assert!(selection(&reply).contains("the agent does not have it"), "{reply:?}");
    assert_eq!(n.api.plugin_requests() - before, 2, "GET pod, GET ConfigMap; the status is the agent's");
    agent.wait_for("the agent's status and event for a pod it did not have", || {
        let annotated = n
            .api
            .pod("default", "elsewhere")
            .is_some_and(|p| p["metadata"]["annotations"][yh_genie::programs::selector::NETWORK_STATUS].is_string());
        annotated && n.api.events().len() == 1
    });
    let writes: Vec<String> = n
        .api
        .calls()
        .iter()
        .filter(|c| c.verb == "patch" || c.verb == "create")
        .map(|c| format!("{} {} {}", c.client, c.verb, c.resource))
        .collect();
    assert!(writes.iter().all(|w| w.starts_with("agent ")), "{writes:?}");
    n.call("DEL", &pod, &always).ok();
    n.assert_nothing_left(&pod, "direct path, agent up");
    drop(agent);
}

#[test]
fn the_event_of_a_one_network_add_reaches_the_api_server_through_the_agent() {
    let n = node();
    n.api.put_pod("default", "web-0", literal("blue"));
    let agent = n.start_agent();
    agent.wait_ready();
    agent.wait_holds(&n.agent_socket(), "web-0", &uid("web-0"), |_| true);
    let conf = n.selector_conf("1.0.0", json!({}));

    let pod = n.pod("web-0");
    let before = n.api.plugin_requests();
    let reply = add(&n, &pod, &conf);
    assert_eq!(selection(&reply), "agent");
    assert!(on(&pod, BLUE), "{:?}", pod_addresses(&pod));
    // One network: no status is wanted, only the event, which the agent took without a word.
    assert!(!reply.stderr.contains("did not take"), "{}", reply.stderr);
    agent
        .wait_for("the AddedInterface event", || agent.metric("yh_genie_agent_events_total{outcome=\"created\"}") == 1);
    let events = n.api.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["message"], format!("Add eth0 [{}] from blue", pod_addresses(&pod)[0]), "{events:?}");
    assert_eq!(events[0]["involvedObject"]["uid"], uid("web-0"), "{events:?}");
    assert_eq!(n.api.plugin_requests(), before, "the plugin makes no API request for it");
    assert!(n.api.patches().is_empty(), "no status for a pod of one network");
    // The plugin was gone before the agent read its request: the agent has nothing to say of it.
    let logged = agent.logged();
    assert!(!logged.contains("WARN") && !logged.contains("ERROR"), "{logged}");

    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "one network through the agent");
}

#[test]
fn an_add_is_whole_when_the_agent_never_answers_its_hand_over() {
    let n = node();
    n.api.put_pod("default", "web-0", literal("blue"));
    let socket = n.agent_socket();
    // The agent's answer for the pod, for a stand-in to give: the selection through the agent.
    let mut agent = n.start_agent();
    agent.wait_holds(&socket, "web-0", &uid("web-0"), |_| true);
    let Ok(Answer::Objects(objects)) = answer(&socket, "default", "web-0", Some(&uid("web-0"))) else {
        panic!("the agent holds the pod")
    };
    agent.kill();
    std::fs::remove_file(&socket).unwrap();
    // The stand-in answers the selection, then reads the hand-over and never answers it.
    let listener = UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let stand_in = std::thread::spawn(move || {
        let deadline = Instant::now() + testkit::agent::PATIENCE;
        loop {
            let connection = match listener.accept() {
                Ok((connection, _)) => connection,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(e) => panic!("no hand-over came: {e}"),
            };
            connection.set_nonblocking(false).unwrap();
            let mut line = Vec::new();
            BufReader::new(&connection).read_until(b'\n', &mut line).unwrap();
            match Request::parse(&line).unwrap().ask {
                Ask::Selection { .. } => {
                    (&connection).write_all(&AgentReply::new(Answer::Objects(objects.clone())).line()).unwrap();
                }
                // Kept open, unanswered, until the test has looked.
                annotate => return (annotate, connection),
            }
        }
    });

    let pod = n.pod("web-0");
    let conf = n.selector_conf("1.0.0", json!({}));
    let reply = add(&n, &pod, &conf);
    assert_eq!(selection(&reply), "agent");
    let address = pod_addresses(&pod)[0].clone();
    assert!(on(&pod, BLUE), "{address}");
    assert_eq!(reply.json()["ips"][0]["address"], address.as_str(), "{reply:?}");
    assert!(!reply.stderr.contains("did not take"), "nothing is missing: {}", reply.stderr);
    let (handed_over, _unanswered) = stand_in.join().unwrap();
    let Ask::Annotate { namespace, name, uid: handed_uid, annotations, events, no_answer } = handed_over else {
        panic!("{handed_over:?}")
    };
    assert_eq!((namespace.as_str(), name.as_str(), handed_uid), ("default", "web-0", uid("web-0")));
    assert_eq!(events, [format!("Add eth0 [{address}] from blue")]);
    assert!(annotations.is_empty() && no_answer, "only the event, no answer awaited");

    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "an agent that never answers");
}

#[test]
fn only_the_pod_recreated_under_its_name_gets_its_networks() {
    let n = node();
    n.api.put_pod("default", "web-0", literal("blue"));
    let agent = n.start_agent();
    agent.wait_ready();
    let socket = n.agent_socket();
    agent.wait_holds(&socket, "web-0", &uid("web-0"), |_| true);
    let old = n.pod("web-0");

    // A StatefulSet deletes web-0 and creates it again, now choosing red.
    n.api.recreate_pod_choosing("default", "web-0", "uid-new", literal("red"));
    agent.wait_holds(&socket, "web-0", "uid-new", |_| true);
    let mut new = n.pod("web-0");
    new.args = new.args.replace(&uid("web-0"), "uid-new");
    let conf = n.selector_conf("1.0.0", json!({}));
    let before = n.api.plugin_requests();
    let reply = add(&n, &new, &conf);
    assert_eq!((selection(&reply).as_str(), n.api.plugin_requests() - before), ("agent", 0));
    assert!(on(&new, RED));
    assert_eq!(n.record(&new)["pod"]["uid"], "uid-new");

    // The old pod's sandbox: the agent knows that uid is gone, and the direct path refuses the
    // new pod's object.
    let reply = n.call("ADD", &old, &conf);
    let e = reply.err();
    assert_eq!(e["code"], 103, "{e}");
    let msg = e["msg"].as_str().unwrap();
    assert!(msg.contains("uid-new") && msg.contains(&uid("web-0")), "{msg}");
    assert!(selection(&reply).contains("deleted"), "{reply:?}");
    let left: Vec<String> = n
        .leftovers_of_networks(&old, &[BLUE.0, RED.0])
        .into_iter()
        .filter(|l| *l != NetnsNode::own_lock(&old))
        .collect();
    assert!(left.is_empty(), "the failed ADD left {left:#?}");
    n.call("DEL", &old, &conf).ok();
    n.call("DEL", &new, &conf).ok();
    n.assert_nothing_left(&new, "new sandbox");
}

#[test]
fn a_configmap_change_reaches_the_pods_created_after_it() {
    let n = node();
    n.api.put_config_map("default", "nets", json!({"k": "blue"}));
    n.api.put_pod("default", "a", from_config_map("nets", "k"));
    let agent = n.start_agent();
    agent.wait_ready();
    let socket = n.agent_socket();
    agent.wait_holds(&socket, "a", &uid("a"), |o| config_map_value(o).as_deref() == Some("blue"));
    let conf = n.selector_conf("1.0.0", json!({}));
    let a = n.pod("a");
    add(&n, &a, &conf);
    assert!(on(&a, BLUE));

    n.api.put_config_map("default", "nets", json!({"k": "red"}));
    n.api.put_pod("default", "b", from_config_map("nets", "k"));
    // The ConfigMap's own watch brings the change; the pod's watch brings the pod.
    agent.wait_holds(&socket, "b", &uid("b"), |o| config_map_value(o).as_deref() == Some("red"));
    let b = n.pod("b");
    let before = n.api.plugin_requests();
    let reply = add(&n, &b, &conf);
    assert_eq!((selection(&reply).as_str(), n.api.plugin_requests() - before), ("agent", 0));
    assert!(on(&b, RED), "{:?}", pod_addresses(&b));
    // The last pod that referred to it gone, the ConfigMap is not watched any more.
    let configmap_watches = "yh_genie_agent_watches{resource=\"configmaps\"}";
    assert_eq!(agent.metric(configmap_watches), 1);
    n.api.remove_pod("default", "a");
    n.api.remove_pod("default", "b");
    agent.wait_for("the ConfigMap's watch to stop", || agent.metric(configmap_watches) == 0);
    for p in [&a, &b] {
        n.call("DEL", p, &conf).ok();
        assert_gone(&n, p, "configmap change");
    }
    assert!(n.leftovers().is_empty());
}

#[test]
fn the_agent_recovers_whenever_its_watches_break() {
    let n = node();
    n.api.down();
    let mut agent = n.start_agent();
    // Not ready while the node's pods cannot be listed.
    agent.wait_for("the agent's port", || agent.http_get("/healthz").is_some());
    assert_eq!(agent.http_get("/readyz").unwrap().0, 503);
    n.api.up();
    agent.wait_ready();
    let socket = n.agent_socket();
    let conf = n.selector_conf("1.0.0", json!({}));
    let mut added = Vec::new();
    let mut add_new = |name: &str| {
        n.api.put_pod("default", name, literal("blue"));
        agent.wait_holds(&socket, name, &uid(name), |_| true);
        let pod = n.pod(name);
        let before = n.api.plugin_requests();
        add(&n, &pod, &conf);
        assert!(on(&pod, BLUE));
        assert_eq!(n.api.plugin_requests(), before, "{name}");
        added.push(pod);
    };
    add_new("before");

    // Watches end (as when the API server sheds them): they resume from their resourceVersion.
    let lists =
        || n.api.calls().iter().filter(|c| c.client == "agent" && (c.verb == "list" || c.streaming_list)).count();
    let listed = lists();
    n.api.drop_watches();
    add_new("after-drop");
    assert_eq!(lists(), listed, "a dropped watch resumes without listing again");

    // A restart: connections cut, the port refused a while, a pod created meanwhile, the watch
    // cache built anew (the resume gets 410; the agent lists again and finds the pod).
    n.api.restart(Duration::from_secs(2), |api| drop(api.put_pod("default", "meanwhile", literal("red"))));
    add_new("after-restart");
    agent.wait_holds(&socket, "meanwhile", &uid("meanwhile"), |_| true);
    assert!(agent.metric("yh_genie_agent_watch_restarts_total{resource=\"pods\"}") >= 1);
    assert!(agent.metric("yh_genie_agent_relists_total{resource=\"pods\"}") >= 1, "{}", agent.logged());
    assert!(agent.running(), "the same agent process all along");
    for pod in &added {
        n.call("DEL", pod, &conf).ok();
    }
    assert!(n.leftovers().is_empty(), "{:#?}", n.leftovers());
}

#[test]
fn explain_tells_the_agents_view_of_the_pod() {
    let n = node();
    n.api.put_config_map("default", "nets", json!({"k": "red"}));
    n.api.put_pod("default", "web-0", from_config_map("nets", "k"));
    let config = n.selector_conflist("1.0.0");
    let explain = |pod: &str| {
        let out =
            n.sb.command(std::path::Path::new(env!("CARGO_BIN_EXE_yh-genie")))
                .args(["explain", "--pod", pod, "--config"])
                .arg(&config)
                .output()
                .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = explain("web-0");
    assert!(out.contains("agent:") && out.contains("not reachable") && out.contains("API server"), "{out}");
    let agent = n.start_agent();
    agent.wait_holds(&n.agent_socket(), "web-0", &uid("web-0"), |_| true);
    let out = explain("web-0");
    assert!(out.contains("network red"), "{out}");
    assert!(out.contains("holds the pod") && out.contains("uid-default-web-0"), "{out}");
    assert!(out.contains("the same networks"), "{out}");
    let out = explain("nobody");
    assert!(out.contains("does not hold"), "{out}");
}

#[test]
fn a_static_pod_gets_its_networks_through_its_mirror_pod_on_both_paths() {
    let n = node();
    // The kubelet runs a static pod under the uid it derives from the manifest; the API server's
    // mirror pod has its own uid and carries the kubelet's in kubernetes.io/config.mirror.
    let mirror = json!({ yh_genie::programs::selector::choose::CONFIG_MIRROR: "static-hash-1" });
    n.api.put_annotated_pod("default", "etcd-node1", mirror, literal("red"));
    let agent = n.start_agent();
    agent.wait_ready();
    let socket = n.agent_socket();
    agent.wait_holds(&socket, "etcd-node1", &uid("etcd-node1"), |_| true);
    let sandbox = |name: &str, sandbox_uid: &str| {
        let mut pod = n.pod(name);
        pod.args = pod.args.replace(&uid(name), sandbox_uid);
        pod
    };

    for (path, extra) in
        [("agent", json!({"networkStatus": "always"})), ("api", json!({"agentSocket": "", "networkStatus": "always"}))]
    {
        let conf = n.selector_conf("1.0.0", extra);
        let pod = sandbox("etcd-node1", "static-hash-1");
        let patches = n.api.patches().len();
        let reply = add(&n, &pod, &conf);
        assert_eq!(selection(&reply), path);
        assert!(on(&pod, RED), "{path}: {:?}", pod_addresses(&pod));
        // The status goes on the mirror pod, guarded by the mirror's own uid.
        agent.wait_for("the network-status annotation", || n.api.patches().len() > patches);
        let patch = n.api.patches().pop().unwrap().2;
        assert_eq!(patch["metadata"]["uid"], uid("etcd-node1"), "{path}");
        let status: serde_json::Value = serde_json::from_str(
            patch["metadata"]["annotations"][yh_genie::programs::selector::NETWORK_STATUS].as_str().unwrap(),
        )
        .unwrap();
        assert_eq!(status[0]["interface"], "eth0", "{path}: {status}");
        n.call("DEL", &pod, &conf).ok();
        n.assert_nothing_left(&pod, path);

        // A sandbox of another uid is still another pod's: refused on both paths, both uids named.
        let other = sandbox("etcd-node1", "static-hash-2");
        let reply = n.call("ADD", &other, &conf);
        let e = reply.err();
        assert_eq!(e["code"], 103, "{path}: {e}");
        let msg = e["msg"].as_str().unwrap();
        assert!(
            msg.contains("static-hash-2") && msg.contains(&uid("etcd-node1")) && msg.contains("static-hash-1"),
            "{msg}"
        );
        if path == "agent" {
            assert!(selection(&reply).contains("api: "), "the agent's answer is not used: {reply:?}");
        }
        n.call("DEL", &other, &conf).ok();
        n.assert_nothing_left(&other, path);
    }
    drop(agent);
}

#[test]
fn without_streaming_lists_the_agent_falls_back_to_lists_with_one_watch_per_namespace() {
    let n = node();
    // Kubernetes 1.33's default: the WatchList gate off, sendInitialEvents refused with 422.
    n.api.refuse_streaming_lists();
    n.api.put_config_map("default", "nets", json!({"k": "blue"}));
    for nad in ["red", "unused"] {
        n.api.put_nad("default", nad, None);
    }
    let networks = json!({ yh_genie::programs::selector::requests::annotation::NETWORKS: "red" });
    n.api.put_annotated_pod("default", "web-0", networks.clone(), from_config_map("nets", "k"));
    let agent = n.start_agent();
    agent.wait_ready();
    let socket = n.agent_socket();
    agent.wait_holds(&socket, "web-0", &uid("web-0"), |o| o.network_attachments.len() == 1);
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("web-0");
    let before = n.api.plugin_requests();
    let reply = add(&n, &pod, &conf);
    assert_eq!((selection(&reply).as_str(), n.api.plugin_requests() - before), ("agent", 0));
    assert!(addresses_on(&pod, "net1")[0].starts_with("10.77.32."), "red through its NAD");
    n.call("DEL", &pod, &conf).ok();

    // One refused streaming list, then lists from the watch cache: one per watch, the namespace's
    // two NADs in one. The pods first (they name the namespaces); the namespace's two watches start
    // together, in either order.
    let calls: Vec<_> = n.api.calls().into_iter().filter(|c| c.client == "agent").collect();
    let streaming: Vec<&str> = calls.iter().filter(|c| c.streaming_list).map(|c| c.resource).collect();
    assert_eq!(streaming, ["pods"], "{calls:#?}");
    let mut lists: Vec<(&str, Option<&str>)> =
        calls.iter().filter(|c| c.verb == "list").map(|c| (c.resource, c.resource_version.as_deref())).collect();
    lists.get_mut(1..).map(<[_]>::sort);
    assert_eq!(
        lists,
        [("pods", Some("0")), ("configmaps", Some("0")), ("network-attachment-definitions", Some("0"))],
        "{calls:#?}"
    );
    assert_eq!(agent.metric("yh_genie_agent_watches{resource=\"network-attachment-definitions\"}"), 1);
    assert_eq!(agent.metric("yh_genie_agent_objects{resource=\"network-attachment-definitions\"}"), 2);

    // A NAD of that namespace a new pod names is known at once; an edit of one reaches the agent.
    n.api.put_nad("default", "blue-side", Some("{\"cniVersion\":\"1.0.0\",\"name\":\"blue-side\",\"type\":\"x\"}"));
    agent.wait_for("the new NAD", || {
        agent.metric("yh_genie_agent_objects{resource=\"network-attachment-definitions\"}") == 3
    });
    let both = json!({ yh_genie::programs::selector::requests::annotation::NETWORKS: "red, unused" });
    n.api.put_annotated_pod("default", "web-1", both, from_config_map("nets", "k"));
    agent.wait_holds(&socket, "web-1", &uid("web-1"), |o| o.network_attachments.len() == 2);
    let watches_of = |resource: &str| calls_since(&n, &calls, resource);
    assert_eq!(watches_of("network-attachment-definitions"), 0, "no new watch for a NAD of a watched namespace");
    assert!(n.leftovers().is_empty(), "{:#?}", n.leftovers());
}

#[test]
fn the_agent_lists_at_once_when_the_api_server_does_not_serve_a_streaming_list() {
    // As an API server on an etcd without progress requests answers (Debian 12's etcd 3.4.23), and
    // the other answers a streaming list may get instead of its objects and their bookmark.
    let cases = [
        (StreamingList::ErrorEvent(500), "500"),
        (StreamingList::ErrorEvent(410), "410"),
        (StreamingList::Status { code: 500, retry_after: None }, "500"),
        (StreamingList::Status { code: 503, retry_after: Some(1) }, "503"),
        (StreamingList::EndBeforeBookmark, "ended"),
    ];
    for (answer, cause) in cases {
        let case = format!("{answer:?}");
        let n = node();
        n.api.answer_streaming_lists(answer);
        n.api.put_config_map("default", "nets", json!({"k": "blue"}));
        n.api.put_nad("default", "red", None);
        let networks = json!({ yh_genie::programs::selector::requests::annotation::NETWORKS: "red" });
        n.api.put_annotated_pod("default", "web-0", networks, from_config_map("nets", "k"));
        let agent = n.start_agent();
        // The old agent retried the streaming list with its backoff and never became ready.
        agent.wait_ready();
        let socket = n.agent_socket();
        agent.wait_holds(&socket, "web-0", &uid("web-0"), |o| o.network_attachments.len() == 1);
        let pod = n.pod("web-0");
        let before = n.api.plugin_requests();
        let reply = add(&n, &pod, &n.selector_conf("1.0.0", json!({})));
        assert_eq!((selection(&reply).as_str(), n.api.plugin_requests() - before), ("agent", 0), "{case}");
        assert!(on(&pod, BLUE) && addresses_on(&pod, "net1")[0].starts_with("10.77.32."), "{case}");

        // One streaming list (the pods'), then plain lists for every watch, the pods' included.
        let calls: Vec<_> = n.api.calls().into_iter().filter(|c| c.client == "agent").collect();
        let streaming: Vec<&str> = calls.iter().filter(|c| c.streaming_list).map(|c| c.resource).collect();
        assert_eq!(streaming, ["pods"], "{case}: {calls:#?}");
        // The pods' list first; the pod's ConfigMap and its namespace's NADs then, in either order.
        let mut lists: Vec<&str> = calls.iter().filter(|c| c.verb == "list").map(|c| c.resource).collect();
        assert_eq!(lists.first(), Some(&"pods"), "{case}: {calls:#?}");
        lists.get_mut(1..).map(<[_]>::sort);
        assert_eq!(lists, ["pods", "configmaps", "network-attachment-definitions"], "{case}: {calls:#?}");
        let refusals = format!("yh_genie_agent_streaming_list_refusals_total{{cause=\"{cause}\"}}");
        assert_eq!(agent.metric(&refusals), 1, "{case}");
        assert_eq!(agent.metric("yh_genie_agent_streaming_lists"), 0, "{case}");
        assert!(agent.logged().contains("did not serve a streaming list"), "{case}: {}", agent.logged());
        n.call("DEL", &pod, &n.selector_conf("1.0.0", json!({}))).ok();
        assert!(n.leftovers().is_empty(), "{case}: {:#?}", n.leftovers());
    }
}

#[test]
fn a_watch_that_keeps_failing_costs_only_the_pods_that_need_it() {
    // A namespace whose NADs RBAC does not let the agent read (403), and a cluster without the NAD
    // CRD (404).
    for (code, namespace) in [(403, Some("default")), (404, None)] {
        let n = node();
        n.api.deny("network-attachment-definitions", namespace, code);
        n.api.put_config_map("default", "nets", json!({"k": "blue"}));
        n.api.put_nad("default", "red", None);
        n.api.put_pod("default", "plain", from_config_map("nets", "k"));
        let networks = json!({ yh_genie::programs::selector::requests::annotation::NETWORKS: "red" });
        n.api.put_annotated_pod("default", "with-nad", networks, from_config_map("nets", "k"));
        let agent = n.start_agent();
        // Ready all the same: only the watch of the node's pods is readiness.
        agent.wait_ready();
        let failing =
            format!("yh_genie_agent_watches_failing{{resource=\"network-attachment-definitions\",code=\"{code}\"}}");
        agent.wait_for("the NAD watch to fail", || agent.metric(&failing) == 1);
        let (status, body) = agent.http_get("/readyz").unwrap();
        assert_eq!(status, 200, "{code}: {body}");
        assert!(
            body.contains(&format!("the watch of the NetworkAttachmentDefinitions of namespace default fails: {code}")),
            "{code}: {body}"
        );
        assert_eq!(agent.metric("yh_genie_agent_ready"), 1);

        // What the agent can answer, it answers.
        let conf = n.selector_conf("1.0.0", json!({}));
        let plain = n.pod("plain");
        let before = n.api.plugin_requests();
        let reply = add(&n, &plain, &conf);
        assert_eq!((selection(&reply).as_str(), n.api.plugin_requests() - before), ("agent", 0), "{code}");
        // The pod that needs the failing watch is told at once, and the plugin asks the API server,
        // which refuses it as it refused the agent: the error says so, and nothing is made.
        // Asked as the plugin asks (willing to wait a second), the agent answers without waiting:
        // the reason is the failing watch, not an object still to be listed.
        let socket = n.agent_socket();
        let ask = Ask::Selection {
            namespace: "default".into(),
            name: "with-nad".into(),
            uid: Some(uid("with-nad")),
            wait_ms: 1000,
        };
        let answered = exchange(&socket, &Request::new(ask), Instant::now() + Duration::from_secs(5));
        let Ok(Answer::Unknown { why }) = answered else { panic!("{code}: {answered:?}") };
        assert!(why.contains("NetworkAttachmentDefinitions of namespace default fails"), "{why}");
        assert_eq!(agent.metric("yh_genie_agent_unknown_total{reason=\"watch_failing\"}"), 1, "{code}");
        let with_nad = n.pod("with-nad");
        let reply = n.call("ADD", &with_nad, &conf);
        let e = reply.err();
        let msg = e["msg"].as_str().unwrap();
        assert!(msg.contains(&code.to_string()), "{code}: {e}");
        if code == 404 {
            assert!(
                msg.contains("does not serve that kind of object") && msg.contains("CustomResourceDefinition"),
                "{e}"
            );
        }
        assert!(selection(&reply).starts_with("api: "), "{code}: {reply:?}");
        assert_eq!(agent.metric("yh_genie_agent_unknown_total{reason=\"watch_failing\"}"), 2, "{code}");
        assert_eq!(agent.metric("yh_genie_agent_unknown_total{reason=\"object_not_listed\"}"), 0, "{code}");
        // The DEL a runtime sends after a failed ADD takes the attachment's lock file.
        n.call("DEL", &with_nad, &conf).ok();
        assert_gone(&n, &with_nad, "the refused pod");

        // Once the API server serves NADs again, the watch catches up and the agent answers.
        n.api.clear_denials();
        agent.wait_holds(&socket, "with-nad", &uid("with-nad"), |o| o.network_attachments.len() == 1);
        assert_eq!(agent.metric(&failing), 0, "{code}");
        let reply = add(&n, &with_nad, &conf);
        assert_eq!(selection(&reply), "agent", "{code}");
        assert!(addresses_on(&with_nad, "net1")[0].starts_with("10.77.32."), "{code}");
        for pod in [&plain, &with_nad] {
            n.call("DEL", pod, &conf).ok();
        }
        assert!(n.leftovers().is_empty(), "{code}: {:#?}", n.leftovers());
    }
}

/// Requests of the agent for `resource` after `before` were made.
fn calls_since(n: &NetnsNode, before: &[Call], resource: &str) -> usize {
    let now: Vec<_> = n.api.calls().into_iter().filter(|c| c.client == "agent").collect();
    now[before.len()..].iter().filter(|c| c.resource == resource).count()
}

#[test]
fn the_agents_metrics_port_reports_operation_counts_with_readiness() {
    let n = node();
    n.api.put_config_map("default", "nets", json!({"k": "blue"}));
    for name in ["a", "b"] {
        n.api.put_pod("default", name, from_config_map("nets", "k"));
    }
    // A network whose plugin fails, and a pod that chooses a network the node does not have.
    FakePlugin::new().on("ADD", [Step::Fail(11, "the device is busy".into())]).write(&n.sb.bin().join("failing"));
    n.write_conf(
        "broken/10-broken.conflist",
        &json!({"cniVersion": "1.0.0", "name": "broken", "plugins": [{"type": "failing"}]}),
    );
    n.api.put_pod("default", "broken", literal("broken"));
    n.api.put_pod("default", "stray", literal("nosuch"));
    // And one whose ConfigMap does not exist.
    n.api.put_pod("default", "lost", from_config_map("gone", "k"));

    // The installer waits for the default network's file: the agent is not ready meanwhile.
    let subnet = n.sb.path().join("default-network.env");
    let wait_for = format!("--wait-for={}", subnet.display());
    let agent = Agent::start(&n.netns, &n.api, n.sb.path(), &n.agent_socket(), METRICS_PORT, &[wait_for.as_str()]);
    agent.wait_for("the agent's port", || agent.http_get("/healthz").is_some());
    agent.wait_for("the pods listed", || {
        agent.metric("yh_genie_agent_watches{resource=\"configmaps\"}") == 2
            && agent.metric("yh_genie_agent_cache_synced{resource=\"configmaps\"}") == 1
            && agent.metric("yh_genie_agent_pods") == 5
    });
    // (Once the installer's first pass has found the file missing.)
    let waiting = format!("the default network is not ready: the installer waits for {}", subnet.display());
    agent.wait_for("the installer to wait", || {
        agent.http_get("/readyz").is_some_and(|(_, body)| body.contains(&waiting))
    });
    assert_eq!(agent.http_get("/readyz").unwrap().0, 503);
    assert_eq!(agent.metric("yh_genie_agent_default_network_ready"), 0);
    assert_eq!(agent.metric("yh_genie_agent_ready"), 0);
    std::fs::write(&subnet, "FLANNEL_SUBNET=10.77.31.1/24\n").unwrap();
    agent.wait_ready();
    assert_eq!(agent.metric("yh_genie_agent_ready"), 1);
    for resource in ["pods", "configmaps", "network-attachment-definitions"] {
        assert_eq!(agent.metric(&format!("yh_genie_agent_cache_synced{{resource=\"{resource}\"}}")), 1, "{resource}");
        assert!(agent.metric(&format!("yh_genie_agent_cache_age_seconds{{resource=\"{resource}\"}}")) < 60);
    }

    let conf = n.selector_conf("1.0.0", json!({}));
    let before = n.api.plugin_requests();
    let pods: Vec<Pod> = ["a", "b"].iter().map(|name| n.pod(name)).collect();
    for pod in &pods {
        agent.wait_holds(&n.agent_socket(), &pod.name, &uid(&pod.name), |_| true);
        add(&n, pod, &conf);
        n.call("CHECK", pod, &conf).ok();
    }
    let broken = n.pod("broken");
    agent.wait_holds(&n.agent_socket(), "broken", &uid("broken"), |_| true);
    assert_eq!(n.call("ADD", &broken, &conf).err()["code"], 11, "the plugin's own error");
    // Refused from the agent's objects: final, the API server is not asked.
    let stray = n.pod("stray");
    agent.wait_holds(&n.agent_socket(), "stray", &uid("stray"), |_| true);
    let refused = n.call("ADD", &stray, &conf).err();
    assert!(refused["msg"].as_str().unwrap().contains("nosuch"), "{refused}");
    assert_eq!(n.api.plugin_requests(), before, "a refusal from the agent's objects asks the API server nothing");
    // An absent object is confirmed with the API server (a pod and its ConfigMap made together may
    // reach the agent's watches in either order).
    let lost = n.pod("lost");
    agent.wait_holds(&n.agent_socket(), "lost", &uid("lost"), |_| true);
    let refused = n.call("ADD", &lost, &conf).err();
    assert!(refused["msg"].as_str().unwrap().contains("ConfigMap default/gone not found"), "{refused}");
    for pod in pods.iter().chain([&broken, &stray, &lost]) {
        n.call("DEL", pod, &conf).ok();
    }
    let plugin_requests = n.api.plugin_requests() - before;
    assert_eq!(
        plugin_requests, 2,
        "the lost pod's absent ConfigMap is confirmed with the API server: GET pod, GET ConfigMap"
    );

    // What an operator reads: every operation by command, network and outcome, failures by reason,
    // the plugin's API requests (the fake server's own count), where ADD's selections came from.
    let count = |command: &str, network: &str, outcome: &str| {
        agent.metric(&format!(
            "yh_genie_cni_operation_duration_seconds_count{{command=\"{command}\",network=\"{network}\",outcome=\"{outcome}\"}}"
        ))
    };
    agent.wait_for("the plugin's reports", || count("DEL", "blue", "success") == 2);
    assert_eq!(count("ADD", "blue", "success"), 2);
    assert_eq!(count("CHECK", "blue", "success"), 2);
    assert_eq!(count("ADD", "broken", "error"), 1);
    assert_eq!(
        agent.metric("yh_genie_cni_operation_errors_total{command=\"ADD\",network=\"broken\",reason=\"plugin\"}"),
        1
    );
    assert_eq!(agent.metric("yh_genie_cni_operation_errors_total{command=\"ADD\",network=\"\",reason=\"policy\"}"), 1);
    assert_eq!(
        agent.metric("yh_genie_cni_operation_errors_total{command=\"ADD\",network=\"\",reason=\"api_refused\"}"),
        1
    );
    assert_eq!(agent.metric("yh_genie_cni_api_requests_total{command=\"ADD\"}"), plugin_requests as u64);
    assert_eq!(agent.metric("yh_genie_cni_api_requests_total{command=\"DEL\"}"), 0);
    assert_eq!(agent.metric("yh_genie_cni_add_selections_total{source=\"agent\"}"), 4);
    assert_eq!(agent.metric("yh_genie_cni_add_selections_total{source=\"api\"}"), 1);
    let (_, text) = agent.http_get("/metrics").unwrap();
    let le = |bound: &str| {
        agent.metric(&format!(
            "yh_genie_cni_operation_duration_seconds_bucket{{command=\"ADD\",network=\"blue\",outcome=\"success\",le=\"{bound}\"}}"
        ))
    };
    assert_eq!(le("+Inf"), 2, "{text}");
    assert!(le("0.0025") <= le("1") && le("1") <= le("+Inf"), "{text}");
    assert!(!text.contains("pod=") && !text.contains("web-"), "no pod in a label: {text}");
    n.assert_nothing_left(&pods[0], "metrics");
}
