//! Crash safety, as root: the selector is killed with SIGKILL part-way through ADD and through DEL,
//! as a runtime does when its CNI timeout expires (or the OOM killer does), and the DEL the runtime
//! then makes, right away, must succeed and leave nothing of the pod: no interface in its netns, no
//! host veth, no lease, no NAT rule, no attachment record, no saved delegate configuration, no temp
//! file of an interrupted write. The network is `yonghui` -> `yh-bridge` (with NAT) -> `host-local`
//! through the selector, the pod choosing it by ConfigMap; and a pod with two such networks (`eth0`
//! and `net1`, their yonghui state in one data dir), killed between and inside its attachments.
//!
//! Three ways of killing: at random times spread over the whole of a normal ADD or DEL, measured
//! first, one random offset within each of equal slices (the seed is printed; `YH_GENIE_TEST_SEED`
//! replays it); at every crash point (src/platform/crash_point.rs), so that each window between two steps is
//! hit for sure; and while a slow IPAM plugin runs, which the DEL must wait for.

use crate::support::node::{NetnsNode, Pod};
use crate::support::rng::Rng;
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::json;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::time::{Duration, Instant};
use testkit::apiserver::from_config_map;
use testkit::fake_plugin::{FakePlugin, Step};
use testkit::process::report;

const NETWORK: &str = "fabric";
/// The second network of the two-network pod, on `net1`.
const SECOND: &str = "fabric2";
const POD: &str = "crash";
/// Random kill times per command.
const KILLS: usize = 30;

/// A node whose pods choose `networks` (a CNI_NETWORK_CONFIG value of yonghui networks) by
/// ConfigMap, and the selector's configuration.
fn node(networks: &[&str]) -> (NetnsNode, String) {
    let n = NetnsNode::new();
    for (i, network) in networks.iter().enumerate() {
        n.add_yonghui_network(network, 30 + i as u8, json!({}));
    }
    n.api.put_config_map("default", "net", json!({"net": networks.join(",")}));
    n.api.put_pod("default", POD, from_config_map("net", "net"));
    let conf = n.selector_conf("1.0.0", json!({}));
    (n, conf)
}

/// How the test kills a call.
#[derive(Debug, Clone, Copy)]
enum Kill<'a> {
    /// With SIGKILL after this long, if it is still running.
    After(Duration),
    /// With SIGKILL once this file exists (a plugin it runs says it has started).
    OnceExists(&'a Path),
    /// It kills itself at this crash point (`YH_GENIE_CRASH_AT`).
    AtCrashPoint(&'a str),
}

/// How a call that was to be killed ended.
#[derive(Debug, PartialEq)]
enum Ending {
    Killed,
    /// It finished before the kill; its exit code.
    Finished(i32),
}

/// Run the selector's `command` for `pod` and kill it as `how` says. The signal goes to the selector
/// alone, as a runtime sends it; the plugins it was running (the IPAM plugin, iptables-restore)
/// finish their work, and the runtime's DEL waits for them. It runs in a process group of its own,
/// returned, which they share, so that the test can tell when the last of them has ended.
fn run_and_kill(n: &NetnsNode, command: &str, pod: &Pod, conf: &str, how: Kill) -> (Ending, Pid) {
    let crash_point = match how {
        Kill::AtCrashPoint(point) => vec![(yh_genie::platform::crash_point::VAR, point)],
        _ => vec![],
    };
    // Its output goes to a file, not a pipe: waiting for the end of a pipe would wait for the
    // helpers that share it, and the runtime's DEL must come while they may still be at work.
    let output = tempfile::tempfile().unwrap();
    let mut child = n
        .command(command, pod, &crash_point)
        .stdout(output.try_clone().unwrap())
        .stderr(output)
        .process_group(0)
        .spawn()
        .expect("plugin starts");
    // A plugin killed before it reads its stdin closes the pipe: that is not the test's failure.
    let _ = child.stdin.take().unwrap().write_all(conf.as_bytes());
    let pid = Pid::from_raw(child.id() as i32);
    match how {
        Kill::After(after) => std::thread::sleep(after),
        Kill::OnceExists(file) => {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !file.exists() {
                assert!(Instant::now() < deadline, "{} never appeared", file.display());
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Kill::AtCrashPoint(_) => {}
    }
    if !matches!(how, Kill::AtCrashPoint(_)) {
        // Killing a process that has exited but is not yet reaped does nothing.
        let _ = kill(pid, Signal::SIGKILL);
    }
    let status = child.wait().unwrap();
    let ending = match status.signal() {
        Some(9) => Ending::Killed,
        _ => Ending::Finished(status.code().unwrap_or(-1)),
    };
    (ending, pid)
}

/// Wait until no process of the group `pgid` is left.
fn wait_for_orphans(pgid: Pid) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while killpg(pgid, None) != Err(Errno::ESRCH) {
        assert!(Instant::now() < deadline, "processes of group {pgid} still running after 60 s");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `command` (for DEL, after a normal ADD) killed as `how` says, then the runtime's DEL, twice.
/// The DEL comes right away, as a runtime's does; once every process the killed call started has
/// ended too, nothing of the pod may be left. The second DEL, a runtime's retry, must succeed and
/// change nothing. Returns how the call ended and what was left after each DEL.
fn crash_then_del(
    n: &NetnsNode,
    networks: &[&str],
    conf: &str,
    pod: &Pod,
    command: &str,
    how: Kill,
) -> (Ending, Vec<String>) {
    if command == "DEL" {
        n.call("ADD", pod, conf).ok();
    }
    let (ending, group) = run_and_kill(n, command, pod, conf, how);
    let mut leaks = Vec::new();
    for round in ["DEL", "second DEL"] {
        let reply = n.call("DEL", pod, conf);
        assert_eq!(reply.code, 0, "{round} after {command} killed ({how:?}, {ending:?}): {reply:?}");
        wait_for_orphans(group);
        let mut left = n.leftovers_of_networks(pod, networks);
        left.extend(n.node_veths().into_iter().map(|v| format!("veth {v}")));
        leaks.extend(left.into_iter().map(|l| format!("after the {round}: {l}")));
    }
    (ending, leaks)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[test]
fn killed_at_random_times_in_add_or_del_the_runtimes_del_leaves_nothing() {
    killed_at_random_times(&[NETWORK], KILLS);
}

#[test]
fn killed_at_random_times_in_the_add_or_del_of_two_networks_the_runtimes_del_leaves_nothing() {
    killed_at_random_times(&[NETWORK, SECOND], KILLS);
}

fn killed_at_random_times(networks: &[&str], kills: usize) {
    let (mut rng, seed) = Rng::from_env();
    report(&format!("crash: seed {seed} (set {} to replay)", crate::support::rng::SEED_VAR));
    let (n, conf) = node(networks);
    let mut pod = n.pod(POD);

    let (mut add_times, mut del_times) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        pod = pod.renew(POD);
        let started = Instant::now();
        n.call("ADD", &pod, &conf).ok();
        add_times.push(started.elapsed());
        let started = Instant::now();
        n.call("DEL", &pod, &conf).ok();
        del_times.push(started.elapsed());
    }

    let mut summary = format!("crash: {} network(s), seed {seed}", networks.len());
    let mut leaks = Vec::new();
    for (command, duration) in [("ADD", median(add_times)), ("DEL", median(del_times))] {
        let (mut killed, mut finished) = (0, 0);
        for slice in 0..kills {
            // Up to 10 % past the median, so that the end of slower runs is covered too.
            let after = duration.mul_f64(1.1 * (slice as f64 + rng.unit()) / kills as f64);
            pod = pod.renew(POD);
            let (ending, left) = crash_then_del(&n, networks, &conf, &pod, command, Kill::After(after));
            match ending {
                Ending::Killed => killed += 1,
                Ending::Finished(0) => finished += 1,
                Ending::Finished(code) => panic!("{command} not killed, but failed with exit code {code}"),
            }
            leaks.extend(left.into_iter().map(|l| format!("{command} killed at {after:?}, {l}")));
        }
        summary += &format!(
            "; {command} (median {:.1} ms) killed at {kills} random times: {killed} mid-way, {finished} after it \
             finished, runtime DELs ok {}",
            duration.as_secs_f64() * 1000.0,
            2 * kills
        );
    }
    let left = n.leftovers();
    report(&format!("{summary}; leaks found: {}", leaks.len() + left.len()));
    assert!(leaks.is_empty(), "left behind after the runtime's DEL (seed {seed}):\n{leaks:#?}");
    assert!(left.is_empty(), "left on the node (seed {seed}): {left:#?}");
}

/// Every crash point (src/platform/crash_point.rs) of ADD and of DEL on one network, in the order a call
/// reaches them. `write_atomic` is reached three times by ADD: the record, yonghui's saved
/// configuration, the record with the result.
const CRASH_POINTS: &[(&str, &str)] = &[
    ("ADD", "write_atomic.before-rename:1"),
    ("ADD", "write_atomic.before-rename:2"),
    ("ADD", "yh-bridge.add.veth-made"),
    ("ADD", "yh-bridge.add.address-allocated"),
    ("ADD", "yh-bridge.add.before-nat"),
    ("ADD", "yh-bridge.add.nat-added"),
    ("ADD", "selector.add.chain-done"),
    ("ADD", "selector.add.attached"),
    ("ADD", "write_atomic.before-rename:3"),
    ("DEL", "yh-bridge.del.interface-deleted"),
    ("DEL", "yh-bridge.del.address-released"),
    ("DEL", "yonghui.del.delegate-done"),
    ("DEL", "selector.del.chain-done"),
    ("DEL", "selector.del.tombstoned"),
];

/// The same for a pod with two networks: both records are written before either chain runs
/// (`write_atomic` `:1` and `:2`, renamed one after the other), then every point of the first
/// network (yonghui's file is write `:3`, the rest `:1`), between the two, inside the second
/// (write `:4`, the rest `:2`), after both, and the results (write `:5`); DEL takes `net1` first.
const CRASH_POINTS_TWO_NETWORKS: &[(&str, &str)] = &[
    ("ADD", "write_atomic.before-rename:1"),
    ("ADD", "write_atomic.before-rename:2"),
    ("ADD", "write_atomic.before-rename:3"),
    ("ADD", "yh-bridge.add.address-allocated:1"),
    ("ADD", "yh-bridge.add.nat-added:1"),
    ("ADD", "selector.add.chain-done:1"),
    ("ADD", "write_atomic.before-rename:4"),
    ("ADD", "yh-bridge.add.veth-made:2"),
    ("ADD", "yh-bridge.add.address-allocated:2"),
    ("ADD", "yh-bridge.add.before-nat:2"),
    ("ADD", "yh-bridge.add.nat-added:2"),
    ("ADD", "selector.add.chain-done:2"),
    ("ADD", "selector.add.attached"),
    ("ADD", "write_atomic.before-rename:5"),
    ("DEL", "yh-bridge.del.interface-deleted:1"),
    ("DEL", "yonghui.del.delegate-done:1"),
    ("DEL", "selector.del.chain-done:1"),
    ("DEL", "yh-bridge.del.interface-deleted:2"),
    ("DEL", "yh-bridge.del.address-released:2"),
    ("DEL", "yonghui.del.delegate-done:2"),
    ("DEL", "selector.del.chain-done:2"),
    ("DEL", "selector.del.tombstoned"),
];

#[test]
fn killed_at_every_crash_point_the_runtimes_del_leaves_nothing() {
    killed_at_every_crash_point(&[NETWORK], CRASH_POINTS);
}

#[test]
fn killed_at_every_crash_point_of_two_networks_the_runtimes_del_leaves_nothing() {
    killed_at_every_crash_point(&[NETWORK, SECOND], CRASH_POINTS_TWO_NETWORKS);
}

fn killed_at_every_crash_point(networks: &[&str], points: &[(&str, &str)]) {
    let (n, conf) = node(networks);
    let mut pod = n.pod(POD);
    let mut leaks = Vec::new();
    for &(command, point) in points {
        pod = pod.renew(POD);
        let (ending, left) = crash_then_del(&n, networks, &conf, &pod, command, Kill::AtCrashPoint(point));
        assert_eq!(ending, Ending::Killed, "{command} did not reach crash point {point}");
        leaks.extend(left.into_iter().map(|l| format!("{command} killed at {point}, {l}")));
    }
    let left = n.leftovers();
    report(&format!(
        "crash: {} network(s), {} crash points ({} in ADD, {} in DEL), each followed by the runtime's DEL twice; leaks found: {}",
        networks.len(),
        points.len(),
        points.iter().filter(|(c, _)| *c == "ADD").count(),
        points.iter().filter(|(c, _)| *c == "DEL").count(),
        leaks.len() + left.len()
    ));
    assert!(leaks.is_empty(), "left behind after the runtime's DEL:\n{leaks:#?}");
    assert!(left.is_empty(), "left on the node: {left:#?}");
}

/// A runtime kills a plugin whose IPAM plugin is slow (one that asks a remote allocator, say) and
/// DELs right away. The IPAM plugin is not killed with the plugin (killed mid-write, host-local can
/// leave a lease with no owner); it finishes, allocating an address. The DEL must wait for it,
/// holding the attachment's lock it inherited, and then release that address.
#[test]
fn a_del_after_a_killed_add_releases_what_its_ipam_plugin_went_on_to_allocate() {
    let n = NetnsNode::new();
    let started = n.sb.path().join("ipam-started");
    let finished = n.sb.path().join("ipam-finished");
    // host-local, after a pause on ADD; it says when it has started and when it has finished.
    let slow = n.sb.bin().join("slow-ipam");
    FakePlugin::new()
        .on(
            "ADD",
            [
                Step::Touch(started.clone()),
                Step::Sleep(Duration::from_secs(1)),
                Step::Run("host-local".into()),
                Step::Touch(finished.clone()),
            ],
        )
        .otherwise([Step::Exec("host-local".into())])
        .write(&slow);
    n.add_yonghui_network(NETWORK, 31, json!({"ipam": {"type": "slow-ipam", "dataDir": n.ipam_dir()}}));
    n.api.put_pod("default", POD, testkit::apiserver::literal(NETWORK));
    let conf = n.selector_conf("1.0.0", json!({}));
    let pod = n.pod(POD);

    let (ending, _) = run_and_kill(&n, "ADD", &pod, &conf, Kill::OnceExists(&started));
    assert_eq!(ending, Ending::Killed);
    assert!(!finished.exists(), "the IPAM plugin was still at work when the plugin was killed");
    let reply = n.call("DEL", &pod, &conf);
    assert_eq!(reply.code, 0, "{reply:?}");
    assert!(finished.exists(), "the DEL returned while the killed ADD's IPAM plugin was still at work");
    let reserved = testkit::inspect::list_dir(&n.ipam_dir())
        .iter()
        .any(|net| n.ipam_dir().join(net).join("last_reserved_ip.0").exists());
    assert!(reserved, "the IPAM plugin, left to finish, allocated an address");
    let left = n.leftovers();
    assert!(left.is_empty(), "left after the DEL: {left:?}");
}
