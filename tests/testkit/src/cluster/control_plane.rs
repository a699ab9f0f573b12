//! A Kubernetes control plane (the test cluster's build, scripts/cluster/build.sh): etcd and
//! kube-apiserver (TLS, RBAC and Node authorization, NodeRestriction, ServiceAccount tokens bound
//! to pods, and an audit log of every request at the Metadata level), and, when asked,
//! kube-controller-manager (service-account tokens, node CIDRs) and kube-scheduler. [`Settings`]
//! says how: the real cluster of `tests/cluster` runs all of it in a network namespace of its own
//! on the underlay, with etcd on the disk; `bench/scale` runs etcd and the API server alone in the
//! benchmark's namespace, etcd on a tmpfs, under each etcd it compares.
//!
//! Everything lives in one directory: the certificates in `pki/`, etcd's data in `etcd/`, each
//! process's output in `log/<name>.log`, the audit log in `log/audit.log`. The processes run with
//! that directory as their working directory (so a [`crate::run_dir::RunDir`] holding it sweeps
//! them) and die with the thread that started them.

use super::pki::Pki;
use super::{CLUSTER_CIDR, CONTROL_PLANE_IP, NODE_CIDR_BITS, PATIENCE, SERVICE_CIDR, SERVICE_IP};
use crate::netns::Netns;
use crate::process::{report, spawn_logged, stop_within};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};

/// Every request the API server answers, with who made it and on what, but no bodies.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

/// How long the API server has to stop after SIGTERM, as a rolling restart gives it.
const APISERVER_STOP_GRACE: Duration = Duration::from_secs(60);
/// How long etcd and the API server have to stop when the control plane goes.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Where etcd keeps its data.
pub enum EtcdData {
    /// On the disk under the control plane's directory, fsyncing its writes as on a control-plane
    /// node.
    Disk,
    /// On a tmpfs of its own of this size (`4g`), mounted on etcd's data dir and unmounted when
    /// the control plane goes: for a benchmark that measures the API server and its clients, not
    /// the disk under etcd (etcd before 3.5 has no `--unsafe-no-fsync` to take the disk out
    /// otherwise).
    Tmpfs(&'static str),
}

/// How a control plane runs.
pub struct Settings {
    /// The Kubernetes binaries: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl.
    pub bin: PathBuf,
    /// The etcd binary (the build's, `bin/etcd`, unless another is compared).
    pub etcd: PathBuf,
    pub etcd_data: EtcdData,
    /// The network namespace its processes (and [`ControlPlane::kubectl`]) run in; none: the
    /// calling thread's.
    pub netns: Option<Netns>,
    /// Start kube-controller-manager and kube-scheduler too. Without them nothing schedules pods
    /// (they are bound by `nodeName`), allocates node CIDRs or makes service-account tokens.
    pub controllers: bool,
    /// The audit log (`log/audit.log`).
    pub audit: bool,
    /// The URL the admin's kubeconfig reaches the API server at. The API server listens on every
    /// address of its namespace, port 6443, and advertises [`CONTROL_PLANE_IP`].
    pub url: String,
    /// The admin's user name (in the group `system:masters`), as the audit log shows it.
    pub admin: &'static str,
    /// How long the API server may take to become ready.
    pub patience: Duration,
}

impl Settings {
    /// etcd and the API server of `bin`, etcd on the disk, in the calling thread's namespace,
    /// audited, reached at [`api_url`], without controller-manager and scheduler.
    pub fn new(bin: &Path) -> Settings {
        Settings {
            bin: bin.to_path_buf(),
            etcd: bin.join("etcd"),
            etcd_data: EtcdData::Disk,
            netns: None,
            controllers: false,
            audit: true,
            url: api_url(),
            admin: "yh-genie-test-admin",
            patience: PATIENCE,
        }
    }
}

pub struct ControlPlane {
    pub dir: PathBuf,
    pub pki: Pki,
    settings: Settings,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    others: Vec<Child>,
    /// etcd's data dir, while a tmpfs of its own is mounted on it.
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
    /// Start it under `dir` as `settings` say (a new CA in `dir/pki`, the API server's
    /// certificates and the admin's kubeconfig), and return once the API server is ready (and the
    /// controllers started, when asked).
    pub fn start(dir: &Path, settings: Settings) -> ControlPlane {
        std::fs::create_dir_all(dir.join("log")).unwrap();
        let pki = Pki::new(&dir.join("pki"));
        issue_apiserver_certificates(&pki);
        pki.kubeconfig("admin", settings.admin, &["system:masters"], &settings.url);
        let data = dir.join("etcd");
        std::fs::create_dir_all(&data).unwrap();
        let mut cp = ControlPlane {
            dir: dir.to_path_buf(),
            pki,
            settings,
            etcd: None,
            apiserver: None,
            others: Vec::new(),
            tmpfs: None,
        };
        if let EtcdData::Tmpfs(size) = cp.settings.etcd_data {
            let mounted =
                Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(&data).status();
            assert!(mounted.is_ok_and(|s| s.success()), "mount a tmpfs on {}", data.display());
            cp.tmpfs = Some(data.clone());
        }
        let started = Instant::now();
        let mut etcd = cp.command(&cp.settings.etcd);
        etcd.args([
            format!("--data-dir={}", data.display()),
            "--name=default".into(),
            "--listen-client-urls=http://127.0.0.1:2379".into(),
            "--advertise-client-urls=http://127.0.0.1:2379".into(),
            "--listen-peer-urls=http://127.0.0.1:2380".into(),
            "--initial-advertise-peer-urls=http://127.0.0.1:2380".into(),
            "--initial-cluster=default=http://127.0.0.1:2380".into(),
            "--quota-backend-bytes=8589934592".into(),
        ]);
        cp.etcd = Some(cp.spawn("etcd", &mut etcd));
        if cp.settings.audit {
            std::fs::write(cp.dir.join("audit-policy.yaml"), AUDIT_POLICY).unwrap();
        }
        cp.start_apiserver();
        cp.wait_ready();
        report(&format!("control plane: API server ready {:.1?} after etcd's start", started.elapsed()));
        if cp.settings.controllers {
            cp.start_controllers();
        }
        cp
    }

    /// `program` run in the control plane's network namespace.
    fn command(&self, program: &Path) -> Command {
        match &self.settings.netns {
            Some(netns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", netns.path().display())).arg("--").arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    fn spawn(&self, name: &str, command: &mut Command) -> Child {
        spawn_logged(command, &self.dir, &self.log(name))
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.join("log").join(format!("{name}.log"))
    }

    /// The network namespace it runs in, if one of its own.
    pub fn netns(&self) -> Option<&Netns> {
        self.settings.netns.as_ref()
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.pki.path("admin.kubeconfig")
    }

    pub fn audit_log(&self) -> PathBuf {
        self.log("audit")
    }

    pub fn apiserver_pid(&self) -> u32 {
        self.apiserver.as_ref().expect("the API server runs").id()
    }

    fn start_apiserver(&mut self) {
        let p = |f: &str| self.pki.path(f).display().to_string();
        let mut apiserver = self.command(&self.settings.bin.join("kube-apiserver"));
        apiserver.args([
            "--etcd-servers=http://127.0.0.1:2379".to_string(),
            "--bind-address=0.0.0.0".into(),
            "--secure-port=6443".into(),
            format!("--advertise-address={CONTROL_PLANE_IP}"),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            format!("--kubelet-client-certificate={}", p("apiserver-kubelet-client.crt")),
            format!("--kubelet-client-key={}", p("apiserver-kubelet-client.key")),
            "--kubelet-preferred-address-types=InternalIP".into(),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            "--allow-privileged=true".into(),
            "--v=1".into(),
        ]);
        if self.settings.audit {
            apiserver.args([
                format!("--audit-policy-file={}", self.dir.join("audit-policy.yaml").display()),
                format!("--audit-log-path={}", self.audit_log().display()),
                "--audit-log-format=json".into(),
            ]);
        }
        self.apiserver = Some(self.spawn("kube-apiserver", &mut apiserver));
    }

    fn start_controllers(&mut self) {
        let (pki, url) = (&self.pki, &self.settings.url);
        let cm = pki.kubeconfig("controller-manager", "system:kube-controller-manager", &[], url);
        let mut controller_manager = self.command(&self.settings.bin.join("kube-controller-manager"));
        controller_manager.args([
            &format!("--kubeconfig={}", cm.display()),
            &format!("--service-account-private-key-file={}", pki.path("sa.key").display()),
            &format!("--root-ca-file={}", pki.path("ca.crt").display()),
            "--use-service-account-credentials=true",
            "--allocate-node-cidrs=true",
            &format!("--cluster-cidr={CLUSTER_CIDR}"),
            &format!("--node-cidr-mask-size={NODE_CIDR_BITS}"),
            &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--leader-elect=false",
            "--secure-port=0",
            "--v=1",
        ]);
        let controller_manager = self.spawn("kube-controller-manager", &mut controller_manager);
        self.others.push(controller_manager);
        let sched = self.pki.kubeconfig("scheduler", "system:kube-scheduler", &[], &self.settings.url);
        let mut scheduler = self.command(&self.settings.bin.join("kube-scheduler"));
        scheduler.args([
            &format!("--kubeconfig={}", sched.display()),
            "--leader-elect=false",
            "--secure-port=0",
            "--v=1",
        ]);
        let scheduler = self.spawn("kube-scheduler", &mut scheduler);
        self.others.push(scheduler);
    }

    /// Wait until the API server answers /readyz (all its post-start hooks done: RBAC roles,
    /// priority classes, the kubernetes Service).
    fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            let out = self.kubectl().args(["get", "--raw", "/readyz"]).output().unwrap();
            if out.status.success() {
                return;
            }
            if let Some(status) = self.apiserver.as_mut().unwrap().try_wait().unwrap() {
                panic!("kube-apiserver exited ({status}):\n{}", self.log_tail("kube-apiserver", 30));
            }
            let patience = self.settings.patience;
            assert!(
                started.elapsed() < patience,
                "the API server is not ready after {patience:?}:\n{}\netcd:\n{}",
                self.log_tail("kube-apiserver", 30),
                self.log_tail("etcd", 10)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stop the API server (SIGTERM, as a rolling restart or an outage would); the rest keeps
    /// running.
    pub fn stop_apiserver(&mut self) {
        if let Some(mut apiserver) = self.apiserver.take() {
            stop_within(&mut apiserver, APISERVER_STOP_GRACE);
        }
    }

    /// Compact etcd's history up to now, so that every watch resuming from before gets 410 Gone
    /// and lists again: what an outage longer than the API server's compaction interval (5
    /// minutes) does.
    pub fn forget_history(&self) {
        let compact = || {
            let revision = etcd_request("/v3/kv/range", r#"{"key": "AA=="}"#)["header"]["revision"]
                .as_str()
                .expect("etcd says its revision")
                .to_string();
            etcd_request("/v3/kv/compaction", &format!(r#"{{"revision": "{revision}", "physical": true}}"#));
        };
        match &self.settings.netns {
            None => compact(),
            // etcd listens on the namespace's loopback: ask from a thread that joins it.
            Some(netns) => std::thread::scope(|s| {
                s.spawn(|| {
                    let ns = std::fs::File::open(netns.path()).unwrap();
                    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
                    compact();
                })
                .join()
                .unwrap()
            }),
        }
    }

    /// Start the API server again after [`ControlPlane::stop_apiserver`], and wait until it is
    /// ready.
    pub fn restart_apiserver(&mut self) -> Restart {
        assert!(self.apiserver.is_none(), "the API server is running");
        let started = SystemTime::now();
        self.start_apiserver();
        self.wait_ready();
        Restart { started, ready: SystemTime::now(), new_pid: self.apiserver_pid() }
    }

    /// kubectl as the cluster's admin, in the control plane's namespace.
    pub fn kubectl(&self) -> Command {
        let mut c = self.command(&self.settings.bin.join("kubectl"));
        c.arg(format!("--kubeconfig={}", self.admin_kubeconfig().display()));
        c
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl().args(args).output().unwrap();
        assert!(out.status.success(), "kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The last `lines` lines of a process's output (`etcd`, `kube-apiserver`, ...).
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        let log = std::fs::read_to_string(self.log(name)).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for mut child in self.others.drain(..).chain(self.apiserver.take()).chain(self.etcd.take()) {
            stop_within(&mut child, STOP_GRACE);
        }
        if let Some(tmpfs) = &self.tmpfs {
            let _ = Command::new("umount").arg(tmpfs).status();
        }
    }
}

/// A request to etcd's JSON gateway (HTTP/1.1), from the calling thread's namespace.
fn etcd_request(path: &str, body: &str) -> serde_json::Value {
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

/// What `etcd --version` says of itself: `3.6.5`.
pub fn etcd_version(etcd: &Path) -> String {
    let out = Command::new(etcd).arg("--version").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    out.ok()
        .and_then(|text| text.lines().find_map(|l| l.strip_prefix("etcd Version: ").map(|v| v.trim().to_string())))
        .unwrap_or_else(|| "?".into())
}

/// The URL the cluster's nodes and tests reach the API server at.
pub fn api_url() -> String {
    format!("https://{CONTROL_PLANE_IP}:6443")
}

/// The API server's serving certificate (every name the cluster reaches it by) and its client
/// certificate for the kubelets.
fn issue_apiserver_certificates(pki: &Pki) {
    pki.issue(
        "apiserver",
        "kube-apiserver",
        &[],
        &[
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
            "127.0.0.1",
            CONTROL_PLANE_IP,
            SERVICE_IP,
        ],
        true,
    );
    pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", &["system:masters"], &[], false);
}
