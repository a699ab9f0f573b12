//! `00-yh-genie.conflist`: the one network configuration the container runtime reads (the `00-`
//! prefix sorts it first in the conf dir, which is how runtimes pick their network). It names the
//! selector and tells it where everything the installer put on the host is.
//!
//! It is read as `--cni-version` (1.0.0 by default) by a runtime whose libcni predates version
//! lists and as 1.1.0 (GC, STATUS) by one that reads `cniVersions` (libcni 1.2 and later take the
//! highest they support). It declares every runtime capability (`programs::selector::netconf::capabilities::DECLARED`),
//! so the runtime hands the selector whatever values it has: hostPorts, bandwidth annotations,
//! DNS, addresses and so on, which go to the plugins of the pod's first network that declare them.

use super::options::Options;
use anyhow::{Context, bail};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

pub const FILE_NAME: &str = "00-yh-genie.conflist";
/// The directory beside the conflist holding the selector's kubeconfig.
pub const STATE_DIR: &str = "yh-genie.d";
pub const KUBECONFIG_NAME: &str = "yh-genie.kubeconfig";

/// The selector's keys the installer derives from its own options. A selector config file may not
/// set them: the values would disagree with where the installer actually put things.
const DERIVED_KEYS: [&str; 7] = ["type", "kubeconfig", "confDir", "dataDir", "binDir", "agentSocket", "capabilities"];

#[derive(Serialize)]
struct ConfList<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    #[serde(rename = "cniVersions")]
    cni_versions: Vec<&'a str>,
    name: &'a str,
    plugins: [SelectorPlugin<'a>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SelectorPlugin<'a> {
    #[serde(rename = "type")]
    plugin_type: &'a str,
    kubeconfig: &'a Path,
    conf_dir: &'a Path,
    data_dir: &'a Path,
    bin_dir: &'a Path,
    /// The agent's socket with `--agent`; empty (the plugin asks no agent) without.
    agent_socket: &'a Path,
    capabilities: BTreeMap<&'a str, bool>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// Further selector keys from `--selector-config`: a JSON object without the derived keys.
pub fn read_selector_config(path: &Path) -> anyhow::Result<Map<String, Value>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading the selector config {}", path.display()))?;
    let value: Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("the selector config {} is not valid JSON", path.display()))?;
    let Value::Object(keys) = value else {
        bail!("the selector config {} must be a JSON object of selector keys", path.display());
    };
    if let Some(key) = DERIVED_KEYS.iter().find(|k| keys.contains_key(**k)) {
        bail!(
            "the selector config {} sets {key:?}, which the installer derives from its flags (see `yh-genie install --help`)",
            path.display()
        );
    }
    Ok(keys)
}

/// The host path of the selector's kubeconfig.
pub fn kubeconfig_path(opts: &Options) -> std::path::PathBuf {
    opts.conf_dir.join(STATE_DIR).join(KUBECONFIG_NAME)
}

/// The conflist bytes: the derived keys, then `extra` (from the selector config) with
/// `--default-network` set over it (and over CNI-Genie's `default_plugin`). Deterministic, so an unchanged setup rewrites nothing.
/// Besides every capability the selector knows, it declares those in `also`: the ones the cluster's
/// network declares when `defaultNetwork` reads it in place, so that the runtime passes their
/// values on to it as it did before the selector came first.
pub fn render(opts: &Options, mut extra: Map<String, Value>, also: &[String]) -> Vec<u8> {
    if let Some(network) = &opts.default_network {
        extra.insert("defaultNetwork".into(), Value::String(network.clone()));
        // CNI-Genie's spelling of the same key would disagree with the flag.
        extra.remove("default_plugin");
    }
    let kubeconfig = kubeconfig_path(opts);
    let latest = crate::platform::cni::CniVersion::LATEST;
    let mut cni_versions = vec![opts.cni_version.as_str()];
    if opts.cni_version < latest {
        cni_versions.push(latest.as_str());
    }
    let doc = ConfList {
        cni_version: opts.cni_version.as_str(),
        cni_versions,
        name: crate::programs::selector::NAME,
        plugins: [SelectorPlugin {
            plugin_type: crate::programs::selector::NAME,
            kubeconfig: &kubeconfig,
            conf_dir: &opts.conf_dir,
            data_dir: &opts.data_dir,
            bin_dir: &opts.bin_dir,
            agent_socket: opts.agent.as_ref().map_or(Path::new(""), |a| &a.socket),
            capabilities: crate::programs::selector::netconf::capabilities::DECLARED
                .into_iter()
                .chain(also.iter().map(String::as_str))
                .map(|c| (c, true))
                .collect(),
            extra,
        }],
    };
    let mut bytes = serde_json::to_vec_pretty(&doc).expect("paths in options are UTF-8 checked strings");
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs::agent::AgentSettings;

    fn with_default_network(name: &str) -> Options {
        Options { default_network: Some(name.into()), ..Options::standard() }
    }

    #[test]
    fn renders_the_spec_shape() {
        let o = with_default_network("yonghui");
        let mut extra = Map::new();
        extra.insert("logLevel".into(), "debug".into());
        let v: Value = serde_json::from_slice(&render(&o, extra, &[])).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "cniVersion": "1.0.0", "cniVersions": ["1.0.0", "1.1.0"], "name": "yh-genie",
                "plugins": [{
                    "type": "yh-genie",
                    "kubeconfig": "/etc/cni/net.d/yh-genie.d/yh-genie.kubeconfig",
                    "confDir": "/etc/cni/net.d",
                    "dataDir": "/var/lib/cni/yh-genie",
                    "binDir": "/opt/cni/bin",
                    "agentSocket": "",
                    "capabilities": {"portMappings": true, "bandwidth": true, "ipRanges": true, "dns": true,
                        "ips": true, "mac": true, "aliases": true, "cgroupPath": true, "infinibandGUID": true,
                        "deviceID": true, "io.kubernetes.cri.pod-annotations": true},
                    "defaultNetwork": "yonghui",
                    "logLevel": "debug"
                }]
            })
        );
        // And it is a conflist the CNI code itself accepts.
        crate::platform::cni::ConfList::parse(&render(&o, Map::new(), &[]), true, "test").unwrap();
        let agent = AgentSettings {
            node_name: "n1".into(),
            socket: "/run/yh-genie/agent.sock".into(),
            metrics_address: "127.0.0.1:9745".parse().unwrap(),
            dynamic_networks: false,
            ipam_records: crate::node::paths::IPAM_RECORDS.into(),
            ipam_reclaim_after: std::time::Duration::from_secs(30),
            ipam_lease_duration: std::time::Duration::from_secs(60),
            ipam_clock_skew: std::time::Duration::from_secs(30),
        };
        let with_agent = Options { agent: Some(agent), ..Options::standard() };
        let v: Value = serde_json::from_slice(&render(&with_agent, Map::new(), &[])).unwrap();
        assert_eq!(v["plugins"][0]["agentSocket"], "/run/yh-genie/agent.sock");
        // Already the newest: no list of one more.
        let v: Value = serde_json::from_slice(&render(
            &Options { cni_version: crate::platform::cni::CniVersion::V1_1_0, ..Options::standard() },
            Map::new(),
            &[],
        ))
        .unwrap();
        assert_eq!(v["cniVersions"], serde_json::json!(["1.1.0"]));
        // A runtime reading version lists runs it as 1.1.0.
        assert_eq!(
            crate::platform::cni::ConfList::parse(&render(&o, Map::new(), &[]), true, "t").unwrap().version_text,
            "1.1.0"
        );
    }

    #[test]
    fn default_network_flag_overrides_the_selector_config() {
        let mut extra = Map::new();
        extra.insert("defaultNetwork".into(), "from-file".into());
        let v: Value = serde_json::from_slice(&render(&with_default_network("flag"), extra.clone(), &[])).unwrap();
        assert_eq!(v["plugins"][0]["defaultNetwork"], "flag");
        let v: Value = serde_json::from_slice(&render(&Options::standard(), extra, &[])).unwrap();
        assert_eq!(v["plugins"][0]["defaultNetwork"], "from-file");
        // CNI-Genie's spelling is kept as the admin wrote it, and goes when the flag decides.
        let mut genie = Map::new();
        genie.insert("default_plugin".into(), "weave,canal".into());
        let v: Value = serde_json::from_slice(&render(&Options::standard(), genie.clone(), &[])).unwrap();
        assert_eq!(v["plugins"][0]["default_plugin"], "weave,canal");
        let v: Value = serde_json::from_slice(&render(&with_default_network("flag"), genie, &[])).unwrap();
        assert_eq!((&v["plugins"][0]["defaultNetwork"], v["plugins"][0].get("default_plugin")), (&"flag".into(), None));
    }

    #[test]
    fn selector_config_must_be_an_object_without_derived_keys() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("selector.json");
        let read = |content: &str| {
            std::fs::write(&p, content).unwrap();
            read_selector_config(&p).map_err(|e| format!("{e:#}"))
        };
        assert_eq!(read(r#"{"defaultNetwork": "yonghui"}"#).unwrap().len(), 1);
        assert!(read("[1]").unwrap_err().contains("must be a JSON object"));
        assert!(read("{").unwrap_err().contains("not valid JSON"));
        assert!(read(r#"{"confDir": "/x"}"#).unwrap_err().contains("\"confDir\""));
    }
}
