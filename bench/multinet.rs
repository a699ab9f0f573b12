//! Pods with 1, 2 and 4 networks: through the selector (one ConfigMap naming the list), and the
//! same networks' plugins run directly one after the other, as a runtime would run one network per
//! interface without the selector. Every network is Debian's reference `bridge` + `host-local`, on a
//! bridge and subnet of its own, exec'd in both cases, so the difference between the two is the
//! selector's own cost; per extra network it is the growth of that difference from 1 network to N,
//! divided by N - 1.
//!
//! A further network costs the selector one fsync (its record, durable before any chain runs), whose
//! price is the disk's: the selector cases run twice, with the records on the sandbox's disk as on
//! a node, and on tmpfs, where an fsync costs nothing, so the two parts of the cost show apart.

use super::{Bench, Case, Times, common, ms, percentile};
use std::path::PathBuf;

const COUNTS: [usize; 3] = [1, 2, 4];

pub fn run(b: &Bench, pods: usize) {
    let names: Vec<String> = (0..4).map(|i| format!("mn{i}")).collect();
    let confs: Vec<_> =
        names.iter().enumerate().map(|(i, name)| b.bridge_network(name, &format!("10.{}.0.0/16", 100 + i))).collect();
    for (name, conf) in names.iter().zip(&confs) {
        b.install(name, conf);
    }
    let on_disk = b.sb.path().join("yh-genie");
    let tmpfs = Tmpfs::new();
    // [3k] through the selector, [3k+1] the same networks directly, [3k+2] the selector with its
    // records on tmpfs, for COUNTS[k] networks.
    let mut cases: Vec<Case> = Vec::new();
    for n in COUNTS {
        let value = names[..n].join(",");
        cases.push(b.choosing_case(&format!("{n} via yh-genie"), &value, pods, &on_disk));
        cases.push(b.direct_case(&format!("{n} directly"), &confs[..n].iter().collect::<Vec<_>>(), pods));
        cases.push(b.choosing_case(&format!("{n} via yh-genie, tmpfs"), &value, pods, &tmpfs.0));
    }
    b.round(&cases, 1, 1);
    let times = b.round(&cases, pods, 1);

    println!();
    println!("pods with 1, 2, 4 networks (reference bridge + host-local each), {pods} pods, one at a time");
    println!("{:<24} ADD median     ADD p90    DEL median     DEL p90", "networks");
    for (case, t) in cases.iter().zip(&times) {
        let [a50, a90, d50, d90] =
            [(&t.add, 0.5), (&t.add, 0.9), (&t.del, 0.5), (&t.del, 0.9)].map(|(v, p)| ms(percentile(v, p)));
        println!("  {:<22} {a50}  {a90}  {d50}  {d90}", case.label);
    }
    let median = |t: &Times, add: bool| percentile(if add { &t.add } else { &t.del }, 0.5).as_secs_f64() * 1000.0;
    for (records, offset) in [("records on disk", 0), ("records on tmpfs", 2)] {
        let own = |k: usize, add: bool| median(&times[3 * k + offset], add) - median(&times[3 * k + 1], add);
        for (k, n) in COUNTS.iter().enumerate() {
            println!(
                "  {records}: selector's own cost with {n} network(s) (median via yh-genie - directly): ADD {:.2} ms, DEL {:.2} ms",
                own(k, true),
                own(k, false)
            );
        }
        for (k, n) in COUNTS.iter().enumerate().skip(1) {
            let per = |add: bool| (own(k, add) - own(0, add)) / (*n as f64 - 1.0);
            println!(
                "  {records}: per extra network, {n} networks against 1: ADD {:+.2} ms, DEL {:+.2} ms above the network's own plugins",
                per(true),
                per(false)
            );
        }
    }
    for (k, n) in COUNTS.iter().enumerate() {
        let (add, del) = requests_of_one_pod(b, &cases[3 * k]);
        println!(
            "  API requests, {n} network(s): {add} per ADD (GET pod, GET ConfigMap{}), {del} per DEL",
            if *n > 1 { ", PATCH status" } else { "" }
        );
    }
    println!("target: the selector's cost per extra network at most 1 ms above that network's own plugins");
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

/// API requests of one more pod's ADD and DEL through `case` (a selector case).
fn requests_of_one_pod(b: &Bench, case: &Case) -> (usize, usize) {
    let cid = common::unique("req");
    let (pod, step) = (&case.pods[0], &case.steps[0]);
    let stdin = step.stdin.to_string();
    let before = b.api.requests();
    b.call(step, "ADD", &cid, pod, &stdin);
    let after_add = b.api.requests();
    b.call(step, "DEL", &cid, pod, &stdin);
    (after_add - before, b.api.requests() - after_add)
}
