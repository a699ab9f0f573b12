//! A fake Kubernetes API server for the tests and the benchmarks: real HTTPS on 127.0.0.1 of a
//! test's node netns (where the plugins run), with a self-signed CA and a bearer token written into
//! a kubeconfig. By concern:
//! - `objects`: the pods, ConfigMaps, NetworkAttachmentDefinitions, DRA ResourceClaims,
//!   ResourceSlices, Nodes, yh-ipam's IPBlocks and node Leases a test puts in, and what the clients wrote (pod patches, Events);
//! - `store`: those objects as etcd and the watch cache hold them: every change a new revision;
//! - `reads` and `watch`: `GET` of one object, list and watch of a namespace's or all of them, with
//!   the field selectors `spec.nodeName` and `metadata.name`, resourceVersions, 410 Gone for a
//!   revision compacted away;
//! - `writes`: `PATCH` of a pod or a `Lease` as a JSON merge patch (422 for one that would change its uid, as
//!   Kubernetes answers), `POST` of an Event, of a yh-ipam `IPBlock` and of a `Lease` (409 when it
//!   exists), `PUT` of a `Lease` or an `IPBlock` (409 when its resourceVersion is not the current
//!   one), `DELETE` of an `IPBlock` (409 when its preconditions do not hold);
//! - `requests`: every request counted and logged, by client (the plugin's token `TOKEN`, the
//!   agent's `AGENT_TOKEN`), verb and resource;
//! - `faults`: misbehaving on demand: HTTP errors, slow answers, hangs, dropped connections, ended
//!   watches, streaming lists not served, a resource denied, an outage, a restart;
//! - `router`: one request to one of those; `listener` and `tls`: the port and its certificate
//!   (`Serving`: a valid one, or one with something wrong); `reply`: answers as Kubernetes makes them.

mod faults;
mod listener;
mod objects;
mod reads;
mod reply;
mod requests;
mod router;
mod store;
mod tls;
mod watch;
mod writes;

pub use faults::{Fault, NO_PROGRESS_REQUESTS, StreamingList};
pub use objects::{ENV_VAR, from_config_map, literal};
pub use requests::Call;
pub use tls::Serving;

use crate::netns::Netns;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// The plugin's token, in the kubeconfig `kubeconfig` writes.
pub const TOKEN: &str = "yh-genie-test-token";
/// The node agent's token (its service account's), so that its requests are told from the plugin's.
pub const AGENT_TOKEN: &str = "yh-genie-agent-token";
/// The node the pods are on unless a test says otherwise (`spec.nodeName`).
pub const NODE_NAME: &str = "yh-node";

/// What the server holds, shared by the tasks serving its connections and the test's handle.
#[derive(Default)]
struct State {
    objects: objects::Objects,
    faults: faults::Faults,
    requests: requests::Requests,
}

pub struct ApiServer {
    state: Arc<State>,
    addr: SocketAddr,
    netns: PathBuf,
    tls: tokio_rustls::TlsAcceptor,
    runtime: tokio::runtime::Handle,
    /// The task accepting connections, which holds them all; none while `down`.
    accept: Mutex<Option<JoinHandle<()>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl ApiServer {
    /// A server on 127.0.0.1 of `node`, where the plugins of a `Sandbox::on_node` run.
    pub fn start_in(node: &Netns) -> Self {
        Self::start_serving(node, Serving::Valid)
    }

    /// `start_in` with the certificate `serving` describes.
    pub fn start_serving(node: &Netns, serving: Serving) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let (tls, ca_pem) = tls::acceptor(serving);
        std::fs::write(dir.path().join("ca.pem"), ca_pem).unwrap();
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            handle_tx.send(rt.handle().clone()).unwrap();
            let _ = rt.block_on(stopped);
        });
        let runtime = handle_rx.recv().unwrap();
        let netns = node.path();
        let listener = listener::bind(&netns, 0);
        let server = ApiServer {
            state: Arc::default(),
            addr: listener.local_addr().unwrap(),
            netns,
            tls,
            runtime,
            accept: Mutex::new(None),
            stop: Some(stop),
            thread: Some(thread),
            dir,
        };
        server.serve(listener);
        server.write_kubeconfig("kubeconfig", TOKEN);
        server
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The PEM of the CA that signed the server's certificate (a service account's `ca.crt`).
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A kubeconfig with the server's CA and the plugin's token.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Write a kubeconfig named `name` (beside the default one) carrying `token`.
    pub fn write_kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\n    certificate-authority: {ca}\n\
             users:\n- name: test\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n\
             current-context: test\n",
            url = self.url(),
            ca = self.ca().display(),
        );
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(accept) = self.accept.lock().unwrap().take() {
            accept.abort();
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
