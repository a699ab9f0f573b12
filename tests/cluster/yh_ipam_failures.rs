//! yh-ipam (docs/ipam.md) when something fails on the real cluster: a node agent killed while a
//! burst of pods asks it for addresses, and a node gone for good whose blocks the elected
//! releaser gives back. Checked as a user checks it: the pods' addresses (their network-status
//! annotation and their netns), the `IPBlock`s, the agents' records on the nodes' disks.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use testkit::cluster::Cluster;
use testkit::cluster::cni::condition;
use testkit::cluster::pods::{in_cidr, sleeper};
use testkit::process::report;

use crate::test_namespace::TestNamespace;

const NS: &str = "yh-ipam-burst";
const POOL: &str = "e2e-burst";
/// Pool `e2e-burst`: 10.245.2.2-.126 (.1 the gateway) in blocks of four.
const BURST_LAN: &str = "10.245.2.0/24";
const FIRST: Ipv4Addr = Ipv4Addr::new(10, 245, 2, 2);
const LAST: Ipv4Addr = Ipv4Addr::new(10, 245, 2, 126);
/// Pods of the burst on each node.
const PER_NODE: usize = 12;
/// The node whose agent is killed.
const KILLED: &str = "node-a";
const NODES: [(&str, &str); 2] = [("node-a", "a"), ("node-b", "b")];
/// The agents' records of the pool, on each node's disk.
const RECORDS: &str = "/var/lib/cni/yh-genie/ipam/e2e-burst";

/// `name` on the node of `slot`, with a macvlan network whose IPAM is the pool.
fn burst_pod(name: &str, slot: &str) -> String {
    sleeper(NS, name).on_slot(slot).annotation("k8s.v1.cni.cncf.io/networks", "burst-lan").yaml()
}

/// The pool's `IPBlock`s: CIDR to node.
fn pool_blocks(cluster: &Cluster, pool: &str) -> BTreeMap<String, String> {
    let list = cluster.get_json(&["get", "ipblocks.ipam.yh-genie.io"]);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["spec"]["pool"] == pool)
        .map(|b| (text(&b["spec"]["cidr"]), text(&b["spec"]["node"])))
        .collect()
}

/// Every file in the pool's record directory on `node` (none when it is absent): its records, and
/// the temp files of writes in progress or cut short by a kill.
fn files_in_records(cluster: &Cluster, node: &str) -> Vec<std::path::PathBuf> {
    match std::fs::read_dir(cluster.worker(node).node_path(RECORDS)) {
        Ok(dir) => dir.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    }
}

/// The pool's records on `node`, as the agent reads them back: `<name>.json`, not the temp files
/// (`.<name>.json.tmp-<pid>-<nonce>`) of writes.
fn record_files(cluster: &Cluster, node: &str) -> Vec<std::path::PathBuf> {
    let is_record = |path: &std::path::Path| {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        !name.starts_with('.') && name.ends_with(".json")
    };
    files_in_records(cluster, node).into_iter().filter(|path| is_record(path)).collect()
}

/// The addresses the agent of `node` has on record: pod uid to its addresses (each file read as
/// the agent writes it: the pool, the owner, the addresses with their blocks).
fn recorded(cluster: &Cluster, node: &str) -> BTreeMap<String, Vec<String>> {
    let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for path in record_files(cluster, node) {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let record: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{node}: {} does not parse: {e}", path.display()));
        let uid = record["owner"]["uid"].as_str().unwrap_or_default().to_string();
        let addresses = record["addresses"].as_array().into_iter().flatten();
        held.entry(uid).or_default().extend(addresses.map(|a| a["address"].as_str().unwrap_or_default().to_string()));
    }
    held
}

/// The DaemonSet's pod on `node`: its name, the install container's id (without the runtime's
/// prefix) and restart count.
fn yh_genie_pod(cluster: &Cluster, node: &str) -> (String, String, u64) {
    let selector = format!("spec.nodeName={node}");
    let list = cluster.get_json(&[
        "-n",
        "kube-system",
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=yh-genie",
        "--field-selector",
        &selector,
    ]);
    let pod = &list["items"][0];
    let status = &pod["status"]["containerStatuses"][0];
    let id = status["containerID"].as_str().unwrap_or_default();
    let id = id.split_once("://").map_or(id, |(_, id)| id).to_string();
    (pod["metadata"]["name"].as_str().unwrap_or_default().to_string(), id, status["restartCount"].as_u64().unwrap_or(0))
}

/// What the usable addresses of the block `cidr` are: those of the pool's range.
fn usable(cidr: &str) -> Vec<String> {
    let (network, bits) = cidr.split_once('/').expect("a CIDR");
    let network = u32::from(network.parse::<Ipv4Addr>().unwrap());
    let size = 1u32 << (32 - bits.parse::<u32>().unwrap());
    (network..network + size)
        .filter(|n| (u32::from(FIRST)..=u32::from(LAST)).contains(n))
        .map(|n| Ipv4Addr::from(n).to_string())
        .collect()
}

/// Each pod's one address on net1, in its netns and in its network-status annotation (which must
/// agree): pod to (uid, address).
fn pod_addresses(cluster: &Cluster, pods: &[(String, &str)]) -> BTreeMap<String, (String, String)> {
    let mut found = BTreeMap::new();
    for (name, _) in pods {
        let object = cluster.wait_pod_ready(NS, name);
        let uid = object["metadata"]["uid"].as_str().unwrap_or_default().to_string();
        let net1 = cluster.pod_addresses(NS, name, "net1");
        assert!(
            net1.len() == 1 && in_cidr(&net1[0], BURST_LAN),
            "{name}: net1 holds {net1:?}, want one address in {BURST_LAN}"
        );
        let listed = cluster.network_status(NS, name, Some(&uid));
        let said: Vec<&String> = listed.iter().filter(|(interface, _)| interface == "net1").map(|(_, a)| a).collect();
        assert_eq!(said, vec![&net1[0]], "{name}: its network-status {listed:?}, its net1 {net1:?}");
        found.insert(name.clone(), (uid, net1[0].clone()));
    }
    found
}

/// Every address given once; each from a block its pod's node holds.
fn assert_distinct_and_from_own_blocks(
    pods: &[(String, &str)],
    found: &BTreeMap<String, (String, String)>,
    blocks: &BTreeMap<String, String>,
) {
    let mut holders: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (name, (_, address)) in found {
        holders.entry(address).or_default().push(name);
    }
    let twice: Vec<_> = holders.iter().filter(|(_, pods)| pods.len() > 1).collect();
    assert!(twice.is_empty(), "addresses held by two pods: {twice:?}");
    for (name, slot) in pods {
        let node = format!("node-{slot}");
        let address = &found[name].1;
        let block = blocks.iter().find(|(cidr, _)| in_cidr(address, cidr));
        assert!(
            block.is_some_and(|(_, holder)| *holder == node),
            "{name} on {node} got {address}, from block {block:?}; blocks: {blocks:?}"
        );
    }
}

/// A burst of pods on both nodes asks for yh-ipam addresses, and node-a's agent is killed
/// (SIGKILL of the DaemonSet's container) while it hands them out; the kubelet starts it again.
/// Every pod ends up Running with one address, in its netns and its network-status, from a block
/// of its own node; no address twice; each agent's records hold exactly its node's pods'
/// addresses; every block of the pool is a live node's. Once the pods are deleted no record (nor a
/// write of one the kill cut short) is left on either node, and new pods take every address of the nodes' blocks again without a new
/// block claimed: nothing leaked.
pub fn yh_ipam_loses_and_duplicates_nothing_when_an_agent_is_killed_mid_burst(cluster: &mut Cluster) {
    let namespace = TestNamespace::new(cluster, NS, |settings| {
        settings["allowInlineConfig"] = json!(true);
        settings["inlinePluginTypes"] = json!(["macvlan", "yh-ipam"]);
        // Its NADs define their pools inline (ranges), which the policy must open.
        settings["inlineYhIpamRanges"] = json!(true);
    });
    let ipam = json!({"type": "yh-ipam", "pool": POOL, "blockSize": 4,
                      "ranges": [[{"subnet": BURST_LAN, "rangeEnd": LAST.to_string()}]]});
    let config = json!({"cniVersion": "1.0.0", "type": "macvlan", "master": "ul0", "mode": "bridge", "ipam": ipam});
    cluster.apply_text(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: burst-lan, namespace: {NS}}}\nspec:\n  config: '{config}'\n"
    ));
    let (agent_pod, container, restarts) = yh_genie_pod(cluster, KILLED);

    let pods: Vec<(String, &str)> =
        (0..PER_NODE).flat_map(|i| NODES.iter().map(move |(_, slot)| (format!("burst-{slot}{i}"), *slot))).collect();
    let manifests: Vec<String> = pods.iter().map(|(name, slot)| burst_pod(name, slot)).collect();
    let started = Instant::now();
    cluster.apply_text(&manifests.join("---\n"));
    // Killed once it has recorded its node's first address: the rest of its node's ADDs are on
    // their way or waiting for it.
    // Polled often: a poll late by the harness's usual quarter second could miss the burst.
    let at_kill = loop {
        let records = record_files(cluster, KILLED).len();
        if records >= 1 {
            break records;
        }
        assert!(
            started.elapsed() < testkit::cluster::PATIENCE,
            "{KILLED}'s agent recorded {records} addresses of the burst\n{}",
            cluster.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    cluster.worker(KILLED).ctr(&["tasks", "kill", "--signal", "SIGKILL", &container]);
    let killed_after = started.elapsed();
    cluster.wait_for_within(Duration::from_secs(180), &format!("{agent_pod} started again and Ready"), || {
        let pod = cluster.get_json(&["-n", "kube-system", "get", "pod", &agent_pod]);
        let restarted = pod["status"]["containerStatuses"][0]["restartCount"].as_u64().unwrap_or(0) > restarts;
        (restarted && condition(&pod, "Ready")).then_some(())
    });
    let agent_back = started.elapsed();

    let found = pod_addresses(cluster, &pods);
    let all_ready = started.elapsed();
    let blocks = pool_blocks(cluster, POOL);
    assert_distinct_and_from_own_blocks(&pods, &found, &blocks);
    assert!(
        blocks.values().all(|node| NODES.iter().any(|(n, _)| n == node)),
        "a block of the pool held by a node that is not the cluster's: {blocks:?}"
    );
    // Each agent's records: exactly its pods' addresses, no address of a sandbox that failed while
    // the agent was down left held (its DEL may come late, as the runtime retries it).
    for (node, slot) in NODES {
        let want: BTreeMap<String, Vec<String>> = pods
            .iter()
            .filter(|(_, s)| *s == slot)
            .map(|(name, _)| (found[name].0.clone(), vec![found[name].1.clone()]))
            .collect();
        let mut last = BTreeMap::new();
        let settled = Instant::now();
        while settled.elapsed() < Duration::from_secs(180) {
            last = recorded(cluster, node);
            if last == want {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        assert_eq!(last, want, "{node}'s records of pool {POOL} (uid to addresses), and its pods' addresses");
    }
    report(&format!(
        "cluster: yh-ipam's burst of {} pods: {KILLED}'s agent SIGKILLed at {killed_after:.1?} with {at_kill} of its {PER_NODE} \
         pods' addresses recorded, back at {agent_back:.1?}, every pod Ready at {all_ready:.1?}; blocks {blocks:?}",
        pods.len()
    ));

    cluster.kubectl_ok(&["-n", NS, "delete", "pods", "--all", "--wait=true", "--timeout=180s"]);
    let deleted = Instant::now();
    // Nor a temp file: a write the kill cut short is removed by the agent's next start.
    for (node, _) in NODES {
        let what = format!("no record of pool {POOL} left on {node}, nor a write of one");
        cluster.wait_for_within(Duration::from_secs(180), &what, || {
            files_in_records(cluster, node).is_empty().then_some(())
        });
    }
    let emptied = deleted.elapsed();

    // Every address of each node's blocks handed out again, with no block claimed: none leaked.
    let mut again: Vec<(String, &str)> = Vec::new();
    let mut want: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (node, slot) in NODES {
        let addresses: BTreeSet<String> =
            blocks.iter().filter(|(_, holder)| *holder == node).flat_map(|(cidr, _)| usable(cidr)).collect();
        again.extend((0..addresses.len()).map(|i| (format!("again-{slot}{i}"), slot)));
        want.insert(slot, addresses);
    }
    let manifests: Vec<String> = again.iter().map(|(name, slot)| burst_pod(name, slot)).collect();
    cluster.apply_text(&manifests.join("---\n"));
    let refound = pod_addresses(cluster, &again);
    assert_distinct_and_from_own_blocks(&again, &refound, &blocks);
    for (slot, addresses) in &want {
        let got: BTreeSet<String> =
            again.iter().filter(|(_, s)| s == slot).map(|(name, _)| refound[name].1.clone()).collect();
        assert_eq!(&got, addresses, "node-{slot}: its new pods' addresses, and every address of its blocks");
    }
    assert_eq!(pool_blocks(cluster, POOL), blocks, "a block claimed again: an address of the nodes' blocks was lost");
    report(&format!(
        "cluster: yh-ipam's records empty on both nodes {emptied:.1?} after the pods' deletion; {} new pods took every \
         address of the {} blocks again",
        again.len(),
        blocks.len()
    ));

    namespace.delete();
    for (node, _) in NODES {
        cluster.wait_for_within(Duration::from_secs(180), &format!("no record of pool {POOL} left on {node}"), || {
            record_files(cluster, node).is_empty().then_some(())
        });
    }
}

/// A node that never was, as the releaser sees a node gone for good: no Node object.
const GONE: &str = "node-gone";
/// A node without a Node object either, whose agent goes on renewing its lease.
const RENEWING: &str = "node-renewing";
const GONE_BLOCK: &str = "10.245.3.0/30";
const RENEWING_BLOCK: &str = "10.245.3.4/30";

/// A node's `IPBlock` and its Lease `yh-ipam-<node>` in kube-system, last renewed `renewed_ago`,
/// as an agent writes them.
fn node_with_block(cluster: &Cluster, node: &str, block: &str, renewed_ago: Duration, duration_seconds: u64) {
    let name = block.replace('/', "-");
    cluster.apply_text(&format!(
        "apiVersion: ipam.yh-genie.io/v1alpha1\nkind: IPBlock\nmetadata: {{name: {name}}}\nspec: {{cidr: {block}, pool: e2e-gone, node: {node}}}\n"
    ));
    let renewed = std::time::SystemTime::now() - renewed_ago;
    let renewed = k8s_openapi::jiff::Timestamp::try_from(renewed).unwrap();
    // A MicroTime: six digits of the second, in UTC.
    let renewed = renewed.strftime("%Y-%m-%dT%H:%M:%S.000000Z").to_string();
    cluster.apply_text(&format!(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: yh-ipam-{node}, namespace: kube-system}}\n\
         spec: {{holderIdentity: {node}, leaseDurationSeconds: {duration_seconds}, acquireTime: '{renewed}', renewTime: '{renewed}'}}\n"
    ));
}

/// The dead-node releaser (one of the two agents, elected) on a real API server: the block of a
/// node without a Node object whose lease ran out an hour ago is deleted, its log line on the
/// releaser; the block of a node without a Node object whose lease is fresh, judged in the same
/// round, is kept. The releaser's deletion (preconditions: the uid and resourceVersion it listed)
/// of a block claimed again under its name, or confirmed by its node since, is answered 409 and
/// the block stays; of the block as listed, it succeeds.
pub fn yh_ipam_releases_a_gone_nodes_blocks_and_keeps_a_renewing_ones(cluster: &mut Cluster) {
    // Both agents take part once their nodes hand out yh-ipam addresses, as the tests before did.
    let releaser = cluster.wait_for("the yh-ipam releaser elected", || {
        let (ok, out, _) = cluster.kubectl(&[
            "-n",
            "kube-system",
            "get",
            "lease",
            "yh-ipam-releaser",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ]);
        (ok && !out.trim().is_empty()).then(|| out.trim().to_string())
    });
    node_with_block(cluster, GONE, GONE_BLOCK, Duration::from_secs(3600), 60);
    node_with_block(cluster, RENEWING, RENEWING_BLOCK, Duration::ZERO, 3600);
    let created = Instant::now();
    // Once per lease duration (60 s) the releaser looks; a round may have begun just before.
    cluster.wait_for_within(Duration::from_secs(200), &format!("{GONE}'s block {GONE_BLOCK} released"), || {
        (!pool_blocks(cluster, "e2e-gone").contains_key(GONE_BLOCK)).then_some(())
    });
    let released = created.elapsed();
    assert_eq!(
        pool_blocks(cluster, "e2e-gone"),
        BTreeMap::from([(RENEWING_BLOCK.to_string(), RENEWING.to_string())]),
        "{RENEWING}'s block, judged in the round that released {GONE}'s"
    );
    let (pod, _, _) = yh_genie_pod(cluster, &releaser);
    let log = cluster.kubectl_ok(&["-n", "kube-system", "logs", &pod, "--tail=-1"]);
    let line = log.lines().find(|l| l.contains(&format!("node {GONE} is gone")));
    let line = line.unwrap_or_else(|| panic!("no release logged by the releaser on {releaser}:\n{log}"));
    assert!(
        line.contains("(its Node object is deleted)") && line.contains("10.245.3.0-30") && !line.contains(RENEWING),
        "{line}"
    );
    report(&format!(
        "cluster: the releaser on {releaser} released {GONE}'s block {released:.1?} after it was made: {line}"
    ));

    // The releaser's deletion, a DELETE with the uid and resourceVersion it listed, made for a block
    // that changed since: claimed again under its name (a new uid), and written by its node's
    // agent (the confirmation, a new resourceVersion). The real API server answers 409 and keeps it.
    let name = RENEWING_BLOCK.replace('/', "-");
    let listed = |cluster: &Cluster| {
        let block = cluster.get_json(&["get", "ipblocks.ipam.yh-genie.io", &name]);
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        (text(&block["metadata"]["uid"]), text(&block["metadata"]["resourceVersion"]))
    };
    let (uid, version) = listed(cluster);
    cluster.kubectl_ok(&["delete", "ipblocks.ipam.yh-genie.io", &name]);
    node_with_block(cluster, RENEWING, RENEWING_BLOCK, Duration::ZERO, 3600);
    assert_conflict(cluster, &name, &uid, &version, "claimed again");
    let (uid, version) = listed(cluster);
    cluster.kubectl_ok(&["annotate", "ipblocks.ipam.yh-genie.io", &name, "ipam.yh-genie.io/confirmed=now"]);
    assert_conflict(cluster, &name, &uid, &version, "confirmed by its node");
    let (uid, version) = listed(cluster);
    let (ok, out, err) = delete_listed(cluster, &name, &uid, &version);
    assert!(ok, "the block as listed is not deleted: {err}{out}");

    for node in [GONE, RENEWING] {
        cluster.kubectl_ok(&["-n", "kube-system", "delete", "lease", &format!("yh-ipam-{node}")]);
    }
}

/// DELETE of the `IPBlock` `name` with the releaser's preconditions (`uid`, `version`), as kube's
/// `DeleteParams` send them: kubectl's success, stdout and stderr (`-v=6`: each response's status).
fn delete_listed(cluster: &Cluster, name: &str, uid: &str, version: &str) -> (bool, String, String) {
    let body = json!({"kind": "DeleteOptions", "apiVersion": "v1",
                      "preconditions": {"uid": uid, "resourceVersion": version}});
    let file = std::env::temp_dir().join(format!("yh-genie-delete-{}-{name}.json", std::process::id()));
    std::fs::write(&file, body.to_string()).unwrap();
    let path = format!("/apis/ipam.yh-genie.io/v1alpha1/ipblocks/{name}");
    let answer = cluster.kubectl(&["delete", "--raw", &path, "-f", &file.display().to_string(), "-v=6"]);
    let _ = std::fs::remove_file(&file);
    answer
}

/// The releaser's deletion of the block `name` as listed (`uid`, `version`) after it changed (`how`):
/// answered 409 Conflict, the block still there.
fn assert_conflict(cluster: &Cluster, name: &str, uid: &str, version: &str, how: &str) {
    let (ok, out, err) = delete_listed(cluster, name, uid, version);
    assert!(!ok, "the block {how} was deleted by a DELETE of it as listed before: {out}");
    let answered_409 =
        err.lines().any(|l| l.contains("DELETE") && l.contains("https://") && l.contains("409 Conflict"));
    assert!(answered_409, "the block {how}: want 409: {err}");
    let (still, _, _) = cluster.kubectl(&["get", "ipblocks.ipam.yh-genie.io", name]);
    assert!(still, "the block {how} is gone");
}
