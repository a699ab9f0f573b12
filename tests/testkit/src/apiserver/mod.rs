//! A fake Kubernetes API server for integration tests: real HTTPS on 127.0.0.1, of this machine or
//! of a test's node netns (where the plugins run), with a self-signed CA and a bearer token written
//! into a kubeconfig. It serves pods, ConfigMaps and NetworkAttachmentDefinitions the test puts in:
//! `GET` of one (`/api/v1/namespaces/{ns}/pods/{name}`, `.../configmaps/{name}`,
//! `/apis/k8s.cni.cncf.io/v1/namespaces/{ns}/network-attachment-definitions/{name}`), list and
//! watch of a namespace's or all of them, with the field selectors `spec.nodeName` and
//! `metadata.name`, resourceVersions (every change is a new revision, `store`), chunked watch streams
//! replaying from a revision (`watch`) and 410 Gone for a revision compacted away (`compact`); and
//! `PATCH` of a pod as a JSON merge patch, which it applies and records, refusing (422, as
//! Kubernetes does) one that would change the pod's uid; and `POST` of an Event, which it keeps. It answers errors as Kubernetes `Status`
//! JSON (404, 401 for a wrong token), counts and logs requests, by client (the plugin's token
//! `TOKEN`, the agent's `AGENT_TOKEN`) and by verb and resource, counts those it answered with a
//! fault, and misbehaves on demand: `inject` queues faults (HTTP errors, slow answers, hangs,
//! dropped connections) for the next requests or for all of them, `down`/`up` close and reopen the
//! port so that clients see connection refused (and lose their watches), `drop_watches` ends every
//! watch stream, `restart` does what an API server restart does to its clients. `start_serving`
//! gives it a certificate with something wrong ([`Serving`]).

mod store;
mod watch;

use crate::netns::Netns;
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Resource, Selector, Store};
use tokio::task::{JoinHandle, JoinSet};

pub const TOKEN: &str = "yh-genie-test-token";
/// The node agent's token (its service account's), so that its requests are told from the plugin's.
pub const AGENT_TOKEN: &str = "yh-genie-agent-token";
/// The node the pods are on unless a test says otherwise (`spec.nodeName`).
pub const NODE_NAME: &str = "yh-node";

/// One request as RBAC and the tests see it: who asked (`plugin` or `agent`), verb, resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub client: &'static str,
    pub verb: &'static str,
    pub resource: &'static str,
    /// The `resourceVersion` asked for (lists: "0" is "from the watch cache").
    pub resource_version: Option<String>,
}

/// How the server misbehaves for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this HTTP status and a `Status` body instead of the object (503, 429, 500...).
    Status(u16),
    /// Answer normally, after this long.
    Delay(Duration),
    /// Never answer; the connection stays open until the client gives up.
    Hang,
    /// Close the connection without an answer.
    Drop,
}

/// The certificate the server presents, and what the kubeconfig it writes trusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    /// Issued for 127.0.0.1 by the CA the kubeconfig names.
    Valid,
    /// Issued for 127.0.0.1 by another CA than the kubeconfig's.
    UnknownCa,
    /// Issued by the kubeconfig's CA, expired since 2020.
    Expired,
    /// Issued by the kubeconfig's CA for `kubernetes.invalid` only.
    WrongName,
    /// One self-signed CA:TRUE certificate for 127.0.0.1, serving and in the kubeconfig as its CA:
    /// what rustls refuses as `CaUsedAsEndEntity` and kubectl accepts.
    SelfSignedCa,
}

#[derive(Default)]
struct Faults {
    /// Faults for the next requests, one each, in order.
    next: VecDeque<Fault>,
    /// A fault for every request once `next` is empty.
    always: Option<Fault>,
}

struct State {
    db: Mutex<Store>,
    /// Bumped by `drop_watches`: every watch stream ends.
    drops: tokio::sync::watch::Sender<u64>,
    /// Pod patches applied: (namespace, name, body).
    patches: Mutex<Vec<(String, String, Value)>>,
    /// Events created, as posted (with their generated names).
    events: Mutex<Vec<Value>>,
    faults: Mutex<Faults>,
    requests: AtomicUsize,
    /// Requests answered with an injected fault.
    faulted: AtomicUsize,
    log: Mutex<Vec<String>>,
    calls: Mutex<Vec<Call>>,
}

impl Default for State {
    fn default() -> Self {
        State {
            db: Mutex::default(),
            drops: tokio::sync::watch::channel(0).0,
            patches: Mutex::default(),
            events: Mutex::default(),
            faults: Mutex::default(),
            requests: AtomicUsize::default(),
            faulted: AtomicUsize::default(),
            log: Mutex::default(),
            calls: Mutex::default(),
        }
    }
}

pub struct ApiServer {
    state: Arc<State>,
    addr: SocketAddr,
    netns: Option<PathBuf>,
    tls: tokio_rustls::TlsAcceptor,
    runtime: tokio::runtime::Handle,
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
        Self::start_at(Some(node.path()), serving)
    }

    fn start_at(netns: Option<PathBuf>, serving: Serving) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let (tls, ca_pem) = tls_acceptor(serving);
        std::fs::write(dir.path().join("ca.pem"), ca_pem).unwrap();
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            handle_tx.send(rt.handle().clone()).unwrap();
            let _ = rt.block_on(stopped);
        });
        let runtime = handle_rx.recv().unwrap();
        let listener = bind(netns.as_deref(), 0);
        let addr = listener.local_addr().unwrap();
        let server = ApiServer {
            state: Arc::default(),
            addr,
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

    /// A kubeconfig with the server's CA and the right token.
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

    /// Put a pod whose spec has these `containers` (JSON as in a manifest). Returns its uid.
    pub fn put_pod(&self, namespace: &str, name: &str, containers: Value) -> String {
        self.put_pod_spec(namespace, name, json!({ "containers": containers }))
    }

    /// Put a pod with a whole `spec`. Returns its uid.
    pub fn put_pod_spec(&self, namespace: &str, name: &str, spec: Value) -> String {
        self.put_pod_with(namespace, name, json!({}), spec)
    }

    /// Put a pod with these `annotations` and `containers`. Returns its uid.
    pub fn put_annotated_pod(&self, namespace: &str, name: &str, annotations: Value, containers: Value) -> String {
        self.put_pod_with(namespace, name, annotations, json!({ "containers": containers }))
    }

    fn put_pod_with(&self, namespace: &str, name: &str, annotations: Value, mut spec: Value) -> String {
        let uid = format!("uid-{namespace}-{name}");
        if spec.get("nodeName").is_none() {
            spec["nodeName"] = NODE_NAME.into();
        }
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "uid": uid, "annotations": annotations},
            "spec": spec,
        });
        self.put(Resource::Pods, namespace, name, pod);
        uid
    }

    fn put(&self, resource: Resource, namespace: &str, name: &str, object: Value) {
        self.state.db.lock().unwrap().put(resource, namespace, name, object);
    }

    /// Delete a pod and create it again under its name with `uid`, as a StatefulSet does: watches
    /// see it deleted, then added.
    pub fn recreate_pod(&self, namespace: &str, name: &str, uid: &str) {
        let mut db = self.state.db.lock().unwrap();
        let mut pod = db.remove(Resource::Pods, namespace, name).expect("the pod exists");
        pod["metadata"]["uid"] = uid.into();
        db.put(Resource::Pods, namespace, name, pod);
    }

    /// Delete a pod and create it again under its name with `uid` and these `containers`.
    pub fn recreate_pod_choosing(&self, namespace: &str, name: &str, uid: &str, containers: Value) {
        let mut db = self.state.db.lock().unwrap();
        let mut pod = db.remove(Resource::Pods, namespace, name).expect("the pod exists");
        pod["metadata"]["uid"] = uid.into();
        pod["spec"]["containers"] = containers;
        db.put(Resource::Pods, namespace, name, pod);
    }

    /// The pod as the server holds it now (patches applied).
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.state.db.lock().unwrap().get(Resource::Pods, namespace, name).cloned()
    }

    /// Put a NetworkAttachmentDefinition; `config` is its `spec.config` (none: no config).
    pub fn put_nad(&self, namespace: &str, name: &str, config: Option<&str>) {
        let nad = json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"namespace": namespace, "name": name},
            "spec": config.map(|c| json!({"config": c})).unwrap_or(json!({})),
        });
        self.put(Resource::Nads, namespace, name, nad);
    }

    /// The pod patches applied so far: (namespace, name, body).
    pub fn patches(&self) -> Vec<(String, String, Value)> {
        self.state.patches.lock().unwrap().clone()
    }

    /// The Events created so far, as posted.
    pub fn events(&self) -> Vec<Value> {
        self.state.events.lock().unwrap().clone()
    }

    /// Put an object as the API server would return it for a pod, even if it is not a valid pod.
    pub fn put_raw_pod(&self, namespace: &str, name: &str, object: Value) {
        self.put(Resource::Pods, namespace, name, object);
    }

    pub fn put_config_map(&self, namespace: &str, name: &str, data: Value) {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": namespace, "name": name},
            "data": data,
        });
        self.put(Resource::ConfigMaps, namespace, name, cm);
    }

    pub fn remove_pod(&self, namespace: &str, name: &str) {
        self.state.db.lock().unwrap().remove(Resource::Pods, namespace, name);
    }

    /// Requests received so far (each one counts, whatever the answer).
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Requests answered with an injected fault so far (connections refused while `down` are not
    /// requests, and not counted).
    pub fn faulted_requests(&self) -> usize {
        self.state.faulted.load(Ordering::SeqCst)
    }

    /// `GET /api/v1/...` lines, in order.
    pub fn request_log(&self) -> Vec<String> {
        self.state.log.lock().unwrap().clone()
    }

    /// Every authenticated request so far, by client, verb and resource, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().unwrap().clone()
    }

    /// Requests made with the plugin's token (`TOKEN`) so far.
    pub fn plugin_requests(&self) -> usize {
        self.calls().iter().filter(|c| c.client == "plugin").count()
    }

    /// End every watch stream now (the clients see the stream end, as when an API server's
    /// watch times out or it sheds load).
    pub fn drop_watches(&self) {
        self.state.drops.send_modify(|n| *n += 1);
    }

    /// Forget the change history: watches resuming from any revision until now get 410 Gone and
    /// must list again.
    pub fn compact(&self) {
        self.state.db.lock().unwrap().compact();
    }

    /// What an API server restart does to its clients: every connection and watch cut, the port
    /// refused for `outage`, while `meanwhile` changes objects, and the watch cache built anew
    /// (a watch resuming from before those changes gets 410 and must list again).
    pub fn restart(&self, outage: Duration, meanwhile: impl FnOnce(&Self)) {
        self.down();
        meanwhile(self);
        self.compact();
        std::thread::sleep(outage);
        self.up();
    }

    /// Misbehave with `fault` for the next `times` requests (after faults queued before).
    pub fn inject(&self, fault: Fault, times: usize) {
        self.state.faults.lock().unwrap().next.extend(std::iter::repeat_n(fault, times));
    }

    /// Misbehave with `fault` for every request until `clear_faults`.
    pub fn inject_always(&self, fault: Fault) {
        self.state.faults.lock().unwrap().always = Some(fault);
    }

    pub fn clear_faults(&self) {
        *self.state.faults.lock().unwrap() = Faults::default();
    }

    /// Close the port and every open connection: clients get "connection refused".
    pub fn down(&self) {
        if let Some(accept) = self.accept.lock().unwrap().take() {
            accept.abort();
            // Wait until the listener is really closed, so the next connect is refused.
            let _ = self.runtime.block_on(async { tokio::time::timeout(Duration::from_secs(5), accept).await });
        }
    }

    /// Listen again on the same address.
    pub fn up(&self) {
        if self.accept.lock().unwrap().is_none() {
            self.serve(bind(self.netns.as_deref(), self.addr.port()));
        }
    }

    fn serve(&self, listener: std::net::TcpListener) {
        let state = self.state.clone();
        let tls = self.tls.clone();
        let task = self.runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            // Connections live in the accept task's set: aborting the task (`down`) closes them all.
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else { continue };
                        connections.spawn(serve_connection(tls.clone(), tcp, state.clone()));
                    }
                    Some(_) = connections.join_next() => {}
                }
            }
        });
        *self.accept.lock().unwrap() = Some(task);
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

/// A listener on 127.0.0.1:`port` (0: any) in `netns` (None: this process's). A socket stays in
/// the netns it was made in, so it is made on a thread that joined the netns.
fn bind(netns: Option<&Path>, port: u16) -> std::net::TcpListener {
    let make = move || {
        let l = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind 127.0.0.1");
        l.set_nonblocking(true).unwrap();
        l
    };
    match netns {
        None => make(),
        Some(path) => {
            let ns = std::fs::File::open(path).expect("open node netns");
            std::thread::scope(|s| {
                s.spawn(move || {
                    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns into node netns");
                    make()
                })
                .join()
                .unwrap()
            })
        }
    }
}

/// A TLS acceptor presenting the certificate `serving` describes, and the PEM of the CA the
/// kubeconfig is to trust.
fn tls_acceptor(serving: Serving) -> (tokio_rustls::TlsAcceptor, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, date_time_ymd};
    let ca = |name: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    };
    let trusted = ca("yh-genie test CA");
    let server_key = KeyPair::generate().unwrap();
    let for_names =
        |names: &[&str]| CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let (server_cert, trusted_pem) = match serving {
        Serving::Valid => (for_names(&["127.0.0.1"]).signed_by(&server_key, &trusted).unwrap(), trusted.pem()),
        Serving::UnknownCa => {
            (for_names(&["127.0.0.1"]).signed_by(&server_key, &ca("another CA")).unwrap(), trusted.pem())
        }
        Serving::Expired => {
            let mut params = for_names(&["127.0.0.1"]);
            params.not_before = date_time_ymd(2019, 1, 1);
            params.not_after = date_time_ymd(2020, 1, 1);
            (params.signed_by(&server_key, &trusted).unwrap(), trusted.pem())
        }
        Serving::WrongName => {
            (for_names(&["kubernetes.invalid"]).signed_by(&server_key, &trusted).unwrap(), trusted.pem())
        }
        Serving::SelfSignedCa => {
            let mut params = for_names(&["127.0.0.1"]);
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let cert = params.self_signed(&server_key).unwrap();
            let pem = cert.pem();
            (cert, pem)
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![server_cert.der().clone()], key)
        .unwrap();
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), trusted_pem)
}

async fn serve_connection(tls: tokio_rustls::TlsAcceptor, tcp: tokio::net::TcpStream, state: Arc<State>) {
    let Ok(stream) = tls.accept(tcp).await else { return };
    let service = hyper::service::service_fn(move |req| handle(req, state.clone()));
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .await;
}

type Reply = Response<http_body_util::combinators::BoxBody<Bytes, std::io::Error>>;

async fn handle(req: Request<Incoming>, state: Arc<State>) -> Result<Reply, std::io::Error> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    state.log.lock().unwrap().push(format!("{} {}", req.method(), req.uri().path()));
    let fault = {
        let mut faults = state.faults.lock().unwrap();
        faults.next.pop_front().or_else(|| faults.always.clone())
    };
    if fault.is_some() {
        state.faulted.fetch_add(1, Ordering::SeqCst);
    }
    match fault {
        Some(Fault::Status(code)) => return Ok(status(code, "injected fault")),
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::Hang) => std::future::pending::<()>().await,
        Some(Fault::Drop) => return Err(std::io::Error::other("injected fault: connection dropped")),
        None => {}
    }
    let client = match req.headers().get("authorization").and_then(|v| v.to_str().ok()) {
        Some(h) if h == format!("Bearer {TOKEN}") => "plugin",
        Some(h) if h == format!("Bearer {AGENT_TOKEN}") => "agent",
        _ => return Ok(status(401, "Unauthorized")),
    };
    let method = req.method().clone();
    let uri_path = req.uri().path().to_string();
    let query: BTreeMap<String, String> = req
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect();
    let path: Vec<&str> = uri_path.trim_start_matches('/').split('/').collect();
    if let ["api", "v1", "namespaces", ns, "events"] = path.as_slice() {
        return create_event(req, &state, client, ns).await;
    }
    let (resource, namespace, name) = match path.as_slice() {
        ["api", "v1", "pods"] => (Resource::Pods, None, None),
        ["api", "v1", "configmaps"] => (Resource::ConfigMaps, None, None),
        ["apis", "k8s.cni.cncf.io", "v1", "network-attachment-definitions"] => (Resource::Nads, None, None),
        ["api", "v1", "namespaces", ns, "pods", rest @ ..] => (Resource::Pods, Some(*ns), rest.first().copied()),
        ["api", "v1", "namespaces", ns, "configmaps", rest @ ..] => {
            (Resource::ConfigMaps, Some(*ns), rest.first().copied())
        }
        ["apis", "k8s.cni.cncf.io", "v1", "namespaces", ns, "network-attachment-definitions", rest @ ..] => {
            (Resource::Nads, Some(*ns), rest.first().copied())
        }
        _ => return Ok(status(404, "the server could not find the requested resource")),
    };
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (&method, name, watching) {
        (&Method::GET, Some(_), _) => "get",
        (&Method::GET, None, true) => "watch",
        (&Method::GET, None, false) => "list",
        (&Method::PATCH, Some(_), _) => "patch",
        _ => return Ok(status(405, "method not allowed")),
    };
    let resource_version = query.get("resourceVersion").cloned();
    state.calls.lock().unwrap().push(Call { client, verb, resource: resource.plural(), resource_version });
    let kind = resource.plural();
    let selector = match Selector::parse(query.get("fieldSelector").map(String::as_str).unwrap_or_default()) {
        Ok(selector) => selector,
        Err(why) => return Ok(status(400, &why)),
    };
    match (verb, name) {
        ("list", _) => Ok(json_reply(StatusCode::OK, &state.db.lock().unwrap().list(resource, namespace, &selector))),
        ("watch", _) => {
            let revision = query.get("resourceVersion").and_then(|r| r.parse().ok()).unwrap_or(0);
            let timeout = query.get("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(1800);
            let w = watch::Watch {
                resource,
                namespace: namespace.map(String::from),
                selector,
                revision,
                timeout: Duration::from_secs(timeout),
            };
            Ok(watch::respond(&state.db, &state.drops, w))
        }
        ("get", Some(name)) => {
            let object = state.db.lock().unwrap().get(resource, namespace.unwrap_or_default(), name).cloned();
            Ok(match object {
                Some(object) => json_reply(StatusCode::OK, &object),
                None => status(404, &format!("{kind} \"{name}\" not found")),
            })
        }
        ("patch", Some(name)) if resource == Resource::Pods => {
            let namespace = namespace.unwrap_or_default();
            let merge =
                req.headers().get("content-type").and_then(|v| v.to_str().ok()) == Some("application/merge-patch+json");
            let body = req.into_body().collect().await.map_err(std::io::Error::other)?.to_bytes();
            let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                return Ok(status(400, "the patch is not JSON"));
            };
            if !merge {
                return Ok(status(415, "only application/merge-patch+json is served here"));
            }
            let mut db = state.db.lock().unwrap();
            let Some(mut pod) = db.get(Resource::Pods, namespace, name).cloned() else {
                return Ok(status(404, &format!("pods \"{name}\" not found")));
            };
            if let Some(uid) = patch.pointer("/metadata/uid")
                && Some(uid) != pod.pointer("/metadata/uid")
            {
                return Ok(status(
                    422,
                    &format!("Pod \"{name}\" is invalid: metadata.uid: Invalid value: {uid}: field is immutable"),
                ));
            }
            merge_patch(&mut pod, &patch);
            let pod = db.put(Resource::Pods, namespace, name, pod);
            state.patches.lock().unwrap().push((namespace.to_string(), name.to_string(), patch));
            Ok(json_reply(StatusCode::OK, &pod))
        }
        _ => Ok(status(405, "method not allowed")),
    }
}

/// `POST` of a core/v1 Event, as kube's `Api::create` sends it: kept (with a name made from its
/// `generateName`) for `events`, answered with the object.
async fn create_event(
    req: Request<Incoming>,
    state: &State,
    client: &'static str,
    namespace: &str,
) -> Result<Reply, std::io::Error> {
    if req.method() != Method::POST {
        return Ok(status(405, "method not allowed"));
    }
    state.calls.lock().unwrap().push(Call { client, verb: "create", resource: "events", resource_version: None });
    let body = req.into_body().collect().await.map_err(std::io::Error::other)?.to_bytes();
    let Ok(mut event) = serde_json::from_slice::<Value>(&body) else {
        return Ok(status(400, "the event is not JSON"));
    };
    if event.pointer("/metadata/namespace").and_then(Value::as_str).is_some_and(|ns| ns != namespace) {
        return Ok(status(400, "the event's namespace does not match the request's"));
    }
    let mut events = state.events.lock().unwrap();
    let generated =
        event.pointer("/metadata/generateName").and_then(Value::as_str).map(|g| format!("{g}{}", events.len()));
    if let Some(name) = generated {
        event["metadata"]["name"] = name.into();
    }
    events.push(event.clone());
    Ok(json_reply(StatusCode::CREATED, &event))
}

/// `%2C` and friends in a query value (kube encodes the field selector's `=` and `,`).
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()),
        ) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// RFC 7386: objects merge key by key, `null` removes, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let object = target.as_object_mut().unwrap();
    for (key, value) in patch {
        if value.is_null() {
            object.remove(key);
        } else {
            merge_patch(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn status(code: u16, message: &str) -> Reply {
    let reason = match code {
        401 => "Unauthorized",
        404 => "NotFound",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    };
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    json_reply(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &body)
}

fn json_reply(code: StatusCode, body: &Value) -> Reply {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(body.to_string())).map_err(|never| match never {}).boxed())
        .unwrap()
}
