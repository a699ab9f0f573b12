//! The control plane the nodes talk to: testkit's (`testkit::cluster::control_plane`), etcd and
//! one kube-apiserver in the benchmark's network namespace, with TLS, the Node and RBAC
//! authorizers, NodeRestriction, ServiceAccount tokens bound to pods (which carry their node), and
//! an audit log of every request at the Metadata level: who asked (each node's token names its
//! node), what, when. No controller-manager, scheduler or kubelet: pods are bound by `nodeName`
//! and the benchmark writes their status.

use std::path::Path;
use std::time::Duration;
use testkit::cluster::control_plane::{ControlPlane, EtcdData, Restart, Settings};

/// The API server's address as the nodes reach it.
pub const API_URL: &str = "https://127.0.0.1:6443";

/// The benchmark's settings: the caller's namespace, no controllers, the admin its own.
fn settings(bin: &Path) -> Settings {
    Settings {
        url: API_URL.into(),
        admin: "yh-genie-bench-admin",
        // A debug build's API server under the load of a smoke run may take a while.
        patience: Duration::from_secs(180),
        ..Settings::new(bin)
    }
}

/// Start `etcd` and the API server under `dir` and wait until the API server is ready. etcd's
/// data dir is a tmpfs of its own: this benchmark measures the nodes and the API server, not the
/// disk under etcd, and etcd before 3.5 has no `--unsafe-no-fsync` to take the disk out otherwise,
/// so each etcd it compares gets the same memory-backed store.
pub fn start(dir: &Path, bin: &Path, etcd: &Path) -> ControlPlane {
    ControlPlane::start(dir, Settings { etcd: etcd.to_path_buf(), etcd_data: EtcdData::Tmpfs("4g"), ..settings(bin) })
}

/// `start` with the Kubernetes build's etcd on the disk, fsyncing its writes as a cluster's
/// does: for a benchmark whose writes (Events) share the machine's disk with what it measures.
#[allow(dead_code)] // bench/selector.rs's, which shares this file (bench/real_cluster.rs)
pub fn start_durable(dir: &Path, bin: &Path) -> ControlPlane {
    ControlPlane::start(dir, settings(bin))
}

/// Stop the API server (SIGTERM, as a rolling restart does), start it again, wait until ready.
/// `forget_history`: meanwhile, etcd's history is compacted up to now, so that every watch
/// resuming from before gets 410 Gone and lists again: what an outage longer than the API
/// server's compaction interval (5 minutes) does.
#[allow(dead_code)] // bench/scale's only
pub fn restart_apiserver(cp: &mut ControlPlane, forget_history: bool) -> Restart {
    cp.stop_apiserver();
    if forget_history {
        cp.forget_history();
    }
    cp.restart_apiserver()
}
