//! yonghui's own network configuration: where subnet.env and the saved delegate configs live, and
//! the `delegate` and `ipam` sections the delegate is built from. Every shape error is code 7 and
//! names the key, so a bad config is refused before anything is written or run.

use super::NAME;
use crate::platform::cni::{CniError, CniVersion, PluginConf};
use serde_json::{Map, Value};
use std::path::PathBuf;

pub const DEFAULT_SUBNET_FILE: &str = "/run/yonghui/subnet.env";
/// On tmpfs: the saved configurations need not outlive a reboot (the module's comment says why).
pub use crate::node::paths::YONGHUI_DATA_DIR as DEFAULT_DATA_DIR;
/// Where 0.1.0 saved them by default, on disk: DEL and CHECK look there too when `dataDir` is
/// not set, for the pods 0.1.0 ADDed.
pub use crate::node::paths::YONGHUI_EARLIER_DATA_DIR as EARLIER_DEFAULT_DATA_DIR;

/// The configuration ADD works from. DEL and CHECK need only [`data_dir`].
#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    /// The network's name; the delegate gets it too (host-local keys its leases by it).
    pub name: String,
    /// `cniVersion` when it is set (not empty). A missing one is handed on as missing, as the
    /// flannel plugin does: the delegate then reads 0.1.0, as yonghui itself does.
    pub cni_version: Option<CniVersion>,
    /// `subnetFile`: the fabric daemon's subnet.env.
    pub subnet_file: PathBuf,
    /// `dataDir`: where each container's delegate configuration is kept for DEL.
    pub data_dir: PathBuf,
    /// `delegate`: the delegate's configuration as given; it has no `name` or `ipam`, and its
    /// `type`, if any, is a plugin name.
    pub delegate: Map<String, Value>,
    /// `ipam`: the base of the delegate's ipam section (Linux).
    pub ipam: Option<Map<String, Value>>,
    /// `runtimeConfig`: what the runtime passed for the capabilities; handed on to the delegate.
    pub runtime_config: Option<Value>,
}

impl NetConf {
    pub fn from_plugin_conf(conf: &PluginConf) -> Result<Self, CniError> {
        if conf.name.is_empty() {
            return Err(invalid("has no 'name'; the delegate and its IPAM need one"));
        }
        let delegate = object(conf, "delegate")?.unwrap_or_default();
        check_delegate(&delegate)?;
        let ipam = object(conf, "ipam")?;
        if let Some(ipam) = &ipam
            && let Some(t) = ipam.get("type")
            && !matches!(t, Value::String(s) if !s.is_empty())
        {
            return Err(invalid(format!("'ipam.type' must be a plugin name, not {t}")));
        }
        Ok(NetConf {
            name: conf.name.clone(),
            cni_version: conf.declared_version(),
            subnet_file: path(conf, "subnetFile", DEFAULT_SUBNET_FILE)?,
            data_dir: data_dir(conf)?,
            delegate,
            ipam,
            runtime_config: conf.raw.get("runtimeConfig").filter(|v| !v.is_null()).cloned(),
        })
    }

    /// The `type` the user chose for the delegate, if any (checked to be a string).
    pub fn delegate_type(&self) -> Option<&str> {
        self.delegate.get("type").and_then(Value::as_str)
    }
}

/// `dataDir`, or its default. All DEL and CHECK need, so a config that has gone bad since ADD in
/// any other way can still be torn down.
pub fn data_dir(conf: &PluginConf) -> Result<PathBuf, CniError> {
    path(conf, "dataDir", DEFAULT_DATA_DIR)
}

/// Where DEL and CHECK look for a saved configuration, in order: `dataDir`, or without one the
/// default and 0.1.0's default.
pub fn data_dirs(conf: &PluginConf) -> Result<Vec<PathBuf>, CniError> {
    let dir = data_dir(conf)?;
    Ok(match conf.raw.get("dataDir") {
        None | Some(Value::Null) => vec![dir, PathBuf::from(EARLIER_DEFAULT_DATA_DIR)],
        Some(_) => vec![dir],
    })
}

/// The rules flannel has for `delegate`, plus one of our own: yonghui cannot delegate to itself.
fn check_delegate(delegate: &Map<String, Value>) -> Result<(), CniError> {
    if delegate.contains_key("name") {
        return Err(invalid("'delegate' must not have 'name': yonghui sets it to the network's name"));
    }
    if delegate.contains_key("ipam") {
        return Err(invalid(
            "'delegate' must not have 'ipam': yonghui builds it from subnet.env (put a base in the top-level 'ipam')",
        ));
    }
    match delegate.get("type") {
        None => Ok(()),
        Some(Value::String(t)) if t == NAME => {
            Err(invalid("'delegate.type' is \"yonghui\": a yonghui network cannot delegate to yonghui"))
        }
        Some(Value::String(t)) if !t.is_empty() => Ok(()),
        Some(t) => Err(invalid(format!("'delegate.type' must be a plugin name (a non-empty string), not {t}"))),
    }
}

/// An optional JSON object at `key`; `null` counts as absent.
fn object(conf: &PluginConf, key: &str) -> Result<Option<Map<String, Value>>, CniError> {
    match conf.raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m.clone())),
        Some(other) => Err(invalid(format!("'{key}' must be an object, not {other}"))),
    }
}

/// An optional non-empty path string at `key`, else `default`.
fn path(conf: &PluginConf, key: &str, default: &str) -> Result<PathBuf, CniError> {
    match conf.raw.get(key) {
        None | Some(Value::Null) => Ok(PathBuf::from(default)),
        Some(Value::String(s)) if !s.is_empty() => Ok(PathBuf::from(s)),
        Some(other) => Err(invalid(format!("'{key}' must be a non-empty path, not {other}"))),
    }
}

fn invalid(what: impl std::fmt::Display) -> CniError {
    CniError::invalid_config(format!("yonghui configuration: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load(v: Value) -> Result<NetConf, CniError> {
        NetConf::from_plugin_conf(&PluginConf::from_value(v).unwrap())
    }

    #[test]
    fn defaults() {
        let c = load(json!({"cniVersion": "1.0.0", "name": "mynet", "type": "yonghui"})).unwrap();
        assert_eq!(c.subnet_file, PathBuf::from("/run/yonghui/subnet.env"));
        assert_eq!(c.data_dir, PathBuf::from("/run/yh-genie/yonghui"));
        assert!(c.delegate.is_empty() && c.ipam.is_none() && c.runtime_config.is_none());
        assert_eq!(c.delegate_type(), None);
    }

    #[test]
    fn keys_are_read() {
        let c = load(json!({
            "cniVersion": "0.4.0", "name": "n", "type": "yonghui",
            "subnetFile": "/x/subnet.env", "dataDir": "/x/data",
            "delegate": {"type": "ipvlan", "master": "eth0"},
            "ipam": {"type": "host-local", "dataDir": "/x/ipam"},
            "runtimeConfig": {"portMappings": []}
        }))
        .unwrap();
        assert_eq!((c.subnet_file.to_str(), c.data_dir.to_str()), (Some("/x/subnet.env"), Some("/x/data")));
        assert_eq!(c.delegate_type(), Some("ipvlan"));
        assert_eq!(c.ipam.unwrap()["dataDir"], "/x/ipam");
        assert_eq!(c.runtime_config, Some(json!({"portMappings": []})));
        assert_eq!(c.cni_version, Some(CniVersion::V0_4_0));
    }

    #[test]
    fn a_shape_error_is_code_7_naming_the_key() {
        for (extra, want) in [
            (json!({"delegate": {"name": "x"}}), "'delegate' must not have 'name'"),
            (json!({"delegate": {"ipam": {}}}), "'delegate' must not have 'ipam'"),
            (json!({"delegate": {"type": 5}}), "'delegate.type' must be a plugin name"),
            (json!({"delegate": {"type": ""}}), "'delegate.type' must be a plugin name"),
            (json!({"delegate": {"type": "yonghui"}}), "cannot delegate to yonghui"),
            (json!({"delegate": "bridge"}), "'delegate' must be an object"),
            (json!({"ipam": []}), "'ipam' must be an object"),
            (json!({"ipam": {"type": false}}), "'ipam.type' must be a plugin name"),
            (json!({"subnetFile": 1}), "'subnetFile' must be a non-empty path"),
            (json!({"dataDir": ""}), "'dataDir' must be a non-empty path"),
            (json!({"name": ""}), "has no 'name'"),
        ] {
            let mut conf = json!({"cniVersion": "1.0.0", "name": "n", "type": "yonghui"});
            conf.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let e = load(conf).unwrap_err();
            assert_eq!(e.code, 7, "{e}");
            assert!(e.msg.starts_with("yonghui configuration: ") && e.msg.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn del_needs_only_data_dir() {
        let conf = PluginConf::from_value(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "yonghui", "dataDir": "/d", "delegate": {"name": "x"}}),
        )
        .unwrap();
        assert!(NetConf::from_plugin_conf(&conf).is_err());
        assert_eq!(data_dir(&conf).unwrap(), PathBuf::from("/d"));
        assert_eq!(data_dirs(&conf).unwrap(), [PathBuf::from("/d")], "an admin's dataDir is the only place");
        let defaulted = PluginConf::from_value(json!({"cniVersion": "1.0.0", "name": "n", "type": "yonghui"})).unwrap();
        assert_eq!(
            data_dirs(&defaulted).unwrap(),
            [PathBuf::from("/run/yh-genie/yonghui"), PathBuf::from("/var/lib/cni/yonghui")],
            "without one, where 0.1.0 saved by default too"
        );
    }
}
