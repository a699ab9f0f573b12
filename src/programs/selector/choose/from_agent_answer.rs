//! Choosing from the node agent's answer (`lookup::agent` asks for it): `resolve` over the pod
//! and the objects the agent holds for it, exactly as over the API server's, so the record carries
//! the pod's uid, the files and where each choice came from exactly as on the direct path.
//!
//! An answer is unusable (`NotUsed`, and the verb asks the API server if its policy says so) when
//! it is of another pod, of the pod of another uid, or lacks an object `resolve` asks for. An
//! answer that makes `resolve` fail is a refusal (`NotUsed::refusal`), the ADD's error, asking the
//! API server nothing, unless an object it names is absent: a pod and the ConfigMap or NAD it names,
//! created together, may reach the agent on their two watches in either order, so the API server
//! confirms an absence. Anything else the agent's copy says is as current as what a success would
//! have used, and a refused sandbox is retried by the kubelet anyway.

use super::chosen::Selection;
use super::from_objects::resolve as resolve_pod;
use super::objects::Objects;
use super::sandbox::check_uid;
use crate::node::agent_socket::protocol::PodObjects;
use crate::platform::cni::{CniError, code};
use crate::platform::kube::{NetworkAttachmentDefinition, ObjectRef};
use crate::programs::selector::config::SelectorConfig;
use k8s_openapi::api::core::v1::ConfigMap;

/// Why the agent's answer was not used, and whether it answered at all: an agent that answered is
/// up, and still takes what ADD hands over afterwards (the status, the events) for a pod its watch
/// had not delivered in time.
#[derive(Debug)]
pub struct NotUsed {
    pub why: String,
    pub answered: bool,
    /// The pod's objects, as the agent holds them, refuse the pod: this is the ADD's error, and the
    /// API server is not asked.
    pub refusal: Option<CniError>,
}

impl NotUsed {
    pub fn new(why: String, answered: bool) -> Self {
        NotUsed { why, answered, refusal: None }
    }
}

impl std::fmt::Display for NotUsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// `resolve` over the agent's answer.
pub fn resolve(
    config: &SelectorConfig,
    runtime_ifname: &str,
    pod: (&str, &str),
    uid: &str,
    objects: &PodObjects,
) -> Result<Selection, NotUsed> {
    let not_used = |why: String| NotUsed::new(why, true);
    let pod_ref = ObjectRef::pod(pod.0, pod.1);
    let named =
        objects.pod.metadata.namespace.as_deref() == Some(pod.0) && objects.pod.metadata.name.as_deref() == Some(pod.1);
    if !named {
        return Err(not_used(format!("the agent answered with another pod than {pod_ref}")));
    }
    check_uid(pod_ref, &objects.pod, Some(uid)).map_err(|e| not_used(format!("the agent's answer: {}", e.msg)))?;
    let mut answered = Answered { objects, missing: None, absent: Vec::new() };
    resolve_pod(config, runtime_ifname, pod, &objects.pod, &mut answered).map_err(|e| {
        match (answered.missing, answered.absent.is_empty()) {
            (Some(object), _) => not_used(format!("the agent's answer lacks {object}")),
            (None, false) => not_used(format!(
                "the agent's objects give an error, and {} absent, which the API server is asked to confirm: {e}",
                answered.absent.join(" and ")
            )),
            (None, true) => {
                NotUsed { why: format!("the agent's objects refuse the pod: {e}"), answered: true, refusal: Some(e) }
            }
        }
    })
}

/// `Objects` from the agent's answer. An object the answer does not hold is not "absent" (the
/// agent may not have known the pod needs it): it makes the answer unusable. The objects the agent
/// holds as absent are noted: an error then is confirmed by the API server.
struct Answered<'a> {
    objects: &'a PodObjects,
    missing: Option<String>,
    absent: Vec<String>,
}

impl Answered<'_> {
    fn lacks(&mut self, what: String) -> CniError {
        let e = CniError::new(code::KUBE_API, format!("{what} is not in the agent's answer"));
        self.missing = Some(what);
        e
    }

    fn noting_absent<T>(&mut self, object: Option<T>, what: ObjectRef) -> Option<T> {
        if object.is_none() {
            self.absent.push(what.to_string());
        }
        object
    }
}

impl Objects for Answered<'_> {
    fn config_map(&mut self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, CniError> {
        match self.objects.config_maps.iter().find(|held| held.is(namespace, name)) {
            Some(held) => Ok(self.noting_absent(held.object.clone(), ObjectRef::config_map(namespace, name))),
            None => Err(self.lacks(ObjectRef::config_map(namespace, name).to_string())),
        }
    }
    fn network_attachment(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        match self.objects.network_attachments.iter().find(|held| held.is(namespace, name)) {
            Some(held) => Ok(self.noting_absent(held.object.clone(), ObjectRef::network_attachment(namespace, name))),
            None => Err(self.lacks(ObjectRef::network_attachment(namespace, name).to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::agent_socket::protocol::Held;
    use crate::programs::selector::choose::chosen::Reason;
    use serde_json::json;

    /// A conf dir with networks `blue` and `red`, and the selector's configuration over it.
    fn node() -> (tempfile::TempDir, SelectorConfig) {
        let dir = tempfile::tempdir().unwrap();
        for name in ["blue", "red"] {
            let path = dir.path().join(format!("{name}/10-{name}.conflist"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(
                path,
                format!(r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[{{"type":"bridge"}}]}}"#),
            )
            .unwrap();
        }
        let conf = json!({"cniVersion": "1.0.0", "type": "yh-genie", "confDir": dir.path(), "defaultNetwork": "red"});
        let conf = crate::platform::cni::PluginConf::parse(conf.to_string().as_bytes()).unwrap();
        (dir, SelectorConfig::from_plugin_conf(&conf).unwrap())
    }

    fn answer(
        uid: &str,
        config_maps: Vec<Held<ConfigMap>>,
        nads: Vec<Held<NetworkAttachmentDefinition>>,
    ) -> PodObjects {
        let pod = serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "web-0", "uid": uid,
                         "annotations": {"k8s.v1.cni.cncf.io/networks": "red@lan0"}},
            "spec": {"containers": [{"name": "app", "env": [{"name": "CNI_NETWORK_CONFIG",
                "valueFrom": {"configMapKeyRef": {"name": "nets", "key": "k"}}}]}]}
        }))
        .unwrap();
        PodObjects { pod, config_maps, network_attachments: nads, resource_claims: vec![], node_devices: None }
    }

    fn nets(value: Option<&str>) -> Held<ConfigMap> {
        let object =
            value.map(|v| serde_json::from_value(json!({"metadata": {"name": "nets"}, "data": {"k": v}})).unwrap());
        Held { namespace: "default".into(), name: "nets".into(), object }
    }

    fn red_nad() -> Held<NetworkAttachmentDefinition> {
        let object = serde_json::from_value(json!({"metadata": {"name": "red", "namespace": "default"}})).unwrap();
        Held { namespace: "default".into(), name: "red".into(), object: Some(object) }
    }

    const POD: (&str, &str) = ("default", "web-0");

    #[test]
    fn a_full_answer_resolves_as_the_direct_path_would() {
        let (dir, config) = node();
        let s = resolve(&config, "eth0", POD, "u1", &answer("u1", vec![nets(Some("blue"))], vec![red_nad()])).unwrap();
        let plan: Vec<(&str, &str)> = s.attachments.iter().map(|a| (a.ifname.as_str(), a.network.as_str())).collect();
        assert_eq!(plan, [("eth0", "blue"), ("lan0", "red")]);
        assert_eq!(s.pod.unwrap().uid.as_deref(), Some("u1"));
        assert!(matches!(s.reason, Reason::Chosen { .. }));
        let blue = dir.path().join("blue/10-blue.conflist").canonicalize().unwrap();
        assert_eq!(s.attachments[0].path.as_deref(), Some(blue.as_path()), "the plugin's own view of confDir");
    }

    #[test]
    fn an_answer_the_plugin_cannot_use_says_why() {
        let (_dir, config) = node();
        let why = |objects: PodObjects, uid: &str| {
            let not_used = resolve(&config, "eth0", POD, uid, &objects).unwrap_err();
            assert!(not_used.refusal.is_none(), "{not_used}: the API server is asked");
            not_used.why
        };
        let lacks = why(answer("u1", vec![], vec![red_nad()]), "u1");
        assert!(lacks.contains("lacks ConfigMap default/nets"), "{lacks}");
        let lacks = why(answer("u1", vec![nets(Some("blue"))], vec![]), "u1");
        assert!(lacks.contains("lacks NetworkAttachmentDefinition default/red"), "{lacks}");
        let other = why(answer("u2", vec![nets(Some("blue"))], vec![red_nad()]), "u1");
        assert!(other.contains("u2") && other.contains("u1"), "{other}");
        let absent = why(answer("u1", vec![nets(None)], vec![red_nad()]), "u1");
        assert!(absent.contains("asked to confirm") && absent.contains("ConfigMap default/nets not found"), "{absent}");
        let mut renamed = answer("u1", vec![nets(Some("blue"))], vec![red_nad()]);
        renamed.pod.metadata.name = Some("web-1".into());
        assert!(why(renamed, "u1").contains("another pod"));
    }

    #[test]
    fn a_refusal_decided_from_the_agents_objects_is_final() {
        let (_dir, config) = node();
        // The NAD is held, and present: its refusal is the ADD's error, asking the API server nothing.
        let mut objects = answer("u1", vec![nets(Some("blue"))], vec![red_nad()]);
        let annotations = objects.pod.metadata.annotations.as_mut().unwrap();
        annotations.insert("k8s.v1.cni.cncf.io/networks".into(), "red@lan0, red@lan0".into());
        let not_used = resolve(&config, "eth0", POD, "u1", &objects).unwrap_err();
        let refusal = not_used.refusal.expect("final");
        assert!(refusal.msg.contains("lan0"), "{refusal}");
        assert!(not_used.why.contains("refuse the pod"), "{}", not_used.why);
    }
}
