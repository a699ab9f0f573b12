//! The burst: every pod's ADD exec'd on its node as a runtime execs its network plugin's IPAM
//! (the CNI variables, `K8S_POD_*` in `CNI_ARGS`, the network configuration on stdin), a few at once
//! per node as a kubelet starts sandboxes; a failed ADD is torn down with a DEL and tried again,
//! backing off, as the kubelet does with a failed sandbox, until the time limit. Then the DELs.

use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A pod as the runtime knows it.
#[derive(Debug, Clone)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: usize,
}

/// How a node's plugin is exec'd: its path, its environment, its network configuration.
#[derive(Clone)]
pub struct NodeExec {
    pub plugin: PathBuf,
    pub env: Vec<(String, String)>,
    pub network: Value,
}

/// A pod's ADD that succeeded: the sandbox it was for and the address it got.
#[derive(Debug, Clone)]
pub struct Held {
    pub pod: Pod,
    pub container_id: String,
    pub address: String,
}

struct Job {
    pod: Pod,
    attempt: u32,
    not_before: Instant,
}

/// A burst under way: per node, its queue and its workers.
pub struct Burst {
    queues: Vec<Arc<Mutex<VecDeque<Job>>>>,
    dead: Vec<Arc<AtomicBool>>,
    /// Per node, the plugins running now (their process ids), to kill with their node.
    running: Vec<Arc<Mutex<Vec<u32>>>>,
    /// Pods still without an address.
    pub remaining: Arc<AtomicUsize>,
    pub held: Arc<Mutex<Vec<Held>>>,
    pub failed_attempts: Arc<AtomicUsize>,
    /// The first few distinct errors.
    pub errors: Arc<Mutex<Vec<String>>>,
    workers: Vec<(usize, std::thread::JoinHandle<()>)>,
    deadline: Instant,
}

impl Burst {
    /// Start `per_node` workers per node over `pods`, each ADD as `execs[pod.node]` says.
    pub fn start(execs: &[NodeExec], pods: Vec<Pod>, per_node: usize, deadline: Instant) -> Burst {
        let nodes = execs.len();
        let mut burst = Burst {
            queues: (0..nodes).map(|_| Arc::default()).collect(),
            dead: (0..nodes).map(|_| Arc::default()).collect(),
            running: (0..nodes).map(|_| Arc::default()).collect(),
            remaining: Arc::new(AtomicUsize::new(pods.len())),
            held: Arc::default(),
            failed_attempts: Arc::default(),
            errors: Arc::default(),
            workers: Vec::new(),
            deadline,
        };
        let now = Instant::now();
        for pod in pods {
            burst.queues[pod.node].lock().unwrap().push_back(Job { pod, attempt: 0, not_before: now });
        }
        for (node, exec) in execs.iter().enumerate() {
            for _ in 0..per_node {
                let worker = Worker {
                    exec: exec.clone(),
                    queue: burst.queues[node].clone(),
                    dead: burst.dead[node].clone(),
                    running: burst.running[node].clone(),
                    remaining: burst.remaining.clone(),
                    held: burst.held.clone(),
                    failed_attempts: burst.failed_attempts.clone(),
                    errors: burst.errors.clone(),
                    deadline,
                };
                burst.workers.push((node, std::thread::spawn(move || worker.run())));
            }
        }
        burst
    }

    /// The addresses handed out so far.
    pub fn allocated(&self) -> usize {
        self.held.lock().unwrap().len()
    }

    /// Node `node` dies: its plugins running now are killed, its workers stop, its pods still
    /// queued are dropped. Returns its pods that got an address.
    pub fn kill_node(&mut self, node: usize) -> Vec<Held> {
        self.dead[node].store(true, Ordering::SeqCst);
        for pid in self.running[node].lock().unwrap().iter() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), nix::sys::signal::Signal::SIGKILL);
        }
        let (theirs, others): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.workers).into_iter().partition(|(n, _)| *n == node);
        self.workers = others;
        for (_, worker) in theirs {
            let _ = worker.join();
        }
        let dropped = self.queues[node].lock().unwrap().drain(..).count();
        self.remaining.fetch_sub(dropped, Ordering::SeqCst);
        self.held.lock().unwrap().iter().filter(|h| h.pod.node == node).cloned().collect()
    }

    /// More pods to ADD (the dead node's, created again on other nodes).
    pub fn add(&self, pods: Vec<Pod>) {
        self.remaining.fetch_add(pods.len(), Ordering::SeqCst);
        let now = Instant::now();
        for pod in pods {
            self.queues[pod.node].lock().unwrap().push_back(Job { pod, attempt: 0, not_before: now });
        }
    }

    /// Keep the workers from ending while more pods are on their way (`add`), until `release`.
    pub fn hold(&self) {
        self.remaining.fetch_add(1, Ordering::SeqCst);
    }

    pub fn release(&self) {
        self.remaining.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether every pod has its address.
    pub fn done(&self) -> bool {
        self.remaining.load(Ordering::SeqCst) == 0
    }

    /// Wait until every pod has its address or the deadline passed; the workers stop.
    pub fn finish(self) -> Finished {
        while !self.done() && Instant::now() < self.deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let all = self.done();
        let at = Instant::now();
        for (_, worker) in self.workers {
            let _ = worker.join();
        }
        let held = std::mem::take(&mut *self.held.lock().unwrap());
        let errors = std::mem::take(&mut *self.errors.lock().unwrap());
        Finished {
            all,
            at,
            held,
            failed_attempts: self.failed_attempts.load(Ordering::SeqCst),
            errors,
            dead: self.dead.iter().map(|d| d.load(Ordering::SeqCst)).collect(),
        }
    }
}

pub struct Finished {
    /// Every pod got its address before the deadline.
    pub all: bool,
    /// When the burst ended (the last address handed out, or the deadline).
    pub at: Instant,
    pub held: Vec<Held>,
    pub failed_attempts: usize,
    pub errors: Vec<String>,
    /// Per node, whether it was killed.
    pub dead: Vec<bool>,
}

impl Finished {
    /// The addresses held by live pods (not on a killed node).
    pub fn live(&self) -> impl Iterator<Item = &Held> {
        self.held.iter().filter(|h| !self.dead[h.pod.node])
    }

    /// Addresses handed to two live pods at once: per address, its holders beyond the first.
    pub fn conflicts(&self) -> usize {
        let mut holders: HashMap<&str, usize> = HashMap::new();
        for h in self.live() {
            *holders.entry(h.address.as_str()).or_default() += 1;
        }
        holders.values().map(|n| n - 1).sum()
    }
}

struct Worker {
    exec: NodeExec,
    queue: Arc<Mutex<VecDeque<Job>>>,
    dead: Arc<AtomicBool>,
    running: Arc<Mutex<Vec<u32>>>,
    remaining: Arc<AtomicUsize>,
    held: Arc<Mutex<Vec<Held>>>,
    failed_attempts: Arc<AtomicUsize>,
    errors: Arc<Mutex<Vec<String>>>,
    deadline: Instant,
}

impl Worker {
    fn run(self) {
        loop {
            if self.dead.load(Ordering::SeqCst) || Instant::now() >= self.deadline {
                return;
            }
            let job = {
                let mut queue = self.queue.lock().unwrap();
                let now = Instant::now();
                match queue.iter().position(|j| j.not_before <= now) {
                    Some(i) => queue.remove(i),
                    None => None,
                }
            };
            let Some(job) = job else {
                if self.remaining.load(Ordering::SeqCst) == 0 {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            // A sandbox per attempt, as the runtime makes a new one after a failure.
            let container_id = format!("{}-{}", job.pod.uid.replace('-', ""), job.attempt);
            let answer = run_plugin(&self.exec, "ADD", &job.pod, &container_id, Some(&self.running));
            if self.dead.load(Ordering::SeqCst) {
                // Its node is gone with the pod: the pod is created again elsewhere.
                self.remaining.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            match answer.and_then(|out| address_of(&out)) {
                Ok(address) => {
                    self.held.lock().unwrap().push(Held { pod: job.pod, container_id, address });
                    self.remaining.fetch_sub(1, Ordering::SeqCst);
                }
                Err(error) => {
                    self.failed_attempts.fetch_add(1, Ordering::SeqCst);
                    {
                        let mut errors = self.errors.lock().unwrap();
                        if errors.len() < 5 && !errors.contains(&error) {
                            errors.push(error);
                        }
                    }
                    let _ = run_plugin(&self.exec, "DEL", &job.pod, &container_id, None);
                    let backoff = Duration::from_secs(1 << job.attempt.min(4));
                    let retry = Job { pod: job.pod, attempt: job.attempt + 1, not_before: Instant::now() + backoff };
                    self.queue.lock().unwrap().push_back(retry);
                }
            }
        }
    }
}

/// Exec the plugin for `command` (ADD or DEL) of `pod`'s sandbox `container_id`; its stdout, or
/// why it failed (its CNI error's message).
pub fn run_plugin(
    exec: &NodeExec,
    command: &str,
    pod: &Pod,
    container_id: &str,
    running: Option<&Mutex<Vec<u32>>>,
) -> Result<String, String> {
    let args = format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={container_id};K8S_POD_UID={}",
        pod.namespace, pod.name, pod.uid
    );
    let cni_path = exec.plugin.parent().map(|p| p.display().to_string()).unwrap_or_default();
    let mut child = Command::new(&exec.plugin)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", container_id)
        .env("CNI_NETNS", format!("/var/run/netns/cni-{container_id}"))
        .env("CNI_IFNAME", "net1")
        .env("CNI_PATH", cni_path)
        .env("CNI_ARGS", args)
        .envs(exec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("exec {}: {e}", exec.plugin.display()))?;
    let pid = child.id();
    if let Some(running) = running {
        running.lock().unwrap().push(pid);
    }
    let _ = child.stdin.take().unwrap().write_all(exec.network.to_string().as_bytes());
    let output = child.wait_with_output();
    if let Some(running) = running {
        running.lock().unwrap().retain(|p| *p != pid);
    }
    let output = output.map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    if output.status.success() {
        return Ok(stdout);
    }
    let error: Value = serde_json::from_str(&stdout).unwrap_or_default();
    Err(match error["msg"].as_str() {
        Some(msg) => format!("code {}: {msg}", error["code"]),
        None => format!("{}: {}", output.status, String::from_utf8_lossy(&output.stderr).trim()),
    })
}

/// The first address of a CNI result.
fn address_of(result: &str) -> Result<String, String> {
    let result: Value = serde_json::from_str(result).map_err(|e| format!("a result that is not JSON: {e}"))?;
    result["ips"][0]["address"]
        .as_str()
        .map(|a| a.split('/').next().unwrap_or(a).to_string())
        .ok_or_else(|| format!("a result without an address: {result}"))
}

/// DEL every held sandbox, `per_node` at a time per node, until `deadline`; how many DELs failed,
/// and the first error.
pub fn delete_all(execs: &[NodeExec], held: &[Held], per_node: usize, deadline: Instant) -> (usize, Option<String>) {
    let mut by_node: Vec<VecDeque<Held>> = (0..execs.len()).map(|_| VecDeque::new()).collect();
    for h in held {
        by_node[h.pod.node].push_back(h.clone());
    }
    let failures = Arc::new(AtomicUsize::new(0));
    let first_error: Arc<Mutex<Option<String>>> = Arc::default();
    let mut workers = Vec::new();
    for (node, queue) in by_node.into_iter().enumerate() {
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..per_node {
            let (queue, exec, failures, first_error) =
                (queue.clone(), execs[node].clone(), failures.clone(), first_error.clone());
            workers.push(std::thread::spawn(move || {
                while Instant::now() < deadline {
                    let Some(h) = queue.lock().unwrap().pop_front() else { return };
                    if let Err(e) = run_plugin(&exec, "DEL", &h.pod, &h.container_id, None) {
                        failures.fetch_add(1, Ordering::SeqCst);
                        first_error.lock().unwrap().get_or_insert(e);
                    }
                }
            }));
        }
    }
    for worker in workers {
        let _ = worker.join();
    }
    let error = first_error.lock().unwrap().take();
    (failures.load(Ordering::SeqCst), error)
}
