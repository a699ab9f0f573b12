//! One request to its answer: counted, misbehaved on if a fault is due, authenticated by its token,
//! then routed by method and path to a read, a watch or a write.

use super::reply::{Reply, status};
use super::requests::Call;
use super::store::{Resource, Selector};
use super::{AGENT_TOKEN, State, TOKEN, reads, watch, writes};
use hyper::body::Incoming;
use hyper::{Method, Request, Uri};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A verb on pods, ConfigMaps or NetworkAttachmentDefinitions: one of them (`name`), or those of
/// `namespace` (or of every namespace).
pub(super) struct Target {
    pub verb: Verb,
    pub resource: Resource,
    pub namespace: Option<String>,
    /// The query's parameters, percent-decoded.
    pub query: BTreeMap<String, String>,
}

pub(super) enum Verb {
    Get(String),
    List,
    Watch,
    Patch(String),
    Create,
    /// `PUT` of the whole object.
    Replace(String),
    Delete(String),
}

impl Verb {
    /// As RBAC names it.
    fn as_str(&self) -> &'static str {
        match self {
            Verb::Get(_) => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Patch(_) => "patch",
            Verb::Create => "create",
            Verb::Replace(_) => "update",
            Verb::Delete(_) => "delete",
        }
    }
}

enum Route {
    /// `/api/v1/namespaces/{namespace}/events`.
    Events {
        namespace: String,
    },
    Objects(Target),
}

pub(super) async fn handle(req: Request<Incoming>, state: Arc<State>) -> Result<Reply, std::io::Error> {
    state.requests.received(req.method(), req.uri().path());
    if let Some(faulted) = state.faults.apply().await {
        return faulted;
    }
    let client = match req.headers().get("authorization").and_then(|v| v.to_str().ok()) {
        Some(h) if h == format!("Bearer {TOKEN}") => "plugin",
        Some(h) if h == format!("Bearer {AGENT_TOKEN}") => "agent",
        _ => return Ok(status(401, "Unauthorized")),
    };
    let target = match route(req.method(), req.uri()) {
        Ok(Route::Events { namespace }) => return writes::create_event(req, &state, client, &namespace).await,
        Ok(Route::Objects(target)) => target,
        Err((code, message)) => return Ok(status(code, message)),
    };
    state.requests.record(Call {
        client,
        verb: target.verb.as_str(),
        resource: target.resource.plural(),
        resource_version: target.query.get("resourceVersion").cloned(),
        streaming_list: matches!(target.verb, Verb::Watch) && watch::is_streaming_list(&target),
    });
    let forbidden = || {
        let what = target.resource.plural();
        match target.namespace.as_deref() {
            Some(ns) => format!("{what} is forbidden: the test denies {what} in the namespace \"{ns}\""),
            None => format!("{what} is forbidden: the test denies {what} at the cluster scope"),
        }
    };
    let one_verb = format!("{}/{}", target.resource.plural(), target.verb.as_str());
    let namespace = target.namespace.as_deref();
    match state.faults.denied(target.resource.plural(), namespace).or_else(|| state.faults.denied(&one_verb, namespace))
    {
        Some(404) => return Ok(status(404, "the server could not find the requested resource")),
        Some(code) => return Ok(status(code, &forbidden())),
        None => {}
    }
    let selector = match Selector::parse(target.query.get("fieldSelector").map(String::as_str).unwrap_or_default()) {
        Ok(selector) => selector,
        Err(why) => return Ok(status(400, &why)),
    };
    match &target.verb {
        Verb::Get(name) => Ok(reads::get(&state, &target, name)),
        Verb::List => Ok(reads::list(&state, &target, &selector)),
        Verb::Watch => Ok(watch::respond(&state, &target, selector)),
        Verb::Patch(name) => writes::patch(req, &state, &target, name).await,
        Verb::Create => writes::create(req, &state, &target).await,
        Verb::Replace(name) => writes::replace(req, &state, &target, name).await,
        Verb::Delete(name) => writes::delete(req, &state, &target, name).await,
    }
}

/// What `method` on `uri` asks for, or the error status (and message) of a request for nothing the
/// server serves.
fn route(method: &Method, uri: &Uri) -> Result<Route, (u16, &'static str)> {
    let path: Vec<&str> = uri.path().trim_start_matches('/').split('/').collect();
    if let ["api", "v1", "namespaces", namespace, "events"] = path.as_slice() {
        return Ok(Route::Events { namespace: namespace.to_string() });
    }
    let (resource, namespace, name) = match path.as_slice() {
        ["api", "v1", "pods"] => (Resource::Pods, None, None),
        ["api", "v1", "configmaps"] => (Resource::ConfigMaps, None, None),
        ["api", "v1", "nodes", rest @ ..] => (Resource::Nodes, None, rest.first()),
        ["apis", "k8s.cni.cncf.io", "v1", "network-attachment-definitions"] => (Resource::Nads, None, None),
        ["api", "v1", "namespaces", ns, "pods", rest @ ..] => (Resource::Pods, Some(*ns), rest.first()),
        ["api", "v1", "namespaces", ns, "configmaps", rest @ ..] => (Resource::ConfigMaps, Some(*ns), rest.first()),
        ["apis", "k8s.cni.cncf.io", "v1", "namespaces", ns, "network-attachment-definitions", rest @ ..] => {
            (Resource::Nads, Some(*ns), rest.first())
        }
        ["apis", "resource.k8s.io", "v1", "namespaces", ns, "resourceclaims", rest @ ..] => {
            (Resource::Claims, Some(*ns), rest.first())
        }
        ["apis", "resource.k8s.io", "v1", "resourceslices"] => (Resource::Slices, None, None),
        ["apis", "ipam.yh-genie.io", "v1alpha1", "ipblocks", rest @ ..] => (Resource::IpBlocks, None, rest.first()),
        ["apis", "ipam.yh-genie.io", "v1alpha1", "addresspools", rest @ ..] => {
            (Resource::AddressPools, None, rest.first())
        }
        ["apis", "ipam.yh-genie.io", "v1alpha1", "fixedaddresses", rest @ ..] => {
            (Resource::FixedAddresses, None, rest.first())
        }
        // `.../ipamclaims/{name}/status` too: the status subresource, replaced whole here.
        ["apis", "k8s.cni.cncf.io", "v1alpha1", "namespaces", ns, "ipamclaims", rest @ ..] => {
            (Resource::IpamClaims, Some(*ns), rest.first())
        }
        ["apis", "whereabouts.cni.cncf.io", "v1alpha1", "ippools"] => (Resource::IpPools, None, None),
        ["apis", "whereabouts.cni.cncf.io", "v1alpha1", "overlappingrangeipreservations"] => {
            (Resource::Reservations, None, None)
        }
        ["apis", "apps", "v1", "namespaces", ns, "statefulsets", rest @ ..] => {
            (Resource::StatefulSets, Some(*ns), rest.first())
        }
        ["apis", "coordination.k8s.io", "v1", "namespaces", ns, "leases", rest @ ..] => {
            (Resource::Leases, Some(*ns), rest.first())
        }
        _ => return Err((404, "the server could not find the requested resource")),
    };
    let query: BTreeMap<String, String> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect();
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (method, name, watching) {
        (&Method::GET, Some(name), _) => Verb::Get(name.to_string()),
        (&Method::GET, None, true) => Verb::Watch,
        (&Method::GET, None, false) => Verb::List,
        (&Method::PATCH, Some(name), _) => Verb::Patch(name.to_string()),
        (&Method::POST, None, _)
            if matches!(resource, Resource::IpBlocks | Resource::Leases | Resource::FixedAddresses) =>
        {
            Verb::Create
        }
        (&Method::PUT, Some(name), _)
            if matches!(
                resource,
                Resource::Leases | Resource::IpBlocks | Resource::FixedAddresses | Resource::IpamClaims
            ) =>
        {
            Verb::Replace(name.to_string())
        }
        (&Method::DELETE, Some(name), _) if matches!(resource, Resource::IpBlocks | Resource::FixedAddresses) => {
            Verb::Delete(name.to_string())
        }
        _ => return Err((405, "method not allowed")),
    };
    Ok(Route::Objects(Target { verb, resource, namespace: namespace.map(String::from), query }))
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
