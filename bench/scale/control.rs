//! The control plane the nodes talk to: etcd and one kube-apiserver (the test cluster's build,
//! scripts/cluster/build.sh), in the benchmark's network namespace, with TLS, the Node and RBAC
//! authorizers, NodeRestriction, ServiceAccount tokens bound to pods (which carry their node), and
//! an audit log of every request at the Metadata level: who asked (each node's token names its
//! node), what, when. No controller-manager, scheduler or kubelet: pods are bound by `nodeName`
//! and the benchmark writes their status.

use super::procs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};
use testkit::cluster::control_plane::issue_apiserver_certificates;
use testkit::cluster::pki::Pki;

/// The API server's address as the nodes reach it.
pub const API_URL: &str = "https://127.0.0.1:6443";
/// How long the API server may take to become ready.
const PATIENCE: Duration = Duration::from_secs(180);

/// Every request, with who made it and on what; no bodies.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

pub struct ControlPlane {
    pub dir: PathBuf,
    pub bin: PathBuf,
    pub pki: Pki,
    etcd: Child,
    apiserver: Option<Child>,
    /// etcd's data dir, when it is a tmpfs of its own (unmounted on drop).
    tmpfs: Option<PathBuf>,
}

/// When an API server restart happened.
pub struct Restart {
    /// The new process started.
    pub started: SystemTime,
    /// It answered /readyz.
    pub ready: SystemTime,
    pub new_pid: u32,
}

impl ControlPlane {
    /// Start `etcd` and the API server under `dir` and wait until the API server is ready. etcd's
    /// data dir is a tmpfs: this benchmark measures the nodes and the API server, not the disk
    /// under etcd, and etcd before 3.5 has no `--unsafe-no-fsync` to take the disk out otherwise,
    /// so each etcd it compares gets the same memory-backed store.
    pub fn start(dir: &Path, bin: &Path, etcd: &Path) -> Self {
        let data = dir.join("etcd");
        std::fs::create_dir_all(&data).unwrap();
        let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=4g", "tmpfs"]).arg(&data).status();
        assert!(mounted.is_ok_and(|s| s.success()), "mount a tmpfs on {}", data.display());
        Self::start_with(dir, bin, etcd, Some(data))
    }

    /// `start` with the Kubernetes build's etcd on the disk, fsyncing its writes as a cluster's
    /// does: for a benchmark whose writes (Events) share the machine's disk with what it measures.
    #[allow(dead_code)] // bench/selector.rs's, which shares this file (bench/real_cluster.rs)
    pub fn start_durable(dir: &Path, bin: &Path) -> Self {
        Self::start_with(dir, bin, &bin.join("etcd"), None)
    }

    fn start_with(dir: &Path, bin: &Path, etcd_binary: &Path, tmpfs: Option<PathBuf>) -> Self {
        std::fs::create_dir_all(dir.join("log")).unwrap();
        let pki = Pki::new(&dir.join("pki"));
        issue_apiserver_certificates(&pki);
        pki.kubeconfig("admin", "yh-genie-bench-admin", &["system:masters"], API_URL);
        let mut etcd = Command::new(etcd_binary);
        etcd.args([
            format!("--data-dir={}", dir.join("etcd").display()),
            "--name=default".into(),
            "--listen-client-urls=http://127.0.0.1:2379".into(),
            "--advertise-client-urls=http://127.0.0.1:2379".into(),
            "--listen-peer-urls=http://127.0.0.1:2380".into(),
            "--initial-advertise-peer-urls=http://127.0.0.1:2380".into(),
            "--initial-cluster=default=http://127.0.0.1:2380".into(),
            "--quota-backend-bytes=8589934592".into(),
        ]);
        let etcd = procs::spawn(&mut etcd, dir, &dir.join("log/etcd.log"));
        std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY).unwrap();
        let mut cp = ControlPlane { dir: dir.to_path_buf(), bin: bin.to_path_buf(), pki, etcd, apiserver: None, tmpfs };
        cp.start_apiserver();
        cp.wait_ready();
        cp
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.pki.path("admin.kubeconfig")
    }

    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("log/audit.log")
    }

    pub fn apiserver_pid(&self) -> u32 {
        self.apiserver.as_ref().expect("the API server runs").id()
    }

    fn start_apiserver(&mut self) {
        let p = |f: &str| self.pki.path(f).display().to_string();
        let mut apiserver = Command::new(self.bin.join("kube-apiserver"));
        apiserver.args([
            "--etcd-servers=http://127.0.0.1:2379".to_string(),
            "--bind-address=0.0.0.0".into(),
            "--secure-port=6443".into(),
            format!("--advertise-address={}", super::ADVERTISE_IP),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            "--allow-privileged=true".into(),
            format!("--audit-policy-file={}", self.dir.join("audit-policy.yaml").display()),
            format!("--audit-log-path={}", self.audit_log().display()),
            "--audit-log-format=json".into(),
            "--v=1".into(),
        ]);
        self.apiserver = Some(procs::spawn(&mut apiserver, &self.dir, &self.dir.join("log/kube-apiserver.log")));
    }

    /// Wait until the API server answers /readyz.
    pub fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            let out = self.kubectl().args(["get", "--raw", "/readyz"]).output().unwrap();
            if out.status.success() {
                return;
            }
            if let Some(status) = self.apiserver.as_mut().unwrap().try_wait().unwrap() {
                panic!("kube-apiserver exited ({status}):\n{}", self.log_tail("kube-apiserver", 30));
            }
            assert!(
                started.elapsed() < PATIENCE,
                "the API server is not ready after {PATIENCE:?}:\n{}",
                self.log_tail("kube-apiserver", 30)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stop the API server (SIGTERM, as a rolling restart does), start it again, wait until ready.
    /// `forget_history`: meanwhile, etcd's history is compacted up to now, so that every watch
    /// resuming from before gets 410 Gone and lists again: what an outage longer than the API
    /// server's compaction interval (5 minutes) does.
    pub fn restart_apiserver(&mut self, forget_history: bool) -> Restart {
        let mut old = self.apiserver.take().expect("the API server runs");
        procs::stop(&mut old, Duration::from_secs(60));
        if forget_history {
            compact_etcd();
        }
        let started = SystemTime::now();
        self.start_apiserver();
        self.wait_ready();
        Restart { started, ready: SystemTime::now(), new_pid: self.apiserver_pid() }
    }

    /// kubectl as the cluster's admin.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(self.bin.join("kubectl"));
        c.arg(format!("--kubeconfig={}", self.admin_kubeconfig().display()));
        c
    }

    /// kubectl that must succeed.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl().args(args).output().unwrap();
        assert!(out.status.success(), "kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join(format!("log/{name}.log"))).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Compact etcd's history up to its current revision (its JSON gateway, HTTP/1.1).
fn compact_etcd() {
    let revision = etcd("/v3/kv/range", r#"{"key": "AA=="}"#)["header"]["revision"]
        .as_str()
        .expect("etcd says its revision")
        .to_string();
    etcd("/v3/kv/compaction", &format!(r#"{{"revision": "{revision}", "physical": true}}"#));
}

fn etcd(path: &str, body: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect("127.0.0.1:2379").expect("etcd listens");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    assert!(head.starts_with("HTTP/1.1 200"), "etcd {path}: {reply}");
    // The body may come chunked: the JSON object is between the first `{` and the last `}`.
    let json = &body[body.find('{').unwrap_or(0)..=body.rfind('}').unwrap_or(0)];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("etcd {path}: {e}: {body}"))
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(mut apiserver) = self.apiserver.take() {
            procs::stop(&mut apiserver, Duration::from_secs(10));
        }
        procs::stop(&mut self.etcd, Duration::from_secs(10));
        if let Some(tmpfs) = &self.tmpfs {
            let _ = Command::new("umount").arg(tmpfs).status();
        }
    }
}

/// What `etcd --version` says of itself: `3.6.5`.
pub fn etcd_version(etcd: &Path) -> String {
    let out = Command::new(etcd).arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    out.ok()
        .and_then(|text| text.lines().find_map(|l| l.strip_prefix("etcd Version: ").map(|v| v.trim().to_string())))
        .unwrap_or_else(|| "?".into())
}
