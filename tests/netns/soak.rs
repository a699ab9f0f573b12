//! Soak, as root: hundreds of pod sandboxes set up and torn down through the selector, 8 at a time,
//! while the fake API server misbehaves: 5xx and 429 answers, slow answers, answers that never
//! come, dropped connections, and outages (its port closed, or every request failing) long enough
//! to exhaust the selector's time budget. The network is `yonghui` -> `yh-bridge` (with NAT) ->
//! `host-local`, chosen by ConfigMap, so every ADD asks the API server twice; every other pod has a
//! second such network on `net1` (and writes its network-status annotation, a third request). Each
//! sandbox has a netns of its own, which the runtime sometimes removes before its DEL, as after a
//! node restart. Some ADDs are killed (SIGKILL, as a runtime's timeout does) at a random moment of
//! their run, and the runtime's DEL follows at once.
//!
//! What must hold: every ADD succeeds, or fails with code 11 (the API server could not be reached
//! in time) leaving nothing of its pod; every DEL (and a repeated DEL), after a killed ADD too,
//! succeeds and leaves nothing of its pod once the killed ADD's helpers have ended; at no time do
//! two live pods hold the same address; at the end nothing is left on the node, and the attachments
//! directory is empty (no record, no temp file of a killed write). The run is bounded by a cycle count and a deadline (not a timing assertion); the counts are
//! printed. The seed of the fault schedule is printed; `YH_GENIE_TEST_SEED` replays it.

use crate::support::node::{NetnsNode, Pod, addresses_on, pod_addresses};
use crate::support::rng::Rng;
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use testkit::apiserver::{Fault, from_config_map};
use testkit::inspect::link_names;
use testkit::process::report;

const NETWORK: &str = "fabric";
/// The second network of every other pod, on `net1`.
const SECOND: &str = "fabric2";
const NETWORKS: [&str; 2] = [NETWORK, SECOND];
const WORKERS: usize = 8;
/// Pod sandboxes set up and torn down, unless the deadline comes first.
const CYCLES: usize = 600;
const DEADLINE: Duration = Duration::from_secs(150);
/// The selector's API budget (seconds), short so that outages make ADDs fail within the run; per
/// attempt, short so that hanging answers are given up on and retried.
const API_BUDGET: f64 = 2.0;
const API_ATTEMPT: f64 = 0.5;
/// The share of ADDs killed, and the longest they run first (a normal ADD here takes 10-40 ms).
const KILLED: f64 = 0.1;
const KILL_WITHIN_MICROS: u64 = 40_000;

/// What the run saw. Every cycle is one ADD and one DEL.
#[derive(Default)]
struct Tally {
    cycles: usize,
    adds_ok: usize,
    /// Failed ADDs that left nothing, by CNI error code.
    adds_failed_cleanly: BTreeMap<u64, usize>,
    /// ADDs that failed otherwise: another code, or something left behind.
    adds_failed_otherwise: usize,
    checks: usize,
    checks_ok: usize,
    repeated_dels: usize,
    /// DELs that came after the pod's netns had been removed.
    netns_gone: usize,
    /// DELs, repeated ones included, that succeeded.
    dels_ok: usize,
    /// ADDs killed part-way, and those that finished before their kill came.
    adds_killed: usize,
    adds_finished_before_kill: usize,
    /// Everything that broke a promise, described.
    broken: Vec<String>,
    leaks: Vec<String>,
    duplicates: Vec<String>,
}

struct Soak {
    n: NetnsNode,
    conf: String,
    tally: Mutex<Tally>,
    /// The address of every pod between its ADD and its DEL, and the container holding it.
    live: Mutex<BTreeMap<String, String>>,
    next_cycle: AtomicUsize,
    deadline: Instant,
}

impl Soak {
    fn new() -> Self {
        let n = NetnsNode::new();
        n.add_yonghui_network(NETWORK, 40, json!({}));
        n.add_yonghui_network(SECOND, 41, json!({}));
        n.api.put_config_map("default", "net", json!({"net": NETWORK}));
        n.api.put_config_map("default", "two-nets", json!({"net": format!("{NETWORK},{SECOND}")}));
        let conf =
            n.selector_conf("1.0.0", json!({"apiTimeoutSeconds": API_BUDGET, "apiAttemptTimeoutSeconds": API_ATTEMPT}));
        Soak {
            n,
            conf,
            tally: Mutex::default(),
            live: Mutex::default(),
            next_cycle: AtomicUsize::new(0),
            deadline: Instant::now() + DEADLINE,
        }
    }

    /// One worker: pod sandbox after pod sandbox, each with a netns of its own.
    fn worker(&self, seed: u64) {
        let mut rng = Rng::new(seed);
        loop {
            let i = self.next_cycle.fetch_add(1, Ordering::SeqCst);
            if i >= CYCLES || Instant::now() > self.deadline {
                return;
            }
            let name = format!("soak-{i}");
            let two_networks = !i.is_multiple_of(2);
            let config_map = if two_networks { "two-nets" } else { "net" };
            self.n.api.put_pod("default", &name, from_config_map(config_map, "net"));
            self.cycle(&self.n.pod(&name), two_networks, &mut rng);
            self.tally.lock().unwrap().cycles += 1;
        }
    }

    /// ADD, CHECK (sometimes), DEL (sometimes after the runtime has removed the netns), and DEL
    /// again (sometimes), checking each step.
    fn cycle(&self, pod: &Pod, two_networks: bool, rng: &mut Rng) {
        if rng.chance(KILLED) {
            self.killed_add_then_del(pod, rng);
            return;
        }
        let add = self.n.call("ADD", pod, &self.conf);
        if add.code != 0 {
            self.add_failed(pod, &add.stdout);
        } else if let Some(addresses) = self.added(pod, two_networks, &add.stdout) {
            if rng.chance(0.5) {
                self.check(pod);
            }
            // The pod is going: from now on its addresses may be handed out again.
            let mut live = self.live.lock().unwrap();
            for address in addresses {
                live.remove(&address);
            }
        }
        if rng.chance(0.15) {
            // As after a node restart, or a runtime that tore the sandbox down first.
            pod.netns.delete();
            self.tally.lock().unwrap().netns_gone += 1;
        }
        self.del(pod, "DEL");
        if rng.chance(0.25) {
            self.del(pod, "repeated DEL");
        }
    }

    /// An ADD killed with SIGKILL after a random part of its run (the signal to the selector alone,
    /// as a runtime sends it), the runtime's DEL right away, and, once every helper the killed ADD
    /// started has ended, nothing of the pod left. Its addresses are not tracked as live: the pod
    /// is gone before anything could see them.
    fn killed_add_then_del(&self, pod: &Pod, rng: &mut Rng) {
        // Output to a file: the end of a pipe would wait for the helpers that share it.
        let output = tempfile::tempfile().unwrap();
        let mut child = self
            .n
            .command("ADD", pod, &[])
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .process_group(0)
            .spawn()
            .expect("plugin starts");
        // A plugin killed before it reads its stdin closes the pipe: not a failure.
        let _ = child.stdin.take().unwrap().write_all(self.conf.as_bytes());
        let group = Pid::from_raw(child.id() as i32);
        std::thread::sleep(Duration::from_micros(rng.next_u64() % KILL_WITHIN_MICROS));
        let _ = kill(group, Signal::SIGKILL);
        let killed = child.wait().unwrap().signal() == Some(9);
        let del = self.n.call("DEL", pod, &self.conf);
        let deadline = Instant::now() + Duration::from_secs(60);
        while killpg(group, None) != Err(Errno::ESRCH) {
            assert!(Instant::now() < deadline, "helpers of the killed ADD of {} still run after 60 s", pod.cid);
            std::thread::sleep(Duration::from_millis(2));
        }
        let left = self.n.leftovers_of_networks(pod, &NETWORKS);
        let mut tally = self.tally.lock().unwrap();
        if killed {
            tally.adds_killed += 1;
        } else {
            tally.adds_finished_before_kill += 1;
        }
        match del.code {
            0 => tally.dels_ok += 1,
            _ => tally.broken.push(format!("DEL after the killed ADD of {}: {}", pod.cid, del.stdout.trim())),
        }
        if !left.is_empty() {
            tally.leaks.push(format!("DEL after the killed ADD of {}: {left:?}", pod.cid));
        }
    }

    fn check(&self, pod: &Pod) {
        let check = self.n.call("CHECK", pod, &self.conf);
        let mut tally = self.tally.lock().unwrap();
        tally.checks += 1;
        match check.code {
            0 => tally.checks_ok += 1,
            _ => tally.broken.push(format!("CHECK of {}: {}", pod.cid, check.stdout.trim())),
        }
    }

    /// A successful ADD: the pod has the result's address on eth0 (and one on net1 if it chose a
    /// second network, none otherwise), host-local leases them to this pod, and no other live pod
    /// has them. Returns them.
    fn added(&self, pod: &Pod, two_networks: bool, stdout: &str) -> Option<Vec<String>> {
        let result: Value = serde_json::from_str(stdout).unwrap_or_default();
        let address = result["ips"][0]["address"].as_str().unwrap_or_default().to_string();
        let on_pod = pod_addresses(pod);
        let mut addresses = vec![address.clone()];
        let mut fine = on_pod == [address.as_str()];
        let has_net1 = link_names(&pod.netns, "").iter().any(|l| l == "net1");
        fine &= has_net1 == two_networks;
        if has_net1 {
            let net1 = addresses_on(pod, "net1");
            fine &= net1.len() == 1;
            addresses.extend(net1);
        }
        let leases = self.n.leases();
        let leased = |a: &String| leases.iter().any(|(ip, cid)| *cid == pod.cid && a.starts_with(&format!("{ip}/")));
        let mut tally = self.tally.lock().unwrap();
        if !fine || !addresses.iter().all(leased) {
            tally.adds_failed_otherwise += 1;
            tally
                .broken
                .push(format!("ADD of {}: result {stdout}, on the pod {addresses:?}, leases {leases:?}", pod.cid));
            return None;
        }
        tally.adds_ok += 1;
        for address in &addresses {
            if let Some(holder) = self.live.lock().unwrap().insert(address.clone(), pod.cid.clone()) {
                tally.duplicates.push(format!("{address} handed to {} while {holder} held it", pod.cid));
            }
        }
        Some(addresses)
    }

    /// A failed ADD must be code 11 (nothing else can fail here) and leave nothing of the pod but
    /// its attachment lock file, which the DEL that follows removes.
    fn add_failed(&self, pod: &Pod, stdout: &str) {
        let error: Value = serde_json::from_str(stdout).unwrap_or_default();
        let code = error["code"].as_u64();
        let own_lock = NetnsNode::own_lock(pod);
        let left: Vec<String> =
            self.n.leftovers_of_networks(pod, &NETWORKS).into_iter().filter(|l| *l != own_lock).collect();
        let mut tally = self.tally.lock().unwrap();
        match code {
            Some(11) if left.is_empty() => *tally.adds_failed_cleanly.entry(11).or_default() += 1,
            Some(11) => {
                tally.adds_failed_otherwise += 1;
                tally.leaks.push(format!("failed ADD of {}: {left:?}", pod.cid));
            }
            _ => {
                tally.adds_failed_otherwise += 1;
                tally.broken.push(format!("ADD of {} failed unexpectedly: {stdout}", pod.cid));
            }
        }
    }

    /// DEL must succeed and leave nothing of the pod.
    fn del(&self, pod: &Pod, what: &str) {
        let del = self.n.call("DEL", pod, &self.conf);
        let left = self.n.leftovers_of_networks(pod, &NETWORKS);
        let mut tally = self.tally.lock().unwrap();
        if what != "DEL" {
            tally.repeated_dels += 1;
        }
        match del.code {
            0 => tally.dels_ok += 1,
            _ => tally.broken.push(format!("{what} of {}: {}", pod.cid, del.stdout.trim())),
        }
        if !left.is_empty() {
            tally.leaks.push(format!("{what} of {}: {left:?}", pod.cid));
        }
    }
}

/// Fault episodes injected, by kind.
#[derive(Default)]
struct Faults {
    episodes: BTreeMap<&'static str, usize>,
}

impl Faults {
    /// Until `stop`: a pause, then one episode of misbehaviour.
    fn inject_until(&mut self, s: &Soak, rng: &mut Rng, stop: &AtomicBool) {
        let api = &s.n.api;
        let millis = |rng: &mut Rng, from: u64, to: u64| Duration::from_millis(from + rng.next_u64() % (to - from));
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(millis(rng, 50, 500));
            let times = 1 + rng.below(4);
            let kind = match rng.below(8) {
                0 => {
                    api.inject(Fault::Status(503), times);
                    "503"
                }
                1 => {
                    api.inject(Fault::Status(429), times);
                    "429"
                }
                2 => {
                    api.inject(Fault::Status(500), times);
                    "500"
                }
                3 => {
                    api.inject(Fault::Delay(millis(rng, 100, 1200)), times);
                    "slow answer"
                }
                4 => {
                    api.inject(Fault::Drop, times);
                    "dropped connection"
                }
                5 => {
                    api.inject(Fault::Hang, times);
                    "no answer"
                }
                6 => {
                    api.down();
                    std::thread::sleep(millis(rng, 300, 3000));
                    api.up();
                    "down (connection refused)"
                }
                _ => {
                    api.inject_always(Fault::Status(503));
                    std::thread::sleep(millis(rng, 500, 3000));
                    api.clear_faults();
                    "outage (every request 503)"
                }
            };
            *self.episodes.entry(kind).or_default() += 1;
        }
    }
}

#[test]
fn hundreds_of_pods_eight_at_a_time_under_api_faults_lose_nothing() {
    let (mut rng, seed) = Rng::from_env();
    report(&format!("soak: seed {seed} (set {} to replay)", crate::support::rng::SEED_VAR));
    let s = Soak::new();
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let mut faults = Faults::default();
    let worker_seeds: Vec<u64> = (0..WORKERS).map(|_| rng.next_u64()).collect();
    std::thread::scope(|scope| {
        let (soak, stop, faults, rng) = (&s, &stop, &mut faults, &mut rng);
        let injector = scope.spawn(move || faults.inject_until(soak, rng, stop));
        let workers: Vec<_> = worker_seeds.iter().map(|&seed| scope.spawn(move || soak.worker(seed))).collect();
        for worker in workers {
            worker.join().expect("a worker panicked");
        }
        stop.store(true, Ordering::SeqCst);
        injector.join().expect("the fault injector panicked");
    });
    s.n.api.clear_faults();
    s.n.api.up();
    let elapsed = started.elapsed();
    // The kernel destroys the veths of deleted netns in the background.
    let veths_gone = Instant::now() + Duration::from_secs(30);
    while !s.n.node_veths().is_empty() && Instant::now() < veths_gone {
        std::thread::sleep(Duration::from_millis(50));
    }

    let t = s.tally.into_inner().unwrap();
    let left = s.n.leftovers();
    let failed: usize = t.adds_failed_cleanly.values().sum();
    let by_code: Vec<String> = t.adds_failed_cleanly.iter().map(|(code, n)| format!("code {code}: {n}")).collect();
    let episodes: Vec<String> = faults.episodes.iter().map(|(kind, n)| format!("{kind} x{n}")).collect();
    report(&format!(
        "soak: {} cycles in {:.0} s, {WORKERS} at a time: {} operations ({} ADD, {} CHECK, {} DEL, {} of them repeated, \
         {} after the netns was removed); \
         faults injected: {} episodes ({}), {} requests answered with a fault; \
         ADD ok {} / failed cleanly {failed} ({}) / failed otherwise {} / killed {} (finished before the kill {}); \
         CHECK ok {}; DEL ok {}; addresses handed out twice: {}; leaks found: {}",
        t.cycles,
        elapsed.as_secs_f64(),
        2 * t.cycles + t.checks + t.repeated_dels,
        t.cycles,
        t.checks,
        t.cycles + t.repeated_dels,
        t.repeated_dels,
        t.netns_gone,
        faults.episodes.values().sum::<usize>(),
        episodes.join(", "),
        s.n.api.faulted_requests(),
        t.adds_ok,
        by_code.join(", "),
        t.adds_failed_otherwise,
        t.adds_killed,
        t.adds_finished_before_kill,
        t.checks_ok,
        t.dels_ok,
        t.duplicates.len(),
        t.leaks.len() + left.len(),
    ));
    assert!(t.cycles > 0, "no cycle ran");
    assert!(t.broken.is_empty(), "broken promises (seed {seed}):\n{:#?}", t.broken);
    assert!(t.duplicates.is_empty(), "addresses handed out twice (seed {seed}):\n{:#?}", t.duplicates);
    assert!(t.leaks.is_empty(), "left behind (seed {seed}):\n{:#?}", t.leaks);
    assert!(left.is_empty(), "left on the node at the end (seed {seed}): {left:#?}");
    assert!(t.adds_killed > 0, "no ADD was killed part-way (seed {seed})");
    assert_eq!(s.n.records(), Vec::<String>::new(), "the attachments directory at the end (seed {seed})");
    assert_eq!(link_names(&s.n.netns, "type bridge").len(), 2, "one bridge for each network");
}
