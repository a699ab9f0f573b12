//! Network configurations: one plugin's stdin (`PluginConf`) and a loaded `.conf`/`.conflist` (`ConfList`).
//! The raw JSON object is kept whole so keys this crate does not know are passed on unchanged.

use super::error::CniError;
use super::result::CniResult;
use super::version::CniVersion;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::path::Path;

/// What a plugin receives on stdin, parsed just enough to dispatch; `raw` is the whole object.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConf {
    pub raw: Map<String, Value>,
    pub cni_version: CniVersion,
    pub name: String,
    pub plugin_type: String,
}

impl PluginConf {
    /// Parse stdin: JSON object (code 6 if not), `type` string and a supported `cniVersion` (codes 7,
    /// 1); none, or an empty one, is 0.1.0.
    pub fn parse(bytes: &[u8]) -> Result<Self, CniError> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| CniError::decode(format!("network configuration is not valid JSON: {e}")))?;
        Self::from_value(v)
    }

    pub fn from_value(v: Value) -> Result<Self, CniError> {
        let Value::Object(raw) = v else {
            return Err(CniError::decode("network configuration must be a JSON object"));
        };
        let plugin_type = match raw.get("type") {
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            Some(_) => return Err(CniError::invalid_config("network configuration 'type' must be a non-empty string")),
            None => return Err(CniError::invalid_config("network configuration has no 'type'")),
        };
        let declared = match raw.get("cniVersion") {
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => return Err(CniError::invalid_config("network configuration 'cniVersion' must be a string")),
            None => None,
        };
        let cni_version = CniVersion::of_config(declared)?;
        let name = match raw.get("name") {
            Some(Value::String(s)) => s.clone(),
            None => String::new(),
            Some(_) => return Err(CniError::invalid_config("network configuration 'name' must be a string")),
        };
        Ok(PluginConf { raw, cni_version, name, plugin_type })
    }

    /// Deserialize the plugin's own view of the config; errors are code 7 and say what is wrong.
    pub fn typed<T: DeserializeOwned>(&self) -> Result<T, CniError> {
        T::deserialize(&self.raw)
            .map_err(|e| CniError::invalid_config(format!("invalid {} configuration: {e}", self.plugin_type)))
    }

    /// The `cniVersion` as written, when it is a non-empty string: what a meta plugin hands on.
    pub fn declared_version(&self) -> Option<CniVersion> {
        match self.raw.get("cniVersion") {
            Some(Value::String(s)) if !s.is_empty() => Some(self.cni_version),
            _ => None,
        }
    }

    /// `prevResult`, parsed (any version; one without `cniVersion` is in the config's), if present
    /// and not null.
    pub fn prev_result(&self) -> Result<Option<CniResult>, CniError> {
        match self.raw.get("prevResult") {
            None | Some(Value::Null) => Ok(None),
            Some(v) => CniResult::from_json(v, self.cni_version).map(Some).map_err(|e| e.context("prevResult")),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.raw).expect("a JSON map always serializes")
    }
}

/// The version of a configuration's bytes, read leniently (for reading a plugin's answer to it):
/// none or empty is 0.1.0; what cannot be read is taken as the newest.
pub fn version_of(config: &[u8]) -> CniVersion {
    let declared = match serde_json::from_slice::<Value>(config) {
        Ok(Value::Object(m)) => match m.get("cniVersion") {
            None => Some(CniVersion::V0_1_0),
            Some(Value::String(s)) => CniVersion::of_config(Some(s)).ok(),
            Some(_) => None,
        },
        _ => None,
    };
    declared.unwrap_or(CniVersion::LATEST)
}

/// A network: a `.conflist` chain, or a `.conf` single plugin seen as a chain of one.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfList {
    pub cni_version: CniVersion,
    /// `cniVersion` as written, empty when absent: what libcni injects into every plugin's stdin.
    pub version_text: String,
    pub name: String,
    pub disable_check: bool,
    /// `disableGC` (1.1.0): the runtime does not GC this network.
    pub disable_gc: bool,
    pub plugins: Vec<Map<String, Value>>,
}

impl ConfList {
    /// Parse a file's bytes; `is_list` picks the conflist shape (by extension, as libcni does).
    pub fn parse(bytes: &[u8], is_list: bool, origin: &str) -> Result<Self, CniError> {
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| CniError::invalid_config(format!("{origin}: not valid JSON: {e}")))?;
        let Value::Object(obj) = v else {
            return Err(CniError::invalid_config(format!("{origin}: must be a JSON object")));
        };
        let str_field = |k: &str| match obj.get(k) {
            Some(Value::String(s)) => Ok(s.clone()),
            None => Ok(String::new()),
            Some(_) => Err(CniError::invalid_config(format!("{origin}: '{k}' must be a string"))),
        };
        let name = str_field("name")?;
        let version_text = match obj.get("cniVersions") {
            None | Some(Value::Null) => str_field("cniVersion")?,
            Some(listed) => highest_listed(&str_field("cniVersion")?, listed).map_err(|e| e.context(origin))?,
        };
        let cni_version = CniVersion::of_config(Some(&version_text)).map_err(|e| e.context(origin))?;
        let plugins = if is_list || obj.contains_key("plugins") {
            let Some(Value::Array(list)) = obj.get("plugins") else {
                return Err(CniError::invalid_config(format!("{origin}: a conflist needs a 'plugins' array")));
            };
            if list.is_empty() {
                return Err(CniError::invalid_config(format!("{origin}: 'plugins' is empty")));
            }
            list.iter()
                .enumerate()
                .map(|(i, p)| match p {
                    Value::Object(m) => Ok(m.clone()),
                    _ => Err(CniError::invalid_config(format!("{origin}: plugins[{i}] must be a JSON object"))),
                })
                .collect::<Result<Vec<_>, _>>()?
        } else {
            vec![obj.clone()]
        };
        for (i, p) in plugins.iter().enumerate() {
            if !matches!(p.get("type"), Some(Value::String(t)) if !t.is_empty()) {
                return Err(CniError::invalid_config(format!("{origin}: plugins[{i}] has no string 'type'")));
            }
        }
        if name.is_empty() {
            return Err(CniError::invalid_config(format!("{origin}: no 'name'")));
        }
        let disable_check = obj.get("disableCheck").and_then(Value::as_bool).unwrap_or(false);
        let disable_gc = obj.get("disableGC").and_then(Value::as_bool).unwrap_or(false);
        Ok(ConfList { cni_version, version_text, name, disable_check, disable_gc, plugins })
    }

    /// Parse the bytes of the file at `path`, in the shape its name gives it: `.conflist` is a chain.
    pub fn parse_file(bytes: &[u8], path: &Path) -> Result<Self, CniError> {
        let is_list = path.extension().is_some_and(|e| e == "conflist");
        Self::parse(bytes, is_list, &path.display().to_string())
    }

    pub fn load(path: &Path) -> Result<Self, CniError> {
        let bytes = std::fs::read(path)
            .map_err(|e| CniError::io(format!("cannot read network configuration {}: {e}", path.display())))?;
        Self::parse_file(&bytes, path)
    }

    /// Stdin for plugin `index`: its own keys plus the list's `name` and `cniVersion` as written
    /// (empty when the list has none), and `prevResult` in the list's version when there is one
    /// (libcni's `buildOneConfig`). Fails only when `prev` cannot be written in a 0.1.0/0.2.0 list.
    pub fn plugin_stdin(&self, index: usize, prev: Option<&CniResult>) -> Result<Vec<u8>, CniError> {
        let mut m = self.plugins[index].clone();
        m.insert("name".into(), self.name.clone().into());
        m.insert("cniVersion".into(), self.version_text.clone().into());
        match prev {
            Some(r) => {
                m.insert("prevResult".into(), r.to_json(self.cni_version).map_err(|e| e.context("prevResult"))?);
            }
            None => {
                m.remove("prevResult");
            }
        }
        Ok(serde_json::to_vec(&m).expect("a JSON map always serializes"))
    }

    pub fn plugin_type(&self, index: usize) -> &str {
        self.plugins[index].get("type").and_then(Value::as_str).unwrap_or_default()
    }
}

/// The version a list with `cniVersions` runs at, as libcni 1.2 and later choose it: the highest of
/// `cniVersions` and `cniVersion` that this crate speaks. Versions above the newest it speaks are
/// skipped (a newer spec's); anything that is no version at all is code 7.
fn highest_listed(declared: &str, listed: &Value) -> Result<String, CniError> {
    let bad = |msg: String| CniError::invalid_config(format!("'cniVersions' {msg}"));
    let Value::Array(items) = listed else {
        return Err(bad(format!("must be a list of versions, not {listed}")));
    };
    let mut best: Option<CniVersion> = None;
    let candidates = items.iter().map(Some).chain(std::iter::once(None));
    for item in candidates {
        let text = match item {
            Some(Value::String(v)) => v.as_str(),
            Some(other) => return Err(bad(format!("must be a list of versions, not one holding {other}"))),
            None if declared.is_empty() => continue,
            None => declared,
        };
        match CniVersion::parse(text) {
            Ok(v) => best = best.max(Some(v)),
            Err(_) if is_newer_version(text) => {}
            Err(_) => return Err(bad(format!("holds {text:?}, which is not a CNI version"))),
        }
    }
    Ok(best.map_or_else(|| declared.to_string(), |v| v.as_str().to_string()))
}

/// `major.minor.patch` above the newest version this crate speaks.
fn is_newer_version(text: &str) -> bool {
    let parts: Option<Vec<u64>> = text.split('.').map(|p| p.parse().ok()).collect();
    let latest: Vec<u64> = CniVersion::LATEST.as_str().split('.').map(|p| p.parse().unwrap_or(0)).collect();
    parts.is_some_and(|p| p.len() == 3 && p > latest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plugin_conf_keeps_unknown_keys() {
        let c =
            PluginConf::parse(br#"{"cniVersion":"0.3.1","name":"n","type":"yonghui","futureKey":{"a":1}}"#).unwrap();
        assert_eq!(c.cni_version, CniVersion::V0_3_1);
        assert_eq!(c.raw["futureKey"], json!({"a":1}));
    }

    #[test]
    fn a_malformed_plugin_conf_is_refused_with_its_cni_error_code() {
        assert_eq!(PluginConf::parse(b"[1]").unwrap_err().code, 6);
        assert_eq!(PluginConf::parse(b"{nope").unwrap_err().code, 6);
        assert_eq!(PluginConf::parse(br#"{"cniVersion":"1.0.0","type":5}"#).unwrap_err().code, 7);
        assert_eq!(PluginConf::parse(br#"{"cniVersion":"9.9.9","type":"x"}"#).unwrap_err().code, 1);
    }

    #[test]
    fn version_of_bytes_is_lenient() {
        assert_eq!(version_of(br#"{"type":"x"}"#), CniVersion::V0_1_0);
        assert_eq!(version_of(br#"{"cniVersion":"0.2.0"}"#), CniVersion::V0_2_0);
        for unreadable in [&b"{"[..], br#"{"cniVersion":"9"}"#, br#"{"cniVersion":1}"#, b"[]"] {
            assert_eq!(version_of(unreadable), CniVersion::LATEST);
        }
    }

    #[test]
    fn a_missing_or_empty_version_reads_as_an_undeclared_0_1_0() {
        for conf in [&br#"{"type":"x"}"#[..], br#"{"cniVersion":"","type":"x"}"#] {
            let c = PluginConf::parse(conf).unwrap();
            assert_eq!((c.cni_version, c.declared_version()), (CniVersion::V0_1_0, None));
        }
        let c = PluginConf::parse(br#"{"cniVersion":"0.1.0","type":"x"}"#).unwrap();
        assert_eq!(c.declared_version(), Some(CniVersion::V0_1_0));
    }

    #[test]
    fn a_version_that_is_not_a_string_is_invalid_config() {
        assert_eq!(PluginConf::parse(br#"{"cniVersion":2,"type":"x"}"#).unwrap_err().code, 7);
    }

    #[test]
    fn a_list_without_a_version_hands_its_plugins_an_empty_one_as_libcni_does() {
        let list = ConfList::parse(br#"{"name":"old","plugins":[{"type":"a"},{"type":"b"}]}"#, true, "x").unwrap();
        assert_eq!((list.cni_version, list.version_text.as_str()), (CniVersion::V0_1_0, ""));
        let prev = CniResult::from_json(&json!({"ip4":{"ip":"10.0.0.2/24"}}), CniVersion::V0_1_0).unwrap();
        let stdin: Value = serde_json::from_slice(&list.plugin_stdin(1, Some(&prev)).unwrap()).unwrap();
        assert_eq!(stdin["cniVersion"], "");
        assert_eq!(stdin["prevResult"], json!({"cniVersion":"0.1.0","ip4":{"ip":"10.0.0.2/24"},"dns":{}}));
        let conf = PluginConf::parse(&list.plugin_stdin(1, Some(&prev)).unwrap()).unwrap();
        assert_eq!(conf.prev_result().unwrap().unwrap(), prev);
        // Nothing to say in 0.2.0 without an address: the chain learns why.
        let e = list.plugin_stdin(1, Some(&CniResult::default())).unwrap_err();
        assert_eq!(e.code, 1);
        assert!(e.msg.starts_with("prevResult: "), "{e}");
    }

    #[test]
    fn a_single_conf_is_a_list_of_one_plugin() {
        let single =
            ConfList::parse(br#"{"cniVersion":"0.4.0","name":"a","type":"bridge","bridge":"b0"}"#, false, "a.conf")
                .unwrap();
        assert_eq!(single.plugins.len(), 1);
        assert_eq!(single.plugin_type(0), "bridge");
    }

    #[test]
    fn a_conflist_plugin_gets_the_lists_version_with_its_name_on_stdin() {
        let list = ConfList::parse(
            br#"{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"macvlan"},{"type":"veth","x":1}]}"#,
            true,
            "b.conflist",
        )
        .unwrap();
        assert_eq!(list.plugins.len(), 2);
        let stdin: Value = serde_json::from_slice(&list.plugin_stdin(1, None).unwrap()).unwrap();
        assert_eq!(stdin, json!({"cniVersion":"1.0.0","name":"b","type":"veth","x":1}));
    }

    #[test]
    fn a_version_list_runs_at_its_highest_version_spoken_here_as_libcni_reads_it() {
        let version = |json: &str| ConfList::parse(json.as_bytes(), true, "x").map(|l| l.version_text);
        let list = |versions: &str| {
            format!(r#"{{"cniVersion":"1.0.0","cniVersions":{versions},"name":"n","plugins":[{{"type":"a"}}]}}"#)
        };
        assert_eq!(version(&list(r#"["1.0.0","1.1.0"]"#)).unwrap(), "1.1.0");
        assert_eq!(version(&list(r#"["0.4.0","1.3.0"]"#)).unwrap(), "1.0.0", "a newer spec's version is skipped");
        assert_eq!(version(&list("[]")).unwrap(), "1.0.0");
        let parsed = ConfList::parse(list(r#"["1.1.0"]"#).as_bytes(), true, "x").unwrap();
        assert_eq!(parsed.cni_version, CniVersion::V1_1_0);
        let stdin: Value = serde_json::from_slice(&parsed.plugin_stdin(0, None).unwrap()).unwrap();
        assert_eq!(stdin["cniVersion"], "1.1.0");
        for bad in [r#""1.1.0""#, "[1]", r#"["one"]"#] {
            let e = version(&list(bad)).unwrap_err();
            assert!(e.code == 7 && e.msg.contains("cniVersions"), "{bad}: {e}");
        }
    }

    #[test]
    fn conflist_errors_name_the_file() {
        for (bytes, want) in [
            (&br#"{"cniVersion":"1.0.0","name":"b","plugins":[]}"#[..], "empty"),
            (br#"{"cniVersion":"1.0.0","name":"b","plugins":[{"x":1}]}"#, "plugins[0]"),
            (br#"{"cniVersion":"1.0.0","plugins":[{"type":"x"}]}"#, "no 'name'"),
            (br#"not json"#, "not valid JSON"),
        ] {
            let e = ConfList::parse(bytes, true, "/etc/cni/net.d/x/y.conflist").unwrap_err();
            assert_eq!(e.code, 7);
            assert!(e.msg.contains("/etc/cni/net.d/x/y.conflist") && e.msg.contains(want), "{e}");
        }
    }

    #[test]
    fn prev_result_in_list_version() {
        let list =
            ConfList::parse(br#"{"cniVersion":"0.3.1","name":"b","plugins":[{"type":"a"},{"type":"b"}]}"#, true, "x")
                .unwrap();
        let prev = CniResult::from_json(&json!({"ips":[{"address":"10.0.0.2/24"}]}), CniVersion::V0_3_1).unwrap();
        let stdin: Value = serde_json::from_slice(&list.plugin_stdin(1, Some(&prev)).unwrap()).unwrap();
        assert_eq!(stdin["prevResult"]["cniVersion"], "0.3.1");
        assert_eq!(stdin["prevResult"]["ips"][0]["version"], "4");
        let conf = PluginConf::parse(&list.plugin_stdin(1, Some(&prev)).unwrap()).unwrap();
        assert_eq!(conf.prev_result().unwrap().unwrap().ips.len(), 1);
    }
}
