//! Every agent started again at once with its node's pods there, as a DaemonSet rollout or a
//! cluster's reboot starts them: from each agent's start until it holds every pod of its node, as
//! the plugin asks for them (`probe`'s question, on the agent's socket), and what the agents said
//! of streaming lists meanwhile (an API server on an etcd without progress requests answers them
//! with an error, and the agents must list instead).

use super::systems::NodeDaemon;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use yh_genie::node::agent_socket::client::exchange;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, Request};

/// How long an agent may take to hold its node's pods before it counts as never.
const PATIENCE: Duration = Duration::from_secs(120);

/// A pod as the agent is asked for it: namespace, name, uid.
pub type LivePod = (String, String, String);

/// What the start cost.
#[derive(Default)]
pub struct StartAll {
    /// Milliseconds from each agent's start until it held every pod of its node.
    pub held_ms: Vec<f64>,
    /// Agents that did not within `PATIENCE`.
    pub never: usize,
    /// Streaming lists the agents found not served (their metric), summed.
    pub refusals: u64,
    /// Agents that found one.
    pub agents_refused: usize,
}

/// Kill every daemon, start them all, and wait until each holds `pods[i]` (its node's).
pub fn run(daemons: &mut [NodeDaemon], pods: &[Vec<LivePod>]) -> StartAll {
    for daemon in daemons.iter_mut() {
        daemon.kill();
    }
    let started: Vec<Instant> = daemons
        .iter_mut()
        .map(|daemon| {
            daemon.start();
            Instant::now()
        })
        .collect();
    let sockets: Vec<PathBuf> = daemons.iter().map(|d| d.socket.clone()).collect();
    let next = Mutex::new(0..daemons.len());
    let held: Mutex<Vec<Option<Duration>>> = Mutex::new(vec![None; daemons.len()]);
    std::thread::scope(|scope| {
        for _ in 0..16 {
            scope.spawn(|| {
                while let Some(node) = { next.lock().unwrap().next() } {
                    let took = holds_all(&sockets[node], &pods[node], started[node]);
                    held.lock().unwrap()[node] = took;
                }
            });
        }
    });
    let held = held.into_inner().unwrap();
    let mut outcome = StartAll {
        held_ms: held.iter().flatten().map(|d| d.as_secs_f64() * 1000.0).collect(),
        never: held.iter().filter(|h| h.is_none()).count(),
        ..Default::default()
    };
    for daemon in daemons.iter() {
        let refused = daemon.metric_sum("yh_genie_agent_streaming_list_refusals_total");
        outcome.refusals += refused;
        outcome.agents_refused += usize::from(refused > 0);
    }
    outcome
}

/// When, after `started`, the agent at `socket` answered with every one of `pods` and its objects;
/// none if not within `PATIENCE`.
fn holds_all(socket: &std::path::Path, pods: &[LivePod], started: Instant) -> Option<Duration> {
    for (namespace, name, uid) in pods {
        let ask =
            Ask::Selection { namespace: namespace.clone(), name: name.clone(), uid: Some(uid.clone()), wait_ms: 1000 };
        let request = Request::new(ask);
        loop {
            match exchange(socket, &request, Instant::now() + Duration::from_secs(2)) {
                Ok(Answer::Objects(_)) => break,
                _ if started.elapsed() > PATIENCE => return None,
                Ok(_) => {}
                // Not listening yet.
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    Some(started.elapsed())
}
