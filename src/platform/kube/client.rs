//! `ApiClient`, the production `PodSource`: a `kube` client built from the kubeconfig file the
//! selector's configuration names, once per plugin call.
//!
//! Every call is bounded: one `ApiPolicy::budget` covers the whole command (loading the kubeconfig,
//! every attempt, the pauses between them), and each attempt is cut at `attempt_timeout`. Transient
//! failures (connection refused or reset, no answer in time, 429, 5xx) are retried with jittered
//! exponential backoff while the budget lasts; refusals (401, 403, 404, an object that does not
//! parse, a server certificate that is not trusted) are final. The client has no retry layer of its
//! own, so this is the only retry loop and the budget is the only clock.

use super::{Annotations, NetworkAttachmentDefinition, ObjectRef, PodSource, tls};
use crate::platform::cni::operation::ApiRequests;
use crate::platform::cni::{CniError, Operation, code};
use ::kube::api::{ListParams, Patch, PatchParams};
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::{Api, Client, Config, Resource};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The first pause between attempts; it doubles up to `MAX_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// How long API work may take and how often an object is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiPolicy {
    /// All API work of one command ends within this, whatever the API server does.
    pub budget: Duration,
    /// One request (connect, TLS handshake, answer) may take this long.
    pub attempt_timeout: Duration,
    /// Attempts per object.
    pub max_attempts: u32,
}

impl ApiPolicy {
    /// Long enough to ride out an API server restart or a leader change, short enough that the
    /// runtime hears "try again later" (code 11) well before its own CNI timeouts.
    pub const DEFAULT_BUDGET: Duration = Duration::from_secs(30);
    /// A TLS handshake plus a GET is a few round trips; 5 s allows for a distant or loaded API
    /// server (Multus's 250 ms per try was too short across continents, multus#1461).
    pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

    /// Retry transient failures for as long as `budget` lasts.
    pub fn retrying(budget: Duration, attempt_timeout: Duration) -> Self {
        ApiPolicy { budget, attempt_timeout, max_attempts: u32::MAX }
    }

    /// One attempt per object, everything within `timeout`: what DEL without a record can afford.
    pub fn single_attempt(timeout: Duration) -> Self {
        ApiPolicy { budget: timeout, attempt_timeout: timeout, max_attempts: 1 }
    }
}

impl Default for ApiPolicy {
    fn default() -> Self {
        Self::retrying(Self::DEFAULT_BUDGET, Self::DEFAULT_ATTEMPT_TIMEOUT)
    }
}

/// A Kubernetes API client for one plugin call. Owns a current-thread runtime and blocks on it, so
/// callers stay synchronous; it must not be used from inside another runtime.
pub struct ApiClient {
    // Declared before `runtime` so it is dropped first, while the runtime its tasks live on exists.
    client: Client,
    server: String,
    kubeconfig: PathBuf,
    /// Whether the kubeconfig names the cluster's CA (else the system's roots are trusted).
    has_ca_data: bool,
    policy: ApiPolicy,
    deadline: Instant,
    /// Every attempt counts, in the operation's count: what a plugin operation reports to the
    /// agent's metrics, where ADD's should be 0 while the agent answers.
    requests: ApiRequests,
    runtime: tokio::runtime::Runtime,
}

impl ApiClient {
    /// Load `kubeconfig` and build a client whose requests count among `op`'s. The policy's budget
    /// starts now. A kubeconfig that is missing or unusable is a node configuration error (code 7)
    /// naming the file.
    pub fn connect(kubeconfig: &Path, policy: ApiPolicy, op: &Operation) -> Result<Self, CniError> {
        let deadline = Instant::now() + policy.budget;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CniError::io(format!("cannot start an async runtime: {e}")))?;
        let bad_kubeconfig = |e: &dyn std::fmt::Display| {
            CniError::invalid_config(format!("cannot use kubeconfig {}: {e}", kubeconfig.display()))
        };
        let parsed = Kubeconfig::read_from(kubeconfig).map_err(|e| bad_kubeconfig(&e))?;
        // Loading may run an exec credential plugin, so it is bounded like any API work.
        let remaining = deadline.saturating_duration_since(Instant::now());
        let config = runtime
            .block_on(async {
                tokio::time::timeout(remaining, Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default()))
                    .await
            })
            .map_err(|_| CniError::try_again(format!("loading kubeconfig {} took too long", kubeconfig.display())))?
            .map_err(|e| bad_kubeconfig(&e))?;
        let server = config.cluster_url.to_string().trim_end_matches('/').to_string();
        let has_ca_data = config.root_cert.is_some();
        let client = {
            let _in_runtime = runtime.enter();
            // Each request is bounded as a whole by `attempt_timeout` (see `with_retries`).
            tls::client(config, policy.attempt_timeout, tls::Protocols::Http1).map_err(|e| bad_kubeconfig(&e))?
        };
        let requests = op.api_requests().clone();
        Ok(ApiClient {
            client,
            server,
            kubeconfig: kubeconfig.to_path_buf(),
            has_ca_data,
            policy,
            deadline,
            requests,
            runtime,
        })
    }

    /// Give the API work that follows a fresh budget of its own (the status write after the
    /// networks' plugins have run, however long they took).
    pub fn renew_budget(&mut self, budget: Duration) {
        self.deadline = Instant::now() + budget;
    }

    fn get<K>(&self, obj: ObjectRef<'_>) -> Result<Option<K>, CniError>
    where
        K: Resource<Scope = NamespaceResourceScope> + DeserializeOwned + Clone + Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), obj.namespace);
        self.runtime.block_on(self.with_retries(&obj, "get", &[404], || api.get(obj.name)))
    }

    /// Run `request` until it succeeds, is refused, or the budget runs out. `Ok(None)`: refused
    /// with one of the `absent` statuses (the object is not there, or not the one asked for).
    async fn with_retries<T, F, Fut>(
        &self,
        obj: &dyn std::fmt::Display,
        verb: &str,
        absent: &[u16],
        request: F,
    ) -> Result<Option<T>, CniError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, ::kube::Error>>,
    {
        let started = Instant::now();
        let mut attempts = 0;
        let mut pause = FIRST_PAUSE;
        let mut last_error = String::from("the time budget was spent before the first attempt");
        loop {
            let remaining = self.deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() || attempts >= self.policy.max_attempts {
                break;
            }
            attempts += 1;
            self.requests.count_one();
            let limit = remaining.min(self.policy.attempt_timeout);
            match tokio::time::timeout(limit, request()).await {
                Ok(Ok(object)) => return Ok(Some(object)),
                Ok(Err(e)) => match classify(&e) {
                    Failure::Refused { status: Some(status), .. } if absent.contains(&status) => return Ok(None),
                    Failure::NotServed(text) => {
                        return Err(CniError::new(
                            code::KUBE_API,
                            format!(
                                "cannot {verb} {obj}: API server {} does not serve that kind of object ({text}); \
                                 install its CustomResourceDefinition (for NetworkAttachmentDefinitions, the \
                                 k8s.cni.cncf.io one that Multus and yh-genie ship)",
                                self.server
                            ),
                        ));
                    }
                    Failure::Refused { status, text } => return Err(self.refusal(obj, verb, status, &text)),
                    Failure::Certificate(problem) => {
                        let why = tls::explain(&problem, &self.server, &self.kubeconfig, self.has_ca_data);
                        return Err(CniError::new(code::KUBE_API, format!("cannot {verb} {obj}: {why}")));
                    }
                    Failure::Transient(text) => last_error = text,
                },
                Err(_) => last_error = format!("no answer within {}", seconds(limit)),
            }
            if attempts < self.policy.max_attempts {
                let remaining = self.deadline.saturating_duration_since(Instant::now());
                tokio::time::sleep(jittered(pause).min(remaining)).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
        Err(CniError::try_again(format!(
            "API server {} unreachable: could not {verb} {obj} ({attempts} attempt{} in {}); last error: {last_error}; {}",
            self.server,
            if attempts == 1 { "" } else { "s" },
            seconds(started.elapsed()),
            unreachable_hint(&self.kubeconfig),
        )))
    }

    fn refusal(&self, obj: &dyn std::fmt::Display, verb: &str, status: Option<u16>, text: &str) -> CniError {
        let server = &self.server;
        let msg = match status {
            Some(401) => format!(
                "API server {server} rejected the credentials of kubeconfig {} (401 Unauthorized) on the request to \
                 {verb} {obj}; {UNAUTHORIZED_HINT}",
                self.kubeconfig.display()
            ),
            Some(403) => format!(
                "API server {server} forbade the request to {verb} {obj} (403 Forbidden: {text}); the kubeconfig's user needs RBAC permission to {verb} it"
            ),
            Some(status) => format!("API server {server} refused the request to {verb} {obj}: {status} {text}"),
            None => format!("cannot {verb} {obj} on API server {server}: {text}"),
        };
        CniError::new(code::KUBE_API, msg)
    }
}

/// What to look at when the API server cannot be reached: the plugin runs in the node's host
/// network namespace, where a Service's ClusterIP works only through kube-proxy (or its equivalent).
fn unreachable_hint(kubeconfig: &Path) -> String {
    format!(
        "the server is the one kubeconfig {} names, and the plugin reaches it from the node's host network: \
         a Service ClusterIP needs kube-proxy (or its equivalent) running on the node, otherwise give \
         yh-genie install --api-server an address the node reaches",
        kubeconfig.display()
    )
}

/// What to look at when the API server rejects the token: the installer writes it and rewrites it
/// as the kubelet rotates it, and it dies with the installer's pod.
const UNAUTHORIZED_HINT: &str = "its token is expired or no longer valid: yh-genie install (the yh-genie DaemonSet's \
     pod on this node) writes it and rewrites it as the kubelet rotates it, so check that pod runs on this node \
     (kubectl -n kube-system get pods -l app.kubernetes.io/name=yh-genie -o wide); while it restarts, this lasts seconds";

impl PodSource for ApiClient {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, CniError> {
        self.get(ObjectRef::pod(namespace, name))
    }
    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, CniError> {
        self.get(ObjectRef::config_map(namespace, name))
    }
    fn network_attachment(&self, namespace: &str, name: &str) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        self.get(ObjectRef::network_attachment(namespace, name))
    }
    fn resource_claim(&self, namespace: &str, name: &str) -> Result<Option<ResourceClaim>, CniError> {
        self.get(ObjectRef::resource_claim(namespace, name))
    }
    /// One LIST, answered from the API server's watch cache (resourceVersion 0).
    fn node_resource_slices(&self, node: &str) -> Result<Vec<ResourceSlice>, CniError> {
        let what = format!("the ResourceSlices of node {node}");
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        let params = ListParams::default().fields(&format!("spec.nodeName={node}")).match_any();
        let listed = self.runtime.block_on(self.with_retries(&what, "list", &[], || api.list(&params)))?;
        Ok(listed.map(|list| list.items).unwrap_or_default())
    }
    /// A JSON merge patch of `metadata`: the annotations, and the uid the pod must still have. The
    /// uid is immutable, so the API server refuses the patch (422, "field is immutable") when the
    /// pod under this name is another one; nothing is written then.
    fn annotate_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        annotations: &Annotations,
    ) -> Result<bool, CniError> {
        let obj = ObjectRef::pod(namespace, name);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = annotations_patch(uid, annotations);
        let params = PatchParams::default();
        let done = self
            .runtime
            .block_on(self.with_retries(&obj, "patch", &POD_REPLACED, || api.patch(name, &params, &patch)))?;
        Ok(done.is_some())
    }
}

/// The answers to an `annotations_patch` that mean the pod under that name is not the one with the
/// uid any more: 404, gone; 422, the uid is immutable (another pod's uid would change); 409, a uid
/// precondition that failed. Nothing was written, and asking again cannot help.
pub const POD_REPLACED: [u16; 3] = [404, 409, 422];

/// A JSON merge patch of a pod's `metadata` that writes `annotations` and carries the `uid` the
/// pod must still have: the uid is immutable, so the API server refuses the patch (422) when the
/// pod under that name is another one.
pub fn annotations_patch(uid: &str, annotations: &Annotations) -> Patch<serde_json::Value> {
    Patch::Merge(serde_json::json!({"metadata": {"uid": uid, "annotations": annotations}}))
}

/// What went wrong with one attempt, and whether trying again can help.
#[derive(Debug, PartialEq)]
pub enum Failure {
    /// The API server may answer next time: connection refused or reset, timeouts, 408, 429, 5xx.
    Transient(String),
    /// It answered, and the answer will not change by asking again.
    Refused { status: Option<u16>, text: String },
    /// A 404 that names no object: the API server does not serve that kind of object at all (a
    /// CustomResourceDefinition not installed, an API group turned off), as opposed to a 404 for
    /// one object that is not there, whose status names it.
    NotServed(String),
    /// Its certificate is not trusted: it will be the same certificate next time.
    Certificate(rustls::CertificateError),
}

pub fn classify(e: &::kube::Error) -> Failure {
    use ::kube::Error as E;
    if let Some(problem) = tls::problem(e) {
        return Failure::Certificate(problem);
    }
    match e {
        E::Api(status) if matches!(status.code, 408 | 429 | 500..=599) => {
            Failure::Transient(format!("{} {}", status.code, status.message))
        }
        E::Api(status) if status.code == 404 && status.details.as_ref().is_none_or(|d| d.name.is_empty()) => {
            Failure::NotServed(format!("{} {}", status.code, status.message))
        }
        E::Api(status) => {
            Failure::Refused { status: (status.code != 0).then_some(status.code), text: status.message.clone() }
        }
        // Transport: the connection could not be made, broke, or timed out.
        E::HyperError(_) | E::Service(_) | E::ReadEvents(_) => Failure::Transient(error_chain(e)),
        E::SerdeError(err) => {
            Failure::Refused { status: None, text: format!("the answer is not a valid object: {err}") }
        }
        other => Failure::Refused { status: None, text: error_chain(other) },
    }
}

/// An error and its sources on one line: transport errors hide their cause (e.g. "Connection
/// refused") a few levels down.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// `pause` scaled by a random factor in [0.5, 1.0), so nodes that lost the API server together do
/// not come back in lockstep.
pub fn jittered(pause: Duration) -> Duration {
    pause.mul_f64(0.5 + random_fraction() / 2.0)
}

/// A random number in [0, 1), evenly spread (0.5 if the system has no randomness to give).
pub fn random_fraction() -> f64 {
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.5;
    }
    f64::from(u32::from_le_bytes(bytes)) / (f64::from(u32::MAX) + 1.0)
}

/// A duration for messages: `30s`, `0.25s`.
fn seconds(d: Duration) -> String {
    let s = format!("{:.2}", d.as_secs_f64());
    format!("{}s", s.trim_end_matches('0').trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::core::Status;

    fn api_error(code: u16, message: &str) -> ::kube::Error {
        ::kube::Error::Api(Status::failure(message, "Reason").with_code(code).boxed())
    }

    #[test]
    fn server_trouble_is_transient() {
        for code in [408, 429, 500, 502, 503, 504] {
            assert!(matches!(classify(&api_error(code, "busy")), Failure::Transient(_)), "{code}");
        }
    }

    #[test]
    fn refusals_are_final() {
        for code in [400, 401, 403, 410] {
            assert_eq!(
                classify(&api_error(code, "no")),
                Failure::Refused { status: Some(code), text: "no".into() },
                "{code}"
            );
        }
        // A 404 names the object that is not there.
        let mut missing = Status::failure("pods \"web\" not found", "NotFound").with_code(404);
        missing.details = Some(serde_json::from_value(serde_json::json!({"name": "web", "kind": "pods"})).unwrap());
        assert_eq!(
            classify(&::kube::Error::Api(missing.boxed())),
            Failure::Refused { status: Some(404), text: "pods \"web\" not found".into() }
        );
        let bad_object = serde_json::from_str::<Pod>("[1]").unwrap_err();
        assert!(matches!(classify(&::kube::Error::SerdeError(bad_object)), Failure::Refused { status: None, .. }));
    }

    #[test]
    fn a_404_that_names_no_object_is_a_kind_not_served() {
        assert_eq!(
            classify(&api_error(404, "the server could not find the requested resource")),
            Failure::NotServed("404 the server could not find the requested resource".into())
        );
    }

    #[test]
    fn jitter_stays_in_the_upper_half_of_the_delay() {
        for _ in 0..200 {
            let d = jittered(Duration::from_millis(1000));
            assert!(d >= Duration::from_millis(500) && d < Duration::from_millis(1000), "{d:?}");
        }
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(seconds(Duration::from_secs(30)), "30s");
        assert_eq!(seconds(Duration::from_millis(250)), "0.25s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5s");
    }

    #[test]
    fn missing_kubeconfig_is_a_configuration_error_naming_the_file() {
        let e = ApiClient::connect(Path::new("/nonexistent/kubeconfig"), ApiPolicy::default(), &Operation::default())
            .err()
            .unwrap();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("/nonexistent/kubeconfig"), "{e}");
    }
}
