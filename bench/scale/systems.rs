//! The per-node daemons under test, K of them, each as its DaemonSet runs it on its node, with its
//! node's name and its own credentials (`setup::node_tokens`):
//!
//! - yh-genie: `yh-genie install --agent` (the installer and the node agent in one process), its
//!   host paths under the node's directory, its socket there, its metrics on a port of its own.
//! - Multus thick: `multus-daemon` (built from its source, given with `--multus-thick-bin`), in a
//!   mount namespace of its own where the node's token is at the in-cluster path client-go reads,
//!   with a no-op network as the node's primary network for its generated configuration.

use super::control::API_URL;
use serde_json::json;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq)]
pub enum System {
    YhGenie { binary: PathBuf },
    MultusThick { bin_dir: PathBuf },
}

impl System {
    pub fn label(&self) -> &'static str {
        match self {
            System::YhGenie { .. } => "yh-genie",
            System::MultusThick { .. } => "Multus thick",
        }
    }

    /// The service account its DaemonSet runs as.
    pub fn service_account(&self) -> &'static str {
        match self {
            System::YhGenie { .. } => "yh-genie",
            System::MultusThick { .. } => "multus",
        }
    }
}

/// One node's daemon.
pub struct NodeDaemon {
    pub node: String,
    pub dir: PathBuf,
    /// yh-genie: the agent's socket.
    pub socket: PathBuf,
    pub metrics_port: u16,
    /// More flags for the daemon (bench/ipam: the agent's `--ipam-records` under the node's
    /// directory).
    pub extra_args: Vec<String>,
    child: Option<Child>,
    system: System,
    run_dir: PathBuf,
}

impl NodeDaemon {
    /// Lay out node `index`'s directory with its credentials (`token`, the cluster's CA).
    pub fn new(system: &System, run_dir: &Path, index: usize, node: &str, token: &str, ca: &Path) -> Self {
        let dir = run_dir.join("nodes").join(node);
        let sa = dir.join("sa");
        std::fs::create_dir_all(&sa).unwrap();
        std::fs::write(sa.join("token"), token).unwrap();
        std::fs::copy(ca, sa.join("ca.crt")).unwrap();
        std::fs::write(sa.join("namespace"), "kube-system").unwrap();
        NodeDaemon {
            node: node.to_string(),
            socket: dir.join("run/agent.sock"),
            metrics_port: 20000 + index as u16,
            extra_args: Vec::new(),
            dir,
            child: None,
            system: system.clone(),
            run_dir: run_dir.to_path_buf(),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn start(&mut self) {
        let log = self.dir.join("daemon.log");
        let mut command = match &self.system {
            System::YhGenie { binary } => {
                let host = self.dir.join("host");
                let mut c = Command::new(binary);
                c.arg("install")
                    .arg(format!("--api-server={API_URL}"))
                    .arg(format!("--sa-dir={}", self.dir.join("sa").display()))
                    .arg(format!("--bin-dir={}", host.join("bin").display()))
                    .arg(format!("--conf-dir={}", host.join("net.d").display()))
                    .arg(format!("--data-dir={}", host.join("data").display()))
                    .arg("--agent")
                    .arg(format!("--node-name={}", self.node))
                    .arg(format!("--agent-socket={}", self.socket.display()))
                    .arg(format!("--agent-metrics-address=127.0.0.1:{}", self.metrics_port))
                    .args(&self.extra_args)
                    .env_clear()
                    .env("PATH", std::env::var_os("PATH").unwrap_or_default());
                c
            }
            System::MultusThick { bin_dir } => {
                let conf_dir = self.dir.join("net.d");
                std::fs::create_dir_all(&conf_dir).unwrap();
                std::fs::write(
                    conf_dir.join("10-noop.conflist"),
                    json!({"cniVersion": "0.3.1", "name": "noop", "plugins": [{"type": "noop"}]}).to_string(),
                )
                .unwrap();
                let config = self.dir.join("daemon-config.json");
                let settings = json!({
                    "chrootDir": "", "cniVersion": "0.3.1", "logLevel": "error", "logToStderr": true,
                    "cniConfigDir": conf_dir, "multusAutoconfigDir": conf_dir, "multusConfigFile": "auto",
                    "socketDir": self.dir.join("run"), "binDir": self.run_dir.join("bin"),
                });
                std::fs::write(&config, settings.to_string()).unwrap();
                // client-go's in-cluster configuration reads the token at a fixed path: each daemon
                // gets its own in a mount namespace of its own (a tmpfs over /run hides the host's).
                let script = "mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && \
                              mount --bind \"$1\" /run/secrets/kubernetes.io/serviceaccount && exec \"$2\" -config \"$3\"";
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"])
                    .arg(self.dir.join("sa"))
                    .arg(bin_dir.join("multus-daemon"))
                    .arg(&config)
                    .env_clear()
                    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                    .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
                    .env("KUBERNETES_SERVICE_PORT", "6443")
                    .env("MULTUS_NODE_NAME", &self.node);
                c
            }
        };
        self.child = Some(testkit::process::spawn_logged(&mut command, &self.dir, &log));
    }

    /// SIGKILL and reap: what an OOM kill or a node's reboot does.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether it says it is ready: the agent's /readyz, Multus's /healthz on its socket.
    pub fn ready(&mut self) -> bool {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            panic!("the daemon of {} exited ({status}):\n{}", self.node, self.log_tail(20));
        }
        match &self.system {
            System::YhGenie { .. } => http_get_tcp(self.metrics_port, "/readyz").is_some_and(|(code, _)| code == 200),
            System::MultusThick { .. } => {
                http_get_unix(&self.dir.join("run/multus.sock"), "/healthz").is_some_and(|(code, _)| code == 200)
            }
        }
    }

    /// The sum of the agent's metric lines named `name` (any labels); 0 when it does not answer.
    pub fn metric_sum(&self, name: &str) -> u64 {
        let Some((200, text)) = http_get_tcp(self.metrics_port, "/metrics") else { return 0 };
        text.lines()
            .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for NodeDaemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Wait until every daemon is ready; how long that took.
pub fn wait_all_ready(daemons: &mut [NodeDaemon], patience: Duration) -> Duration {
    let started = Instant::now();
    let mut pending: Vec<usize> = (0..daemons.len()).collect();
    while !pending.is_empty() {
        pending.retain(|i| !daemons[*i].ready());
        if pending.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < patience,
            "{} daemons not ready after {patience:?}; {}:\n{}",
            pending.len(),
            daemons[pending[0]].node,
            daemons[pending[0]].log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    started.elapsed()
}

fn http_get_tcp(port: u16, path: &str) -> Option<(u16, String)> {
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    http_get(stream, path)
}

fn http_get_unix(socket: &Path, path: &str) -> Option<(u16, String)> {
    let stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    http_get(stream, path)
}

fn http_get<S: Read + Write>(mut stream: S, path: &str) -> Option<(u16, String)> {
    write!(stream, "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    let status = reply.split_whitespace().nth(1)?.parse().ok()?;
    let body = reply.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}
