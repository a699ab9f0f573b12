//! DEL as containerd sends it, as root: once when it stops the sandbox, then again (four times were
//! seen on a real node) with an empty `CNI_NETNS` each time it stops or removes it later. A DEL
//! after a completed DEL finds its tombstone and costs nothing; a DEL that finds no record never
//! waits on the API server. The network is `yonghui` -> `yh-bridge`, through the selector; the fake
//! API server counts the plugin's requests (its token) apart from the agent's.

use crate::support::agent::AgentAnswers;
use crate::support::driver::Reply;
use crate::support::node::{NetnsNode, Pod, pod_addresses};
use serde_json::json;
use std::io::Write;
use testkit::apiserver::{Fault, from_config_map};

const RED: (&str, u8) = ("red", 41);

fn node() -> NetnsNode {
    let n = NetnsNode::new();
    n.add_yonghui_network(RED.0, RED.1, json!({}));
    n.api.put_config_map("default", "net", json!({"k": RED.0}));
    n.api.put_pod("default", "web-0", from_config_map("net", "k"));
    n
}

fn add(n: &NetnsNode, pod: &Pod, conf: &str) {
    let reply = n.call("ADD", pod, conf);
    assert_eq!(reply.code, 0, "ADD failed: {reply:?}");
    let addresses = pod_addresses(pod);
    assert!(addresses.len() == 1 && addresses[0].starts_with(&format!("10.77.{}.", RED.1)), "{addresses:?}");
}

/// A DEL with `extra` environment; `CNI_NETNS` empty as containerd's repeated DELs have it.
fn del_with(n: &NetnsNode, pod: &Pod, conf: &str, extra: &[(&str, &str)]) -> Reply {
    let mut child = n.command("DEL", pod, extra).spawn().expect("plugin starts");
    child.stdin.take().unwrap().write_all(conf.as_bytes()).unwrap();
    Reply::from(child.wait_with_output().unwrap())
}

fn del_without_netns(n: &NetnsNode, pod: &Pod, conf: &str) {
    del_with(n, pod, conf, &[("CNI_NETNS", "")]).ok();
}

fn record_path(n: &NetnsNode, pod: &Pod) -> std::path::PathBuf {
    n.data_dir().join("attachments").join(format!("{}:eth0", pod.cid))
}

#[test]
fn dels_after_a_completed_del_make_no_api_request() {
    let n = node();
    let conf = n.selector_conf("1.0.0", json!({"agentSocket": ""}));
    let pod = n.pod("web-0");
    add(&n, &pod, &conf);
    let after_add = n.api.plugin_requests();
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "DEL");
    assert_eq!(n.tombstones(), [format!("{}:eth0", pod.cid)], "the completed DEL's tombstone");
    for _ in 0..4 {
        del_without_netns(&n, &pod, &conf);
    }
    assert_eq!(n.api.plugin_requests(), after_add, "DEL and containerd's four repeated DELs make no API request");
    n.assert_nothing_left(&pod, "repeated DELs");

    // An ADD of the same sandbox and interface again takes the tombstone away; its DEL leaves it again.
    add(&n, &pod, &conf);
    assert!(n.tombstones().is_empty(), "{:?}", n.tombstones());
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "DEL after the ADD again");
    assert_eq!(n.tombstones().len(), 1);
}

#[test]
fn with_the_agent_a_pod_lifecycle_makes_no_api_request_at_all() {
    let n = node();
    let agent = n.start_agent();
    agent.wait_holds(&n.agent_socket(), "web-0", "uid-default-web-0", |_| true);
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod("web-0");
    add(&n, &pod, &conf);
    n.call("DEL", &pod, &conf).ok();
    for _ in 0..4 {
        del_without_netns(&n, &pod, &conf);
    }
    n.assert_nothing_left(&pod, "DEL and four repeated DELs");
    assert_eq!(n.api.plugin_requests(), 0, "ADD, DEL and the repeated DELs: {:#?}", n.api.calls());

    // A lost record (no record, no tombstone): the agent still holds the pod and says which network
    // it has, and DEL frees its address there, with no API request either.
    let pod = n.pod("web-0");
    add(&n, &pod, &conf);
    std::fs::remove_file(record_path(&n, &pod)).unwrap();
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "DEL without a record, through the agent");
    assert_eq!(n.api.plugin_requests(), 0);
}

#[test]
fn del_without_a_record_never_waits_on_the_api_server() {
    let n = node();
    let conf = n.selector_conf("1.0.0", json!({"agentSocket": ""}));

    // Records removed and no tombstone (as a DEL of the release before tombstones leaves it, or a
    // power loss that took the tombstone): with the API server stalled, DEL succeeds at once (one
    // attempt would take apiAttemptTimeoutSeconds, 5 s), asking nothing.
    let pod = n.pod("web-0");
    add(&n, &pod, &conf);
    let record = record_path(&n, &pod);
    let kept = std::fs::read(&record).unwrap();
    std::fs::remove_file(&record).unwrap();
    n.api.inject_always(Fault::Hang);
    let before = n.api.plugin_requests();
    let started = std::time::Instant::now();
    del_without_netns(&n, &pod, &conf);
    let took = started.elapsed();
    assert_eq!(n.api.plugin_requests(), before, "no request for a DEL without a record");
    assert_eq!(n.tombstones(), [format!("{}:eth0", pod.cid)]);
    testkit::process::report(&format!("repeated_del: DEL without a record, API server hanging: {took:?}"));
    // The record back: a record counts before any tombstone, and its DEL frees the address.
    std::fs::write(&record, kept).unwrap();
    n.call("DEL", &pod, &conf).ok();
    n.assert_nothing_left(&pod, "DEL of the record found again");

    // A sandbox never attached (its ADD failed before any record), the API server down: the same.
    n.api.down();
    let never = n.pod("web-0");
    del_without_netns(&n, &never, &conf);
    n.call("DEL", &never, &conf).ok();
    assert_eq!(n.api.plugin_requests(), before);
    n.api.up();
    n.api.clear_faults();

    // A torn record: something was made, and only the pod can say what. The API server is asked
    // once (pod, ConfigMap), and the address freed.
    let pod = n.pod("web-0");
    add(&n, &pod, &conf);
    std::fs::write(record_path(&n, &pod), "{torn").unwrap();
    let before = n.api.plugin_requests();
    n.call("DEL", &pod, &conf).ok();
    assert_eq!(n.api.plugin_requests() - before, 2, "pod and ConfigMap, once each");
    n.assert_nothing_left(&pod, "DEL with a torn record");
}

#[test]
fn a_del_killed_after_its_tombstone_is_completed_by_the_next() {
    let n = node();
    let conf = n.selector_conf("1.0.0", json!({"agentSocket": ""}));
    let pod = n.pod("web-0");
    add(&n, &pod, &conf);
    let killed = del_with(&n, &pod, &conf, &[("YH_GENIE_CRASH_AT", "selector.del.tombstoned")]);
    assert_ne!(killed.code, 0, "{killed:?}");
    assert!(record_path(&n, &pod).exists(), "killed before the records went");
    assert_eq!(n.tombstones(), [format!("{}:eth0", pod.cid)]);
    let before = n.api.plugin_requests();
    del_without_netns(&n, &pod, &conf);
    n.assert_nothing_left(&pod, "the next DEL, from the records");
    assert_eq!(n.api.plugin_requests(), before);
}
