//! Concurrency, as root: the kubelet's runtime sets up different pods at once, so several selector
//! processes run side by side on one node. They share the record store, yonghui's `dataDir` (here the
//! same directory as the selector's), host-local's leases, the NAT table, and the bridge, which the
//! first pods of a network create at the same moment. Each round uses a new network with a bridge
//! that does not exist yet; its pods are ADDed at once (released together by a barrier), CHECKed at
//! once, then DELeted at once.

use crate::support::node::{NetnsNode, Pod, pod_addresses};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Barrier;
use testkit::apiserver::from_config_map;
use testkit::inspect::link_names;
use testkit::process::unique;

/// Pods per round: more than the machine has cores, so the processes really interleave.
const PODS: usize = 8;
const ROUNDS: u8 = 4;

/// Run `f` for every pod on its own thread, all released at the same instant; results in pod order.
fn at_once<T: Send>(pods: &[Pod], f: impl Fn(&Pod) -> T + Sync) -> Vec<T> {
    let start = Barrier::new(pods.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .map(|pod| {
                let (start, f) = (&start, &f);
                s.spawn(move || {
                    start.wait();
                    f(pod)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a pod's thread panicked")).collect()
    })
}

#[test]
fn pods_at_once_share_a_new_bridge_with_distinct_addresses() {
    let n = NetnsNode::new();
    let conf = n.selector_conf("1.0.0", json!({}));
    for round in 0..ROUNDS {
        let network = format!("round{round}");
        let bridge = unique("cb");
        // yonghui keeps its saved delegate configurations in the selector's dataDir, beside the
        // selector's `attachments/`: one directory for every record of the node.
        n.add_yonghui_network(&network, 10 + round, json!({"dataDir": n.data_dir(), "delegate": {"bridge": bridge}}));
        n.api.put_config_map("default", &network, json!({"net": network}));
        let pods: Vec<Pod> = (0..PODS)
            .map(|i| {
                let name = format!("{network}-pod{i}");
                n.api.put_pod("default", &name, from_config_map(&network, "net"));
                n.pod(&name)
            })
            .collect();
        let case = format!("round {round} (network {network}, bridge {bridge})");
        assert!(link_names(&n.netns, "").iter().all(|l| *l != bridge), "{case}: the bridge is new");

        let results: Vec<Value> = at_once(&pods, |pod| n.call("ADD", pod, &conf)).iter().map(|r| r.ok()).collect();

        let mut addresses = BTreeSet::new();
        for (pod, result) in pods.iter().zip(&results) {
            let address = result["ips"][0]["address"].as_str().unwrap().to_string();
            assert!(address.starts_with(&format!("10.77.{}.", 10 + round)), "{case}: {address}");
            assert_eq!(pod_addresses(pod), [address.as_str()], "{case}: the pod holds the result's address");
            assert!(addresses.insert(address.clone()), "{case}: {address} handed out twice");
            let record = n.record(pod);
            assert_eq!(record["network"], network.as_str(), "{case}");
            assert_eq!(n.results(pod)["result"]["ips"], result["ips"], "{case}: the pod's own result is kept");
            let saved: Value =
                serde_json::from_slice(&std::fs::read(n.data_dir().join(format!("{}:eth0", pod.cid))).unwrap())
                    .unwrap();
            assert_eq!(saved["bridge"], bridge.as_str(), "{case}: yonghui's saved delegate configuration");
            let leases: Vec<_> = n.leases().into_iter().filter(|(_, cid)| *cid == pod.cid).collect();
            assert_eq!(leases.len(), 1, "{case}: one lease per pod: {leases:?}");
            assert_eq!(format!("{}/24", leases[0].0), address, "{case}: the lease is the pod's address");
            let chain = yh_genie::programs::plugins::firewall::Owner::new(&network, &pod.cid, "eth0").chain();
            assert!(n.nat_lines().iter().any(|l| l.contains(&chain)), "{case}: the pod's NAT chain");
        }
        let ports = link_names(&n.netns, &format!("master {bridge} type veth"));
        assert_eq!(ports.len(), PODS, "{case}: every pod is a port of the one bridge: {ports:?}");

        for reply in at_once(&pods, |pod| n.call("CHECK", pod, &conf)) {
            reply.ok();
        }
        for reply in at_once(&pods, |pod| n.call("DEL", pod, &conf)) {
            reply.ok();
        }
        for pod in &pods {
            n.assert_nothing_left(pod, &case);
        }
    }
}
