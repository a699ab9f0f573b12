//! docs/migrate.md's move from whereabouts to yh-ipam on the real cluster, step for step as an
//! operator takes it: pods on both nodes on a macvlan NAD whose IPAM is whereabouts (installed as
//! whereabouts.rs installs it), then the NAD edited to yh-ipam with the same range while they run.
//! Checked as the docs say to check it: the pods' addresses, whereabouts' `IPPool` and
//! reservations beside yh-ipam's `FixedAddress`es, `IPBlock`s and the Lease marking the import, and
//! the agents' logs. [`Setup`] undoes what the test made, pass or fail.
//!
//! Needs whereabouts: `YH_GENIE_WHEREABOUTS` (scripts/test.sh's cluster tier sets it). Without it
//! the test says so and checks nothing.

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use testkit::cluster::Cluster;
use testkit::cluster::pods::{in_cidr, web_server};
use testkit::process::report;

use crate::test_namespace::{TestNamespace, set_selector_settings};
use crate::whereabouts::{install_whereabouts, remove_whereabouts, whereabouts_dir};

const NS: &str = "yh-ipam-migrate-e2e";
/// The range, whereabouts' and then yh-ipam's: no other test uses it.
const RANGE: &str = "10.246.1.0/27";
/// The range's gateway for yh-ipam (its first address, as host-local completes a range): whereabouts,
/// given no gateway, hands it out; yh-ipam neither hands it out nor imports it.
const GATEWAY: &str = "10.246.1.1";
/// The yh-ipam pool the range moves to, in blocks of four.
const POOL: &str = "e2e-moved";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const FIXED_ADDRESSES: &str = "fixedaddresses.ipam.yh-genie.io";
const IP_BLOCKS: &str = "ipblocks.ipam.yh-genie.io";
/// The Lease marking the pool imported.
const MARKER: &str = "yh-ipam-imported-e2e-moved";
/// Pods whereabouts attaches, two on each node.
const OLD: [(&str, &str); 4] = [("wb-a1", "a"), ("wb-a2", "a"), ("wb-b1", "b"), ("wb-b2", "b")];
/// Pods yh-ipam attaches once the NAD is moved, one on each node.
const NEW: [(&str, &str); 2] = [("ipam-a", "a"), ("ipam-b", "b")];
/// The releaser sweeps once per lease duration (60 s in the manifest): an address whose pod is
/// gone goes within two sweeps.
const SWEEP_PATIENCE: Duration = Duration::from_secs(240);

/// What the test set up: whereabouts, the selector's policy letting the NAD in, the namespace.
/// Dropped, pass or fail: the namespace deleted, the pool's `FixedAddress`es, `IPBlock`s, marker
/// Lease and `AddressPool` deleted, whereabouts removed, the policy as it was.
struct Setup<'a> {
    namespace: TestNamespace<'a>,
    cluster: &'a Cluster,
    whereabouts: PathBuf,
}

impl Drop for Setup<'_> {
    fn drop(&mut self) {
        let cluster = self.cluster;
        self.namespace.delete();
        let pool = format!("ipam.yh-genie.io/pool={POOL}");
        let _ = cluster.kubectl(&["delete", FIXED_ADDRESSES, "-l", &pool, "--ignore-not-found"]);
        for (name, block) in blocks(cluster) {
            if block["pool"] == POOL {
                let _ = cluster.kubectl(&["delete", IP_BLOCKS, &name, "--ignore-not-found"]);
            }
        }
        let _ = cluster.kubectl(&["-n", "kube-system", "delete", "lease", MARKER, "--ignore-not-found"]);
        let _ = cluster.kubectl(&["delete", "addresspool.ipam.yh-genie.io", POOL, "--ignore-not-found"]);
        remove_whereabouts(cluster, &self.whereabouts);
    }
}

/// The NAD `lan`, macvlan on the underlay, with `ipam`.
fn apply_nad(cluster: &Cluster, ipam: Value) {
    let config = json!({"cniVersion": "0.3.1", "type": "macvlan", "master": "ul0", "mode": "bridge", "ipam": ipam});
    cluster.apply_text(&format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: lan, namespace: {NS}}}\nspec:\n  config: '{config}'\n"
    ));
}

/// What whereabouts holds in RANGE, in its `IPPool` and its reservations: address to (pod
/// reference, container id), each source by itself.
struct Whereabouts {
    pool: BTreeMap<String, (String, String)>,
    reservations: BTreeMap<String, (String, String)>,
}

fn whereabouts_holds(cluster: &Cluster) -> Whereabouts {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let pools = cluster.get_json(&["get", "ippools.whereabouts.cni.cncf.io", "-A"]);
    let mut pool = BTreeMap::new();
    for object in pools["items"].as_array().into_iter().flatten().filter(|p| p["spec"]["range"] == RANGE) {
        let base: Ipv4Addr = RANGE.split_once('/').unwrap().0.parse().unwrap();
        for (offset, allocation) in object["spec"]["allocations"].as_object().into_iter().flatten() {
            let address = Ipv4Addr::from(u32::from(base) + offset.parse::<u32>().unwrap()).to_string();
            pool.insert(address, (text(&allocation["podref"]), text(&allocation["id"])));
        }
    }
    let listed = cluster.get_json(&["get", "overlappingrangeipreservations.whereabouts.cni.cncf.io", "-A"]);
    let reservations = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| in_cidr(r["metadata"]["name"].as_str().unwrap_or_default(), RANGE))
        .map(|r| (text(&r["metadata"]["name"]), (text(&r["spec"]["podref"]), text(&r["spec"]["containerid"]))))
        .collect();
    Whereabouts { pool, reservations }
}

/// The pool's `FixedAddress`es: address to spec.
fn fixed_addresses(cluster: &Cluster) -> BTreeMap<String, Value> {
    let (ok, out, _) =
        cluster.kubectl(&["get", FIXED_ADDRESSES, "-l", &format!("ipam.yh-genie.io/pool={POOL}"), "-o", "json"]);
    let list: Value = if ok { serde_json::from_str(&out).unwrap_or_default() } else { Value::Null };
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .into_iter()
        .map(|f| (f["spec"]["address"].as_str().unwrap_or_default().to_string(), f["spec"].clone()))
        .collect()
}

/// Every `IPBlock`: (name, spec).
fn blocks(cluster: &Cluster) -> Vec<(String, Value)> {
    let (ok, out, _) = cluster.kubectl(&["get", IP_BLOCKS, "-o", "json"]);
    let list: Value = if ok { serde_json::from_str(&out).unwrap_or_default() } else { Value::Null };
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .into_iter()
        .map(|b| (b["metadata"]["name"].as_str().unwrap_or_default().to_string(), b["spec"].clone()))
        .collect()
}

/// The pool's blocks: CIDR to the node holding it, `"fixed"` for a fixed block.
fn pool_blocks(cluster: &Cluster) -> BTreeMap<String, String> {
    blocks(cluster)
        .into_iter()
        .filter(|(_, spec)| spec["pool"] == POOL)
        .map(|(_, spec)| {
            let holder = if spec["fixed"] == true {
                "fixed".to_string()
            } else {
                spec["node"].as_str().unwrap_or_default().to_string()
            };
            (spec["cidr"].as_str().unwrap_or_default().to_string(), holder)
        })
        .collect()
}

/// The block of `blocks` holding `address`, and who holds it.
fn block_of<'b>(blocks: &'b BTreeMap<String, String>, address: &str) -> Option<(&'b String, &'b String)> {
    blocks.iter().find(|(cidr, _)| in_cidr(address, cidr))
}

/// Both nodes' yh-genie logs, every line.
fn agent_logs(cluster: &Cluster) -> String {
    let (_, out, _) = cluster.kubectl(&[
        "-n",
        "kube-system",
        "logs",
        "-l",
        "app.kubernetes.io/name=yh-genie",
        "--all-containers=true",
        "--prefix",
        "--tail=-1",
    ]);
    out
}

/// The pod's one address on net1, in RANGE.
fn net1(cluster: &Cluster, name: &str) -> String {
    let net1 = cluster.pod_addresses(NS, name, "net1");
    assert!(net1.len() == 1 && in_cidr(&net1[0], RANGE), "{name}: net1 holds {net1:?}, want one address in {RANGE}");
    net1[0].clone()
}

/// Waits until the `FixedAddress` of `address` is gone; how long it took.
fn wait_freed(cluster: &Cluster, address: &str, what: &str) -> Duration {
    let started = Instant::now();
    cluster.wait_for_within(SWEEP_PATIENCE, &format!("the FixedAddress of {address} ({what}) deleted"), || {
        (!fixed_addresses(cluster).contains_key(address)).then_some(())
    });
    started.elapsed()
}

/// docs/migrate.md, "From whereabouts": pods whereabouts attached keep their addresses when their
/// NAD is edited to yh-ipam with the same range; the pool's first ADD imports them (one
/// `FixedAddress` each, in fixed blocks, but the gateway's; the Lease marks the import), new pods
/// on both nodes get other addresses from their nodes' blocks and reach the old ones; an old pod's
/// deletion gives whereabouts its allocation back and frees its address by the releaser's sweep;
/// once every pod is gone no `FixedAddress` of the pool is left, nor anything in whereabouts.
pub fn yh_ipam_keeps_the_addresses_of_pods_whereabouts_attached(cluster: &mut Cluster) {
    let Some(dir) = whereabouts_dir() else {
        report("cluster: YH_GENIE_WHEREABOUTS unset: the move from whereabouts is not tried");
        return;
    };
    let open = |settings: &mut Value| {
        settings["allowInlineConfig"] = json!(true);
        settings["inlinePluginTypes"] = json!(["macvlan", "whereabouts"]);
    };
    let namespace = TestNamespace::new(cluster, NS, open);
    let mut settings = namespace.settings_before();
    open(&mut settings);
    let setup = Setup { namespace, cluster, whereabouts: dir.clone() };
    install_whereabouts(cluster, &dir);

    // Before: the network's pods are whereabouts'.
    apply_nad(cluster, json!({"type": "whereabouts", "range": RANGE}));
    for (name, slot) in OLD {
        cluster.apply_text(&web_server(NS, name).on_slot(slot).annotation(NETWORKS, "lan").yaml());
    }
    let old: Vec<String> = OLD
        .iter()
        .map(|(name, _)| {
            cluster.wait_pod_ready(NS, name);
            net1(cluster, name)
        })
        .collect();
    let distinct: BTreeSet<&String> = old.iter().collect();
    assert_eq!(distinct.len(), OLD.len(), "whereabouts gave one address twice: {old:?}");
    let before = whereabouts_holds(cluster);
    for ((name, _), address) in OLD.iter().zip(&old) {
        let pod_ref = format!("{NS}/{name}");
        assert_eq!(before.pool.get(address).map(|(p, _)| p), Some(&pod_ref), "whereabouts' IPPool: {:?}", before.pool);
    }
    report(&format!(
        "cluster: whereabouts gave {OLD:?} {old:?}; its IPPool {:?}, its reservations {:?}",
        before.pool, before.reservations
    ));

    // The move (docs/migrate.md, step 2): the same range in an AddressPool the NAD names, and the
    // admin lets the NADs run yh-ipam.
    settings["inlinePluginTypes"] = json!(["macvlan", "whereabouts", "yh-ipam"]);
    set_selector_settings(cluster, &settings.to_string());
    cluster.apply_text(&format!(
        "apiVersion: ipam.yh-genie.io/v1alpha1\nkind: AddressPool\nmetadata: {{name: {POOL}}}\nspec:\n  \
         blockSize: 4\n  ranges:\n    - [{{subnet: \"{RANGE}\"}}]\n"
    ));
    apply_nad(cluster, json!({"type": "yh-ipam", "pool": POOL}));
    assert_eq!(fixed_addresses(cluster), BTreeMap::new(), "FixedAddresses of {POOL} before its first ADD");
    let started = Instant::now();
    for (name, slot) in NEW {
        cluster.apply_text(&web_server(NS, name).on_slot(slot).annotation(NETWORKS, "lan").yaml());
    }
    let new: Vec<String> = NEW
        .iter()
        .map(|(name, _)| {
            cluster.wait_pod_ready(NS, name);
            net1(cluster, name)
        })
        .collect();
    let ready = started.elapsed();

    // New pods got addresses no running pod holds, from their own nodes' blocks.
    let held = pool_blocks(cluster);
    for ((name, slot), address) in NEW.iter().zip(&new) {
        assert!(!old.contains(address), "{name} got {address}, which a pod whereabouts attached holds: {old:?}");
        assert_ne!(address, GATEWAY, "{name} got the range's gateway");
        let node = format!("node-{slot}");
        let block = block_of(&held, address);
        assert!(
            block.is_some_and(|(_, holder)| *holder == node),
            "{name} on {node} got {address}, from block {block:?}: {held:?}"
        );
    }
    assert_ne!(new[0], new[1], "yh-ipam gave one address twice");
    // Step 4's check: one FixedAddress per address whereabouts handed out that the pool may hand
    // out (not its gateway), kept for its pod, in a fixed block; the Lease marks the import.
    let fixed = fixed_addresses(cluster);
    let imported: Vec<&String> = fixed.keys().collect();
    let mut want: Vec<&String> = old.iter().filter(|a| *a != GATEWAY).collect();
    want.sort();
    assert_eq!(imported, want, "the FixedAddresses of {POOL}: {fixed:?}");
    for ((name, _), address) in OLD.iter().zip(&old).filter(|(_, a)| *a != GATEWAY) {
        let spec = &fixed[address];
        let (_, container) = &before.pool[address];
        assert_eq!(
            (&spec["owner"]["kind"], &spec["owner"]["namespace"], &spec["owner"]["name"], &spec["owner"]["uid"]),
            (&json!("Whereabouts"), &json!(NS), &json!(name), &json!(container)),
            "the FixedAddress of {address}: {spec}"
        );
        assert_eq!(spec["interface"], "net1", "the FixedAddress of {address}: {spec}");
        let block = block_of(&held, address);
        assert!(block.is_some_and(|(_, holder)| holder == "fixed"), "{address} of {name} in block {block:?}: {held:?}");
    }
    let marker = cluster.get_json(&["-n", "kube-system", "get", "lease", MARKER]);
    assert_eq!(
        marker["metadata"]["annotations"]["ipam.yh-genie.io/imported-addresses"],
        want.len().to_string(),
        "the Lease marking the import: {marker}"
    );

    // The running pods keep theirs, and reach each other and the new pods across the nodes.
    let kept: Vec<String> = OLD.iter().map(|(name, _)| net1(cluster, name)).collect();
    assert_eq!(kept, old, "the addresses of the pods whereabouts attached");
    assert_eq!(cluster.fetch(NS, "wb-a1", &old[2]), "wb-b1", "wb-a1 fetching wb-b1 at {}", old[2]);
    assert_eq!(cluster.fetch(NS, "ipam-a", &old[3]), "wb-b2", "ipam-a fetching wb-b2 at {}", old[3]);
    assert_eq!(cluster.fetch(NS, "wb-b1", &new[0]), "ipam-a", "wb-b1 fetching ipam-a at {}", new[0]);
    assert_eq!(cluster.fetch(NS, "ipam-b", &old[1]), "wb-a2", "ipam-b fetching wb-a2 at {}", old[1]);
    report(&format!(
        "cluster: NAD moved to yh-ipam: {NEW:?} got {new:?} within {ready:.1?}; {OLD:?} kept {old:?}, imported as \
         FixedAddresses in blocks {held:?}"
    ));

    // An old pod deleted: its DEL runs what its ADD ran (the configuration yh-genie recorded), so
    // whereabouts takes its allocation back, and the releaser's sweep frees its address (its
    // FixedAddress gone) once no pod of its name is left.
    let deleted = OLD.iter().zip(&old).position(|(_, a)| a != GATEWAY).unwrap();
    let (name, address) = (OLD[deleted].0, &old[deleted]);
    cluster.delete_pod(NS, name);
    let took = wait_freed(cluster, address, &format!("{name}'s, deleted"));
    let logs = agent_logs(cluster);
    let how: Vec<&str> = logs.lines().filter(|l| l.contains(&format!("address {address} of pool"))).collect();
    let after = whereabouts_holds(cluster);
    report(&format!(
        "cluster: {name} deleted: the FixedAddress of {address} gone within {took:.1?}: {how:?}; whereabouts' IPPool \
         now {:?}, reservations {:?}",
        after.pool, after.reservations
    ));
    assert!(
        how.iter().any(|l| l.contains("is gone (no pod of its name)")),
        "no agent logged {address} freed by the sweep: {how:?}"
    );
    assert!(
        !after.pool.contains_key(address) && !after.reservations.contains_key(address.as_str()),
        "whereabouts still holds {address} once {name} is gone: {:?} {:?}",
        after.pool,
        after.reservations
    );
    let others: Vec<String> = fixed_addresses(cluster).into_keys().collect();
    let mut still_held: Vec<String> = want.iter().filter(|a| **a != address).map(|a| a.to_string()).collect();
    still_held.sort();
    assert_eq!(others, still_held, "the FixedAddresses left once {name} is gone");

    // Every pod deleted: nothing of the pool is held.
    for (other, _) in OLD.iter().filter(|(other, _)| *other != name).chain(&NEW) {
        cluster.delete_pod(NS, other);
    }
    let started = Instant::now();
    cluster.wait_for_within(SWEEP_PATIENCE, &format!("no FixedAddress of {POOL} once its pods are gone"), || {
        fixed_addresses(cluster).is_empty().then_some(())
    });
    let took = started.elapsed();
    let left = pool_blocks(cluster);
    let after = whereabouts_holds(cluster);
    report(&format!(
        "cluster: every pod deleted: no FixedAddress of {POOL} within {took:.1?}; its blocks {left:?}; whereabouts' \
         IPPool {:?}, reservations {:?}",
        after.pool, after.reservations
    ));
    // whereabouts holds nothing of the range any more: it may be removed (step 5).
    assert!(
        after.pool.is_empty() && after.reservations.is_empty(),
        "whereabouts still holds {:?} {:?}",
        after.pool,
        after.reservations
    );
    // The blocks stay as the docs say: a fixed block stays one, a live node keeps its blocks.
    assert_eq!(left, held, "the blocks of {POOL} once its pods are gone");
    drop(setup);
}
