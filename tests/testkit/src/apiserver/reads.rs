//! `GET` of one object, and list of a namespace's or all of them (the current revision and the
//! objects a field selector matches).

use super::State;
use super::reply::{Reply, json_reply, not_found};
use super::router::Target;
use super::store::Selector;
use hyper::StatusCode;

pub(super) fn get(state: &State, target: &Target, name: &str) -> Reply {
    let namespace = target.namespace.as_deref().unwrap_or_default();
    let object = state.objects.store.lock().unwrap().get(target.resource, namespace, name).cloned();
    match object {
        Some(object) => json_reply(StatusCode::OK, &object),
        None => not_found(target.resource.plural(), name),
    }
}

pub(super) fn list(state: &State, target: &Target, selector: &Selector) -> Reply {
    let list = state.objects.store.lock().unwrap().list(target.resource, target.namespace.as_deref(), selector);
    json_reply(StatusCode::OK, &list)
}
