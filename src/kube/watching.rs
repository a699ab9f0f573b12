//! The node agent's access to the API server: one long-lived async client (where `ApiClient` is
//! built for one plugin call and blocks), used for its watches and for the network-status writes
//! and `AddedInterface` events it makes on the plugin's behalf. Built with the same HTTPS stack and certificate checks as the
//! plugin's client (`tls`).
//!
//! In the DaemonSet it authenticates with the pod's service account: the token file is named, not
//! copied, so kube re-reads it as the kubelet rotates it. Elsewhere (tests) a kubeconfig file.

use super::client::{Failure, POD_REPLACED, annotations_patch, classify};
use super::tls;
use ::kube::api::{PatchParams, PostParams};
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::{Api, Client, Config};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// One status write may take this long; the writer retries within its own budget.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the agent's credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// A kubeconfig file.
    Kubeconfig(PathBuf),
    /// A service account's mounted `token` and `ca.crt` in `dir`, and the API server's URL.
    ServiceAccount { dir: PathBuf, server: String },
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Access::Kubeconfig(path) => write!(f, "kubeconfig {}", path.display()),
            Access::ServiceAccount { dir, server } => write!(f, "the service account in {} at {server}", dir.display()),
        }
    }
}

/// A client for `access`; the error says what is wrong with it.
pub async fn connect(access: &Access) -> Result<Client, String> {
    let kubeconfig = match access {
        Access::Kubeconfig(path) => Kubeconfig::read_from(path).map_err(|e| format!("{access}: {e}"))?,
        Access::ServiceAccount { dir, server } => serde_json::from_value(serde_json::json!({
            "clusters": [{"name": "cluster", "cluster": {
                "server": server, "certificate-authority": dir.join("ca.crt")}}],
            "users": [{"name": "agent", "user": {"tokenFile": dir.join("token")}}],
            "contexts": [{"name": "agent", "context": {"cluster": "cluster", "user": "agent"}}],
            "current-context": "agent",
        }))
        .map_err(|e| format!("{access}: {e}"))?,
    };
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("{access}: {e}"))?;
    tls::client(config, CONNECT_TIMEOUT, tls::Protocols::Http2Preferred).map_err(|e| format!("{access}: {e}"))
}

/// How one status write ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Annotated {
    Written,
    /// The pod is gone, or is another pod (another uid) under that name: nothing was written.
    PodGone,
    /// Asking again may help (unreachable, 5xx, 429, no answer in time).
    Transient(String),
    /// It will not work by asking again (forbidden, bad request).
    Refused(String),
}

/// Merge `annotations` into pod `namespace/name` if it is still `uid` (see `annotations_patch`),
/// in one attempt.
pub async fn annotate(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
    annotations: &BTreeMap<String, String>,
) -> Annotated {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let patch = annotations_patch(uid, annotations);
    match tokio::time::timeout(REQUEST_TIMEOUT, api.patch(name, &PatchParams::default(), &patch)).await {
        Err(_) => Annotated::Transient(format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())),
        Ok(Ok(_)) => Annotated::Written,
        Ok(Err(e)) => match classify(&e) {
            Failure::Refused { status: Some(status), .. } if POD_REPLACED.contains(&status) => Annotated::PodGone,
            Failure::Transient(text) => Annotated::Transient(text),
            Failure::Refused { text, .. } => Annotated::Refused(text),
            Failure::Certificate(problem) => Annotated::Refused(format!("the server's certificate: {problem}")),
        },
    }
}

/// The pod an Event is about: its namespace, name and uid.
pub struct EventPod<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// Who reports an Event: a component on a node (as the kubelet's and Multus's events say).
pub struct Reporter<'a> {
    pub component: &'a str,
    pub node: &'a str,
}

/// Create one `Normal` core/v1 Event about `pod` with `reason` and `message`, reported by
/// `reporter`, in one attempt.
pub async fn create_event(
    client: &Client,
    pod: &EventPod<'_>,
    reporter: &Reporter<'_>,
    reason: &str,
    message: &str,
) -> Annotated {
    let (component, node) = (reporter.component, reporter.node);
    let api: Api<Event> = Api::namespaced(client.clone(), pod.namespace);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", pod.name)),
            namespace: Some(pod.namespace.to_string()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(pod.namespace.to_string()),
            name: Some(pod.name.to_string()),
            uid: Some(pod.uid.to_string()),
            ..Default::default()
        },
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some("Normal".into()),
        source: Some(EventSource { component: Some(component.into()), host: Some(node.to_string()) }),
        reporting_component: Some(component.into()),
        reporting_instance: Some(node.to_string()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Default::default()
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &event)).await {
        Err(_) => Annotated::Transient(format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())),
        Ok(Ok(_)) => Annotated::Written,
        Ok(Err(e)) => match classify(&e) {
            Failure::Transient(text) => Annotated::Transient(text),
            Failure::Refused { text, .. } => Annotated::Refused(text),
            Failure::Certificate(problem) => Annotated::Refused(format!("the server's certificate: {problem}")),
        },
    }
}
