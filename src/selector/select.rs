//! Which network a pod gets, and why (SPEC §3, "Selecting a network for a pod").
//!
//! The rules: a caller that is not a Kubernetes pod gets `defaultNetwork`. A pod's containers may
//! carry the env var `CNI_NETWORK_CONFIG`, as a literal `value` or from `valueFrom.configMapKeyRef`
//! (a ConfigMap in the pod's namespace); its value names the network (see `network`). Containers
//! that name different networks are an error naming both; a pod that names none gets
//! `defaultNetwork`. Init containers are not consulted: the network belongs to the pod's long-lived
//! containers, and init containers are often injected by tooling the pod's author does not control.
//! `explain` mentions an init container that carries the variable, so the choice is never silent.

use super::config::SelectorConfig;
use super::network::{self, NetworkFile, NetworkName};
use crate::cni::{CniError, code};
use crate::kube::{ObjectRef, PodSource};
use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar};
use std::collections::BTreeMap;
use std::fmt;

/// The env var through which a pod's container names its network (the seed's name).
pub const ENV_VAR: &str = "CNI_NETWORK_CONFIG";

/// The outcome: a configuration file, and the reasons it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub file: NetworkFile,
    pub reason: Reason,
    /// The pod's uid as the API server reported it, when the API server was asked.
    pub pod_uid: Option<String>,
    /// Facts that did not decide anything but a person should know (ignored init containers).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// No `K8S_POD_NAMESPACE`/`K8S_POD_NAME` in `CNI_ARGS`: `defaultNetwork`.
    NotAPod,
    /// The selector has no kubeconfig, so it cannot ask: `defaultNetwork`.
    KubernetesNotConfigured,
    /// The pod names no network: `defaultNetwork`.
    PodChoseNothing,
    /// The pod's containers name this network (all that name one agree).
    Chosen(Vec<Choice>),
}

/// One container's choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub container: String,
    pub source: ValueSource,
    pub value: String,
    pub name: NetworkName,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueSource {
    Literal,
    ConfigMap { name: String, key: String },
}

/// Choose the network for `pod` (namespace, name), asking `source` (None: no Kubernetes access).
pub fn select(
    config: &SelectorConfig,
    pod: Option<(&str, &str)>,
    source: Option<&dyn PodSource>,
) -> Result<Selection, CniError> {
    let Some((namespace, name)) = pod else {
        return default_network(config, Reason::NotAPod, None, Vec::new(), "the caller is not a Kubernetes pod");
    };
    let pod_ref = ObjectRef::pod(namespace, name);
    let Some(source) = source else {
        let why = format!("{pod_ref} cannot be looked up (no kubeconfig configured)");
        return default_network(config, Reason::KubernetesNotConfigured, None, Vec::new(), &why);
    };
    pod_arg("K8S_POD_NAMESPACE", namespace)?;
    pod_arg("K8S_POD_NAME", name)?;
    let pod =
        source.pod(namespace, name)?.ok_or_else(|| CniError::new(code::KUBE_API, format!("{pod_ref} not found")))?;
    let uid = pod.metadata.uid.clone();
    let (containers, init_containers) = match &pod.spec {
        Some(spec) => (spec.containers.as_slice(), spec.init_containers.as_deref().unwrap_or_default()),
        None => (&[][..], &[][..]),
    };
    let notes = init_containers
        .iter()
        .filter(|c| env_entry(c).is_some())
        .map(|c| format!("init container {:?} sets {ENV_VAR}; init containers are not consulted", c.name))
        .collect();

    let mut config_maps = ConfigMapCache::new(source, namespace);
    let mut chosen: Vec<(Choice, NetworkFile)> = Vec::new();
    for container in containers {
        let whose = format!("{pod_ref} container {:?} env {ENV_VAR}", container.name);
        let Some((source, value)) = container_value(container, &mut config_maps).map_err(|e| e.context(&whose))? else {
            continue;
        };
        let from = match &source {
            ValueSource::Literal => whose.clone(),
            ValueSource::ConfigMap { name, key } => format!("{whose} (ConfigMap {namespace}/{name} key {key:?})"),
        };
        let name = NetworkName::parse(&value)
            .map_err(|why| CniError::invalid_config(format!("{from}: cannot name a network: {why}")))?;
        let file = network::resolve(&config.conf_dir, &name).map_err(|e| e.context(&from))?;
        if let Some((first, first_file)) = chosen.first()
            && first_file.path != file.path
        {
            return Err(CniError::invalid_config(format!(
                "{pod_ref}: containers {:?} and {:?} choose different networks: {:?} chooses {} ({}), {:?} chooses {} ({})",
                first.container,
                container.name,
                first.container,
                first_file.network,
                first_file.path.display(),
                container.name,
                file.network,
                file.path.display(),
            )));
        }
        chosen.push((Choice { container: container.name.clone(), source, value, name }, file));
    }
    match chosen.first() {
        Some((_, file)) => {
            let file = file.clone();
            let choices = chosen.into_iter().map(|(c, _)| c).collect();
            Ok(Selection { file, reason: Reason::Chosen(choices), pod_uid: uid, notes })
        }
        None => {
            let why = format!("{pod_ref} chooses no network (no container sets {ENV_VAR})");
            default_network(config, Reason::PodChoseNothing, uid, notes, &why)
        }
    }
}

/// Check a name from `CNI_ARGS` before it goes into an API URL, which `kube` builds by pasting the
/// name into the path unescaped: `a?x` would fetch pod `a`, `..` another path. Kubernetes names are
/// DNS-1123 labels or subdomains: lowercase letters, digits, `-` and `.`, alphanumeric at both ends.
fn pod_arg(key: &str, value: &str) -> Result<(), CniError> {
    let alphanumeric = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let bytes = value.as_bytes();
    let valid = bytes.len() <= 253
        && alphanumeric(bytes.first())
        && alphanumeric(bytes.last())
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(CniError::invalid_env(format!(
            "CNI_ARGS: {key} {value:?} is not a Kubernetes name (lowercase letters, digits, '-' and '.')"
        )))
    }
}

fn default_network(
    config: &SelectorConfig,
    reason: Reason,
    pod_uid: Option<String>,
    notes: Vec<String>,
    why: &str,
) -> Result<Selection, CniError> {
    let value = config
        .default_network
        .as_deref()
        .ok_or_else(|| CniError::invalid_config(format!("{why} and no defaultNetwork is configured")))?;
    let name = NetworkName::parse(value)
        .map_err(|e| CniError::invalid_config(format!("defaultNetwork {value:?} cannot name a network: {e}")))?;
    let file = network::resolve(&config.conf_dir, &name).map_err(|e| e.context("defaultNetwork"))?;
    Ok(Selection { file, reason, pod_uid, notes })
}

/// The container's `CNI_NETWORK_CONFIG` entry; the last one wins, as in Kubernetes.
fn env_entry(container: &Container) -> Option<&EnvVar> {
    container.env.as_deref().unwrap_or_default().iter().rev().find(|e| e.name == ENV_VAR)
}

/// The value a container's `CNI_NETWORK_CONFIG` would have, and where it comes from. `None` when
/// the container has none, or takes it from an `optional` ConfigMap or key that is absent (as
/// Kubernetes leaves such a variable unset).
fn container_value(
    container: &Container,
    config_maps: &mut ConfigMapCache<'_>,
) -> Result<Option<(ValueSource, String)>, CniError> {
    let Some(entry) = env_entry(container) else {
        return Ok(None);
    };
    let Some(from) = &entry.value_from else {
        return Ok(Some((ValueSource::Literal, entry.value.clone().unwrap_or_default())));
    };
    let Some(selector) = &from.config_map_key_ref else {
        return Err(CniError::invalid_config(
            "only a literal value or valueFrom.configMapKeyRef can name a network".to_string(),
        ));
    };
    let optional = selector.optional.unwrap_or(false);
    let cm_ref = ObjectRef::config_map(config_maps.namespace, &selector.name);
    let Some(cm) = config_maps.get(&selector.name)? else {
        return if optional { Ok(None) } else { Err(CniError::new(code::KUBE_API, format!("{cm_ref} not found"))) };
    };
    match cm.data.as_ref().and_then(|d| d.get(&selector.key)) {
        Some(value) => {
            Ok(Some((ValueSource::ConfigMap { name: selector.name.clone(), key: selector.key.clone() }, value.clone())))
        }
        None if optional => Ok(None),
        None => Err(CniError::new(code::KUBE_API, format!("{cm_ref} has no key {:?} in its data", selector.key))),
    }
}

/// ConfigMaps fetched once each, however many containers refer to them.
struct ConfigMapCache<'a> {
    source: &'a dyn PodSource,
    namespace: &'a str,
    fetched: BTreeMap<String, Option<ConfigMap>>,
}

impl<'a> ConfigMapCache<'a> {
    fn new(source: &'a dyn PodSource, namespace: &'a str) -> Self {
        ConfigMapCache { source, namespace, fetched: BTreeMap::new() }
    }
    fn get(&mut self, name: &str) -> Result<Option<&ConfigMap>, CniError> {
        if !self.fetched.contains_key(name) {
            let cm = self.source.config_map(self.namespace, name)?;
            self.fetched.insert(name.to_string(), cm);
        }
        Ok(self.fetched[name].as_ref())
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotAPod => f.write_str("defaultNetwork: the caller is not a Kubernetes pod"),
            Reason::KubernetesNotConfigured => {
                f.write_str("defaultNetwork: no kubeconfig is configured, so the pod was not looked up")
            }
            Reason::PodChoseNothing => write!(f, "defaultNetwork: no container of the pod sets {ENV_VAR}"),
            Reason::Chosen(choices) => {
                for (i, c) in choices.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "container {:?}: env {ENV_VAR} ", c.container)?;
                    match &c.source {
                        ValueSource::Literal => f.write_str("(literal value)")?,
                        ValueSource::ConfigMap { name, key } => write!(f, "from ConfigMap {name} key {key:?}")?,
                    }
                    write!(f, " = {:?}, read as a {}", c.value, c.name.form())?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;
    use std::cell::RefCell;
    use std::path::{Path, PathBuf};

    /// An in-memory API server: objects by name, and a log of what was asked.
    #[derive(Default)]
    struct FakeApi {
        pods: BTreeMap<(String, String), Pod>,
        config_maps: BTreeMap<(String, String), ConfigMap>,
        fail_with: Option<CniError>,
        asked: RefCell<Vec<String>>,
    }

    impl FakeApi {
        fn pod(mut self, ns: &str, name: &str, containers: serde_json::Value) -> Self {
            let pod = serde_json::from_value(json!({
                "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}")},
                "spec": {"containers": containers}
            }))
            .unwrap();
            self.pods.insert((ns.into(), name.into()), pod);
            self
        }
        fn pod_json(mut self, ns: &str, name: &str, pod: serde_json::Value) -> Self {
            self.pods.insert((ns.into(), name.into()), serde_json::from_value(pod).unwrap());
            self
        }
        fn config_map(mut self, ns: &str, name: &str, data: serde_json::Value) -> Self {
            let cm = serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
            self.config_maps.insert((ns.into(), name.into()), cm);
            self
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
    }

    fn env_cm(cm: &str, key: &str) -> serde_json::Value {
        json!([{"name": ENV_VAR, "valueFrom": {"configMapKeyRef": {"name": cm, "key": key}}}])
    }
    fn env_value(v: &str) -> serde_json::Value {
        json!([{"name": "OTHER", "value": "x"}, {"name": ENV_VAR, "value": v}])
    }

    struct Node {
        dir: tempfile::TempDir,
        config: SelectorConfig,
    }

    impl Node {
        /// A conf dir with networks `blue` (one .conflist) and `green` (a .conf), default `green`.
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let conf_dir = dir.path().join("net.d");
            for rel in ["blue/10-blue.conflist", "green/green.conf"] {
                let p = conf_dir.join(rel);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, "{}").unwrap();
            }
            let conf = crate::cni::PluginConf::parse(
                json!({"cniVersion": "1.0.0", "type": "yh-genie", "confDir": conf_dir, "defaultNetwork": "green"})
                    .to_string()
                    .as_bytes(),
            )
            .unwrap();
            Node { dir, config: SelectorConfig::from_plugin_conf(&conf).unwrap() }
        }
        fn path(&self, rel: &str) -> PathBuf {
            self.dir.path().join("net.d").join(rel).canonicalize().unwrap()
        }
        fn select(&self, api: &FakeApi, pod: &str) -> Result<Selection, CniError> {
            select(&self.config, Some(("default", pod)), Some(api))
        }
    }

    fn network_of(s: &Selection) -> (&str, &Path) {
        (s.file.network.as_str(), s.file.path.as_path())
    }

    #[test]
    fn configmap_in_each_form_literal_and_no_choice() {
        let node = Node::new();
        let seed = json!({"kubernetes": {"kubeconfig": node.path("blue/10-blue.conflist")}}).to_string();
        let api = FakeApi::default()
            .config_map("default", "by-json", json!({"cni_network_config": seed}))
            .config_map("default", "by-name", json!({"net": "blue"}))
            .config_map("default", "by-path", json!({"net": "green/green.conf"}))
            .pod("default", "p-json", json!([{"name": "c", "env": env_cm("by-json", "cni_network_config")}]))
            .pod("default", "p-name", json!([{"name": "c", "env": env_cm("by-name", "net")}]))
            .pod("default", "p-path", json!([{"name": "c", "env": env_cm("by-path", "net")}]))
            .pod("default", "p-literal", json!([{"name": "c", "env": env_value("blue")}]))
            .pod("default", "p-none", json!([{"name": "c", "env": [{"name": "X", "value": "1"}]}, {"name": "d"}]));
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
            assert_eq!(s.pod_uid, Some(format!("uid-{pod}")));
        }
        let s = node.select(&api, "p-json").unwrap();
        let Reason::Chosen(choices) = &s.reason else { panic!("{:?}", s.reason) };
        assert_eq!(
            choices[0].source,
            ValueSource::ConfigMap { name: "by-json".into(), key: "cni_network_config".into() }
        );
        assert!(matches!(choices[0].name, NetworkName::SeedJson(_)));
        assert_eq!(node.select(&api, "p-none").unwrap().reason, Reason::PodChoseNothing);
    }

    #[test]
    fn one_request_per_object_and_containers_that_agree_are_fine() {
        let node = Node::new();
        let api = FakeApi::default().config_map("default", "net", json!({"k": "blue"})).pod(
            "default",
            "p",
            json!([
                {"name": "a", "env": env_cm("net", "k")},
                {"name": "b", "env": env_cm("net", "k")},
                {"name": "c", "env": env_value("blue/10-blue.conflist")}
            ]),
        );
        let s = node.select(&api, "p").unwrap();
        assert_eq!(s.file.network, "blue");
        assert!(matches!(&s.reason, Reason::Chosen(c) if c.len() == 3));
        assert_eq!(*api.asked.borrow(), ["pod default/p", "ConfigMap default/net"]);
    }

    #[test]
    fn not_a_pod_or_no_kubernetes_gets_the_default_without_asking() {
        let node = Node::new();
        let s = select(&node.config, None, None).unwrap();
        assert_eq!((s.file.network.as_str(), s.reason), ("green", Reason::NotAPod));
        let s = select(&node.config, Some(("default", "p")), None).unwrap();
        assert_eq!(s.reason, Reason::KubernetesNotConfigured);
    }

    #[test]
    fn pod_names_that_are_not_kubernetes_names_are_refused_before_any_request() {
        let node = Node::new();
        let api = FakeApi::default().pod("default", "a", json!([{"name": "c", "env": env_value("blue")}]));
        for (namespace, name, key) in [
            ("default", "a?x", "K8S_POD_NAME"),
            ("default", "..", "K8S_POD_NAME"),
            ("default", "a/b", "K8S_POD_NAME"),
            ("default", "Web-0", "K8S_POD_NAME"),
            ("kube-system/configmaps", "a", "K8S_POD_NAMESPACE"),
        ] {
            let e = select(&node.config, Some((namespace, name)), Some(&api)).unwrap_err();
            assert_eq!(e.code, 4, "{namespace}/{name}");
            assert!(e.msg.contains(key), "{e}");
        }
        assert!(api.asked.borrow().is_empty());
        let good = FakeApi::default().pod("kube-system", "web-0.x-1", json!([{"name": "c"}]));
        assert!(select(&node.config, Some(("kube-system", "web-0.x-1")), Some(&good)).is_ok());
    }

    #[test]
    fn no_choice_and_no_default_is_code_7_naming_the_pod() {
        let mut node = Node::new();
        node.config.default_network = None;
        let api = FakeApi::default().pod("default", "lonely", json!([{"name": "c"}]));
        let e = node.select(&api, "lonely").unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("pod default/lonely") && e.msg.contains("defaultNetwork"), "{e}");
        let e = select(&node.config, None, None).unwrap_err();
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
            .pod("default", "p-nodir", json!([{"name": "c", "env": env_value("purple")}]))
            .pod(
                "default",
                "p-secret",
                json!([{"name": "c", "env": [{"name": ENV_VAR, "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]),
            )
            .pod(
                "default",
                "p-split",
                json!([{"name": "a", "env": env_value("blue")}, {"name": "b", "env": env_value("green")}]),
            );
        for (pod, code, wants) in [
            ("p-gone", 103, &["pod default/p-gone not found"][..]),
            ("p-missing-cm", 103, &["ConfigMap default/absent not found", "container \"c\""]),
            ("p-missing-key", 103, &["ConfigMap default/nokey", "\"k\""]),
            ("p-garbage", 7, &["ConfigMap default/garbage", "does not parse"]),
            ("p-outside", 7, &["outside confDir", "pod default/p-outside"]),
            ("p-empty", 7, &["empty", "pod default/p-empty"]),
            ("p-nodir", 7, &["purple"]),
            ("p-secret", 7, &["configMapKeyRef"]),
            ("p-split", 7, &["\"a\"", "\"b\"", "blue", "green"]),
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
        assert_eq!((s.file.network.as_str(), &s.reason), ("green", &Reason::PodChoseNothing));
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
}
