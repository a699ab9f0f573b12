//! What an inline configuration (a NetworkAttachmentDefinition's `spec.config`, written by a pod
//! author) may hold, read the way the plugins that run it read it.
//!
//! - **Plugin types.** Go plugins decode JSON keys without regard to case (`"Type"`, `"TYPE"` and
//!   `"type"` are one key to them), so every key that folds to `type`, at any depth, names a plugin
//!   that may run (`plugin_types`). Types a plugin runs without being told count too: yonghui's
//!   delegate is `yh-bridge` and its IPAM `host-local` unless the configuration says otherwise, the
//!   flannel plugin's `bridge` and `host-local` (`implied_types`).
//! - **Host paths.** An option that names a file or directory of the node (host-local's `dataDir`
//!   and `resolvConf`, yonghui's `subnetFile` and `dataDir`, the dhcp plugin's `daemonSocketPath`,
//!   the router's `data_dir` and `log_file`, whereabouts' `kubernetes.kubeconfig`, ...) would let
//!   the pod author read or write where the plugin may. Every string under a key that reads as a
//!   path (`is_path_key`), and every string anywhere that is an absolute path but a prefix length
//!   (whereabouts' `node_slice_size: "/22"`), must lie under a prefix the admin allows: for every
//!   plugin (`inlinePathPrefixes`), or for the plugin whose section holds it
//!   (`inlinePathPrefixesByType`: a plugin's object, or an `ipam` or `delegate` section it runs);
//!   none by default.
//!
//! - **yh-ipam's pools.** A `yh-ipam` that gives its own ranges hands out whatever addresses its
//!   writer chose, across the cluster; one that names an `AddressPool` (no ranges) hands out only a
//!   pool the admin defined. `yh_ipam_pool_keys` finds the keys that define a pool in a plugin that
//!   runs `yh-ipam`, for the policy (`inlineYhIpamRanges`).
//!
//! And the name an inline configuration takes when it has none (`named_after_nad`), as Multus
//! reads a NetworkAttachmentDefinition: the plugins need a network name, and NADs written for
//! Multus mostly leave it to the NAD's.

use crate::platform::cni::{CniError, ConfList};
use serde_json::{Map, Value};
use std::path::{Component, Path, PathBuf};

/// A NetworkAttachmentDefinition's inline configuration as its plugins get it: with the NAD's name
/// (`metadata.name`, without the namespace) as its `name` when the top level has none or an empty
/// one, as the Network Plumbing WG's client library hands a NAD's configuration to Multus. Only the
/// top level: a plugin's own `name` in a list is left as written. Any other configuration (a
/// name given, not a JSON object) is returned as it is, to be checked as written.
pub fn named_after_nad(config: &str, nad_name: &str) -> String {
    let Ok(Value::Object(mut top)) = serde_json::from_str::<Value>(config) else {
        return config.to_string();
    };
    match top.get("name") {
        None => {}
        Some(Value::String(name)) if name.is_empty() => {}
        Some(_) => return config.to_string(),
    }
    top.insert("name".into(), Value::String(nad_name.to_string()));
    Value::Object(top).to_string()
}

/// `key` as Go's `encoding/json` compares keys: two keys are the same field when their folds are
/// equal (ASCII letters in upper case; any other character `unicode.ToUpper(unicode.ToLower(c))`,
/// so the Kelvin sign is `K`, a long s `S`, and a dotted capital I and a dotless i are `I`). Go's
/// mappings are Unicode's simple (one character to one) case mappings, which is what `simple`
/// makes of Rust's full ones.
pub fn go_fold(key: &str) -> String {
    /// The simple mapping from a full one: a character's full lowercase has more than one
    /// character only for the dotted capital I, whose simple lowercase is its first (`i`); a full
    /// uppercase of several characters (`ß` to `SS`) has no simple counterpart, so Go leaves it.
    fn simple(c: char, full: impl Iterator<Item = char>, first_of_several: bool) -> char {
        let full: Vec<char> = full.collect();
        match full[..] {
            [one] => one,
            [first, ..] if first_of_several => first,
            _ => c,
        }
    }
    key.chars()
        .map(|c| {
            if c.is_ascii() {
                c.to_ascii_uppercase()
            } else {
                let lower = simple(c, c.to_lowercase(), true);
                simple(lower, lower.to_uppercase(), false)
            }
        })
        .collect()
}

/// Whether a Go plugin reads `key` as its `type` field.
pub fn is_type_key(key: &str) -> bool {
    go_fold(key) == "TYPE"
}

/// Every plugin type a chain names, with where: each plugin's `type`, and every key a Go plugin
/// would read as `type` nested in it (`plugins[0].ipam.type`, `plugins[0].delegate.Type`), since
/// meta plugins and IPAM run those too. Not descended into: the value of such a key.
pub fn plugin_types(list: &ConfList) -> Vec<(String, String)> {
    fn walk(value: &Value, at: String, out: &mut Vec<(String, String)>) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    match v {
                        Value::String(t) if is_type_key(key) => out.push((format!("{at}.{key}"), t.clone())),
                        _ => walk(v, format!("{at}.{key}"), out),
                    }
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, format!("{at}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (i, plugin) in list.plugins.iter().enumerate() {
        walk(&Value::Object(plugin.clone()), format!("plugins[{i}]"), &mut out);
    }
    out
}

/// The plugins a chain's plugins run without naming them: the built-in defaults of meta plugins.
pub fn implied_types(list: &ConfList) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, plugin) in list.plugins.iter().enumerate() {
        let defaults: &[(&str, &str)] = match plugin.get("type").and_then(Value::as_str) {
            Some(crate::programs::plugins::yonghui::NAME) => {
                &[("delegate", crate::programs::plugins::yonghui::delegate::LINUX_DEFAULT_TYPE), ("ipam", "host-local")]
            }
            Some("flannel") => &[("delegate", "bridge"), ("ipam", "host-local")],
            _ => &[],
        };
        for (section, default) in defaults {
            if !names_type(plugin.get(*section)) {
                out.push((
                    format!("plugins[{i}].{section}.type (the {} default)", plugin["type"]),
                    default.to_string(),
                ));
            }
        }
    }
    out
}

/// The plugins a chain's plugins run in their turn: every type in an `ipam` or `delegate` section
/// (section and type keys as Go reads them, and a delegate's own `ipam`), and the built-in
/// defaults of meta plugins (`implied_types`). The node must have them for the chain to run; a
/// `type` elsewhere may be an option of the plugin's own.
pub fn delegated_types(list: &ConfList) -> Vec<(String, String)> {
    fn walk(object: &Map<String, Value>, at: &str, out: &mut Vec<(String, String)>) {
        for (key, value) in object {
            let Value::Object(section) = value else { continue };
            if !matches!(go_fold(key).as_str(), "IPAM" | "DELEGATE") {
                continue;
            }
            let section_at = format!("{at}.{key}");
            for (k, v) in section {
                if let (true, Value::String(t)) = (is_type_key(k), v) {
                    out.push((format!("{section_at}.{k}"), t.clone()));
                }
            }
            walk(section, &section_at, out);
        }
    }
    let mut out = Vec::new();
    for (i, plugin) in list.plugins.iter().enumerate() {
        walk(plugin, &format!("plugins[{i}]"), &mut out);
    }
    out.extend(implied_types(list));
    out
}

/// The keys that define a `yh-ipam` pool (`ranges`, `exclude`, `blockSize`, folded as Go folds
/// them), with where, in each `ipam` section (at any depth, key folded) of each plugin that runs
/// `yh-ipam` (its own type, or any type key in it, says so). Whichever of the plugin's IPAM sections
/// `yh-ipam` reads, and however a Go plugin that execs it spells the key, a pool defined inline is
/// found; a plugin that does not run `yh-ipam` is not looked at.
pub fn yh_ipam_pool_keys(list: &ConfList) -> Vec<String> {
    const YH_IPAM: &str = crate::programs::selector::netconf::capabilities::YH_IPAM;
    let defining: Vec<String> =
        crate::node::agent_socket::pool_definition::ADDRESS_KEYS.iter().map(|k| go_fold(k)).collect();
    fn walk(value: &Value, at: String, in_ipam: bool, defining: &[String], out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    let folded = go_fold(key);
                    if in_ipam && defining.contains(&folded) && !v.is_null() {
                        out.push(format!("{at}.{key}"));
                    }
                    walk(v, format!("{at}.{key}"), folded == "IPAM", defining, out);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, format!("{at}[{i}]"), false, defining, out);
                }
            }
            _ => {}
        }
    }
    fn runs_yh_ipam(value: &Value) -> bool {
        match value {
            Value::Object(map) => map.iter().any(|(k, v)| (is_type_key(k) && v == YH_IPAM) || runs_yh_ipam(v)),
            Value::Array(items) => items.iter().any(runs_yh_ipam),
            _ => false,
        }
    }
    let mut out = Vec::new();
    for (i, plugin) in list.plugins.iter().enumerate() {
        let plugin = Value::Object(plugin.clone());
        if runs_yh_ipam(&plugin) {
            walk(&plugin, format!("plugins[{i}]"), false, &defining, &mut out);
        }
    }
    out
}

/// Whether a section (`delegate`, `ipam`) sets its plugin type for the meta plugin that fills in the
/// default: yonghui (serde) and the flannel plugin (a map lookup) both look for `type` exactly, so
/// `{"Type": "bridge"}` leaves the default in place (and `bridge` is counted too, as Go's delegate
/// would read it).
fn names_type(section: Option<&Value>) -> bool {
    section.and_then(|s| s.get("type")).is_some_and(Value::is_string)
}

/// Whether a string under `key` is a host path to the plugins that read it: the path options of the
/// plugins shipped and of the reference plugins (`dataDir`, `subnetFile`, `resolvConf`,
/// `daemonSocketPath`, `data_dir`, `log_file`, `kubeconfig`...), recognised by how such keys end.
pub fn is_path_key(key: &str) -> bool {
    let plain: String = go_fold(key).chars().filter(|c| *c != '_' && *c != '-').collect();
    ["FILE", "DIR", "PATH", "SOCKET", "CONF", "CONFIG", "DIRECTORY"].iter().any(|end| plain.ends_with(end))
}

/// A host path an inline configuration names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPath {
    /// Where: `plugins[0].ipam.kubernetes.kubeconfig`.
    pub at: String,
    pub path: String,
    /// The type of the plugin that reads it: the innermost section that holds it and that a plugin
    /// runs as a plugin (each plugin's object, an `ipam` or `delegate` section in it, as Go reads
    /// those keys), when that section names one type. An object elsewhere that says `type` is an
    /// option of the plugin around it, not a plugin.
    pub section_type: Option<String>,
}

/// Every host path an inline configuration names: strings (or lists of strings) under a path key,
/// and any other string that is an absolute path, but a prefix length (`"/22"`, as whereabouts'
/// `node_slice_size`): no plugin reads a file at the root named by a number under a key that does
/// not say it is a path.
pub fn host_paths(list: &ConfList) -> Vec<HostPath> {
    fn walk(value: &Value, at: String, path_key: bool, owner: &Option<String>, out: &mut Vec<HostPath>) {
        match value {
            Value::String(s) if path_key || (s.starts_with('/') && !is_prefix_length(s)) => {
                out.push(HostPath { at, path: s.clone(), section_type: owner.clone() })
            }
            Value::Object(map) => walk_map(map, &at, owner, out),
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, format!("{at}[{i}]"), path_key, owner, out);
                }
            }
            _ => {}
        }
    }
    fn walk_map(map: &Map<String, Value>, at: &str, owner: &Option<String>, out: &mut Vec<HostPath>) {
        for (key, v) in map {
            let at = format!("{at}.{key}");
            match v {
                Value::Object(section) if matches!(go_fold(key).as_str(), "IPAM" | "DELEGATE") => {
                    walk_map(section, &at, &section_type(section), out)
                }
                _ => walk(v, at, is_path_key(key), owner, out),
            }
        }
    }
    let mut out = Vec::new();
    for (i, plugin) in list.plugins.iter().enumerate() {
        walk_map(plugin, &format!("plugins[{i}]"), &section_type(plugin), &mut out);
    }
    out
}

/// The one type a plugin section names (every key Go reads as `type` saying the same); none when
/// it names none or several.
fn section_type(section: &Map<String, Value>) -> Option<String> {
    let mut types = section.iter().filter(|(k, _)| is_type_key(k)).map(|(_, v)| v.as_str());
    let first = types.next()??;
    types.all(|t| t == Some(first)).then(|| first.to_string())
}

/// `/0` to `/128`: a prefix length, as a plugin option writes one.
fn is_prefix_length(s: &str) -> bool {
    s.strip_prefix('/')
        .filter(|n| (1..=3).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse::<u8>().ok())
        .is_some_and(|n| n <= 128)
}

/// Whether `path` is an absolute path, without `.` or `..` components, under one of `prefixes`.
pub fn path_allowed(path: &str, prefixes: &[PathBuf]) -> bool {
    let p = Path::new(path);
    let plain = p.is_absolute() && p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    plain && prefixes.iter().any(|prefix| p.starts_with(prefix))
}

/// The network names an inline configuration gives its plugins: the list's `name`, and every key
/// of a plugin that a Go plugin reads as `name`. host-local keeps its leases in `<dataDir>/<name>/`,
/// so a name is a path component to it.
pub fn network_names(list: &ConfList) -> Vec<(String, String)> {
    let mut out = vec![("name".to_string(), list.name.clone())];
    for (i, plugin) in list.plugins.iter().enumerate() {
        for (key, v) in plugin {
            if go_fold(key) == "NAME" {
                out.push((format!("plugins[{i}].{key}"), v.as_str().map_or_else(|| v.to_string(), String::from)));
            }
        }
    }
    out
}

/// A network name as the CNI specification has it: a letter or digit, then letters, digits, `_`,
/// `.` and `-` (so never a path: no `/`, not `..`).
pub fn valid_network_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A plugin type must be a file name in the plugin directories: no `/` (a path elsewhere), no `..`.
pub fn check_type_name(at: &str, t: &str, origin: &str) -> Result<(), CniError> {
    if t.contains('/') || t.contains("..") {
        return Err(CniError::invalid_config(format!(
            "{origin}: {at} is {t:?}, which is not a plugin name (a plugin type may not contain '/' or '..')"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(json: &str) -> ConfList {
        ConfList::parse(json.as_bytes(), false, "t").unwrap()
    }

    #[test]
    fn a_configuration_without_a_name_takes_the_nads() {
        let named = |config: &str| list(&named_after_nad(config, "macvlan-conf"));
        let missing = named(r#"{"cniVersion":"0.3.1","plugins":[{"type":"macvlan","name":"inner"}]}"#);
        assert_eq!((missing.name.as_str(), &missing.plugins[0]["name"]), ("macvlan-conf", &Value::from("inner")));
        assert_eq!(named(r#"{"cniVersion":"0.3.1","name":"","type":"macvlan"}"#).name, "macvlan-conf");
    }

    #[test]
    fn a_configuration_with_a_name_or_unreadable_stays_as_written() {
        for config in [r#"{"cniVersion": "0.3.1", "name": "own", "type": "macvlan"}"#, "{not json", "[]"] {
            assert_eq!(named_after_nad(config, "nad"), config);
        }
    }

    #[test]
    fn keys_fold_as_go_folds_them() {
        for key in ["type", "Type", "TYPE", "tYpE"] {
            assert!(is_type_key(key), "{key}");
        }
        for key in ["types", "typ", "_type", "ty pe"] {
            assert!(!is_type_key(key), "{key}");
        }
        assert_eq!(go_fold("\u{212a}ey"), "KEY", "the Kelvin sign is K to Go");
        assert_eq!(go_fold("\u{17f}ubnet"), "SUBNET", "a long s is S to Go");
        // Go 1.21 and later: ToUpper(ToLower('İ')) is 'I', and so is ToUpper('ı').
        assert_eq!(go_fold("dataD\u{130}r"), "DATADIR");
        assert!(is_path_key("dataD\u{130}r") && is_path_key("subnetF\u{131}le"));
        // Characters with no simple mapping stay themselves.
        assert_eq!(go_fold("\u{df}\u{149}"), "\u{df}\u{149}");
        assert_eq!(go_fold("T\u{1f00}pe"), "T\u{1f08}PE");
    }

    #[test]
    fn every_key_read_as_type_at_every_depth() {
        let l = list(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[
                {"type":"macvlan","ipam":{"Type":"evil"}},
                {"type":"tuning","TYPE":"sbr","delegate":{"tYpE":"host-device","ipam":{"type":"dhcp"}}}]}"#,
        );
        let mut types: Vec<String> = plugin_types(&l).into_iter().map(|(at, t)| format!("{at}={t}")).collect();
        types.sort();
        assert_eq!(
            types,
            [
                "plugins[0].ipam.Type=evil",
                "plugins[0].type=macvlan",
                "plugins[1].TYPE=sbr",
                "plugins[1].delegate.ipam.type=dhcp",
                "plugins[1].delegate.tYpE=host-device",
                "plugins[1].type=tuning",
            ]
        );
    }

    #[test]
    fn built_in_defaults_count_as_types() {
        let bare = list(r#"{"cniVersion":"1.0.0","name":"n","type":"yonghui"}"#);
        let implied: Vec<String> = implied_types(&bare).into_iter().map(|(_, t)| t).collect();
        assert_eq!(implied, ["yh-bridge", "host-local"]);
        let named = list(
            r#"{"cniVersion":"1.0.0","name":"n","type":"yonghui","delegate":{"type":"bridge"},"ipam":{"type":"static"}}"#,
        );
        assert!(implied_types(&named).is_empty());
        // yonghui reads `type` exactly: a `Type` leaves its default, which must be listed too.
        let folded = list(
            r#"{"cniVersion":"1.0.0","name":"n","type":"yonghui","delegate":{"Type":"bridge"},"ipam":{"TYPE":"static"}}"#,
        );
        let implied: Vec<String> = implied_types(&folded).into_iter().map(|(_, t)| t).collect();
        assert_eq!(implied, ["yh-bridge", "host-local"]);
        let flannel = list(r#"{"cniVersion":"1.0.0","name":"n","type":"flannel","delegate":{"mtu":1400}}"#);
        assert_eq!(implied_types(&flannel)[0].1, "bridge");
        assert!(implied_types(&list(r#"{"cniVersion":"1.0.0","name":"n","type":"macvlan"}"#)).is_empty());
    }

    #[test]
    fn every_delegated_type_is_found_with_the_built_in_defaults() {
        let l = list(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[
                {"type":"macvlan","IPAM":{"Type":"dhcp"},"options":{"type":"not-a-plugin"}},
                {"type":"yonghui","delegate":{"type":"bridge","ipam":{"type":"static"}}}]}"#,
        );
        let found: Vec<String> = delegated_types(&l).into_iter().map(|(at, t)| format!("{at}={t}")).collect();
        assert_eq!(
            found,
            [
                "plugins[0].IPAM.Type=dhcp",
                "plugins[1].delegate.type=bridge",
                "plugins[1].delegate.ipam.type=static",
                "plugins[1].ipam.type (the \"yonghui\" default)=host-local",
            ]
        );
    }

    fn paths(l: &ConfList) -> Vec<String> {
        let mut found: Vec<String> = host_paths(l).into_iter().map(|p| format!("{}={}", p.at, p.path)).collect();
        found.sort();
        found
    }

    #[test]
    fn host_paths_are_found_by_key_name_or_by_shape() {
        let l = list(
            r#"{"cniVersion":"1.0.0","name":"n","type":"yonghui","subnetFile":"/etc/shadow","DataDir":"rel",
                "ipam":{"type":"host-local","resolvConf":"/etc/resolv.conf","ranges":[[{"subnet":"10.0.0.0/24"}]]},
                "log_options":{"log_file":"/tmp/x"},"weird":["/root/.ssh"],"sock":{"daemonSocketPath":"/run/x.sock"},
                "master":"eth0","mtu":1400}"#,
        );
        assert_eq!(
            paths(&l),
            [
                "plugins[0].DataDir=rel",
                "plugins[0].ipam.resolvConf=/etc/resolv.conf",
                "plugins[0].log_options.log_file=/tmp/x",
                "plugins[0].sock.daemonSocketPath=/run/x.sock",
                "plugins[0].subnetFile=/etc/shadow",
                "plugins[0].weird[0]=/root/.ssh",
            ]
        );
    }

    /// whereabouts' IPAM section with every option that names a host path, and its node slice size.
    const WHEREABOUTS: &str = r#"{"cniVersion":"0.3.1","name":"wb","type":"macvlan","master":"eth0",
        "ipam":{"type":"whereabouts","range":"192.168.2.0/24","node_slice_size":"/22",
            "kubernetes":{"kubeconfig":"/etc/cni/net.d/whereabouts.d/whereabouts.kubeconfig"},
            "configuration_path":"/etc/cni/net.d/whereabouts.d/whereabouts.conf",
            "log_file":"/var/log/whereabouts/wb.log","log_level":"debug"}}"#;

    #[test]
    fn whereabouts_paths_are_found_and_belong_to_its_section() {
        let found = host_paths(&list(WHEREABOUTS));
        let mut named: Vec<(&str, Option<&str>)> =
            found.iter().map(|p| (p.at.as_str(), p.section_type.as_deref())).collect();
        named.sort();
        assert_eq!(
            named,
            [
                ("plugins[0].ipam.configuration_path", Some("whereabouts")),
                ("plugins[0].ipam.kubernetes.kubeconfig", Some("whereabouts")),
                ("plugins[0].ipam.log_file", Some("whereabouts")),
            ]
        );
    }

    #[test]
    fn a_prefix_length_is_no_path_unless_its_key_says_path() {
        let l = list(r#"{"cniVersion":"1.0.0","name":"n","type":"x","size":"/22","big":"/129","dataDir":"/22"}"#);
        assert_eq!(paths(&l), ["plugins[0].big=/129", "plugins[0].dataDir=/22"]);
        for not_a_length in ["/", "/1234", "/2a", "/-1", "/22/x"] {
            assert!(!is_prefix_length(not_a_length), "{not_a_length}");
        }
    }

    #[test]
    fn a_typed_object_that_is_no_plugin_section_belongs_to_the_plugin_around_it() {
        let l = list(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"router",
                "log_options":{"type":"whereabouts","log_file":"/x/a.log"}},
                {"type":"tuning","IPAM":{"Type":"whereabouts","TYPE":"other","log_file":"/x/b.log"}},
                {"type":"yonghui","delegate":{"type":"bridge","ipam":{"dataDir":"/x/c"}}}]}"#,
        );
        let owners: Vec<(String, Option<String>)> =
            host_paths(&l).into_iter().map(|p| (p.path, p.section_type)).collect();
        assert_eq!(
            owners,
            [
                ("/x/a.log".to_string(), Some("router".to_string())),
                ("/x/b.log".to_string(), None),
                ("/x/c".to_string(), None),
            ]
        );
    }

    #[test]
    fn paths_only_plainly_under_an_allowed_prefix() {
        let prefixes = [PathBuf::from("/var/lib/cni/tenants")];
        assert!(path_allowed("/var/lib/cni/tenants/a", &prefixes));
        assert!(path_allowed("/var/lib/cni/tenants", &prefixes));
        for bad in ["/var/lib/cni/tenants/../../x", "/var/lib/cni/tenantsx", "var/lib/cni/tenants/a", "/etc", ""] {
            assert!(!path_allowed(bad, &prefixes), "{bad}");
        }
        assert!(!path_allowed("/var/lib/cni/tenants/a", &[]));
    }

    #[test]
    fn network_names_as_plugins_read_them() {
        let l = list(r#"{"cniVersion":"1.0.0","name":"lan","type":"macvlan","Name":"../../etc"}"#);
        let names: Vec<String> = network_names(&l).into_iter().map(|(at, n)| format!("{at}={n}")).collect();
        assert_eq!(names, ["name=lan", "plugins[0].Name=../../etc", "plugins[0].name=lan"]);
        for good in ["lan", "a.b_c-1", "9"] {
            assert!(valid_network_name(good), "{good}");
        }
        for bad in ["", "../x", "a/b", ".hidden", "-a", "a b", "a\u{0}"] {
            assert!(!valid_network_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn type_names_that_are_paths_are_refused() {
        for bad in ["../../bin/sh", "/bin/sh", "a/b", "..", "x..y"] {
            let e = check_type_name("plugins[0].type", bad, "network n").unwrap_err();
            assert!(e.code == 7 && e.msg.contains("not a plugin name"), "{e}");
        }
        assert!(check_type_name("plugins[0].type", "host-local", "n").is_ok());
    }
}
