//! Kubernetes' own network conformance specs, from the e2e suite of the same source as the test
//! cluster (testkit::cluster), with yh-genie installed from manifests/ as the nodes' one CNI.
//!
//! By default (the README's test command, CI): the pod-networking specs, the Networking Granular
//! Checks for pods (intra-pod and node-pod, http and udp) and HostPort. scripts/conformance.sh
//! chooses with two variables:
//! - `YH_GENIE_CONFORMANCE=sig-network`: every `[sig-network]` spec tagged `[Conformance]`;
//! - `YH_GENIE_CONFORMANCE_CNI=bridge`: the baseline, Debian's reference `bridge` plugin as the
//!   nodes' only CNI instead of yh-genie: what fails there too is a limit of this test cluster.
//!
//! Output in `target/conformance/<cni>-<set>/` (e2e.log, junit.xml, report.json, summary.txt).
//! Fails when a spec fails with yh-genie that is not in `CLUSTER_LIMITS`, or when no spec ran.

use libtest_mimic::{Arguments, Failed, Trial};
use std::path::PathBuf;
use testkit::cluster::Cluster;
use testkit::cluster::e2e::{Specs, Summary};
use testkit::process::report;

/// A set of specs, chosen by its name in `YH_GENIE_CONFORMANCE`.
struct Set {
    name: &'static str,
    focus: &'static str,
    /// Ginkgo processes (most specs wait on pods and the network, not the CPU).
    procs: u32,
    /// Bound of the whole run (about ten times what it takes here).
    timeout: &'static str,
    /// Whether its specs need the cluster's DNS (CoreDNS).
    dns: bool,
}

const SETS: &[Set] = &[
    Set {
        name: "pod-networking",
        focus: r"\[sig-network\] (Networking Granular Checks: Pods|HostPort) .*\[Conformance\]",
        procs: 2,
        timeout: "15m",
        dns: false,
    },
    Set { name: "sig-network", focus: r"\[sig-network\].*\[Conformance\]", procs: 3, timeout: "60m", dns: true },
];

/// Specs that fail on this test cluster whatever its CNI, with why; each fails the same way with
/// the reference bridge (`YH_GENIE_CONFORMANCE_CNI=bridge`). docs/conformance.md explains them.
const CLUSTER_LIMITS: &[(&str, &str)] = &[];

fn main() {
    let args = Arguments::from_args();
    let set = std::env::var("YH_GENIE_CONFORMANCE").unwrap_or_else(|_| "pod-networking".into());
    let cni = std::env::var("YH_GENIE_CONFORMANCE_CNI").unwrap_or_else(|_| "yh-genie".into());
    let chosen = SETS
        .iter()
        .find(|s| s.name == set)
        .unwrap_or_else(|| panic!("YH_GENIE_CONFORMANCE={set}: one of pod-networking, sig-network"));
    assert!(["yh-genie", "bridge"].contains(&cni.as_str()), "YH_GENIE_CONFORMANCE_CNI={cni}: yh-genie or bridge");
    let name = format!("{}_conformance_with_{}", set.replace('-', "_"), cni.replace('-', "_"));
    let trial = Trial::test(name, move || {
        let output = target_dir().join("conformance").join(format!("{cni}-{set}"));
        let specs = Specs { focus: chosen.focus, procs: chosen.procs, timeout: chosen.timeout, output: output.clone() };
        let summary = run(&cni, chosen.dns, &specs);
        report(&format!("conformance ({set}, {cni}): {summary}output in {}", output.display()));
        verdict(&cni, &summary)
    });
    libtest_mimic::run(&args, vec![trial]).exit();
}

/// A cluster with the e2e images, the CNI (and the DNS) installed, the suite run; the cluster is
/// always stopped.
fn run(cni: &str, dns: bool, specs: &Specs) -> Summary {
    let cluster = Cluster::start_for_e2e();
    match cni {
        "bridge" => cluster.install_reference_bridge(),
        _ => cluster.install_yh_genie(),
    }
    if dns {
        cluster.install_coredns();
    }
    cluster.run_e2e(specs)
}

/// With yh-genie every spec passes but the cluster's known limits; the baseline is a measurement.
fn verdict(cni: &str, summary: &Summary) -> Result<(), Failed> {
    if summary.passed.is_empty() && summary.failed.is_empty() {
        return Err("no spec ran: the focus took none, or every one skipped itself".into());
    }
    if cni == "bridge" {
        return Ok(());
    }
    let unexplained: Vec<&str> = summary
        .failed
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| !CLUSTER_LIMITS.iter().any(|(limit, _)| name.contains(limit)))
        .collect();
    match unexplained.as_slice() {
        [] => Ok(()),
        failed => Err(format!("failed with yh-genie:\n  {}", failed.join("\n  ")).into()),
    }
}

/// Cargo's target dir: the test binary is `<target>/<profile>/deps/conformance-<hash>`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).expect("the test binary is in <target>/<profile>/deps").to_path_buf()
}
