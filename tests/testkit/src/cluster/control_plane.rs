//! The control plane, in a network namespace of its own on the underlay: etcd (the version kubeadm
//! runs with this Kubernetes, built by scripts/cluster/build.sh beside it), kube-apiserver
//! (TLS, RBAC and Node authorization, ServiceAccount tokens, an audit log of every request at the
//! Metadata level), kube-controller-manager (service-account tokens, node CIDRs) and
//! kube-scheduler. The test reaches the API server with kubectl run in this namespace.

use super::pki::Pki;
use super::{CLUSTER_CIDR, CONTROL_PLANE_IP, NODE_CIDR_BITS, PATIENCE, SERVICE_CIDR, SERVICE_IP, kubectl_command};
use crate::netns::Netns;
use crate::process::{report, terminate};
use crate::run_dir::RunDir;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Instant;

/// Every request the API server answers, with who made it and on what, but no bodies.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

pub struct ControlPlane {
    pub netns: Netns,
    bin: PathBuf,
    etcd: Option<Child>,
    apiserver: Option<Child>,
    others: Vec<Child>,
}

impl ControlPlane {
    pub fn start(run: &RunDir, pki: &Pki, netns: Netns, bin: &Path) -> Self {
        let mut cp = ControlPlane { netns, bin: bin.to_path_buf(), etcd: None, apiserver: None, others: Vec::new() };
        let started = Instant::now();
        cp.etcd = Some(run.spawn("etcd", cp.command(&bin.join("etcd").display().to_string()).args(etcd_args(run))));
        cp.start_apiserver(run, pki);
        cp.wait_ready(run);
        report(&format!("cluster: API server ready {:.1?} after etcd's start", started.elapsed()));
        let cm = pki.kubeconfig("controller-manager", "system:kube-controller-manager", &[], &api_url());
        let mut controller_manager = cp.command(&bin.join("kube-controller-manager").display().to_string());
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
        cp.others.push(run.spawn("kube-controller-manager", &mut controller_manager));
        let sched = pki.kubeconfig("scheduler", "system:kube-scheduler", &[], &api_url());
        let mut scheduler = cp.command(&bin.join("kube-scheduler").display().to_string());
        scheduler.args([
            &format!("--kubeconfig={}", sched.display()),
            "--leader-elect=false",
            "--secure-port=0",
            "--v=1",
        ]);
        cp.others.push(run.spawn("kube-scheduler", &mut scheduler));
        cp
    }

    /// `program` run in the control plane's network namespace.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.netns.path().display())).arg("--").arg(program);
        c
    }

    fn start_apiserver(&mut self, run: &RunDir, pki: &Pki) {
        let audit_policy = run.path().join("audit-policy.yaml");
        std::fs::write(&audit_policy, AUDIT_POLICY).unwrap();
        let p = |f: &str| pki.path(f).display().to_string();
        let mut apiserver = self.command(&self.bin.join("kube-apiserver").display().to_string());
        apiserver.args([
            "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=0.0.0.0",
            "--secure-port=6443",
            &format!("--advertise-address={CONTROL_PLANE_IP}"),
            &format!("--tls-cert-file={}", p("apiserver.crt")),
            &format!("--tls-private-key-file={}", p("apiserver.key")),
            &format!("--client-ca-file={}", p("ca.crt")),
            &format!("--kubelet-client-certificate={}", p("apiserver-kubelet-client.crt")),
            &format!("--kubelet-client-key={}", p("apiserver-kubelet-client.key")),
            "--kubelet-preferred-address-types=InternalIP",
            &format!("--service-account-key-file={}", p("sa.pub")),
            &format!("--service-account-signing-key-file={}", p("sa.key")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            &format!("--audit-policy-file={}", audit_policy.display()),
            &format!("--audit-log-path={}", audit_log(run).display()),
            "--audit-log-format=json",
            "--v=1",
        ]);
        self.apiserver = Some(run.spawn("kube-apiserver", &mut apiserver));
    }

    /// Wait until the API server answers /readyz (all its post-start hooks done: RBAC roles,
    /// priority classes, the kubernetes Service).
    fn wait_ready(&mut self, run: &RunDir) {
        let started = Instant::now();
        loop {
            let out = kubectl_command(&self.netns, &self.bin, run).args(["get", "--raw", "/readyz"]).output().unwrap();
            if out.status.success() {
                return;
            }
            if let Some(status) = self.apiserver.as_mut().unwrap().try_wait().unwrap() {
                panic!("kube-apiserver exited ({status}):\n{}", run.log_tail("kube-apiserver", 30));
            }
            assert!(
                started.elapsed() < PATIENCE,
                "the API server is not ready after {PATIENCE:?}:\n{}\netcd:\n{}",
                run.log_tail("kube-apiserver", 30),
                run.log_tail("etcd", 10)
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// Stop the API server (SIGTERM, as a restart or an outage would); the rest keeps running.
    pub fn stop_apiserver(&mut self) {
        if let Some(mut apiserver) = self.apiserver.take() {
            terminate(&mut apiserver);
        }
    }

    /// Start the API server again after `stop_apiserver`, and wait until it is ready.
    pub fn restart_apiserver(&mut self, run: &RunDir, pki: &Pki) {
        assert!(self.apiserver.is_none(), "the API server is running");
        self.start_apiserver(run, pki);
        self.wait_ready(run);
    }
}

pub fn api_url() -> String {
    format!("https://{CONTROL_PLANE_IP}:6443")
}

pub fn audit_log(run: &RunDir) -> PathBuf {
    run.path().join("log/audit.log")
}

fn etcd_args(run: &RunDir) -> Vec<String> {
    [
        format!("--data-dir={}", run.path().join("etcd").display()),
        "--name=default".into(),
        "--listen-client-urls=http://127.0.0.1:2379".into(),
        "--advertise-client-urls=http://127.0.0.1:2379".into(),
        "--listen-peer-urls=http://127.0.0.1:2380".into(),
        "--initial-advertise-peer-urls=http://127.0.0.1:2380".into(),
        "--initial-cluster=default=http://127.0.0.1:2380".into(),
    ]
    .into()
}

/// The API server's serving certificate: every name the cluster reaches it by.
pub fn issue_apiserver_certificates(pki: &Pki) {
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
