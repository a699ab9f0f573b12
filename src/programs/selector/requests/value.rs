//! A `CNI_NETWORK_CONFIG` value (or `defaultNetwork`) read as the list of networks it names.
//!
//! Every value that named one network before keeps its meaning: the JSON form naming a file, a
//! bare name, a path under `confDir`. Two list forms name several, in order, the first on the
//! runtime's interface (`CNI_IFNAME`) and each later one on `net<position>` unless it names its
//! interface:
//!
//! - comma-separated elements, each in a single-network form but JSON, optionally followed by
//!   `@<interface>`: `yonghui,lan-macvlan@net1`;
//! - a JSON array of `{"name": ..., "interface": ...}` objects:
//!   `[{"name": "yonghui"}, {"name": "lan-macvlan", "interface": "net1"}]`.
//!
//! A value without `,` or `@` is never a list. One with them could, before lists existed, name a
//! network directory with those characters in its name; `legacy_single` gives the caller that
//! reading to try first, so such a value still means what it meant.

use crate::platform::cni::env::validate_ifname;
use crate::programs::selector::netconf::confdir::NetworkName;
use serde::Deserialize;

/// One network of a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// How it names the network.
    pub name: NetworkName,
    /// The interface it asks for, if any.
    pub ifname: Option<String>,
    /// The element as written (for messages and `explain`).
    pub text: String,
}

/// Parse a value into its networks (at least one). The error says what is wrong; callers add whose
/// value it was.
pub fn parse(value: &str) -> Result<Vec<Element>, String> {
    let value = value.trim();
    if value.starts_with('[') {
        return parse_json_array(value);
    }
    if value.starts_with(['{', '"']) || !is_list_syntax(value) {
        let name = NetworkName::parse(value)?;
        return Ok(vec![Element { name, ifname: None, text: value.to_string() }]);
    }
    value
        .split(',')
        .enumerate()
        .map(|(i, raw)| {
            let text = raw.trim();
            parse_element(text).map_err(|why| format!("element {} ({text:?}): {why}", i + 1))
        })
        .collect()
}

/// The single-network reading of a value that uses list syntax (`,` or `@`), for the caller to try
/// first: before lists, `net@a` named the directory `net@a`. `None` when the value is not list
/// syntax (it has only that one reading) or does not parse as one name.
pub fn legacy_single(value: &str) -> Option<NetworkName> {
    let value = value.trim();
    let plain = !value.starts_with(['[', '{', '"']);
    if plain && is_list_syntax(value) { NetworkName::parse(value).ok() } else { None }
}

fn is_list_syntax(value: &str) -> bool {
    value.contains([',', '@'])
}

/// `name` or `name@ifname`, the name in a single-network form other than JSON.
fn parse_element(text: &str) -> Result<Element, String> {
    if text.is_empty() {
        return Err("it is empty".into());
    }
    let (name, ifname) = match text.rsplit_once('@') {
        Some((name, ifname)) => (name.trim(), Some(interface(ifname.trim())?)),
        None => (text, None),
    };
    Ok(Element { name: plain_name(name)?, ifname, text: text.to_string() })
}

fn parse_json_array(value: &str) -> Result<Vec<Element>, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Entry {
        name: String,
        #[serde(default)]
        interface: Option<String>,
    }
    let entries: Vec<Entry> = serde_json::from_str(value).map_err(|e| {
        format!(r#"a JSON array value must be [{{"name": "<network>", "interface": "<optional name>"}}, ...]: {e}"#)
    })?;
    if entries.is_empty() {
        return Err("the JSON array names no network".into());
    }
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let at = |why: String| format!("element {} ({:?}): {why}", i + 1, entry.name);
            let name = plain_name(&entry.name).map_err(at)?;
            let ifname = entry.interface.as_deref().map(interface).transpose().map_err(at)?;
            let text = match &ifname {
                Some(ifname) => format!("{}@{ifname}", entry.name),
                None => entry.name.clone(),
            };
            Ok(Element { name, ifname, text })
        })
        .collect()
}

/// A bare name or a path: the JSON form names one network, not an element of a list.
fn plain_name(name: &str) -> Result<NetworkName, String> {
    if name.starts_with(['{', '[', '"']) {
        return Err("a list element must be a network name or a path under confDir, not JSON".into());
    }
    NetworkName::parse(name)
}

/// An interface name a pod asked for (`@net1`, `"interface": "net1"`), if it is a valid one: a
/// name the kernel takes literally (`validate_ifname`), and never `lo`, which every netns has and
/// whose DEL would take the pod's loopback. Every name a pod writes goes through here, at
/// selection, before anything is recorded or made.
pub fn interface(name: &str) -> Result<String, String> {
    validate_ifname(name)?;
    if name == LOOPBACK {
        return Err(format!("interface name {name:?} is the netns's loopback, which no network may take"));
    }
    Ok(name.to_string())
}

/// The loopback interface of every network namespace.
const LOOPBACK: &str = "lo";

#[cfg(test)]
mod tests {
    use super::*;

    fn names(value: &str) -> Vec<(String, Option<String>)> {
        parse(value).unwrap().into_iter().map(|e| (e.name.to_string(), e.ifname)).collect()
    }

    fn one(name: &str, ifname: Option<&str>) -> (String, Option<String>) {
        (name.to_string(), ifname.map(String::from))
    }

    #[test]
    fn single_values_mean_what_they_meant() {
        for value in ["canal", " canal\n", "canal/canal.conf", r#"{"kubernetes": {"kubeconfig": "/n/canal/a.conf"}}"#] {
            let elements = parse(value).unwrap();
            assert_eq!(elements.len(), 1, "{value}");
            assert_eq!(elements[0].name, NetworkName::parse(value).unwrap(), "{value}");
            assert_eq!(elements[0].ifname, None);
        }
        // The JSON form may contain commas: it is one value, not a list.
        let json = r#"{"kubernetes": {"kubeconfig": "/n/canal/a.conf", "x": 1}}"#;
        assert!(matches!(parse(json).unwrap()[..], [Element { name: NetworkName::KubeconfigJson(_), .. }]));
    }

    #[test]
    fn comma_lists_with_interfaces() {
        assert_eq!(names("yonghui,lan-macvlan@net1"), [one("yonghui", None), one("lan-macvlan", Some("net1"))]);
        assert_eq!(
            names(" a , b/b.conflist @ lan0 ,c@eth0"),
            [one("a", None), one("b/b.conflist", Some("lan0")), one("c", Some("eth0"))]
        );
        assert_eq!(names("a@x@net2"), [one("a@x", Some("net2"))], "the last @ separates the interface");
        assert_eq!(parse("a, b@net1").unwrap()[1].text, "b@net1");
    }

    #[test]
    fn json_arrays() {
        assert_eq!(
            names(r#"[{"name": "yonghui"}, {"name": "lan-macvlan", "interface": "net1"}]"#),
            [one("yonghui", None), one("lan-macvlan", Some("net1"))]
        );
        assert_eq!(parse(r#"[{"name":"a","interface":"n1"}]"#).unwrap()[0].text, "a@n1");
    }

    #[test]
    fn a_malformed_value_is_refused_naming_its_fault() {
        for (value, want) in [
            ("a,,b", "element 2 (\"\"): it is empty"),
            ("a,", "element 2"),
            ("a@", "element 1 (\"a@\"): interface name is empty"),
            ("a@this-name-is-too-long", "longer than 15"),
            ("a@net 1", "invalid"),
            ("a@net/1", "invalid"),
            ("a@..", "invalid"),
            ("@net1", "empty"),
            ("a,..", "not a network name"),
            (r#"a,{"kubernetes":{"kubeconfig":"/x/y.conf"}}"#, "not JSON"),
            ("[]", "names no network"),
            ("[1]", "JSON array value must be"),
            (r#"[{"name":"a","ifname":"x"}]"#, "unknown field `ifname`"),
            (r#"[{"name":"a","interface":"bad name"}]"#, "element 1 (\"a\")"),
            (r#"[{"name":"[x]"}]"#, "not JSON"),
            ("a,b\u{1}", "control characters"),
            ("a,b@lo", "loopback"),
            ("a,b@net%d", "invalid"),
            ("a,b@n\u{7}", "invalid"),
            ("a,b@n\u{0}", "invalid"),
            (r#"[{"name":"a"},{"name":"b","interface":"lo"}]"#, "loopback"),
            (r#"[{"name":"a"},{"name":"b","interface":"x%d"}]"#, "invalid"),
        ] {
            let e = parse(value).unwrap_err();
            assert!(e.contains(want), "{value:?}: {e}");
        }
    }

    #[test]
    fn legacy_single_is_offered_only_for_list_syntax() {
        assert_eq!(legacy_single("net@a"), Some(NetworkName::Bare("net@a".into())));
        assert_eq!(legacy_single("a,b"), Some(NetworkName::Bare("a,b".into())));
        assert_eq!(legacy_single("dir/a,b.conf"), Some(NetworkName::Path("dir/a,b.conf".into())));
        assert_eq!(legacy_single("plain"), None);
        assert_eq!(legacy_single(r#"[{"name":"a"}]"#), None);
        assert_eq!(legacy_single(r#"{"kubernetes":{"kubeconfig":"/a,b.conf"}}"#), None);
    }
}
