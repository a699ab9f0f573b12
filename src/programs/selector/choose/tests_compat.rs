//! Multus's and CNI-Genie's ways of choosing, and the one precedence rule between all of them.

use super::chosen::{Reason, Source};
use super::tests::{FakeApi, Node, app, env_cm, pairs, plan};
use super::{CONFIG_MIRROR, Fetching, references, resolve, select, trimmed};
use crate::programs::selector::requests::annotation;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

fn annotated(api: FakeApi, name: &str, annotations: serde_json::Value, containers: serde_json::Value) -> FakeApi {
    api.pod_json(
        "default",
        name,
        json!({"metadata": {"name": name, "namespace": "default", "uid": "u", "annotations": annotations},
               "spec": {"containers": containers}}),
    )
}

/// Pods with Multus's default-network annotation: `p` beside every other way of choosing, and
/// ones naming a NAD of their own namespace, of another, and two networks.
fn pods_with_a_multus_default_network() -> FakeApi {
    // As with Multus, a bare name is in multusNamespace (kube-system by default), not the pod's.
    let api =
        FakeApi::default().nad("kube-system", "red", None).nad("default", "blue", None).nad("infra", "blue", None);
    let both = json!({annotation::MULTUS_DEFAULT_NETWORK: "red", annotation::GENIE_CNI: "blue",
                      annotation::NETWORKS: "blue"});
    let api = annotated(api, "p", both, app("green,lan"));
    let api = annotated(api, "p-other-ns", json!({annotation::MULTUS_DEFAULT_NETWORK: "infra/blue"}), json!([]));
    let api = annotated(api, "p-own-ns", json!({annotation::MULTUS_DEFAULT_NETWORK: "default/blue"}), json!([]));
    annotated(api, "p-two", json!({annotation::MULTUS_DEFAULT_NETWORK: "red,blue"}), json!([]))
}

#[test]
fn multus_default_network_replaces_the_first_network_however_else_it_was_chosen() {
    let node = Node::new();
    let api = pods_with_a_multus_default_network();
    let s = node.select(&api, "p").unwrap();
    // The env's list and Genie's annotation are ignored, with notes; the annotation adds after.
    assert_eq!(plan(&s), pairs(&[("eth0", "red"), ("net1", "blue")]));
    assert_eq!(s.reason, Reason::MultusDefaultNetwork { value: "red".into() });
    assert_eq!(
        s.attachments[0].source,
        Source::MultusDefault { element: "red".into(), nad: "kube-system/red".into(), inline: false }
    );
    // The networks annotation's bare name is still the pod's namespace.
    assert_eq!(s.attachments[1].source.nad(), Some("default/blue"));
    assert!(s.notes.iter().any(|n| n.contains("container \"c\" env CNI_NETWORK_CONFIG is ignored")), "{:?}", s.notes);
    assert!(s.notes.iter().any(|n| n.contains("annotation cni \"blue\" is ignored")), "{:?}", s.notes);
    assert!(!api.asked().iter().any(|a| a.starts_with("ConfigMap")));
}

#[test]
fn multus_default_network_is_held_to_namespace_isolation() {
    let node = Node::new();
    let api = pods_with_a_multus_default_network();
    // A namespace it names is held to the networks annotation's rule: its own, not another's.
    let s = node.select(&api, "p-own-ns").unwrap();
    assert_eq!(s.attachments[0].source.nad(), Some("default/blue"));
    let e = node.select(&api, "p-other-ns").unwrap_err();
    assert!(e.code == 7 && e.msg.contains("namespaceIsolation") && e.msg.contains(annotation::MULTUS_DEFAULT_NETWORK));
}

#[test]
fn multus_default_network_names_one_network_only() {
    let node = Node::new();
    let api = pods_with_a_multus_default_network();
    let e = node.select(&api, "p-two").unwrap_err();
    assert!(e.code == 7 && e.msg.contains("names 2 networks"), "{e}");
}

#[test]
fn the_agent_watches_the_multus_default_networks_nad_in_multus_namespace() {
    let node = Node::new();
    let api = pods_with_a_multus_default_network();
    // The agent watches the same objects resolve reads: the default network's in multusNamespace.
    let pod = api.pods[&("default".to_string(), "p".to_string())].clone();
    let names: Vec<String> = references(&node.config.policy, &node.config.defaults, "default", &pod)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(names, ["NetworkAttachmentDefinition default/blue", "NetworkAttachmentDefinition kube-system/red"]);
}

#[test]
fn multus_namespace_moves_where_a_bare_multus_default_network_is() {
    let api = pods_with_a_multus_default_network();
    let node = Node::with(json!({"multusNamespace": "infra"}));
    let api = annotated(api, "p-bare", json!({annotation::MULTUS_DEFAULT_NETWORK: "blue"}), json!([]));
    assert_eq!(node.select(&api, "p-bare").unwrap().attachments[0].source.nad(), Some("infra/blue"));
}

#[test]
fn genie_cni_annotation_names_confdir_networks_with_genie_interface_names() {
    let node = Node::new();
    let api = annotated(FakeApi::default(), "p", json!({annotation::GENIE_CNI: "blue,red,lan@eth1"}), json!([]));
    let api = annotated(api, "p-env", json!({annotation::GENIE_CNI: "blue"}), app("red"));
    let api = annotated(api, "p-empty", json!({annotation::GENIE_CNI: ""}), json!([]));
    let api = annotated(api, "p-missing", json!({annotation::GENIE_CNI: "weave"}), json!([]));
    let s = node.select(&api, "p").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "blue"), ("eth2", "red"), ("eth1", "lan")]));
    assert_eq!(s.reason, Reason::GenieAnnotation { value: "blue,red,lan@eth1".into() });
    assert_eq!(s.attachments[1].source, Source::Genie { element: "red".into(), form: "network name".into() });
    // The env decides before Genie's annotation.
    let s = node.select(&api, "p-env").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "red")]));
    assert!(s.notes[0].contains("annotation cni \"blue\" is ignored: env CNI_NETWORK_CONFIG decides first"));
    // Genie's choice by load is not done: the default, with a note.
    let s = node.select(&api, "p-empty").unwrap();
    assert_eq!((plan(&s), &s.reason), (pairs(&[("eth0", "green")]), &Reason::PodChoseNothing));
    assert!(s.notes[0].contains("cAdvisor"), "{:?}", s.notes);
    let e = node.select(&api, "p-missing").unwrap_err();
    assert!(e.msg.contains("pod default/p-missing annotation cni") && e.msg.contains("weave"), "{e}");
}

#[test]
fn genie_default_plugin_is_the_default_network_named_the_genie_way() {
    let node = Node::with(json!({"defaultNetwork": null, "default_plugin": "blue,red"}));
    let api = FakeApi::default().pod("default", "p", json!([]));
    let s = node.select(&api, "p").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "blue"), ("eth1", "red")]));
}

/// A node with defaultNetworks `lan` (in multusNamespace `net-admin`) and `infra/red`, pod `p`
/// annotated with `blue`, and coredns in kube-system annotated the same.
fn default_networks_node() -> (Node, FakeApi) {
    let node = Node::with(json!({"defaultNetworks": ["lan", "infra/red"], "multusNamespace": "net-admin"}));
    // defaultNetworks are the admin's: namespaceIsolation does not apply to them.
    let api = FakeApi::default()
        .nad("net-admin", "lan", None)
        .nad("infra", "red", None)
        .nad("default", "blue", None)
        .nad("kube-system", "blue", None);
    let api = annotated(api, "p", json!({annotation::NETWORKS: "blue"}), app("green"));
    let api = api.pod_json(
        "kube-system",
        "coredns",
        json!({"metadata": {"name": "coredns", "namespace": "kube-system", "uid": "k",
                            "annotations": {annotation::NETWORKS: "blue"}}, "spec": {"containers": []}}),
    );
    (node, api)
}

#[test]
fn default_networks_come_after_the_first_network_before_the_annotations() {
    let (node, api) = default_networks_node();
    let s = node.select(&api, "p").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "green"), ("net1", "lan"), ("net2", "red"), ("net3", "blue")]));
    assert_eq!(
        s.attachments[1].source,
        Source::DefaultNetworks { element: "lan".into(), nad: "net-admin/lan".into(), inline: false }
    );
    assert_eq!(s.attachments[2].source.nad(), Some("infra/red"));
}

#[test]
fn system_namespaces_skip_only_the_default_networks() {
    let (node, api) = default_networks_node();
    let s = select(&node.config, "eth0", Some(("kube-system", "coredns")), None, Some(&api)).unwrap();
    // As Multus: no defaultNetworks in a system namespace, but the pod's own annotation applies.
    assert_eq!(plan(&s), pairs(&[("eth0", "green"), ("net1", "blue")]));
    assert!(s.notes[0].contains("systemNamespaces"), "{:?}", s.notes);
}

#[test]
fn the_agent_watches_the_default_networks_nads_outside_system_namespaces() {
    let (node, api) = default_networks_node();
    // The agent watches what resolve reads: the default NADs, not in system namespaces.
    let pod = api.pods[&("default".to_string(), "p".to_string())].clone();
    let refs = references(&node.config.policy, &node.config.defaults, "default", &pod);
    let names: Vec<String> = refs.iter().map(ToString::to_string).collect();
    assert_eq!(
        names,
        [
            "NetworkAttachmentDefinition default/blue",
            "NetworkAttachmentDefinition infra/red",
            "NetworkAttachmentDefinition net-admin/lan"
        ]
    );
    let coredns = api.pods[&("kube-system".to_string(), "coredns".to_string())].clone();
    let names: Vec<String> = references(&node.config.policy, &node.config.defaults, "kube-system", &coredns)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(names, ["NetworkAttachmentDefinition kube-system/blue"]);
}

#[test]
fn trimmed_pods_keep_every_annotation_resolve_reads() {
    let node = Node::new();
    let keys = json!({annotation::MULTUS_DEFAULT_NETWORK: "red", annotation::GENIE_CNI: "blue",
                      CONFIG_MIRROR: "hash", "unrelated": "x"});
    let api = annotated(
        FakeApi::default().nad("kube-system", "red", None),
        "p",
        keys,
        json!([{"name": "c", "env": env_cm("cm", "k")}]),
    );
    let pod = api.pods[&("default".to_string(), "p".to_string())].clone();
    let small = trimmed(&pod);
    let kept: Vec<&String> = small.metadata.annotations.as_ref().unwrap().keys().collect();
    assert_eq!(kept, [annotation::GENIE_CNI, CONFIG_MIRROR, annotation::MULTUS_DEFAULT_NETWORK]);
    let resolved = |pod: &Pod| resolve(&node.config, "eth0", ("default", "p"), pod, &mut Fetching::new(&api));
    assert_eq!(resolved(&small).unwrap(), resolved(&pod).unwrap());
}
