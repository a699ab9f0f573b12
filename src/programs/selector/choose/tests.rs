use super::chosen::{ENV_VAR, Reason, Selection, Source, ValueSource};
use super::{Fetching, Objects, references, resolve, select, trimmed};
use crate::platform::cni::CniError;
use crate::platform::kube::NetworkAttachmentDefinition;
use crate::platform::kube::PodSource;
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::config::defaults::PodDefaults;
use crate::programs::selector::config::policy::AttachmentPolicy;
use crate::programs::selector::requests::annotation;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use serde_json::json;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An in-memory API server: objects by name, and a log of what was asked.
#[derive(Default)]
pub(super) struct FakeApi {
    pub(super) pods: BTreeMap<(String, String), Pod>,
    config_maps: BTreeMap<(String, String), ConfigMap>,
    nads: BTreeMap<(String, String), NetworkAttachmentDefinition>,
    fail_with: Option<CniError>,
    asked: RefCell<Vec<String>>,
}

impl FakeApi {
    pub(super) fn pod(mut self, ns: &str, name: &str, containers: serde_json::Value) -> Self {
        let pod = serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}")},
            "spec": {"containers": containers}
        }))
        .unwrap();
        self.pods.insert((ns.into(), name.into()), pod);
        self
    }
    pub(super) fn pod_json(mut self, ns: &str, name: &str, pod: serde_json::Value) -> Self {
        self.pods.insert((ns.into(), name.into()), serde_json::from_value(pod).unwrap());
        self
    }
    /// A pod with the networks annotation and these containers.
    fn annotated(self, ns: &str, name: &str, networks: &str, containers: serde_json::Value) -> Self {
        self.pod_json(
            ns,
            name,
            json!({"metadata": {"name": name, "uid": "u", "annotations": {annotation::NETWORKS: networks}},
                   "spec": {"containers": containers}}),
        )
    }
    pub(super) fn config_map(mut self, ns: &str, name: &str, data: serde_json::Value) -> Self {
        let cm = serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
        self.config_maps.insert((ns.into(), name.into()), cm);
        self
    }
    pub(super) fn nad(mut self, ns: &str, name: &str, config: Option<&str>) -> Self {
        let nad =
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}, "spec": {"config": config}}))
                .unwrap();
        self.nads.insert((ns.into(), name.into()), nad);
        self
    }
    pub(super) fn asked(&self) -> Vec<String> {
        self.asked.borrow().clone()
    }
}

impl PodSource for FakeApi {
    fn pod(&self, ns: &str, name: &str) -> Result<Option<Pod>, CniError> {
        self.asked.borrow_mut().push(format!("pod {ns}/{name}"));
        if let Some(e) = &self.fail_with {
            return Err(e.clone());
        }
        Ok(self.pods.get(&(ns.into(), name.into())).cloned())
    }
    fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, CniError> {
        self.asked.borrow_mut().push(format!("ConfigMap {ns}/{name}"));
        Ok(self.config_maps.get(&(ns.into(), name.into())).cloned())
    }
    fn network_attachment(&self, ns: &str, name: &str) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        self.asked.borrow_mut().push(format!("NAD {ns}/{name}"));
        Ok(self.nads.get(&(ns.into(), name.into())).cloned())
    }
    fn resource_claim(&self, _: &str, _: &str) -> Result<Option<ResourceClaim>, CniError> {
        unreachable!("selection reads no claims")
    }
    fn node_resource_slices(&self, _: &str) -> Result<Vec<ResourceSlice>, CniError> {
        unreachable!("selection reads no slices")
    }
    fn annotate_pod(&self, _: &str, _: &str, _: &str, _: &BTreeMap<String, String>) -> Result<bool, CniError> {
        unreachable!("selection writes nothing")
    }
}

pub(super) fn env_cm(cm: &str, key: &str) -> serde_json::Value {
    json!([{"name": ENV_VAR, "valueFrom": {"configMapKeyRef": {"name": cm, "key": key}}}])
}
fn env_value(v: &str) -> serde_json::Value {
    json!([{"name": "OTHER", "value": "x"}, {"name": ENV_VAR, "value": v}])
}
pub(super) fn app(value: &str) -> serde_json::Value {
    json!([{"name": "c", "env": env_value(value)}])
}

const MACVLAN: &str = r#"{"cniVersion":"1.0.0","name":"lan","plugins":[{"type":"macvlan","master":"eth1",
    "capabilities":{"ips":true},"ipam":{"type":"static"}}]}"#;

pub(super) struct Node {
    dir: tempfile::TempDir,
    pub(super) config: SelectorConfig,
}

impl Node {
    /// A conf dir with networks `blue` (a .conflist), `green` (a .conf), `red`, `lan` (macvlan, the
    /// `ips` capability declared) and `net@a` (a name from before lists), default `green`.
    pub(super) fn new() -> Self {
        Self::with(json!({}))
    }
    pub(super) fn with(keys: serde_json::Value) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let conf_dir = dir.path().join("net.d");
        let list = |name: &str| format!(r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[{{"type":"bridge"}}]}}"#);
        for (rel, text) in [
            ("blue/10-blue.conflist", list("blue")),
            ("green/green.conf", r#"{"cniVersion":"0.3.1","name":"green","type":"bridge"}"#.to_string()),
            ("red/10-red.conflist", list("red")),
            ("lan/10-lan.conflist", MACVLAN.to_string()),
            ("net@a/1.conflist", list("net@a")),
        ] {
            let p = conf_dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let mut conf =
            json!({"cniVersion": "1.0.0", "type": "yh-genie", "confDir": conf_dir, "defaultNetwork": "green"});
        for (k, v) in keys.as_object().unwrap() {
            conf[k] = v.clone();
        }
        let conf = crate::platform::cni::PluginConf::parse(conf.to_string().as_bytes()).unwrap();
        Node { dir, config: SelectorConfig::from_plugin_conf(&conf).unwrap() }
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join("net.d").join(rel).canonicalize().unwrap()
    }
    pub(super) fn select(&self, api: &FakeApi, pod: &str) -> Result<Selection, CniError> {
        select(&self.config, "eth0", Some(("default", pod)), None, Some(api))
    }
}

fn network_of(s: &Selection) -> (&str, &Path) {
    (s.attachments[0].network.as_str(), s.attachments[0].path.as_deref().unwrap())
}

/// (interface, network) of every attachment.
pub(super) fn plan(s: &Selection) -> Vec<(String, String)> {
    s.attachments.iter().map(|a| (a.ifname.clone(), a.network.clone())).collect()
}

pub(super) fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(i, n)| (i.to_string(), n.to_string())).collect()
}

/// Pods choosing through a ConfigMap in each form (JSON naming a file, a network name, a path),
/// literally, or not at all.
fn pods_choosing_each_way(node: &Node) -> FakeApi {
    let by_json = json!({"kubernetes": {"kubeconfig": node.path("blue/10-blue.conflist")}}).to_string();
    FakeApi::default()
        .config_map("default", "by-json", json!({"cni_network_config": by_json}))
        .config_map("default", "by-name", json!({"net": "blue"}))
        .config_map("default", "by-path", json!({"net": "green/green.conf"}))
        .pod("default", "p-json", json!([{"name": "c", "env": env_cm("by-json", "cni_network_config")}]))
        .pod("default", "p-name", json!([{"name": "c", "env": env_cm("by-name", "net")}]))
        .pod("default", "p-path", json!([{"name": "c", "env": env_cm("by-path", "net")}]))
        .pod("default", "p-literal", app("blue"))
        .pod("default", "p-none", json!([{"name": "c", "env": [{"name": "X", "value": "1"}]}, {"name": "d"}]))
}

#[test]
fn every_way_of_choosing_attaches_the_exact_file_chosen() {
    let node = Node::new();
    let api = pods_choosing_each_way(&node);
    let blue = node.path("blue/10-blue.conflist");
    let green = node.path("green/green.conf");
    for (pod, network, file) in [
        ("p-json", "blue", &blue),
        ("p-name", "blue", &blue),
        ("p-path", "green", &green),
        ("p-literal", "blue", &blue),
        ("p-none", "green", &green),
    ] {
        let s = node.select(&api, pod).unwrap();
        assert_eq!(network_of(&s), (network, file.as_path()), "{pod}");
        assert_eq!(s.attachments.len(), 1, "{pod}: one value, one network");
        assert_eq!(s.attachments[0].ifname, "eth0");
        assert_eq!(s.attachments[0].config, std::fs::read_to_string(file).unwrap(), "{pod}: the exact bytes");
        assert_eq!(s.pod.as_ref().unwrap().uid, Some(format!("uid-{pod}")));
    }
}

#[test]
fn a_choice_through_a_configmap_names_the_configmap_as_its_source() {
    let node = Node::new();
    let api = pods_choosing_each_way(&node);
    let s = node.select(&api, "p-json").unwrap();
    let Reason::Chosen { choices } = &s.reason else { panic!("{:?}", s.reason) };
    assert_eq!(choices[0].source, ValueSource::ConfigMap { name: "by-json".into(), key: "cni_network_config".into() });
    assert!(
        matches!(&s.attachments[0].source, Source::Value { form, .. } if form == "JSON naming a configuration file")
    );
}

#[test]
fn a_pod_that_chooses_nothing_gets_the_default_network() {
    let node = Node::new();
    let api = pods_choosing_each_way(&node);
    let s = node.select(&api, "p-none").unwrap();
    assert_eq!(s.reason, Reason::PodChoseNothing);
    assert_eq!(s.attachments[0].source, Source::DefaultNetwork { element: "green".into() });
}

#[test]
fn a_list_value_gives_the_runtime_interface_then_net_by_position() {
    let node = Node::new();
    let api = FakeApi::default()
        .config_map("default", "nets", json!({"k": "blue, red@lan0 ,green"}))
        .pod("default", "p-list", json!([{"name": "c", "env": env_cm("nets", "k")}]))
        .pod("default", "p-json", app(r#"[{"name": "blue"}, {"name": "red/10-red.conflist", "interface": "net1"}]"#));
    let s = node.select(&api, "p-list").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "blue"), ("lan0", "red"), ("net2", "green")]));
    assert_eq!(s.attachments[1].source, Source::Value { element: "red@lan0".into(), form: "network name".into() });
    assert_eq!(api.asked(), ["pod default/p-list", "ConfigMap default/nets"]);
    let s = node.select(&api, "p-json").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "blue"), ("net1", "red")]));
}

#[test]
fn a_value_from_before_lists_keeps_its_meaning() {
    let node = Node::new();
    let api = FakeApi::default().pod("default", "old", app("net@a")).pod("default", "new", app("blue@eth0,red@a"));
    let s = node.select(&api, "old").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "net@a")]), "the directory net@a, as before");
    let s = node.select(&api, "new").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "blue"), ("a", "red")]));
}

#[test]
fn the_annotation_adds_networks_after_the_value_or_the_default() {
    let node = Node::new();
    let api = FakeApi::default()
        .nad("default", "lan", None)
        .nad("default", "red", None)
        .annotated("default", "p-value", "lan@net5, red", app("blue"))
        .annotated("default", "p-default", "lan", json!([{"name": "c"}]));
    let s = node.select(&api, "p-value").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "blue"), ("net5", "lan"), ("net2", "red")]));
    assert_eq!(
        s.attachments[1].source,
        Source::Annotation { element: "lan@net5".into(), nad: "default/lan".into(), inline: false }
    );
    assert_eq!(s.attachments[1].path.as_deref(), Some(node.path("lan/10-lan.conflist").as_path()));
    assert_eq!(api.asked(), ["pod default/p-value", "NAD default/lan", "NAD default/red"]);
    let s = node.select(&api, "p-default").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "green"), ("net1", "lan")]), "the default network is eth0");
    assert_eq!(s.reason, Reason::PodChoseNothing);
}

#[test]
fn inline_nad_configurations_follow_the_policy() {
    let strict = Node::new();
    let open = Node::with(json!({"allowInlineConfig": true, "inlinePluginTypes": ["macvlan", "static"]}));
    let api = FakeApi::default()
        .nad("default", "inline", Some(MACVLAN))
        .nad("default", "sneaky", Some(r#"{"cniVersion":"1.0.0","name":"x","type":"host-device","device":"eth0"}"#))
        .nad("infra", "lan", None)
        .annotated("default", "p-inline", "inline", app("blue"))
        .annotated("default", "p-sneaky", "sneaky", app("blue"))
        .annotated("default", "p-other-ns", "infra/lan", app("blue"));
    let e = strict.select(&api, "p-inline").unwrap_err();
    assert_eq!(e.code, 7);
    assert!(
        e.msg.contains("NetworkAttachmentDefinition default/inline is refused") && e.msg.contains("allowInlineConfig"),
        "{e}"
    );
    let s = open.select(&api, "p-inline").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "blue"), ("net1", "default/inline")]));
    assert_eq!((s.attachments[1].path.as_ref(), s.attachments[1].config.as_str()), (None, MACVLAN));
    assert!(s.attachments[1].conf_list().is_ok());
    let e = open.select(&api, "p-sneaky").unwrap_err();
    assert!(e.msg.contains("\"host-device\"") && e.msg.contains("inlinePluginTypes"), "{e}");
    let e = open.select(&api, "p-other-ns").unwrap_err();
    assert!(e.msg.contains("infra/lan") && e.msg.contains("namespaceIsolation"), "{e}");
    assert!(!api.asked().contains(&"NAD infra/lan".to_string()), "a refused NAD is not even fetched");
    let global = Node::with(json!({"globalNamespaces": ["infra"]}));
    assert_eq!(plan(&global.select(&api, "p-other-ns").unwrap())[1], ("net1".into(), "lan".into()));
}

#[test]
fn an_inline_nad_configuration_without_a_name_is_named_after_the_nad() {
    let open = Node::with(json!({"allowInlineConfig": true}));
    let nameless = r#"{"cniVersion":"0.3.1","plugins":[{"type":"macvlan","master":"eth1","ipam":{"type":"static"}}]}"#;
    let api = FakeApi::default().nad("default", "macvlan-conf", Some(nameless)).annotated(
        "default",
        "p",
        "macvlan-conf",
        app("blue"),
    );
    let s = open.select(&api, "p").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "blue"), ("net1", "default/macvlan-conf")]));
    let named: serde_json::Value = serde_json::from_str(&s.attachments[1].config).unwrap();
    assert_eq!((&named["name"], &named["plugins"][0]["type"]), (&json!("macvlan-conf"), &json!("macvlan")));
    assert_eq!(s.attachments[1].conf_list().unwrap().name, "macvlan-conf");
}

#[test]
fn a_network_chosen_twice_attaches_on_each_interface_asked_for() {
    let node = Node::with(json!({"allowInlineConfig": true}));
    let api = FakeApi::default()
        .nad("default", "blue", None)
        .nad("default", "bridge-nad", Some(r#"{"cniVersion":"0.3.1","type":"bridge","bridge":"testnet0"}"#))
        .pod("default", "p-value", app("blue,red,blue/10-blue.conflist@net9"))
        .annotated("default", "p-value-and-nad", "blue", app("blue"))
        .annotated("default", "p-nad", "bridge-nad@net1, bridge-nad@net2", app("blue"))
        .annotated(
            "default",
            "p-json",
            r#"[{"name":"bridge-nad"},{"name":"bridge-nad","interface":"lan0"}]"#,
            app("blue"),
        );
    let cases = [
        ("p-value", [("eth0", "blue"), ("net1", "red"), ("net9", "blue")]),
        ("p-value-and-nad", [("eth0", "blue"), ("net1", "blue"), ("", "")]),
        ("p-nad", [("eth0", "blue"), ("net1", "default/bridge-nad"), ("net2", "default/bridge-nad")]),
        ("p-json", [("eth0", "blue"), ("net1", "default/bridge-nad"), ("lan0", "default/bridge-nad")]),
    ];
    for (pod, want) in cases {
        let want: Vec<(&str, &str)> = want.into_iter().filter(|(i, _)| !i.is_empty()).collect();
        assert_eq!(plan(&node.select(&api, pod).unwrap()), pairs(&want), "{pod}");
    }
    assert_eq!(api.asked().iter().filter(|a| *a == "NAD default/bridge-nad").count(), 2, "once per pod");
}

/// Multus's e2e `default-route-config`: an inline macvlan with static IPAM that declares no
/// capability, and a pod asking it for an address; `red` (a confDir network) asked the same.
fn pods_choosing_addresses_without_a_capability() -> FakeApi {
    let default_route = r#"{"cniVersion":"0.3.1","plugins":[{"type":"macvlan","master":"eth1","mode":"bridge",
        "ipam":{"type":"static"}}]}"#;
    FakeApi::default()
        .nad("default", "default-route-config", Some(default_route))
        .nad("default", "red", None)
        .annotated(
            "default",
            "p-inline",
            r#"[{"name":"default-route-config","ips":["10.1.1.21/24"],"default-route":["10.1.1.254"]}]"#,
            app("blue"),
        )
        .annotated("default", "p-confdir", r#"[{"name":"red","ips":["10.1.1.22/24"]}]"#, app("blue"))
}

#[test]
fn by_default_ips_on_a_network_declaring_no_ips_capability_are_refused_naming_the_key_that_allows_them() {
    let node = Node::with(json!({"allowInlineConfig": true}));
    let e = node.select(&pods_choosing_addresses_without_a_capability(), "p-inline").unwrap_err();
    assert!(e.code == 7 && e.msg.contains("\"ips\" capability") && e.msg.contains("\"annotationIps\""), "{e}");
}

#[test]
fn annotation_ips_inline_takes_ips_on_inline_networks_only() {
    let node = Node::with(json!({"allowInlineConfig": true, "annotationIps": "inline"}));
    let api = pods_choosing_addresses_without_a_capability();
    let s = node.select(&api, "p-inline").unwrap();
    assert_eq!(s.attachments[1].extras.ips[0].to_string(), "10.1.1.21/24");
    let e = node.select(&api, "p-confdir").unwrap_err();
    assert!(e.msg.contains("network red"), "{e}");
    let everywhere = Node::with(json!({"annotationIps": "everywhere"}));
    assert!(everywhere.select(&api, "p-confdir").is_ok());
}

/// Pods whose networks annotation asks for extras: ones `lan` declares, and ones its network
/// cannot take.
fn pods_asking_for_extras() -> FakeApi {
    FakeApi::default()
        .nad("default", "lan", None)
        .nad("default", "red", None)
        .annotated(
            "default",
            "p-ips",
            r#"[{"name":"lan","ips":["10.9.0.5/24"],"mac":"02:00:00:00:00:05","default-route":["10.9.0.1"]}]"#,
            app("blue"),
        )
        .annotated("default", "p-no-cap", r#"[{"name":"red","ips":["10.9.0.5/24"]}]"#, app("blue"))
        .annotated("default", "p-cni-args-ips", r#"[{"name":"red","cni-args":{"IPs":["10.9.0.5/24"]}}]"#, app("blue"))
        .annotated(
            "default",
            "p-no-portmap",
            r#"[{"name":"red","portMappings":[{"hostPort":8080,"containerPort":80}]}]"#,
            app("blue"),
        )
        .annotated(
            "default",
            "p-two-defaults",
            r#"[{"name":"lan","default-route":["10.9.0.1"]},{"name":"red","default-route":["10.8.0.1"]}]"#,
            app("blue"),
        )
}

#[test]
fn the_extras_an_annotation_asks_for_reach_the_attachment() {
    let node = Node::new();
    let api = pods_asking_for_extras();
    let s = node.select(&api, "p-ips").unwrap();
    let extras = &s.attachments[1].extras;
    assert_eq!(extras.ips[0].to_string(), "10.9.0.5/24");
    assert_eq!(extras.mac.as_deref(), Some("02:00:00:00:00:05"));
    assert_eq!(extras.default_route[0].to_string(), "10.9.0.1");
}

#[test]
fn extras_a_network_cannot_take_are_refused_naming_the_network() {
    let node = Node::new();
    let api = pods_asking_for_extras();
    let e = node.select(&api, "p-no-cap").unwrap_err();
    assert!(e.msg.contains("\"ips\" capability") && e.msg.contains("network red"), "{e}");
    let e = node.select(&api, "p-cni-args-ips").unwrap_err();
    assert!(e.code == 7 && e.msg.contains("\"cni-args\" key \"IPs\"") && e.msg.contains("network red"), "{e}");
    let e = node.select(&api, "p-no-portmap").unwrap_err();
    assert!(e.code == 7 && e.msg.contains("\"portMappings\" capability") && e.msg.contains("network red"), "{e}");
    let e = node.select(&api, "p-two-defaults").unwrap_err();
    assert!(e.msg.contains("two default routes") && e.msg.contains("net1") && e.msg.contains("net2"), "{e}");
}

#[test]
fn a_selection_breaking_a_rule_is_code_7_naming_the_rule_with_the_pod() {
    let node = Node::new();
    let seventeen = (0..17).map(|i| format!("n{i}")).collect::<Vec<_>>().join(",");
    let api = FakeApi::default()
        .nad("default", "blue", None)
        .pod("default", "p-twice", app("blue,red,blue/10-blue.conflist@net1"))
        .pod("default", "p-ifname", app("blue,red@net2,green"))
        .pod("default", "p-first", app("blue@lan0,red"))
        .pod("default", "p-bad-ifname", app("blue,red@a:b"))
        .pod("default", "p-many", app(&seventeen))
        .annotated("default", "p-many-nads", &seventeen, app("blue"));
    for (pod, want) in [
        ("p-twice", &["interface net1 is given twice", "network 2 (\"red\"", "network 3"][..]),
        ("p-ifname", &["interface net2 is given twice", "\"red@net2\"", "\"green\""]),
        ("p-first", &["asks for interface lan0", "CNI_IFNAME"]),
        ("p-bad-ifname", &["\"a:b\" is invalid"]),
        ("p-many", &["17 networks", "at most 16"]),
        ("p-many-nads", &["18 networks", "at most 16"]),
    ] {
        let e = node.select(&api, pod).unwrap_err();
        assert_eq!(e.code, 7, "{pod}: {e}");
        for want in want {
            assert!(e.msg.contains(want) && e.msg.contains(&format!("pod default/{pod}")), "{pod}: {e} lacks {want:?}");
        }
    }
    assert!(!api.asked().iter().any(|a| a.starts_with("NAD default/n")), "too many NADs are refused before fetching");
}

/// Pod `p`, whose three containers choose the same networks, two through one ConfigMap.
fn containers_that_agree() -> FakeApi {
    FakeApi::default().config_map("default", "net", json!({"k": "blue,red"})).pod(
        "default",
        "p",
        json!([
            {"name": "a", "env": env_cm("net", "k")},
            {"name": "b", "env": env_cm("net", "k")},
            {"name": "c", "env": env_value("blue/10-blue.conflist, red@net1")}
        ]),
    )
}

#[test]
fn containers_that_agree_select_their_networks_once() {
    let node = Node::new();
    let api = containers_that_agree();
    let s = node.select(&api, "p").unwrap();
    assert_eq!(plan(&s), pairs(&[("eth0", "blue"), ("net1", "red")]));
    assert!(matches!(&s.reason, Reason::Chosen { choices } if choices.len() == 3));
}

#[test]
fn each_object_is_requested_once() {
    let node = Node::new();
    let api = containers_that_agree();
    node.select(&api, "p").unwrap();
    assert_eq!(api.asked(), ["pod default/p", "ConfigMap default/net"]);
}

#[test]
fn not_a_pod_or_no_kubernetes_gets_the_default_without_asking() {
    let node = Node::new();
    let s = select(&node.config, "eth0", None, None, None).unwrap();
    assert_eq!((s.attachments[0].network.as_str(), s.reason), ("green", Reason::NotAPod));
    let s = select(&node.config, "eth0", Some(("default", "p")), None, None).unwrap();
    assert_eq!(s.reason, Reason::KubernetesNotConfigured);
    let mut node = Node::new();
    node.config.default_network = Some("green,blue@lan0".into());
    let s = select(&node.config, "eth1", None, None, None).unwrap();
    assert_eq!(plan(&s), pairs(&[("eth1", "green"), ("lan0", "blue")]), "a default list, on the runtime's name");
}

#[test]
fn pod_names_that_are_not_kubernetes_names_are_refused_before_any_request() {
    let node = Node::new();
    let api = FakeApi::default().pod("default", "a", app("blue"));
    for (namespace, name, key) in [
        ("default", "a?x", "K8S_POD_NAME"),
        ("default", "..", "K8S_POD_NAME"),
        ("default", "a/b", "K8S_POD_NAME"),
        ("default", "Web-0", "K8S_POD_NAME"),
        ("kube-system/configmaps", "a", "K8S_POD_NAMESPACE"),
    ] {
        let e = select(&node.config, "eth0", Some((namespace, name)), None, Some(&api)).unwrap_err();
        assert_eq!(e.code, 4, "{namespace}/{name}");
        assert!(e.msg.contains(key), "{e}");
    }
    assert!(api.asked().is_empty());
    let good = FakeApi::default().pod("kube-system", "web-0.x-1", json!([{"name": "c"}]));
    assert!(select(&node.config, "eth0", Some(("kube-system", "web-0.x-1")), None, Some(&good)).is_ok());
}

#[test]
fn without_a_choice_or_a_default_a_pod_is_code_7_saying_what_to_set() {
    let mut node = Node::new();
    node.config.default_network = None;
    let api = FakeApi::default()
        .pod("default", "lonely", json!([{"name": "c"}]))
        .nad("default", "lan", None)
        .annotated("default", "only-nads", "lan", json!([{"name": "c"}]));
    let e = node.select(&api, "lonely").unwrap_err();
    assert_eq!(e.code, 7);
    assert!(e.msg.contains("pod default/lonely") && e.msg.contains("defaultNetwork"), "{e}");
    // It says what to set: the pod's variable, or the node's defaultNetwork and where it lives.
    assert!(
        e.msg.contains("CNI_NETWORK_CONFIG")
            && e.msg.contains(r#""defaultNetwork" in selector.json of the yh-genie-config ConfigMap"#)
            && e.msg.contains("--default-network"),
        "{e}"
    );
    let e = node.select(&api, "only-nads").unwrap_err();
    assert!(
        e.msg.contains("pod default/only-nads") && e.msg.contains("defaultNetwork"),
        "an annotation only adds: {e}"
    );
}

#[test]
fn without_a_default_a_container_that_is_no_pod_is_refused() {
    let mut node = Node::new();
    node.config.default_network = None;
    let e = select(&node.config, "eth0", None, None, None).unwrap_err();
    assert!(e.msg.contains("not a Kubernetes pod"), "{e}");
}

#[test]
fn bad_inputs_name_the_object() {
    let node = Node::new();
    let api = FakeApi::default()
        .config_map("default", "nokey", json!({"other": "blue"}))
        .config_map("default", "garbage", json!({"k": "{not json"}))
        .config_map("default", "outside", json!({"k": "../../etc/passwd"}))
        .pod("default", "p-missing-cm", json!([{"name": "c", "env": env_cm("absent", "k")}]))
        .pod("default", "p-missing-key", json!([{"name": "c", "env": env_cm("nokey", "k")}]))
        .pod("default", "p-garbage", json!([{"name": "c", "env": env_cm("garbage", "k")}]))
        .pod("default", "p-outside", json!([{"name": "c", "env": env_cm("outside", "k")}]))
        .pod("default", "p-empty", json!([{"name": "c", "env": [{"name": ENV_VAR}]}]))
        .pod("default", "p-nodir", app("purple"))
        .pod("default", "p-list-nodir", app("blue,purple@net1"))
        .annotated("default", "p-no-nad", "ghost", app("blue"))
        .annotated("default", "p-bad-annotation", "a/b/c", app("blue"))
        .nad("default", "purple", None)
        .annotated("default", "p-nad-nodir", "purple", app("blue"))
        .pod(
            "default",
            "p-secret",
            json!([{"name": "c", "env": [{"name": ENV_VAR, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]),
        )
        .pod("default", "p-split", json!([{"name": "a", "env": env_value("blue")}, {"name": "b", "env": env_value("green")}]))
        .pod(
            "default",
            "p-split-list",
            json!([{"name": "a", "env": env_value("blue,red")}, {"name": "b", "env": env_value("blue,red@lan0")}]),
        );
    for (pod, code, wants) in [
        ("p-gone", 103, &["pod default/p-gone not found"][..]),
        ("p-missing-cm", 103, &["ConfigMap default/absent not found", "container \"c\""]),
        ("p-missing-key", 103, &["ConfigMap default/nokey", "\"k\""]),
        ("p-garbage", 7, &["ConfigMap default/garbage", "does not parse"]),
        ("p-outside", 7, &["outside confDir", "pod default/p-outside"]),
        ("p-empty", 7, &["empty", "pod default/p-empty"]),
        ("p-nodir", 7, &["purple"]),
        ("p-list-nodir", 7, &["network purple", "pod default/p-list-nodir"]),
        ("p-no-nad", 103, &["NetworkAttachmentDefinition default/ghost not found", "element \"ghost\""]),
        ("p-bad-annotation", 7, &["pod default/p-bad-annotation", "k8s.v1.cni.cncf.io/networks"]),
        ("p-nad-nodir", 7, &["NetworkAttachmentDefinition default/purple has no spec.config", "network purple"]),
        ("p-secret", 7, &["configMapKeyRef"]),
        ("p-split", 7, &["\"a\"", "\"b\"", "blue", "green"]),
        ("p-split-list", 7, &["\"a\"", "\"b\"", "red@lan0"]),
    ] {
        let e = node.select(&api, pod).unwrap_err();
        assert_eq!(e.code, code, "{pod}: {e}");
        for want in wants {
            assert!(e.msg.contains(want), "{pod}: {e:?} lacks {want:?}");
        }
    }
}

#[test]
fn optional_references_that_are_absent_mean_no_choice() {
    let node = Node::new();
    let optional = |cm: &str, key: &str| json!([{"name": ENV_VAR, "valueFrom": {"configMapKeyRef": {"name": cm, "key": key, "optional": true}}}]);
    let api = FakeApi::default().config_map("default", "present", json!({"other": "blue"})).pod(
        "default",
        "p",
        json!([{"name": "a", "env": optional("absent", "k")}, {"name": "b", "env": optional("present", "k")}]),
    );
    assert_eq!(node.select(&api, "p").unwrap().reason, Reason::PodChoseNothing);
}

#[test]
fn init_containers_are_not_consulted_but_noted() {
    let node = Node::new();
    let api = FakeApi::default().pod_json(
        "default",
        "p",
        json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "setup", "env": [{"name": ENV_VAR, "value": "blue"}]}],
            "containers": [{"name": "main"}]}}),
    );
    let s = node.select(&api, "p").unwrap();
    assert_eq!((s.attachments[0].network.as_str(), &s.reason), ("green", &Reason::PodChoseNothing));
    assert_eq!(s.notes.len(), 1);
    assert!(s.notes[0].contains("\"setup\""), "{:?}", s.notes);
}

#[test]
fn api_errors_pass_through_unchanged() {
    let node = Node::new();
    let api =
        FakeApi { fail_with: Some(CniError::try_again("API server https://x unreachable")), ..Default::default() };
    let e = node.select(&api, "p").unwrap_err();
    assert_eq!((e.code, e.msg.as_str()), (11, "API server https://x unreachable"));
}

/// `resolve` needs nothing but the pod and the objects it refers to: an agent holding them
/// already gets the same answer as a fetch, with no API request.
#[test]
fn resolve_works_from_objects_held_in_memory() {
    struct Held(FakeApi);
    impl Objects for Held {
        fn config_map(&mut self, ns: &str, name: &str) -> Result<Option<ConfigMap>, CniError> {
            Ok(self.0.config_maps.get(&(ns.into(), name.into())).cloned())
        }
        fn network_attachment(
            &mut self,
            ns: &str,
            name: &str,
        ) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
            Ok(self.0.nads.get(&(ns.into(), name.into())).cloned())
        }
    }
    let node = Node::new();
    let api = FakeApi::default()
        .config_map("default", "nets", json!({"k": "blue"}))
        .nad("default", "lan", None)
        .annotated("default", "p", "lan", json!([{"name": "c", "env": env_cm("nets", "k")}]));
    let fetched = node.select(&api, "p").unwrap();
    let pod = api.pods[&("default".to_string(), "p".to_string())].clone();
    let held = resolve(&node.config, "eth0", ("default", "p"), &pod, &mut Held(api)).unwrap();
    assert_eq!(held, fetched);
}

/// A pod with everything a real one carries beside what `resolve` reads.
fn busy_pod(annotations: serde_json::Value, containers: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "p", "uid": "u1", "resourceVersion": "7",
                     "labels": {"app": "web"}, "annotations": annotations,
                     "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"nodeName": "n1", "containers": containers,
                 "initContainers": [{"name": "setup", "image": "busybox", "env": [{"name": ENV_VAR, "value": "red"}]},
                                    {"name": "quiet", "image": "busybox"}],
                 "volumes": [{"name": "v", "emptyDir": {}}]},
        "status": {"phase": "Pending", "podIP": "10.0.0.9"}
    }))
    .unwrap()
}

#[test]
fn references_name_what_resolve_asks_for_within_the_policy() {
    let containers = json!([
        {"name": "a", "image": "x", "env": env_cm("nets", "k")},
        {"name": "b", "image": "x", "env": [{"name": ENV_VAR, "valueFrom": {"configMapKeyRef": {"name": "nets", "key": "k"}}}]},
        {"name": "c", "image": "x", "env": env_value("blue")},
        {"name": "d", "image": "x", "env": [{"name": ENV_VAR, "valueFrom": {"configMapKeyRef": {"name": "Bad,Name", "key": "k"}}}]},
    ]);
    let pod = busy_pod(json!({annotation::NETWORKS: "lan, infra/lan2@net5, other/lan3"}), containers);
    let keys = |policy: &AttachmentPolicy| -> Vec<String> {
        references(policy, &PodDefaults::default(), "default", &pod).iter().map(ToString::to_string).collect()
    };
    assert_eq!(
        keys(&AttachmentPolicy::default()),
        ["ConfigMap default/nets", "NetworkAttachmentDefinition default/lan"],
        "one ConfigMap however often named, no name that cannot exist, NADs of other namespaces refused"
    );
    let policy = AttachmentPolicy { global_namespaces: ["infra".to_string()].into(), ..Default::default() };
    assert_eq!(
        keys(&policy),
        ["ConfigMap default/nets", "NetworkAttachmentDefinition default/lan", "NetworkAttachmentDefinition infra/lan2"]
    );
    let open = AttachmentPolicy { namespace_isolation: false, ..Default::default() };
    assert_eq!(keys(&open).len(), 4);
    // resolve refuses these before asking for any NAD, so nothing is held for them.
    let many: Vec<String> = (0..17).map(|i| format!("n{i}")).collect();
    for networks in ["[not json", many.join(",").as_str()] {
        let pod = busy_pod(json!({annotation::NETWORKS: networks}), json!([{"name": "a"}]));
        assert_eq!(references(&open, &PodDefaults::default(), "default", &pod), vec![], "{networks}");
    }
}

/// Four busy pods: the first three resolve (through a ConfigMap and the annotation, the default,
/// the annotation's ips); the last is refused (its containers disagree).
fn busy_pods() -> [Pod; 4] {
    [
        busy_pod(
            json!({annotation::NETWORKS: "lan@net2", "other": "x"}),
            json!([{"name": "a", "image": "x", "env": [{"name": "OTHER", "value": "1"}, {"name": ENV_VAR, "value": "red"},
                                                      {"name": ENV_VAR, "valueFrom": {"configMapKeyRef": {"name": "nets", "key": "k"}}}]},
                   {"name": "b", "image": "x"},
                   {"name": "c", "image": "x", "env": env_value("blue")}]),
        ),
        busy_pod(json!({}), json!([{"name": "a", "image": "x"}])),
        busy_pod(
            json!({annotation::NETWORKS: "[{\"name\": \"lan\", \"ips\": [\"10.1.1.5/24\"]}]"}),
            json!([{"name": "a"}]),
        ),
        busy_pod(json!({}), json!([{"name": "a", "env": env_value("red")}, {"name": "b", "env": env_value("blue")}])),
    ]
}

#[test]
fn a_trimmed_pod_resolves_as_the_whole_pod() {
    let node = Node::new();
    let api = FakeApi::default().config_map("default", "nets", json!({"k": "blue"})).nad("default", "lan", None);
    for (i, pod) in busy_pods().iter().enumerate() {
        let small = trimmed(pod);
        let resolved = |pod: &Pod| resolve(&node.config, "eth0", ("default", "p"), pod, &mut Fetching::new(&api));
        let whole = resolved(pod);
        assert_eq!(whole.is_ok(), i < 3, "pod {i}: {whole:?}");
        assert_eq!(resolved(&small), whole, "{pod:?}");
    }
}

#[test]
fn a_trimmed_pod_keeps_only_what_resolving_reads() {
    for pod in busy_pods() {
        let small = trimmed(&pod);
        assert_eq!(trimmed(&small), small, "trimming twice changes nothing");
        let text = serde_json::to_string(&small).unwrap();
        for gone in ["managedFields", "status", "image", "volumes", "labels", "OTHER", "\"quiet\""] {
            assert!(!text.contains(gone), "{gone} kept: {text}");
        }
        assert_eq!(
            small.spec.as_ref().unwrap().node_name,
            pod.spec.as_ref().unwrap().node_name,
            "the device lookup's node"
        );
        assert_eq!(
            (small.metadata.uid.as_deref(), small.metadata.resource_version.as_deref()),
            (Some("u1"), Some("7"))
        );
    }
}

#[test]
fn a_trimmed_pod_keeps_its_resource_claims_for_the_device_lookup() {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "p", "uid": "u1"},
        "spec": {"nodeName": "n1", "containers": [{"name": "a", "image": "x"}],
                 "resourceClaims": [{"name": "nics", "resourceClaimTemplateName": "two-vfs"}]},
        "status": {"phase": "Pending", "resourceClaimStatuses": [{"name": "nics", "resourceClaimName": "p-nics-x7k"}],
                   "extendedResourceClaimStatus": {"resourceClaimName": "p-extended-resources-abc", "requestMappings": []}}
    }))
    .unwrap();
    let small = trimmed(&pod);
    assert_eq!(
        crate::programs::selector::devices::dra::claims_of(&small).unwrap(),
        crate::programs::selector::devices::dra::claims_of(&pod).unwrap()
    );
    assert_eq!(
        crate::programs::selector::devices::dra::claim_names(&small),
        ["p-nics-x7k", "p-extended-resources-abc"]
    );
    assert_eq!(small.status.as_ref().unwrap().phase, None);
}

#[test]
fn a_pod_of_another_uid_than_the_sandbox_is_refused_naming_both() {
    let node = Node::new();
    let api = FakeApi::default().pod("default", "web-0", app("blue"));
    let chosen = |uid| select(&node.config, "eth0", Some(("default", "web-0")), uid, Some(&api));
    assert_eq!(chosen(Some("uid-web-0")).unwrap().attachments[0].network, "blue");
    assert_eq!(chosen(None).unwrap().attachments[0].network, "blue", "no K8S_POD_UID: nothing to compare");
    let e = chosen(Some("uid-old")).unwrap_err();
    assert_eq!(e.code, 103);
    assert!(e.msg.contains("uid-web-0") && e.msg.contains("uid-old") && e.msg.contains("pod default/web-0"), "{e}");
}

const VF: &str = "example.com/vf";

/// Two device networks of resource `VF`, `lan` and `red`, and
/// `blue` that is not one; pods that request `VF`, another resource, and a deviceID on `blue`.
fn pods_on_device_networks() -> FakeApi {
    let mut api = FakeApi::default().nad("default", "blue", None);
    for name in ["lan", "red"] {
        let device_nad = serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default",
            "annotations": {crate::programs::selector::devices::RESOURCE_NAME: VF}}, "spec": {}}))
        .unwrap();
        api.nads.insert(("default".into(), name.into()), device_nad);
    }
    let limits =
        |resource: &str| json!([{"name": "c", "image": "x", "resources": {"limits": {resource: "2", "cpu": "1"}}}]);
    api.annotated("default", "asks", "lan@net1, red@net2, blue", limits(VF))
        .annotated("default", "asks-not", "lan", limits("example.com/other"))
        .annotated("default", "names", r#"[{"name": "blue", "deviceID": "0000:03:00.2"}]"#, limits(VF))
}

#[test]
fn a_device_network_takes_the_resource_its_nad_names() {
    let node = Node::new();
    let api = pods_on_device_networks();
    let s = node.select(&api, "asks").unwrap();
    let devices: Vec<_> = s.attachments.iter().map(|a| a.device.as_ref().map(|d| d.resource.as_str())).collect();
    assert_eq!(devices, [None, Some(VF), Some(VF), None]);
}

#[test]
fn a_device_network_whose_resource_the_pod_does_not_request_is_refused() {
    let node = Node::new();
    let api = pods_on_device_networks();
    let err = node.select(&api, "asks-not").unwrap_err();
    assert_eq!(err.code, crate::platform::cni::code::INVALID_CONFIG);
    assert!(err.msg.contains("no container of the pod requests that resource"), "{err}");
    assert!(err.msg.contains("\"example.com/vf\": \"1\""), "{err}");
}

#[test]
fn a_device_id_on_a_network_that_is_no_device_network_is_refused() {
    let node = Node::new();
    let api = pods_on_device_networks();
    // A deviceID on a network that is no device network names nothing the pod has.
    let err = node.select(&api, "names").unwrap_err();
    assert!(err.msg.contains("has no k8s.v1.cni.cncf.io/resourceName annotation"), "{err}");
}

#[test]
fn a_trimmed_pod_keeps_only_its_extended_resources_deciding_the_same() {
    let node = Node::new();
    let api = pods_on_device_networks();
    // The agent's trimmed pod keeps the extended resources (and only those), and decides the same.
    let pod = api.pods[&("default".to_string(), "asks".to_string())].clone();
    let small = trimmed(&pod);
    let text = serde_json::to_string(&small).unwrap();
    assert!(text.contains(VF) && !text.contains("cpu"), "{text}");
    let resolved = |pod: &Pod| resolve(&node.config, "eth0", ("default", "asks"), pod, &mut Fetching::new(&api));
    assert_eq!(resolved(&small), resolved(&pod));
}

/// A node whose cluster network writes `10-kindnet.conflist` directly in the conf dir, beside the
/// selector's own `00-yh-genie.conflist`, with `defaultNetwork` set to `value`.
fn node_beside_the_cluster_network(value: &str) -> Node {
    let node = Node::with(json!({"defaultNetwork": value}));
    let conf_dir = node.dir.path().join("net.d");
    std::fs::write(
        conf_dir.join("00-yh-genie.conflist"),
        r#"{"cniVersion":"1.0.0","name":"yh-genie","plugins":[{"type":"yh-genie"}]}"#,
    )
    .unwrap();
    std::fs::write(conf_dir.join("10-kindnet.conflist"), KINDNET).unwrap();
    node
}

const KINDNET: &str = r#"{"cniVersion":"0.3.1","name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local",
    "ranges":[[{"subnet":"10.244.0.0/24"}]]}},{"type":"portmap","capabilities":{"portMappings":true}}]}"#;

#[test]
fn the_default_network_is_read_in_place_by_file_name_or_auto_and_follows_its_owner() {
    for value in ["10-kindnet.conflist", "auto"] {
        let node = node_beside_the_cluster_network(value);
        let api = pods_choosing_each_way(&node);
        let s = node.select(&api, "p-none").unwrap();
        let file = node.path("10-kindnet.conflist");
        assert_eq!(network_of(&s), ("10-kindnet.conflist", file.as_path()), "{value}");
        assert_eq!(s.attachments[0].config, KINDNET, "{value}: the owner's exact bytes");
        assert_eq!(s.attachments[0].source, Source::DefaultNetwork { element: value.into() });
        // The owner rewrites it (an MTU, an upgrade): the next pod gets the new text, no copy.
        let updated = KINDNET.replace("10.244.0.0/24", "10.244.7.0/24");
        std::fs::write(&file, &updated).unwrap();
        assert_eq!(node.select(&api, "p-none").unwrap().attachments[0].config, updated, "{value}");
    }
}

#[test]
fn auto_takes_the_first_file_by_name_and_waits_for_one_to_appear() {
    let node = node_beside_the_cluster_network("auto");
    let conf_dir = node.dir.path().join("net.d");
    std::fs::write(conf_dir.join("05-calico.conflist"), KINDNET.replace("kindnet", "calico")).unwrap();
    std::fs::write(conf_dir.join("01-cilium.conflist.cilium_bak"), KINDNET).unwrap();
    let api = pods_choosing_each_way(&node);
    assert_eq!(network_of(&node.select(&api, "p-none").unwrap()).0, "05-calico.conflist");
    for f in ["05-calico.conflist", "10-kindnet.conflist"] {
        std::fs::remove_file(conf_dir.join(f)).unwrap();
    }
    let e = node.select(&api, "p-none").unwrap_err();
    assert_eq!(e.code, 11, "try again later: {e}");
    assert!(e.msg.contains("waiting for the cluster's network"), "{e}");
    let named = node_beside_the_cluster_network("20-flannel.conflist");
    let e = named.select(&pods_choosing_each_way(&named), "p-none").unwrap_err();
    assert_eq!(e.code, 11, "{e}");
    assert!(e.msg.contains("20-flannel.conflist"), "{e}");
}

#[test]
fn a_pod_cannot_name_a_file_directly_in_the_conf_dir_even_when_the_default_is_one() {
    let node = node_beside_the_cluster_network("10-kindnet.conflist");
    let api = FakeApi::default()
        .pod("default", "p-file", app("10-kindnet.conflist"))
        .pod("default", "p-own", app("00-yh-genie.conflist"))
        .pod("default", "p-auto", app("auto"));
    for pod in ["p-file", "p-own", "p-auto"] {
        let e = node.select(&api, pod).unwrap_err();
        assert_eq!(e.code, 7, "{pod}: {e}");
    }
    assert!(node.select(&api, "p-file").unwrap_err().msg.contains("not inside a network directory"));
}

/// An `ipam-claim-reference` is carried to the network whose IPAM is yh-ipam, and refused (code 2)
/// on one whose IPAM is another, which would drop it and give the pod an address of its own.
#[test]
fn an_ipam_claim_reference_needs_a_network_whose_ipam_is_yh_ipam() {
    let lan = r#"{"cniVersion":"1.0.0","plugins":[{"type":"macvlan","master":"eth1",
        "ipam":{"type":"yh-ipam","pool":"lan"}}]}"#;
    let other = r#"{"cniVersion":"1.0.0","plugins":[{"type":"macvlan","master":"eth1","ipam":{"type":"static"}}]}"#;
    let api = FakeApi::default()
        .nad("default", "lan", Some(lan))
        .nad("default", "other", Some(other))
        .annotated("default", "vm", r#"[{"name":"lan","ipam-claim-reference":"vm-a"}]"#, app("blue"))
        .annotated("default", "vm-other", r#"[{"name":"other","ipam-claim-reference":"vm-a"}]"#, app("blue"));
    let node = Node::with(json!({"allowInlineConfig": true}));
    let s = node.select(&api, "vm").unwrap();
    assert_eq!(s.attachments[1].extras.ipam_claim.as_deref(), Some("vm-a"));
    let e = node.select(&api, "vm-other").unwrap_err();
    assert_eq!(e.code, 2, "{e}");
    assert!(
        e.msg.contains("ipam-claim-reference \"vm-a\", but no plugin of network") && e.msg.contains("yh-ipam"),
        "{e}"
    );
}
