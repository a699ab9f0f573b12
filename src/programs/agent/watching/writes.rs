//! The writes the node agent makes for the plugin: a pod's network-status annotation (a merge
//! patch guarded by the pod's uid) and `AddedInterface` events, each in one attempt; the agent's
//! writer retries them.

use crate::platform::kube::{Failure, POD_REPLACED, annotations_patch, classify};
use ::kube::api::{PatchParams, PostParams};
use ::kube::{Api, Client};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use std::collections::BTreeMap;
use std::time::Duration;

/// One status write may take this long; the writer retries within its own budget.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

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
            Failure::Refused { text, .. } | Failure::NotServed(text) => Annotated::Refused(text),
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
/// `reporter`, in one attempt; `at`: when it happened (it may be sent a while later).
pub async fn create_event(
    client: &Client,
    pod: &EventPod<'_>,
    reporter: &Reporter<'_>,
    reason: &str,
    message: &str,
    at: std::time::SystemTime,
) -> Annotated {
    create_event_of_type(client, pod, reporter, reason, message, false, at).await
}

/// `create_event`, a `Warning` when `warning`.
pub async fn create_event_of_type(
    client: &Client,
    pod: &EventPod<'_>,
    reporter: &Reporter<'_>,
    reason: &str,
    message: &str,
    warning: bool,
    at: std::time::SystemTime,
) -> Annotated {
    let (component, node) = (reporter.component, reporter.node);
    let api: Api<Event> = Api::namespaced(client.clone(), pod.namespace);
    let now = Time(k8s_openapi::jiff::Timestamp::try_from(at).unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now()));
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
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
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
            Failure::Refused { text, .. } | Failure::NotServed(text) => Annotated::Refused(text),
            Failure::Certificate(problem) => Annotated::Refused(format!("the server's certificate: {problem}")),
        },
    }
}

/// Merge `annotations` into pod `namespace/name` while it is still `uid` at `resource_version`
/// (both preconditions of the one patch). `Transient` when the pod changed since that version: the
/// caller takes the newer one its watch delivers and writes again.
pub async fn annotate_at_version(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
    resource_version: &str,
    annotations: &BTreeMap<String, String>,
) -> Annotated {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let patch = ::kube::api::Patch::Merge(serde_json::json!({"metadata": {
        "uid": uid, "resourceVersion": resource_version, "annotations": annotations}}));
    match tokio::time::timeout(REQUEST_TIMEOUT, api.patch(name, &PatchParams::default(), &patch)).await {
        Err(_) => Annotated::Transient(format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())),
        Ok(Ok(_)) => Annotated::Written,
        Ok(Err(::kube::Error::Api(e))) if e.code == 409 => {
            Annotated::Transient(format!("the pod changed since resourceVersion {resource_version} (409 Conflict)"))
        }
        Ok(Err(e)) => match classify(&e) {
            Failure::Refused { status: Some(status), .. } if POD_REPLACED.contains(&status) => Annotated::PodGone,
            _ => failed(&e),
        },
    }
}

fn failed(e: &::kube::Error) -> Annotated {
    match classify(e) {
        Failure::Transient(text) => Annotated::Transient(text),
        Failure::Refused { text, .. } | Failure::NotServed(text) => Annotated::Refused(text),
        Failure::Certificate(problem) => Annotated::Refused(format!("the server's certificate: {problem}")),
    }
}
