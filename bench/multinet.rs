//! Pods with 1, 2 and 4 networks: through the selector (one ConfigMap naming the list, the pod's
//! objects from the node agent, the network-status annotation handed to it), and the same networks'
//! plugins run directly one after the other, as a runtime would run one network per interface
//! without the selector. Every network is Debian's reference `bridge` + `host-local`, on a
//! bridge and subnet of its own, exec'd in both cases, so the difference between the two is the
//! selector's own cost; per extra network it is the growth of that difference from 1 network to N,
//! divided by N - 1.
//!
//! A further network costs the selector one fsync (its record, durable before any chain runs), whose
//! price is the disk's: the selector cases run twice, with the records on the sandbox's disk as on
//! a node, and on tmpfs, where an fsync costs nothing, so the two parts of the cost show apart.

use super::{Bench, Case, Times, ms, percentile, requests_of_one_pod};
use serde_json::Value;
use std::path::PathBuf;

const COUNTS: [usize; 3] = [1, 2, 4];

pub fn run(b: &Bench, pods: usize) {
    let bridges: Vec<(String, Value)> = (0..4)
        .map(|i| {
            let name = format!("mn{i}");
            let conf = b.bridge_network(&name, &format!("10.{}.0.0/16", 100 + i));
            (name, conf)
        })
        .collect();
    let noop = b.noop_network();
    let noops: Vec<(String, Value)> = (0..4).map(|i| (format!("mz{i}"), noop.clone())).collect();
    for (name, conf) in bridges.iter().chain(&noops) {
        b.install(name, conf);
    }
    let requests = compare(b, "reference bridge + host-local each", &bridges, pods, false);
    compare(b, "a no-op /bin/sh plugin each: the selector's own cost, least noise", &noops, pods, true);
    println!();
    for (n, (add, del)) in COUNTS.iter().zip(requests) {
        println!(
            "API requests of the plugin, {n} network(s): {add} per ADD, {del} per DEL (the agent writes the status)"
        );
    }
    println!("target: the selector's cost per extra network at most 1 ms above that network's own plugins");
}

/// Pods with 1, 2 and 4 of `networks` through the selector (and, with `tmpfs`, again with its
/// records on tmpfs) and directly; prints the figures. Returns the API requests of one pod's ADD
/// and DEL through the selector, per count.
fn compare(b: &Bench, what: &str, networks: &[(String, Value)], pods: usize, tmpfs: bool) -> Vec<(usize, usize)> {
    let on_disk = b.sb.path().join("yh-genie");
    let on_tmpfs = Tmpfs::new();
    // (what it is, where the records are)
    let mut places = vec![("disk", on_disk.as_path())];
    if tmpfs {
        places.push(("tmpfs", on_tmpfs.0.as_path()));
    }
    // For COUNTS[k] networks: [per * k] directly, then through the selector for each place.
    let per = 1 + places.len();
    let mut cases: Vec<Case> = Vec::new();
    for n in COUNTS {
        let (names, confs): (Vec<&str>, Vec<&Value>) = networks[..n].iter().map(|(name, c)| (name.as_str(), c)).unzip();
        cases.push(b.direct_case(&format!("{n} directly"), &confs, pods));
        for (place, dir) in &places {
            cases.push(b.choosing_case(&format!("{n} via yh-genie, {place}"), &names.join(","), pods, dir, true));
        }
    }
    b.wait_for_agent(&cases);
    b.round(&cases, 1, 1);
    let times = b.round(&cases, pods, 1);

    println!();
    println!("pods with 1, 2, 4 networks ({what}), {pods} pods, one at a time");
    println!("{:<30} ADD median     ADD p90    DEL median     DEL p90", "networks");
    for (case, t) in cases.iter().zip(&times) {
        let [a50, a90, d50, d90] =
            [(&t.add, 0.5), (&t.add, 0.9), (&t.del, 0.5), (&t.del, 0.9)].map(|(v, p)| ms(percentile(v, p)));
        println!("  {:<28} {a50}  {a90}  {d50}  {d90}", case.label);
    }
    let median = |t: &Times, add: bool| percentile(if add { &t.add } else { &t.del }, 0.5).as_secs_f64() * 1000.0;
    for (p, (place, _)) in places.iter().enumerate() {
        let own = |k: usize, add: bool| median(&times[per * k + 1 + p], add) - median(&times[per * k], add);
        let costs: Vec<String> = COUNTS
            .iter()
            .enumerate()
            .map(|(k, n)| format!("{n}: {:.2} / {:.2}", own(k, true), own(k, false)))
            .collect();
        println!(
            "  records on {place}: the selector's own cost (via yh-genie - directly), ADD / DEL ms, by networks: {}",
            costs.join(", ")
        );
        for (k, n) in COUNTS.iter().enumerate().skip(1) {
            let extra = |add: bool| (own(k, add) - own(0, add)) / (*n as f64 - 1.0);
            println!(
                "  records on {place}: per extra network, {n} networks against 1: ADD {:+.2} ms, DEL {:+.2} ms",
                extra(true),
                extra(false)
            );
        }
    }
    COUNTS.iter().enumerate().map(|(k, _)| requests_of_one_pod(b, &cases[per * k + 1])).collect()
}

/// A directory on tmpfs (`/run`), removed at the end.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new() -> Self {
        let dir = PathBuf::from(format!("/run/yh-genie-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
