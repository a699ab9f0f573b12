//! The selector's own configuration: the `yh-genie` entry of `00-yh-genie.conflist`.

pub mod defaults;
pub mod policy;

use crate::platform::cni::{CniError, ConfList, PluginConf};
use crate::platform::kube::ApiPolicy;
use crate::programs::selector::name::NAME;
use defaults::PodDefaults;
use policy::AttachmentPolicy;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::node::paths::{
    BIN_DIR as DEFAULT_BIN_DIR, CONF_DIR as DEFAULT_CONF_DIR, CONFLIST as DEFAULT_CONFIG_FILE,
    DATA_DIR as DEFAULT_DATA_DIR, MULTUS_DIR as DEFAULT_MULTUS_DIR,
};

/// Longest API budget accepted: beyond it the runtime's own timeouts fire first anyway.
const MAX_API_SECONDS: f64 = 600.0;

#[derive(Debug, Clone, PartialEq)]
pub struct SelectorConfig {
    /// How to reach the API server; `None`: Kubernetes is not consulted and every container gets
    /// `default_network`.
    pub kubeconfig: Option<PathBuf>,
    /// Where network directories live (`<conf_dir>/<network>/*.conflist`).
    pub conf_dir: PathBuf,
    /// Where attachment records live.
    pub data_dir: PathBuf,
    /// Searched for external plugins before `CNI_PATH`.
    pub bin_dir: PathBuf,
    /// The network of pods that choose none, in any form a pod may use.
    pub default_network: Option<String>,
    /// Time budget for the API work of one ADD.
    pub api: ApiPolicy,
    /// Which NetworkAttachmentDefinitions pods may use and what they may ask of them
    /// (`namespaceIsolation`, `globalNamespaces`, `allowInlineConfig`, `inlinePluginTypes`,
    /// `inlinePathPrefixes`, `inlinePathPrefixesByType`, `inlineYhIpamRanges`, `annotationIps`).
    pub policy: AttachmentPolicy,
    /// `networkStatus`: when ADD writes the pod's `k8s.v1.cni.cncf.io/network-status` annotation.
    pub network_status: NetworkStatus,
    /// `agentSocket`: where the node agent answers (`None`, from an empty value: ask no agent).
    pub agent_socket: Option<PathBuf>,
    /// Whether `default_network` came from CNI-Genie's `default_plugin` key: its further networks
    /// are then named as Genie names them (`eth1`, `eth2`...).
    pub genie_default: bool,
    /// `defaultNetworks`, `systemNamespaces`, `multusNamespace` (Multus's keys).
    pub defaults: PodDefaults,
    /// `readinessindicatorfile` (Multus's key): ADD and STATUS fail while this file is missing.
    pub readiness_indicator_file: Option<PathBuf>,
    /// `addedInterfaceEvents`: whether the node agent creates an `AddedInterface` event per
    /// interface after an ADD it gave the selection for (as Multus does; default on).
    pub added_interface_events: bool,
    /// The runtime's capability arguments (the selector's `runtimeConfig`), for the plugins of the
    /// pod's first network that declare them (`capabilities`).
    pub capability_args: Map<String, Value>,
    /// `cniDir` (Multus's key): where Multus keeps the delegates of the pods it attached, which
    /// DEL reads for a pod that has no record here (`None`, from an empty value: never read).
    pub multus_dir: Option<PathBuf>,
    /// `podResourcesSocket`: the kubelet's PodResources API, asked for the devices of a pod whose
    /// networks include a device network (a NetworkAttachmentDefinition with a `resourceName`).
    pub pod_resources_socket: PathBuf,
    /// `deviceInfoDir`: where device plugins and device CNIs keep device-info files.
    pub device_info_dir: PathBuf,
    /// `dynamicNetworks`: whether the node agent attaches and detaches the networks a running pod's
    /// `k8s.v1.cni.cncf.io/networks` annotation gains and loses (docs/dynamic-networks.md; off by
    /// default).
    pub dynamic_networks: bool,
}

/// When to write the `network-status` annotation after a successful ADD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NetworkStatus {
    /// For pods with more than one network, or that use the `k8s.v1.cni.cncf.io/networks`
    /// annotation (tools that read the status look there): a pod with one network makes no request
    /// more than it always did.
    #[default]
    Auto,
    /// For every pod looked up in the API server.
    Always,
    /// Never.
    Never,
}

impl SelectorConfig {
    /// Read the keys from the plugin's stdin; unknown keys are ignored (they belong to the list or
    /// to newer versions). A key of the wrong type is code 7 naming the key.
    pub fn from_plugin_conf(conf: &PluginConf) -> Result<Self, CniError> {
        let non_empty = |p: Option<PathBuf>| p.filter(|p| !p.as_os_str().is_empty());
        let top = non_empty(key(&conf.raw, "kubeconfig")?);
        let nested = match key::<Map<String, Value>>(&conf.raw, "kubernetes")? {
            Some(section) => non_empty(key(&section, "kubeconfig").map_err(|e| e.context("kubernetes"))?),
            None => None,
        };
        let kubeconfig = match (top, nested) {
            (Some(a), Some(b)) if a != b => {
                return Err(CniError::invalid_config(format!(
                    "yh-genie: 'kubeconfig' ({}) and 'kubernetes.kubeconfig' ({}) disagree; set one",
                    a.display(),
                    b.display()
                )));
            }
            (a, b) => a.or(b),
        };
        let dir = |p: Option<PathBuf>, default: &str| non_empty(p).unwrap_or_else(|| PathBuf::from(default));
        let budget = seconds_key(&conf.raw, "apiTimeoutSeconds", ApiPolicy::DEFAULT_BUDGET)?;
        let attempt = seconds_key(&conf.raw, "apiAttemptTimeoutSeconds", ApiPolicy::DEFAULT_ATTEMPT_TIMEOUT)?;
        let default_network = key::<String>(&conf.raw, "defaultNetwork")?.filter(|n| !n.trim().is_empty());
        let default_plugin = key::<String>(&conf.raw, "default_plugin")?.filter(|n| !n.trim().is_empty());
        let genie_default = default_network.is_none() && default_plugin.is_some();
        if let (Some(a), Some(b)) = (&default_network, &default_plugin)
            && a.trim() != b.trim()
        {
            return Err(CniError::invalid_config(format!(
                "yh-genie: 'defaultNetwork' ({a:?}) and CNI-Genie's 'default_plugin' ({b:?}) disagree; set one"
            )));
        }
        Ok(SelectorConfig {
            kubeconfig,
            conf_dir: dir(key(&conf.raw, "confDir")?, DEFAULT_CONF_DIR),
            data_dir: dir(key(&conf.raw, "dataDir")?, DEFAULT_DATA_DIR),
            bin_dir: dir(key(&conf.raw, "binDir")?, DEFAULT_BIN_DIR),
            default_network: default_network.or(default_plugin),
            genie_default,
            defaults: PodDefaults::from_keys(&conf.raw)?,
            readiness_indicator_file: non_empty(key(&conf.raw, "readinessindicatorfile")?),
            added_interface_events: key(&conf.raw, "addedInterfaceEvents")?.unwrap_or(true),
            dynamic_networks: key(&conf.raw, "dynamicNetworks")?.unwrap_or(false),
            api: ApiPolicy::retrying(budget, attempt.min(budget)),
            policy: AttachmentPolicy::from_keys(&conf.raw)?,
            network_status: key(&conf.raw, "networkStatus")?.unwrap_or_default(),
            agent_socket: match key::<PathBuf>(&conf.raw, "agentSocket")? {
                None => Some(PathBuf::from(crate::node::paths::AGENT_SOCKET)),
                Some(path) => non_empty(Some(path)),
            },
            capability_args: crate::programs::selector::netconf::capabilities::runtime_args(conf)?,
            multus_dir: match key::<PathBuf>(&conf.raw, "cniDir")? {
                None => Some(PathBuf::from(DEFAULT_MULTUS_DIR)),
                Some(path) => non_empty(Some(path)),
            },
            pod_resources_socket: dir(
                key(&conf.raw, "podResourcesSocket")?,
                crate::programs::selector::devices::podresources::DEFAULT_SOCKET,
            ),
            device_info_dir: dir(
                key(&conf.raw, "deviceInfoDir")?,
                crate::programs::selector::devices::handoff::DEVICE_INFO_DIR,
            ),
        })
    }

    /// Read the selector's configuration from its file (`.conflist` or `.conf`), as the runtime
    /// would hand it over: the first plugin of type `yh-genie`.
    pub fn load_file(path: &Path) -> Result<Self, CniError> {
        let list = ConfList::load(path)?;
        let index = (0..list.plugins.len())
            .find(|&i| list.plugin_type(i) == NAME)
            .ok_or_else(|| CniError::invalid_config(format!("{}: no plugin of type {}", path.display(), NAME)))?;
        let conf = PluginConf::parse(&list.plugin_stdin(index, None)?)?;
        Self::from_plugin_conf(&conf).map_err(|e| e.context(path.display()))
    }
}

/// The value of `name` in `map`, if present and not null; a wrong type is code 7 naming the key.
fn key<T: DeserializeOwned>(map: &Map<String, Value>, name: &str) -> Result<Option<T>, CniError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => T::deserialize(v)
            .map(Some)
            .map_err(|e| CniError::invalid_config(format!("yh-genie: '{name}' is invalid: {e}"))),
    }
}

fn seconds_key(map: &Map<String, Value>, name: &str, default: Duration) -> Result<Duration, CniError> {
    match key::<f64>(map, name)? {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s <= MAX_API_SECONDS => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(CniError::invalid_config(format!(
            "yh-genie: '{name}' is {s}; it must be a number of seconds above 0 and at most {MAX_API_SECONDS}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<SelectorConfig, CniError> {
        SelectorConfig::from_plugin_conf(&PluginConf::parse(json.as_bytes()).unwrap())
    }

    #[test]
    fn defaults_need_nothing() {
        let c = parse(r#"{"cniVersion":"1.0.0","name":"yh-genie","type":"yh-genie"}"#).unwrap();
        assert_eq!(c.kubeconfig, None);
        assert_eq!(c.conf_dir, Path::new("/etc/cni/net.d"));
        assert_eq!(c.data_dir, Path::new("/var/lib/cni/yh-genie"));
        assert_eq!(c.bin_dir, Path::new("/opt/cni/bin"));
        assert_eq!(c.default_network, None);
        assert_eq!(c.api, ApiPolicy::default());
        assert_eq!(c.policy, AttachmentPolicy::default());
        assert_eq!(c.network_status, NetworkStatus::Auto);
        assert_eq!(c.agent_socket.as_deref(), Some(Path::new("/run/yh-genie/agent.sock")));
        assert_eq!(c.multus_dir.as_deref(), Some(Path::new("/var/lib/cni/multus")));
        let c = parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","cniDir":""}"#).unwrap();
        assert_eq!(c.multus_dir, None);
    }

    #[test]
    fn an_empty_agent_socket_asks_no_agent() {
        let c = parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","agentSocket":""}"#).unwrap();
        assert_eq!(c.agent_socket, None);
        let c = parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","agentSocket":"/run/a.sock"}"#).unwrap();
        assert_eq!(c.agent_socket.as_deref(), Some(Path::new("/run/a.sock")));
        assert_eq!(parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","agentSocket":1}"#).unwrap_err().code, 7);
    }

    #[test]
    fn network_status_takes_only_the_values_it_knows() {
        let c = parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","networkStatus":"never","allowInlineConfig":true}"#)
            .unwrap();
        assert_eq!(c.network_status, NetworkStatus::Never);
        let e = parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","networkStatus":"sometimes"}"#).unwrap_err();
        assert!(e.msg.contains("networkStatus"), "{e}");
    }

    #[test]
    fn policy_keys_are_read_from_the_selectors_configuration() {
        let c = parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","networkStatus":"never","allowInlineConfig":true}"#)
            .unwrap();
        assert!(c.policy.allow_inline_config);
    }

    #[test]
    fn the_selectors_keys_are_read_among_keys_it_does_not_know() {
        let c = parse(
            r#"{"cniVersion":"1.0.0","name":"n","type":"yh-genie","kubernetes":{"kubeconfig":"/k"},
                "confDir":"/c","dataDir":"/d","binDir":"/b","defaultNetwork":"yonghui",
                "apiTimeoutSeconds":2.5,"apiAttemptTimeoutSeconds":0.5,"logLevel":"debug"}"#,
        )
        .unwrap();
        assert_eq!(c.kubeconfig.as_deref(), Some(Path::new("/k")));
        assert_eq!(
            (c.conf_dir.to_str(), c.data_dir.to_str(), c.bin_dir.to_str()),
            (Some("/c"), Some("/d"), Some("/b"))
        );
        assert_eq!(c.default_network.as_deref(), Some("yonghui"));
        assert_eq!(c.api, ApiPolicy::retrying(Duration::from_millis(2500), Duration::from_millis(500)));
    }

    #[test]
    fn genies_default_plugin_is_the_default_network_unless_they_disagree() {
        let c = parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","default_plugin":"weave,canal"}"#).unwrap();
        assert_eq!((c.default_network.as_deref(), c.genie_default), (Some("weave,canal"), true));
        let c = parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","defaultNetwork":"a","default_plugin":"a"}"#).unwrap();
        assert_eq!((c.default_network.as_deref(), c.genie_default), (Some("a"), false));
        let e =
            parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","defaultNetwork":"a","default_plugin":"b"}"#).unwrap_err();
        assert!(e.code == 7 && e.msg.contains("default_plugin") && e.msg.contains("disagree"), "{e}");
    }

    #[test]
    fn multus_keys_are_read_with_their_defaults() {
        let c = parse(
            r#"{"cniVersion":"1.0.0","type":"yh-genie","readinessindicatorfile":"/run/ready",
                          "defaultNetworks":["lan"],"systemNamespaces":[]}"#,
        )
        .unwrap();
        assert_eq!(c.readiness_indicator_file.as_deref(), Some(Path::new("/run/ready")));
        assert_eq!(c.defaults.default_networks[0].name, "lan");
        assert!(!c.defaults.is_system("kube-system"));
        assert_eq!(parse(r#"{"cniVersion":"1.0.0","type":"yh-genie"}"#).unwrap().defaults, PodDefaults::default());
    }

    #[test]
    fn attempt_timeout_never_exceeds_the_budget() {
        let c = parse(r#"{"cniVersion":"1.0.0","type":"yh-genie","apiTimeoutSeconds":1}"#).unwrap();
        assert_eq!(c.api.attempt_timeout, Duration::from_secs(1));
    }

    #[test]
    fn bad_values_are_code_7_naming_the_key() {
        for (json, key) in [
            (r#""apiTimeoutSeconds":0"#, "apiTimeoutSeconds"),
            (r#""apiAttemptTimeoutSeconds":-1"#, "apiAttemptTimeoutSeconds"),
            (r#""apiTimeoutSeconds":"10""#, "apiTimeoutSeconds"),
            (r#""kubeconfig":"/a","kubernetes":{"kubeconfig":"/b"}"#, "kubernetes.kubeconfig"),
            (r#""confDir":5"#, "confDir"),
        ] {
            let e = parse(&format!(r#"{{"cniVersion":"1.0.0","type":"yh-genie",{json}}}"#)).unwrap_err();
            assert_eq!(e.code, 7, "{json}");
            assert!(e.msg.contains(key), "{json}: {e}");
        }
    }
}
