use super::*;
use crate::kube::agent_socket::protocol::Held;
use crate::selector::selection::Reason;
use serde_json::json;

/// A conf dir with networks `blue` and `red`, and the selector's configuration over it.
fn node() -> (tempfile::TempDir, SelectorConfig) {
    let dir = tempfile::tempdir().unwrap();
    for name in ["blue", "red"] {
        let path = dir.path().join(format!("{name}/10-{name}.conflist"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!(r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[{{"type":"bridge"}}]}}"#))
            .unwrap();
    }
    let conf = json!({"cniVersion": "1.0.0", "type": "yh-genie", "confDir": dir.path(), "defaultNetwork": "red"});
    let conf = crate::cni::PluginConf::parse(conf.to_string().as_bytes()).unwrap();
    (dir, SelectorConfig::from_plugin_conf(&conf).unwrap())
}

fn answer(uid: &str, config_maps: Vec<Held<ConfigMap>>, nads: Vec<Held<NetworkAttachmentDefinition>>) -> PodObjects {
    let pod = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "web-0", "uid": uid,
                     "annotations": {"k8s.v1.cni.cncf.io/networks": "red@lan0"}},
        "spec": {"containers": [{"name": "app", "env": [{"name": "CNI_NETWORK_CONFIG",
            "valueFrom": {"configMapKeyRef": {"name": "nets", "key": "k"}}}]}]}
    }))
    .unwrap();
    PodObjects { pod, config_maps, network_attachments: nads }
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
    let why = |objects: PodObjects, uid: &str| resolve(&config, "eth0", POD, uid, &objects).unwrap_err();
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
