//! Kubernetes access for the selector, behind one small trait.
//!
//! The selector needs exactly two reads: a pod, and a ConfigMap in the pod's namespace. `PodSource`
//! is that interface, synchronous like the `Plugin` trait, so selection logic is tested with an
//! in-memory fake and runs in production over `ApiClient`, which talks to the API server with the
//! `kube` crate, bounded in time and retried within one budget (see `client`).

mod client;
mod tls;

pub use client::{ApiClient, ApiPolicy};

use crate::cni::CniError;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use std::fmt;

/// The two reads the selector makes. `Ok(None)`: the object does not exist (the caller knows what
/// that means for it). Errors are CNI errors ready to print, naming the object: code 11 when the
/// API server could not be reached in time, 103 when it refused (unauthorized, forbidden), sent
/// an object that does not parse, or presented a certificate that is not trusted.
pub trait PodSource {
    fn pod(&self, namespace: &str, name: &str) -> Result<Option<Pod>, CniError>;
    fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, CniError>;
}

/// A namespaced object as messages name it: `pod default/web-0`, `ConfigMap default/net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectRef<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pod,
    ConfigMap,
}

impl<'a> ObjectRef<'a> {
    pub fn pod(namespace: &'a str, name: &'a str) -> Self {
        ObjectRef { kind: Kind::Pod, namespace, name }
    }
    pub fn config_map(namespace: &'a str, name: &'a str) -> Self {
        ObjectRef { kind: Kind::ConfigMap, namespace, name }
    }
}

impl fmt::Display for ObjectRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Pod => "pod",
            Kind::ConfigMap => "ConfigMap",
        };
        write!(f, "{kind} {}/{}", self.namespace, self.name)
    }
}
