//! The node agent as the DaemonSet runs it: `yh-genie install --agent` (or alone, `yh-genie
//! agent`), a real process in a test node's netns (where the fake API server listens), with a
//! service account of its own (the agent's token, the server's CA) and every host path it writes
//! under a directory of the test:
//! its socket, the binary and conflist it installs. Killed when dropped, so a failing test leaves
//! no process behind. Its readiness and metrics port is on the node netns' loopback.
//!
//! What the agent answers on its socket is the product's protocol: the suites ask it with the
//! product's own client.

use crate::apiserver::{AGENT_TOKEN, ApiServer, NODE_NAME};
use crate::netns::Netns;
use crate::process::unique;
use crate::yh_genie_binary;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The agent's readiness and metrics port (its default).
pub const METRICS_PORT: u16 = 9745;
/// How long a test waits for the agent to do something before failing (a guard, not a speed check).
pub const PATIENCE: Duration = Duration::from_secs(30);

pub struct Agent {
    child: Child,
    node_netns: PathBuf,
    metrics_port: u16,
    /// The agent's stderr.
    pub log: PathBuf,
}

impl Agent {
    /// Start `yh-genie install --agent` with the DaemonSet's flags in `netns`, watching `api`,
    /// listening on `socket`, its files under `dir`, its readiness and metrics on `metrics_port`,
    /// with `extra` flags.
    pub fn start(
        netns: &Netns,
        api: &ApiServer,
        dir: &Path,
        socket: &Path,
        metrics_port: u16,
        extra: &[&str],
    ) -> Agent {
        let (mut command, log) = installer(netns, api, dir);
        command.arg("--agent").args(agent_flags(socket, metrics_port, extra)).args(extra);
        let child = command.spawn().expect("the agent starts");
        Agent { child, node_netns: netns.path(), metrics_port, log }
    }

    /// Start `yh-genie agent`, the agent alone, with the flags `start` gives `install --agent`.
    pub fn start_alone(
        netns: &Netns,
        api: &ApiServer,
        dir: &Path,
        socket: &Path,
        metrics_port: u16,
        extra: &[&str],
    ) -> Agent {
        let (sa, log) = (service_account(api, dir), dir.join(format!("{}.log", unique("agent"))));
        let mut command = std::process::Command::new("ip");
        command
            .args(["netns", "exec", &netns.name])
            .arg(yh_genie_binary())
            .arg("agent")
            .arg(format!("--api-server={}", api.url()))
            .arg(format!("--sa-dir={}", sa.display()))
            .args(agent_flags(socket, metrics_port, extra))
            .args(extra)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = command.spawn().expect("the agent starts");
        Agent { child, node_netns: netns.path(), metrics_port, log }
    }

    /// The installer of `start` without `--agent`: what the DaemonSet's container costs without it.
    pub fn start_without_agent(netns: &Netns, api: &ApiServer, dir: &Path) -> Agent {
        let (mut command, log) = installer(netns, api, dir);
        let child = command.spawn().expect("the installer starts");
        Agent { child, node_netns: netns.path(), metrics_port: 0, log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Its log so far, for messages.
    pub fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET path` on its local port: (status code, body); `None` when nothing answers.
    pub fn http_get(&self, path: &str) -> Option<(u16, String)> {
        let netns = std::fs::File::open(&self.node_netns).unwrap();
        let path = path.to_string();
        let port = self.metrics_port;
        std::thread::spawn(move || {
            nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
            stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            write!(stream, "GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n").ok()?;
            let mut reply = String::new();
            stream.read_to_string(&mut reply).ok()?;
            let status = reply.split_whitespace().nth(1)?.parse().ok()?;
            let body = reply.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
            Some((status, body))
        })
        .join()
        .unwrap()
    }

    /// Wait until `/readyz` answers 200 (the node's pods are listed).
    pub fn wait_ready(&self) {
        self.wait_for("the agent to be ready", || self.http_get("/readyz").is_some_and(|(code, _)| code == 200));
    }

    /// The value of the metric line `name` (with its labels, as written), 0 when absent.
    pub fn metric(&self, name: &str) -> u64 {
        let (_, text) = self.http_get("/metrics").expect("the agent serves /metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
            .map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
    }

    /// Wait until `done`, for at most `PATIENCE`; fails with the agent's log.
    pub fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}; agent log:\n{}", self.logged());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal).unwrap();
    }

    /// SIGKILL, and wait for it to be gone: what an OOM kill or a crash does.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Wait for it to exit, for at most `PATIENCE`.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "timed out waiting for the agent to exit; its log:\n{}", self.logged());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

/// `yh-genie install` in `netns` with a service account of its own for `api` (the agent's token),
/// every host path under `dir`; and the file its stderr goes to.
fn installer(netns: &Netns, api: &ApiServer, dir: &Path) -> (std::process::Command, PathBuf) {
    let id = unique("installer");
    let sa = service_account(api, dir);
    let host = dir.join(format!("{id}-host"));
    let log = dir.join(format!("{id}.log"));
    let mut command = std::process::Command::new("ip");
    command
        .args(["netns", "exec", &netns.name])
        .arg(yh_genie_binary())
        .arg("install")
        .arg(format!("--api-server={}", api.url()))
        .arg(format!("--sa-dir={}", sa.display()))
        .arg(format!("--bin-dir={}", host.join("bin").display()))
        .arg(format!("--conf-dir={}", host.join("net.d").display()))
        .arg(format!("--data-dir={}", host.join("data").display()))
        .arg("--interval=1")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    (command, log)
}

/// A service account of the agent's own for `api` under `dir`: its token, the server's CA.
fn service_account(api: &ApiServer, dir: &Path) -> PathBuf {
    let sa = dir.join(format!("{}-sa", unique("agent")));
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::write(sa.join("token"), AGENT_TOKEN).unwrap();
    std::fs::copy(api.ca(), sa.join("ca.crt")).unwrap();
    sa
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), nix::sys::signal::Signal::SIGCONT);
        self.kill();
    }
}

/// The agent's flags as the tests run it: this node (unless `extra` names another), its socket,
/// its metrics port, its address records beside its socket (`ipam_records`).
fn agent_flags(socket: &Path, metrics_port: u16, extra: &[&str]) -> Vec<String> {
    let node = format!("--node-name={NODE_NAME}");
    let node = (!extra.iter().any(|flag| flag.starts_with("--node-name"))).then_some(node);
    node.into_iter()
        .chain([
            format!("--agent-socket={}", socket.display()),
            format!("--agent-metrics-address=127.0.0.1:{metrics_port}"),
            format!("--ipam-records={}", ipam_records(socket).display()),
        ])
        .collect()
}

/// Where the agent listening on `socket` records the yh-ipam addresses it hands out: a directory
/// beside its socket, so that an agent started again on the same socket reads them back.
pub fn ipam_records(socket: &Path) -> PathBuf {
    socket.with_file_name("ipam-records")
}
