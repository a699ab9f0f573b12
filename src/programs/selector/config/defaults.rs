//! The networks the admin attaches to pods beyond what each pod chooses, in Multus's keys:
//! `defaultNetworks` (NetworkAttachmentDefinitions attached to every pod, after its first network
//! and before its annotation's), `systemNamespaces` (whose pods do not get `defaultNetworks`) and
//! `multusNamespace` (where a `defaultNetworks` name without a namespace is looked up). The node
//! agent reads the same keys, to watch those NADs for every pod.

use crate::platform::cni::CniError;
use crate::programs::selector::config::policy::key;
use crate::programs::selector::requests::annotation::{self, Request};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Multus's default for both namespaces.
const KUBE_SYSTEM: &str = "kube-system";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDefaults {
    /// `defaultNetworks`, each with its namespace (`multusNamespace` when it names none).
    pub default_networks: Vec<Request>,
    /// `systemNamespaces`: their pods do not get `defaultNetworks` (as Multus).
    pub system_namespaces: BTreeSet<String>,
    /// `multusNamespace`: the admin's namespace for NetworkAttachmentDefinitions, where a name
    /// without a namespace in `defaultNetworks` or in Multus's default-network annotation is.
    pub multus_namespace: String,
}

impl Default for PodDefaults {
    fn default() -> Self {
        PodDefaults {
            default_networks: Vec::new(),
            system_namespaces: BTreeSet::from([KUBE_SYSTEM.to_string()]),
            multus_namespace: KUBE_SYSTEM.to_string(),
        }
    }
}

impl PodDefaults {
    /// The keys of the selector's configuration; a wrong type or a name that is not a
    /// NetworkAttachmentDefinition's is code 7 naming the key.
    pub fn from_keys(raw: &Map<String, Value>) -> Result<Self, CniError> {
        let home: String = key(raw, "multusNamespace")?.unwrap_or_else(|| KUBE_SYSTEM.to_string());
        let names: Vec<String> = key(raw, "defaultNetworks")?.unwrap_or_default();
        let mut default_networks = Vec::with_capacity(names.len());
        for name in &names {
            let bad = |why: String| CniError::invalid_config(format!("yh-genie: 'defaultNetworks' {name:?}: {why}"));
            let mut requests = annotation::parse(name).map_err(|e| bad(e.msg))?;
            if requests.len() != 1 {
                return Err(bad("each entry names one NetworkAttachmentDefinition, namespace/name or name".into()));
            }
            let mut request = requests.remove(0);
            request.namespace.get_or_insert_with(|| home.clone());
            default_networks.push(request);
        }
        let system_namespaces = match key::<Vec<String>>(raw, "systemNamespaces")? {
            Some(list) => list.into_iter().collect(),
            None => PodDefaults::default().system_namespaces,
        };
        Ok(PodDefaults { default_networks, system_namespaces, multus_namespace: home })
    }

    /// Whether a pod of `namespace` gets only its first network.
    pub fn is_system(&self, namespace: &str) -> bool {
        self.system_namespaces.contains(namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(keys: Value) -> Result<PodDefaults, CniError> {
        PodDefaults::from_keys(keys.as_object().unwrap())
    }

    #[test]
    fn multus_defaults() {
        let d = parse(json!({})).unwrap();
        assert!(d.default_networks.is_empty());
        assert!(d.is_system("kube-system") && !d.is_system("default"));
    }

    #[test]
    fn default_networks_take_multus_namespace_unless_they_name_one() {
        let d = parse(json!({"defaultNetworks": ["lan", "infra/storage@stor0"], "multusNamespace": "net",
                             "systemNamespaces": ["ops"]}))
        .unwrap();
        let refs: Vec<(&str, &str, Option<&str>)> = d
            .default_networks
            .iter()
            .map(|r| (r.namespace.as_deref().unwrap(), r.name.as_str(), r.ifname.as_deref()))
            .collect();
        assert_eq!(refs, [("net", "lan", None), ("infra", "storage", Some("stor0"))]);
        assert!(d.is_system("ops") && !d.is_system("kube-system"));
        let d = parse(json!({"defaultNetworks": ["lan"]})).unwrap();
        assert_eq!(d.default_networks[0].namespace.as_deref(), Some("kube-system"));
    }

    #[test]
    fn bad_entries_are_code_7_naming_the_key() {
        for keys in [
            json!({"defaultNetworks": "lan"}),
            json!({"defaultNetworks": ["a,b"]}),
            json!({"defaultNetworks": ["Not/A/Name"]}),
            json!({"systemNamespaces": "kube-system"}),
        ] {
            let e = parse(keys.clone()).unwrap_err();
            assert_eq!(e.code, 7, "{keys}");
            assert!(e.msg.contains("defaultNetworks") || e.msg.contains("systemNamespaces"), "{keys}: {e}");
        }
    }
}
