//! What clients write: a pod's or a `Lease`'s `PATCH` as a JSON merge patch (RFC 7386), applied and
//! kept, refused with 422 (as Kubernetes does) when it would change the object's uid; and the `POST` of a core/v1
//! Event, as kube's `Api::create` sends it, kept with a name made from its `generateName`; the
//! `POST` of an `IPBlock` or a `Lease`, refused with 409 `AlreadyExists` when its name is taken,
//! and the `PUT` of a `Lease` or an `IPBlock`, refused with 409 `Conflict` when its resourceVersion
//! is not the current one; the `DELETE` of an `IPBlock`, refused with 409 `Conflict` when its preconditions
//! (uid, resourceVersion) do not hold. A created object gets a uid, as the API server gives one.

use super::State;
use super::reply::{Reply, json_reply, not_found, status};
use super::requests::Call;
use super::router::Target;
use super::store::Resource;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{Value, json};

pub(super) async fn patch(
    req: Request<Incoming>,
    state: &State,
    target: &Target,
    name: &str,
) -> Result<Reply, std::io::Error> {
    if !matches!(target.resource, Resource::Pods | Resource::Leases) {
        return Ok(status(405, "method not allowed"));
    }
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let merge = req.headers().get("content-type").and_then(|v| v.to_str().ok()) == Some("application/merge-patch+json");
    let body = req.into_body().collect().await.map_err(std::io::Error::other)?.to_bytes();
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return Ok(status(400, "the patch is not JSON"));
    };
    if !merge {
        return Ok(status(415, "only application/merge-patch+json is served here"));
    }
    let mut store = state.objects.store.lock().unwrap();
    let Some(mut pod) = store.get(target.resource, namespace, name).cloned() else {
        return Ok(not_found(target.resource.plural(), name));
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
    let pod = store.put(target.resource, namespace, name, pod);
    if target.resource == Resource::Pods {
        state.objects.patches.lock().unwrap().push((namespace.to_string(), name.to_string(), patch));
    }
    Ok(json_reply(StatusCode::OK, &pod))
}

/// `POST` of an `IPBlock` (cluster-scoped) or a `Lease`: kept under its name, or 409
/// `AlreadyExists` when that name is taken, as the API server decides who created an object first.
pub(super) async fn create(req: Request<Incoming>, state: &State, target: &Target) -> Result<Reply, std::io::Error> {
    let body = req.into_body().collect().await.map_err(std::io::Error::other)?.to_bytes();
    let Ok(object) = serde_json::from_slice::<Value>(&body) else {
        return Ok(status(400, "the object is not JSON"));
    };
    let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str).map(String::from) else {
        return Ok(status(422, "metadata.name: Required value"));
    };
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let mut store = state.objects.store.lock().unwrap();
    if store.get(target.resource, namespace, &name).is_some() {
        return Ok(status(409, &format!("{} \"{name}\" already exists", target.resource.plural())));
    }
    let mut object = object;
    object["metadata"]["uid"] = format!("uid-{}-{name}-{}", target.resource.plural(), store.current_revision()).into();
    let stored = store.put(target.resource, namespace, &name, object);
    Ok(json_reply(StatusCode::CREATED, &stored))
}

/// `DELETE` of an `IPBlock`: removed when the body's `preconditions` (uid, resourceVersion), if
/// any, hold for the stored object, 409 `Conflict` when they do not, 404 when there is none.
pub(super) async fn delete(
    req: Request<Incoming>,
    state: &State,
    target: &Target,
    name: &str,
) -> Result<Reply, std::io::Error> {
    let body = req.into_body().collect().await.map_err(std::io::Error::other)?.to_bytes();
    let options: Value = if body.is_empty() { json!({}) } else { serde_json::from_slice(&body).unwrap_or(json!({})) };
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let mut store = state.objects.store.lock().unwrap();
    let Some(stored) = store.get(target.resource, namespace, name) else {
        return Ok(not_found(target.resource.plural(), name));
    };
    for field in ["uid", "resourceVersion"] {
        let wanted = options.pointer(&format!("/preconditions/{field}")).and_then(Value::as_str);
        let held = stored.pointer(&format!("/metadata/{field}")).and_then(Value::as_str);
        if let Some(wanted) = wanted
            && Some(wanted) != held
        {
            let message = format!(
                "Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {}",
                held.unwrap_or_default()
            );
            return Ok(status(409, &message));
        }
    }
    let removed = store.remove(target.resource, namespace, name).expect("read above");
    Ok(json_reply(StatusCode::OK, &removed))
}

/// `PUT` of a `Lease` or an `IPBlock`: replaced when its resourceVersion is the stored one (or not
/// given), 409 when another write came first, 404 when there is none.
pub(super) async fn replace(
    req: Request<Incoming>,
    state: &State,
    target: &Target,
    name: &str,
) -> Result<Reply, std::io::Error> {
    let body = req.into_body().collect().await.map_err(std::io::Error::other)?.to_bytes();
    let Ok(object) = serde_json::from_slice::<Value>(&body) else {
        return Ok(status(400, "the object is not JSON"));
    };
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let mut store = state.objects.store.lock().unwrap();
    let Some(stored) = store.get(target.resource, namespace, name) else {
        return Ok(not_found(target.resource.plural(), name));
    };
    let version = |o: &Value| o.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(String::from);
    if version(&object).is_some_and(|v| Some(v) != version(stored)) {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified",
            target.resource.plural()
        );
        return Ok(status(409, &message));
    }
    let stored = store.put(target.resource, namespace, name, object);
    Ok(json_reply(StatusCode::OK, &stored))
}

pub(super) async fn create_event(
    req: Request<Incoming>,
    state: &State,
    client: &'static str,
    namespace: &str,
) -> Result<Reply, std::io::Error> {
    if req.method() != Method::POST {
        return Ok(status(405, "method not allowed"));
    }
    state.requests.record(Call {
        client,
        verb: "create",
        resource: "events",
        resource_version: None,
        streaming_list: false,
    });
    let body = req.into_body().collect().await.map_err(std::io::Error::other)?.to_bytes();
    let Ok(mut event) = serde_json::from_slice::<Value>(&body) else {
        return Ok(status(400, "the event is not JSON"));
    };
    if event.pointer("/metadata/namespace").and_then(Value::as_str).is_some_and(|ns| ns != namespace) {
        return Ok(status(400, "the event's namespace does not match the request's"));
    }
    let mut events = state.objects.events.lock().unwrap();
    let generated =
        event.pointer("/metadata/generateName").and_then(Value::as_str).map(|g| format!("{g}{}", events.len()));
    if let Some(name) = generated {
        event["metadata"]["name"] = name.into();
    }
    events.push(event.clone());
    Ok(json_reply(StatusCode::CREATED, &event))
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
