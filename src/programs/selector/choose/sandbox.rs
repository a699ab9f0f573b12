//! Whether the pod object under the sandbox's name is the sandbox's pod. The runtime names the pod
//! by namespace, name and `K8S_POD_UID`; the API server may hold under that name:
//!
//! - the same pod (its uid is `K8S_POD_UID`);
//! - a static pod's mirror: the kubelet runs a static pod (a manifest file on the node) under a uid
//!   of its own, the file's hash, and shows it to the API server as a mirror pod, which gets a uid
//!   of the API server's and carries the kubelet's in its `kubernetes.io/config.mirror`
//!   annotation. That is the same pod (Multus #773 refused every static pod);
//! - another pod: a StatefulSet's pod deleted and created again under its name. The old pod's
//!   sandbox must not get the new pod's networks.

use crate::platform::cni::{CniError, code};
use crate::platform::kube::ObjectRef;
use k8s_openapi::api::core::v1::Pod;

/// The annotation of a mirror pod that holds the uid the kubelet runs its static pod under.
pub const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";

/// Whether `pod` is the pod whose sandbox has `sandbox_uid`: the same uid, or the mirror of the
/// static pod that runs under it.
pub fn is_sandbox_pod(pod: &Pod, sandbox_uid: &str) -> bool {
    pod.metadata.uid.as_deref() == Some(sandbox_uid) || mirrored_uid(pod) == Some(sandbox_uid)
}

/// The uid a mirror pod's static pod runs under.
fn mirrored_uid(pod: &Pod) -> Option<&str> {
    pod.metadata.annotations.as_ref()?.get(CONFIG_MIRROR).map(String::as_str).filter(|uid| !uid.is_empty())
}

/// Refuse with code 103, naming both uids, a pod object that is not the sandbox's pod.
pub fn check_uid(pod_ref: ObjectRef<'_>, pod: &Pod, sandbox_uid: Option<&str>) -> Result<(), CniError> {
    let (Some(want), Some(have)) = (sandbox_uid, pod.metadata.uid.as_deref()) else {
        return Ok(());
    };
    if is_sandbox_pod(pod, want) {
        return Ok(());
    }
    let mirror = match mirrored_uid(pod) {
        Some(mirrored) => format!(" (a mirror pod of the static pod uid {mirrored})"),
        None => String::new(),
    };
    Err(CniError::new(
        code::KUBE_API,
        format!(
            "{pod_ref} is uid {have}{mirror}, but this sandbox is for uid {want} (K8S_POD_UID): the pod was deleted \
             and created again under its name, and its own sandbox gets its networks"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn pod(uid: &str, mirror: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.uid = Some(uid.into());
        pod.metadata.annotations = mirror.map(|m| BTreeMap::from([(CONFIG_MIRROR.to_string(), m.to_string())]));
        pod
    }

    #[test]
    fn the_same_uid_or_a_mirror_of_it_is_the_sandbox_pod() {
        let at = ObjectRef::pod("kube-system", "etcd-node1");
        assert!(check_uid(at, &pod("u1", None), Some("u1")).is_ok());
        assert!(check_uid(at, &pod("api-uid", Some("hash1")), Some("hash1")).is_ok(), "a static pod's mirror");
        assert!(check_uid(at, &pod("api-uid", Some("hash1")), Some("api-uid")).is_ok());
        assert!(check_uid(at, &pod("u1", None), None).is_ok(), "a runtime that does not say");
    }

    #[test]
    fn another_pod_is_refused_naming_both_uids() {
        let at = ObjectRef::pod("default", "web-0");
        let e = check_uid(at, &pod("u2", None), Some("u1")).unwrap_err();
        assert_eq!(e.code, 103);
        assert!(e.msg.contains("uid u2") && e.msg.contains("uid u1 (K8S_POD_UID)"), "{e}");
        let e = check_uid(at, &pod("api-uid", Some("hash2")), Some("hash1")).unwrap_err();
        assert!(e.msg.contains("api-uid (a mirror pod of the static pod uid hash2)") && e.msg.contains("hash1"), "{e}");
        assert!(!is_sandbox_pod(&pod("u1", Some("")), ""), "an empty mirror annotation names no uid");
    }
}
