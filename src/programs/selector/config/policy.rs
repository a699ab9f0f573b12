//! Who may attach what through NetworkAttachmentDefinitions: the cluster admin's rules, in the
//! selector's configuration.
//!
//! A NAD is namespaced, and whoever may create one in a namespace could otherwise make every node
//! run any plugin in `binDir` with any configuration (host-device taking the node's NIC, a bridge on
//! its uplink). So, by default:
//!
//! - a NAD may only name a network the admin installed: an empty `spec.config` means the network
//!   directory of the NAD's name under `confDir`; a configuration inline in `spec.config` is refused
//!   unless `allowInlineConfig` is true, and then, if `inlinePluginTypes` is set, every plugin type
//!   anywhere in it (each plugin's, its IPAM's, a meta plugin's delegate's, any key a Go plugin reads
//!   as `type`, and the types a built-in runs by default) must be listed, and every host path in it
//!   must lie under one of `inlinePathPrefixes`, or of the `inlinePathPrefixesByType` of the plugin
//!   whose section holds it (none by default: see `inline`);
//! - an inline configuration's `yh-ipam` may only name a pool an `AddressPool` object defines (the
//!   admin's, cluster-scoped), not define one with its own `ranges`, `exclude` or `blockSize`, unless
//!   `inlineYhIpamRanges` is true: a pool defined inline hands out, across the cluster, addresses
//!   its writer chose (see `inline::yh_ipam_pool_keys`);
//! - a pod may only use NADs of its own namespace and of the `globalNamespaces` the admin lists
//!   (Multus's `namespaceIsolation`, here on by default);
//! - a pod's `ips` choose its addresses only on networks whose configuration asks for them, by a
//!   plugin declaring the `ips` capability (`annotationIps`, see `AnnotationIps`): an address a pod
//!   author picks from an admin's range may be one the admin keeps for something else.
//!
//! A refusal is code 7 naming the NAD and the rule.

use crate::platform::cni::{CniError, ConfList};
use crate::programs::selector::netconf::{confdir, inline};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentPolicy {
    /// `namespaceIsolation`: NADs only from the pod's namespace and `global_namespaces`.
    pub namespace_isolation: bool,
    /// `globalNamespaces`: namespaces whose NADs every pod may use.
    pub global_namespaces: BTreeSet<String>,
    /// `allowInlineConfig`: whether a NAD's `spec.config` may carry a configuration.
    pub allow_inline_config: bool,
    /// `inlinePluginTypes`: when set, the only plugin types an inline configuration may use.
    pub inline_plugin_types: Option<BTreeSet<String>>,
    /// `inlinePathPrefixes`: the directories under which an inline configuration may name host
    /// paths (a `dataDir`, a `subnetFile`); none by default.
    pub inline_path_prefixes: Vec<PathBuf>,
    /// `inlinePathPrefixesByType`: by plugin type, further directories (or files) under which the
    /// section of an inline configuration that plugin runs may name host paths (whereabouts'
    /// kubeconfig); none by default.
    pub inline_path_prefixes_by_type: BTreeMap<String, Vec<PathBuf>>,
    /// `inlineYhIpamRanges`: whether an inline configuration's `yh-ipam` may define its pool
    /// (`ranges`, `exclude`, `blockSize`) rather than name an `AddressPool`.
    pub inline_yh_ipam_ranges: bool,
    /// `annotationIps`: on which networks a pod's `ips` choose its addresses, and how they reach
    /// the plugins there.
    pub annotation_ips: AnnotationIps,
}

/// `annotationIps`: where the `ips` of a pod's networks annotation (and its `cni-args` keys read as
/// `ips`) may choose the pod's addresses.
///
/// Multus hands every network a pod's `ips` twice: as `CNI_ARGS` `IP=` (the addresses joined by
/// `,`) to every plugin of the chain, and as `runtimeConfig.ips` to the plugins that declare the
/// `ips` capability. `IP=` reaches IPAM plugins that never asked for it (host-local, static and
/// whereabouts read it), so on a network the admin installed it would let a pod author take any
/// address of the admin's range. By default (`declared`) a pod chooses addresses only where the
/// network's configuration declares the `ips` capability, and only through it; the other values
/// widen that for admins coming from Multus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnnotationIps {
    /// Only on networks a plugin of which declares the `ips` capability, as `runtimeConfig.ips` of
    /// those plugins; elsewhere a pod asking for `ips` is refused.
    #[default]
    Declared,
    /// As `declared` on the networks the admin installed under `confDir`; on the networks of
    /// NetworkAttachmentDefinitions' inline configurations, as Multus gives them (their writers
    /// choose the ranges and may write addresses into them, so a pod's choice among them adds
    /// nothing they cannot do).
    Inline,
    /// On every network, as Multus gives them.
    Everywhere,
}

impl AnnotationIps {
    /// Whether a pod's `ips` reach the plugins of a network (of an inline configuration or not) as
    /// Multus gives them: `CNI_ARGS` `IP=` besides `runtimeConfig.ips` where declared, and never
    /// refused for want of a declared capability.
    pub fn as_multus(self, inline: bool) -> bool {
        match self {
            AnnotationIps::Declared => false,
            AnnotationIps::Inline => inline,
            AnnotationIps::Everywhere => true,
        }
    }
}

impl Default for AttachmentPolicy {
    fn default() -> Self {
        AttachmentPolicy {
            namespace_isolation: true,
            global_namespaces: BTreeSet::new(),
            allow_inline_config: false,
            inline_plugin_types: None,
            inline_path_prefixes: Vec::new(),
            inline_path_prefixes_by_type: BTreeMap::new(),
            inline_yh_ipam_ranges: false,
            annotation_ips: AnnotationIps::Declared,
        }
    }
}

/// A key of the selector's configuration read as `T` (absent or null: `None`); a wrong type is code 7
/// naming the key. For the policy's keys and Multus's `defaultNetworks` keys (`defaults`), which
/// `config` reads through them.
pub(super) fn key<T: for<'de> Deserialize<'de>>(raw: &Map<String, Value>, name: &str) -> Result<Option<T>, CniError> {
    raw.get(name)
        .filter(|v| !v.is_null())
        .map(|v| T::deserialize(v))
        .transpose()
        .map_err(|e| CniError::invalid_config(format!("yh-genie: '{name}' is invalid: {e}")))
}

/// `globalNamespaces`: a list, or Multus's comma-separated string (`"default,infra"`), so that a
/// Multus configuration's value works unchanged.
fn global_namespaces(raw: &Map<String, Value>) -> Result<BTreeSet<String>, CniError> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Namespaces {
        List(BTreeSet<String>),
        Multus(String),
    }
    Ok(match key(raw, "globalNamespaces")? {
        None => BTreeSet::new(),
        Some(Namespaces::List(list)) => list,
        Some(Namespaces::Multus(text)) => {
            text.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect()
        }
    })
}

impl AttachmentPolicy {
    /// The policy keys of the selector's configuration; absent keys keep their defaults.
    pub fn from_keys(raw: &Map<String, Value>) -> Result<Self, CniError> {
        let defaults = AttachmentPolicy::default();
        Ok(AttachmentPolicy {
            namespace_isolation: key(raw, "namespaceIsolation")?.unwrap_or(defaults.namespace_isolation),
            global_namespaces: global_namespaces(raw)?,
            allow_inline_config: key(raw, "allowInlineConfig")?.unwrap_or(defaults.allow_inline_config),
            inline_plugin_types: key(raw, "inlinePluginTypes")?,
            inline_path_prefixes: path_prefixes(
                "inlinePathPrefixes",
                key(raw, "inlinePathPrefixes")?.unwrap_or_default(),
            )?,
            inline_path_prefixes_by_type: key::<BTreeMap<String, Vec<String>>>(raw, "inlinePathPrefixesByType")?
                .unwrap_or_default()
                .into_iter()
                .map(|(t, prefixes)| Ok((t, path_prefixes("inlinePathPrefixesByType", prefixes)?)))
                .collect::<Result<_, CniError>>()?,
            inline_yh_ipam_ranges: key(raw, "inlineYhIpamRanges")?.unwrap_or(defaults.inline_yh_ipam_ranges),
            annotation_ips: key(raw, "annotationIps")?.unwrap_or(defaults.annotation_ips),
        })
    }

    /// May a pod in `pod_namespace` use the NAD `namespace/name`?
    pub fn check_namespace(&self, pod_namespace: &str, namespace: &str, name: &str) -> Result<(), CniError> {
        if !self.namespace_isolation || namespace == pod_namespace || self.global_namespaces.contains(namespace) {
            return Ok(());
        }
        let globals: Vec<&str> = self.global_namespaces.iter().map(String::as_str).collect();
        Err(CniError::invalid_config(format!(
            "NetworkAttachmentDefinition {namespace}/{name} is refused: namespaceIsolation lets a pod of namespace \
             {pod_namespace} use only its own namespace's NetworkAttachmentDefinitions and those of globalNamespaces [{}]; \
             use one in namespace {pod_namespace}, or have the cluster admin add {namespace:?} to \"globalNamespaces\" \
             in selector.json of the yh-genie-config ConfigMap",
            globals.join(", ")
        )))
    }

    /// May the NAD `nad` (`namespace/name`) carry this inline configuration? Parses it (with the
    /// same checks as a file's) and returns the chain.
    pub fn check_inline(&self, nad: &str, config: &str) -> Result<ConfList, CniError> {
        let refused =
            |rule: String| CniError::invalid_config(format!("NetworkAttachmentDefinition {nad} is refused: {rule}"));
        if !self.allow_inline_config {
            return Err(refused(
                "its spec.config holds a configuration, and allowInlineConfig is false on this node: a \
                 NetworkAttachmentDefinition may only name a network installed under confDir (empty spec.config)"
                    .into(),
            ));
        }
        let origin = format!("NetworkAttachmentDefinition {nad} spec.config");
        let list = confdir::parse_inline(config.as_bytes(), &origin)?;
        if let Some(allowed) = &self.inline_plugin_types {
            let listed: Vec<&str> = allowed.iter().map(String::as_str).collect();
            let types = confdir::plugin_types(&list).into_iter().chain(inline::implied_types(&list));
            if let Some((at, t)) = types.into_iter().find(|(_, t)| !allowed.contains(t)) {
                return Err(refused(format!(
                    "spec.config {at} is {t:?}, which inlinePluginTypes [{}] does not list",
                    listed.join(", ")
                )));
            }
        }
        if !self.inline_yh_ipam_ranges
            && let Some(at) = inline::yh_ipam_pool_keys(&list).into_iter().next()
        {
            return Err(refused(format!(
                "spec.config {at} defines a yh-ipam pool, and inlineYhIpamRanges is false on this node: an inline \
                 configuration's yh-ipam may only name a pool the cluster admin defined as an AddressPool (\"pool\" \
                 and no \"ranges\", \"exclude\" or \"blockSize\"); use one (kubectl get addresspools), or have the \
                 cluster admin set \"inlineYhIpamRanges\": true in selector.json of the yh-genie-config ConfigMap"
            )));
        }
        if let Some((at, name)) = inline::network_names(&list).into_iter().find(|(_, n)| !inline::valid_network_name(n))
        {
            return Err(refused(format!(
                "spec.config {at} is {name:?}, which is not a network name (a letter or digit, then letters, digits, \
                 '_', '.', '-'): plugins keep state in directories of that name"
            )));
        }
        let shown =
            |prefixes: &[PathBuf]| prefixes.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
        let of_type = |t: &Option<String>| {
            t.as_ref().and_then(|t| self.inline_path_prefixes_by_type.get(t)).map(Vec::as_slice).unwrap_or_default()
        };
        let outside = |p: &inline::HostPath| {
            !inline::path_allowed(&p.path, &self.inline_path_prefixes)
                && !inline::path_allowed(&p.path, of_type(&p.section_type))
        };
        if let Some(p) = inline::host_paths(&list).into_iter().find(outside) {
            let by_type = match &p.section_type {
                Some(t) => format!(" and inlinePathPrefixesByType {t:?} [{}]", shown(of_type(&p.section_type))),
                None => String::new(),
            };
            return Err(refused(format!(
                "spec.config {} is {:?}, a host path outside inlinePathPrefixes [{}]{by_type}: an inline configuration \
                 may name only paths under a directory the admin allows",
                p.at,
                p.path,
                shown(&self.inline_path_prefixes)
            )));
        }
        Ok(list)
    }
}

/// `inlinePathPrefixes` (and each list of `inlinePathPrefixesByType`, the key `name`): absolute
/// directories without `.` or `..`.
fn path_prefixes(name: &str, prefixes: Vec<String>) -> Result<Vec<PathBuf>, CniError> {
    prefixes
        .into_iter()
        .map(|p| {
            if inline::path_allowed(&p, &[PathBuf::from("/")]) {
                Ok(PathBuf::from(p))
            } else {
                Err(CniError::invalid_config(format!(
                    "yh-genie: '{name}' is invalid: {p:?} is not an absolute directory without '.' or '..'"
                )))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(keys: Value) -> AttachmentPolicy {
        AttachmentPolicy::from_keys(keys.as_object().unwrap()).unwrap()
    }

    const MACVLAN: &str = r#"{"cniVersion":"1.0.0","name":"lan","plugins":[
        {"type":"macvlan","master":"eth1","ipam":{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/24"}]]}},
        {"type":"router","overlay_hijack_subnet":["10.244.0.0/16"],"service_hijack_subnet":["10.96.0.0/12"]}]}"#;

    #[test]
    fn by_default_a_nad_of_another_namespace_is_refused_saying_what_to_do() {
        let p = AttachmentPolicy::default();
        assert_eq!(policy(json!({})), p);
        assert!(p.check_namespace("web", "web", "lan").is_ok());
        let e = p.check_namespace("web", "infra", "lan").unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("NetworkAttachmentDefinition infra/lan") && e.msg.contains("namespaceIsolation"), "{e}");
        // And what to do: a NAD of the pod's own namespace, or the admin's globalNamespaces.
        assert!(
            e.msg.contains("use one in namespace web")
                && e.msg
                    .contains(r#"add "infra" to "globalNamespaces" in selector.json of the yh-genie-config ConfigMap"#),
            "{e}"
        );
    }

    #[test]
    fn by_default_inline_configurations_are_refused() {
        let p = AttachmentPolicy::default();
        let e = p.check_inline("web/lan", MACVLAN).unwrap_err();
        assert!(e.msg.contains("web/lan") && e.msg.contains("allowInlineConfig is false"), "{e}");
    }

    #[test]
    fn global_namespaces_are_open_to_pods_of_every_namespace() {
        let p = policy(json!({"globalNamespaces": ["infra"]}));
        assert!(p.check_namespace("web", "infra", "lan").is_ok());
        let e = p.check_namespace("web", "other", "lan").unwrap_err();
        assert!(e.msg.contains("globalNamespaces [infra]"), "{e}");
        // Multus's spelling, a comma-separated string, means the same.
        assert_eq!(
            policy(json!({"globalNamespaces": "infra, tools,"})),
            policy(json!({"globalNamespaces": ["infra", "tools"]}))
        );
    }

    #[test]
    fn namespace_isolation_can_be_turned_off() {
        assert!(policy(json!({"namespaceIsolation": false})).check_namespace("web", "other", "lan").is_ok());
    }

    #[test]
    fn inline_configurations_are_accepted_once_allowed() {
        let any = policy(json!({"allowInlineConfig": true}));
        assert_eq!(any.check_inline("web/lan", MACVLAN).unwrap().plugins.len(), 2);
    }

    #[test]
    fn inline_plugin_types_limit_the_types_an_inline_configuration_may_run() {
        let listed = policy(json!({"allowInlineConfig": true, "inlinePluginTypes": ["macvlan", "router"]}));
        let e = listed.check_inline("web/lan", MACVLAN).unwrap_err();
        assert!(e.msg.contains("plugins[0].ipam.type is \"host-local\""), "the IPAM type counts too: {e}");
        let all = policy(json!({"allowInlineConfig": true, "inlinePluginTypes": ["macvlan", "router", "host-local"]}));
        assert!(all.check_inline("web/lan", MACVLAN).is_ok());
    }

    #[test]
    fn an_inline_configuration_running_the_selector_is_refused() {
        let any = policy(json!({"allowInlineConfig": true}));
        let e = any.check_inline("web/x", r#"{"cniVersion":"1.0.0","name":"x","type":"yh-genie"}"#).unwrap_err();
        assert!(e.msg.contains("would run the selector"), "{e}");
    }

    #[test]
    fn an_inline_configuration_that_is_not_json_is_refused_naming_where_it_is() {
        let any = policy(json!({"allowInlineConfig": true}));
        let e = any.check_inline("web/x", "{not json").unwrap_err();
        assert!(e.msg.contains("NetworkAttachmentDefinition web/x spec.config"), "{e}");
    }

    #[test]
    fn inline_types_are_checked_as_go_plugins_read_them() {
        let listed = policy(json!({"allowInlineConfig": true, "inlinePluginTypes": ["macvlan", "host-local"]}));
        for (config, at, t) in [
            (r#"{"cniVersion":"1.0.0","name":"n","type":"macvlan","ipam":{"Type":"evil"}}"#, "ipam.Type", "evil"),
            (r#"{"cniVersion":"1.0.0","name":"n","TYPE":"evil","type":"macvlan"}"#, "TYPE", "evil"),
            (
                r#"{"cniVersion":"1.0.0","name":"n","type":"macvlan","x":{"y":[{"tYPe":"evil"}]}}"#,
                "x.y[0].tYPe",
                "evil",
            ),
        ] {
            let e = listed.check_inline("web/n", config).unwrap_err();
            assert!(e.msg.contains(&format!("{at} is {t:?}")), "{config}: {e}");
        }
    }

    #[test]
    fn a_built_in_plugins_default_delegate_must_be_listed_too() {
        let yonghui = policy(json!({"allowInlineConfig": true, "inlinePluginTypes": ["yonghui", "host-local"]}));
        let bare = r#"{"cniVersion":"1.0.0","name":"n","type":"yonghui"}"#;
        let e = yonghui.check_inline("web/n", bare).unwrap_err();
        assert!(e.msg.contains("delegate.type (the \"yonghui\" default) is \"yh-bridge\""), "{e}");
        let with =
            policy(json!({"allowInlineConfig": true, "inlinePluginTypes": ["yonghui", "yh-bridge", "host-local"]}));
        assert!(with.check_inline("web/n", bare).is_ok());
    }

    #[test]
    fn network_names_that_are_paths_are_refused() {
        let open = policy(json!({"allowInlineConfig": true}));
        for config in [
            r#"{"cniVersion":"1.0.0","name":"../../etc","type":"macvlan"}"#,
            r#"{"cniVersion":"1.0.0","name":"lan","type":"macvlan","NAME":"x/y"}"#,
        ] {
            let e = open.check_inline("web/n", config).unwrap_err();
            assert!(e.code == 7 && e.msg.contains("is not a network name"), "{config}: {e}");
        }
    }

    #[test]
    fn host_paths_only_under_allowed_prefixes() {
        let open = policy(json!({"allowInlineConfig": true}));
        let yonghui = r#"{"cniVersion":"1.0.0","name":"n","type":"yonghui","subnetFile":"/etc/shadow"}"#;
        let e = open.check_inline("web/n", yonghui).unwrap_err();
        assert!(e.msg.contains("subnetFile is \"/etc/shadow\", a host path outside inlinePathPrefixes []"), "{e}");
        let ipam =
            r#"{"cniVersion":"1.0.0","name":"n","type":"macvlan","ipam":{"type":"host-local","dataDir":"/srv/t/a"}}"#;
        assert!(open.check_inline("web/n", ipam).unwrap_err().msg.contains("ipam.dataDir"));
        let allowed = policy(json!({"allowInlineConfig": true, "inlinePathPrefixes": ["/srv/t"]}));
        assert!(allowed.check_inline("web/n", ipam).is_ok());
        let out = ipam.replace("/srv/t/a", "/srv/t/../../etc");
        assert!(allowed.check_inline("web/n", &out).is_err());
        assert!(allowed.check_inline("web/n", MACVLAN).is_ok(), "no path, nothing to allow");
    }

    /// A macvlan network whose yh-ipam takes `ipam` (beside its type).
    fn yh_ipam_nad(ipam: &str) -> String {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"lan","plugins":[{{"type":"macvlan","master":"eth1",
                "ipam":{{"type":"yh-ipam","pool":"lan"{ipam}}}}}]}}"#
        )
    }

    #[test]
    fn by_default_an_inline_yh_ipam_may_only_name_an_address_pool() {
        let open = policy(json!({"allowInlineConfig": true, "inlinePluginTypes": ["macvlan", "yh-ipam"]}));
        assert!(!open.inline_yh_ipam_ranges);
        // Naming the admin's AddressPool: allowed.
        assert!(open.check_inline("web/lan", &yh_ipam_nad("")).is_ok());
        assert!(open.check_inline("web/lan", &yh_ipam_nad(r#","routes":[{"dst":"10.0.0.0/8"}]"#)).is_ok());
        // Defining a pool: refused, naming the key, the rule and what to do.
        for (ipam, at) in [
            (r#","ranges":[[{"subnet":"10.80.0.0/24"}]]"#, "plugins[0].ipam.ranges"),
            (r#","blockSize":4"#, "plugins[0].ipam.blockSize"),
            (r#","Exclude":["10.80.0.0/30"]"#, "plugins[0].ipam.Exclude"),
        ] {
            let e = open.check_inline("web/lan", &yh_ipam_nad(ipam)).unwrap_err();
            assert_eq!(e.code, 7);
            assert!(
                e.msg.contains(&format!("spec.config {at} defines a yh-ipam pool, and inlineYhIpamRanges is false"))
                    && e.msg.contains("kubectl get addresspools"),
                "{ipam}: {e}"
            );
        }
        // However the IPAM section and its type are spelt, as a Go plugin reads them.
        let go = r#"{"cniVersion":"1.0.0","name":"lan","type":"macvlan","IPAM":{"Type":"yh-ipam","RANGES":[[{"subnet":"10.80.0.0/24"}]]}}"#;
        assert!(open.check_inline("web/lan", go).unwrap_err().msg.contains("spec.config plugins[0].IPAM.RANGES"));
        // Another IPAM's ranges are its own business.
        let host_local = r#"{"cniVersion":"1.0.0","name":"lan","type":"macvlan","ipam":{"type":"host-local","ranges":[[{"subnet":"10.80.0.0/24"}]]}}"#;
        assert!(policy(json!({"allowInlineConfig": true})).check_inline("web/lan", host_local).is_ok());
        // Opened by the admin.
        let ranges = policy(json!({"allowInlineConfig": true, "inlineYhIpamRanges": true}));
        assert!(ranges.check_inline("web/lan", &yh_ipam_nad(r#","ranges":[[{"subnet":"10.80.0.0/24"}]]"#)).is_ok());
    }

    #[test]
    fn by_default_pods_choose_addresses_only_where_a_plugin_declares_ips() {
        let p = AttachmentPolicy::default();
        assert_eq!(p.annotation_ips, AnnotationIps::Declared);
        assert!(!p.annotation_ips.as_multus(true) && !p.annotation_ips.as_multus(false));
    }

    #[test]
    fn annotation_ips_inline_opens_only_inline_configurations() {
        let p = policy(json!({"annotationIps": "inline"}));
        assert!(p.annotation_ips.as_multus(true) && !p.annotation_ips.as_multus(false));
    }

    #[test]
    fn annotation_ips_everywhere_opens_every_network() {
        let p = policy(json!({"annotationIps": "everywhere"}));
        assert!(p.annotation_ips.as_multus(true) && p.annotation_ips.as_multus(false));
    }

    /// A whereabouts NAD naming every host path whereabouts reads, and its node slice size.
    const WHEREABOUTS: &str = r#"{"cniVersion":"0.3.1","name":"wb","type":"macvlan","master":"eth0","mode":"bridge",
        "ipam":{"type":"whereabouts","range":"192.168.2.0/24","node_slice_size":"/22",
            "kubernetes":{"kubeconfig":"/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"},
            "configuration_path":"/etc/cni/net.d/whereabouts.d/whereabouts.conf",
            "log_file":"/var/log/whereabouts/wb.log","log_level":"debug"}}"#;

    /// The whereabouts recipe of docs/selector.md: the two files whereabouts' DaemonSet writes and
    /// a log directory, for whereabouts' own section only.
    fn whereabouts_recipe() -> AttachmentPolicy {
        policy(json!({"allowInlineConfig": true, "inlinePluginTypes": ["macvlan", "whereabouts", "router"],
            "inlinePathPrefixesByType": {"whereabouts": ["/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig",
                "/etc/cni/net.d/whereabouts.d/whereabouts.conf", "/var/log/whereabouts"]}}))
    }

    #[test]
    fn a_whereabouts_configuration_with_its_host_paths_is_accepted_under_the_recipe() {
        let list = whereabouts_recipe().check_inline("web/wb", WHEREABOUTS).unwrap();
        assert_eq!(list.plugins[0]["ipam"]["node_slice_size"], "/22");
    }

    #[test]
    fn a_whereabouts_configuration_with_host_paths_is_refused_by_default() {
        let open = policy(json!({"allowInlineConfig": true}));
        let e = open.check_inline("web/wb", WHEREABOUTS).unwrap_err();
        assert!(
            e.msg.contains("a host path outside inlinePathPrefixes [] and inlinePathPrefixesByType \"whereabouts\" []"),
            "{e}"
        );
        // What whereabouts needs besides its flat file is no path.
        let bare = r#"{"cniVersion":"0.3.1","name":"wb","type":"macvlan","master":"eth0",
            "ipam":{"type":"whereabouts","range":"192.168.2.0/24","node_slice_size":"/22"}}"#;
        assert!(open.check_inline("web/wb", bare).is_ok());
    }

    #[test]
    fn paths_allowed_to_one_type_stay_refused_to_every_other_plugin() {
        let kubeconfig = "/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig";
        let router = format!(
            r#"{{"cniVersion":"1.0.0","name":"n","plugins":[{{"type":"macvlan","master":"eth0"}},
                {{"type":"router","log_options":{{"type":"whereabouts","log_file":"{kubeconfig}"}}}}]}}"#
        );
        let e = whereabouts_recipe().check_inline("web/n", &router).unwrap_err();
        assert!(e.msg.contains("plugins[1].log_options.log_file") && e.msg.contains("\"router\" []"), "{e}");
        let log_over_kubeconfig = WHEREABOUTS.replace("/var/log/whereabouts/wb.log", "/etc/cni/net.d/whereabouts.d/x");
        assert!(whereabouts_recipe().check_inline("web/wb", &log_over_kubeconfig).is_err());
    }

    #[test]
    fn keys_of_the_wrong_type_are_named() {
        for (keys, name) in [
            (json!({"namespaceIsolation": "yes"}), "namespaceIsolation"),
            (json!({"globalNamespaces": 7}), "globalNamespaces"),
            (json!({"globalNamespaces": [7]}), "globalNamespaces"),
            (json!({"allowInlineConfig": 1}), "allowInlineConfig"),
            (json!({"inlinePluginTypes": [1]}), "inlinePluginTypes"),
            (json!({"inlinePathPrefixes": "/x"}), "inlinePathPrefixes"),
            (json!({"inlinePathPrefixes": ["relative"]}), "inlinePathPrefixes"),
            (json!({"inlinePathPrefixes": ["/a/../etc"]}), "inlinePathPrefixes"),
            (json!({"inlinePathPrefixesByType": ["/x"]}), "inlinePathPrefixesByType"),
            (json!({"inlinePathPrefixesByType": {"whereabouts": ["relative"]}}), "inlinePathPrefixesByType"),
            (json!({"annotationIps": "multus"}), "annotationIps"),
            (json!({"annotationIps": true}), "annotationIps"),
        ] {
            let e = AttachmentPolicy::from_keys(keys.as_object().unwrap()).unwrap_err();
            assert!(e.code == 7 && e.msg.contains(name), "{e}");
        }
    }
}
