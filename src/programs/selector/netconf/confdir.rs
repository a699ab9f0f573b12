//! Naming a network and finding its configuration file under `confDir`.
//!
//! A value (from a pod's `CNI_NETWORK_CONFIG`, or `defaultNetwork`) names a logical network in one
//! of three forms: JSON naming the file, `{"kubernetes": {"kubeconfig": "<path of the conf file>"}}`, a
//! bare network name (`canal`: the first configuration file in `<confDir>/canal/`), or a path
//! relative to `confDir` (`canal/canal.conf`). Whatever the form, the file must lie inside a network
//! directory under `confDir`, checked on the path as written and again after resolving symlinks.

use crate::platform::cni::{CniError, ConfList};
use crate::programs::selector::name::NAME;
use serde_json::Value;
use std::fmt;
use std::path::{Component, Path, PathBuf};

/// File name endings of network configurations, as libcni loads them.
pub const CONF_EXTENSIONS: [&str; 3] = ["conflist", "conf", "json"];

/// How a value names a network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkName {
    /// `{"kubernetes": {"kubeconfig": "/etc/cni/net.d/canal/canal.conf"}}`: the file, by path.
    KubeconfigJson(PathBuf),
    /// `canal`: the network directory.
    Bare(String),
    /// `canal/canal.conf`: a path under `confDir` (an absolute path inside it is accepted too).
    Path(PathBuf),
}

impl NetworkName {
    /// Parse a value. The error text says what is wrong; callers add whose value it was.
    pub fn parse(value: &str) -> Result<Self, String> {
        let value = value.trim();
        if value.is_empty() {
            return Err("the value is empty".into());
        }
        if value.starts_with(['{', '[', '"']) {
            let json: Value = serde_json::from_str(value)
                .map_err(|e| format!("the value looks like JSON but does not parse: {e}"))?;
            return match json.pointer("/kubernetes/kubeconfig") {
                Some(Value::String(p)) if !p.trim().is_empty() => {
                    Ok(NetworkName::KubeconfigJson(PathBuf::from(p.trim())))
                }
                _ => Err(
                    r#"JSON values must be {"kubernetes": {"kubeconfig": "<path of a network configuration file>"}}"#
                        .into(),
                ),
            };
        }
        if value.chars().any(char::is_control) {
            return Err(format!("{value:?} contains control characters"));
        }
        if value.contains('/') {
            return Ok(NetworkName::Path(PathBuf::from(value)));
        }
        if value == "." || value == ".." {
            return Err(format!("{value:?} is not a network name"));
        }
        Ok(NetworkName::Bare(value.to_string()))
    }

    /// Which form it is, for `explain`.
    pub fn form(&self) -> &'static str {
        match self {
            NetworkName::KubeconfigJson(_) => "JSON naming a configuration file",
            NetworkName::Bare(_) => "network name",
            NetworkName::Path(_) => "path under confDir",
        }
    }
}

impl fmt::Display for NetworkName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetworkName::KubeconfigJson(p) | NetworkName::Path(p) => write!(f, "{}", p.display()),
            NetworkName::Bare(n) => f.write_str(n),
        }
    }
}

/// A network resolved to its configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkFile {
    /// The network directory's name under `confDir`, as the value named it.
    pub network: String,
    /// The configuration file, symlinks resolved.
    pub path: PathBuf,
}

/// Find the configuration file `name` designates under `conf_dir`. Every failure is code 7: a
/// value that leaves `conf_dir`, a missing directory or file, a directory with no configuration.
pub fn resolve(conf_dir: &Path, name: &NetworkName) -> Result<NetworkFile, CniError> {
    let bad = |msg: String| CniError::invalid_config(format!("network {name}: {msg}"));
    let target = match name {
        NetworkName::Bare(n) => conf_dir.join(n),
        NetworkName::KubeconfigJson(p) | NetworkName::Path(p) => conf_dir.join(p),
    };
    // As written: `..` must not climb out, an absolute path must be inside.
    let relative = normalize(&target)
        .strip_prefix(normalize(conf_dir))
        .map(Path::to_path_buf)
        .map_err(|_| bad(format!("{} is outside confDir {}", target.display(), conf_dir.display())))?;
    let network = match relative.components().next() {
        Some(Component::Normal(first)) => first.to_string_lossy().into_owned(),
        _ => return Err(bad(format!("it must name a network directory under confDir {}", conf_dir.display()))),
    };
    // As resolved: a symlink must not lead out either.
    let root = conf_dir.canonicalize().map_err(|e| bad(format!("cannot read confDir {}: {e}", conf_dir.display())))?;
    let inside = |p: &Path| -> Result<PathBuf, CniError> {
        let real = p.canonicalize().map_err(|e| bad(format!("{}: {e}", p.display())))?;
        if real.starts_with(&root) && real != root {
            Ok(real)
        } else {
            Err(bad(format!("{} leads outside confDir {} (to {})", p.display(), conf_dir.display(), real.display())))
        }
    };
    let real = inside(&target)?;
    let path = if real.is_dir() {
        let file = first_conf_file(&real).map_err(bad)?;
        inside(&file)?
    } else if relative.components().count() < 2 {
        return Err(bad(format!("{} is not inside a network directory under confDir", target.display())));
    } else if !has_conf_extension(&real) {
        return Err(bad(format!("{} is not a .conflist, .conf or .json file", target.display())));
    } else if !real.is_file() {
        // A FIFO or a device would block or never end when read.
        return Err(bad(format!("{} is not a regular file", target.display())));
    } else {
        real
    };
    Ok(NetworkFile { network, path })
}

/// `defaultNetwork`'s value that picks the cluster's own network as a runtime would: the first
/// configuration file directly in `confDir` by name, other than the selector's own.
pub const AUTO: &str = "auto";

/// The admin's `defaultNetwork` may name the cluster's network where its owner writes it: a file
/// directly in `confDir` (`10-calico.conflist`), or `auto`. `None` when the value is neither, so it
/// names a network directory as any other value does. Pods' values never come here: a pod still
/// cannot name a file directly in `confDir`. The file is read where it lies on every call, never
/// copied, so its owner's updates reach the next pod. A missing file is code 11 (try again later):
/// the network's owner may not have written it yet, and the runtime retries.
pub fn resolve_in_place(conf_dir: &Path, value: &str) -> Option<Result<NetworkFile, CniError>> {
    let value = value.trim();
    let in_place = |path: PathBuf| {
        let network = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        NetworkFile { network, path }
    };
    if value == AUTO && !conf_dir.join(AUTO).is_dir() {
        return Some(first_in_place(conf_dir).map(in_place));
    }
    let named = Path::new(value);
    let plain_file_name = !value.is_empty()
        && named.components().count() == 1
        && matches!(named.components().next(), Some(Component::Normal(_)))
        && has_conf_extension(named)
        && !value.chars().any(char::is_control);
    if !plain_file_name || conf_dir.join(value).is_dir() {
        return None;
    }
    let path = conf_dir.join(value);
    Some(match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() => Ok(in_place(path)),
        Ok(_) => {
            Err(CniError::invalid_config(format!("defaultNetwork {value:?}: {} is not a regular file", path.display())))
        }
        Err(e) => Err(CniError::try_again(format!(
            "defaultNetwork {value:?}: {} is not there (yet?): {e}; the network it names writes it when it starts",
            path.display()
        ))),
    })
}

/// The file `auto` picks: the first configuration file directly in `conf_dir` by name, as libcni
/// orders them, other than the selector's own (which would run the selector inside itself).
fn first_in_place(conf_dir: &Path) -> Result<PathBuf, CniError> {
    let own = Path::new(crate::node::paths::CONFLIST).file_name();
    let entries = std::fs::read_dir(conf_dir).map_err(|e| {
        CniError::invalid_config(format!("defaultNetwork \"auto\": cannot list {}: {e}", conf_dir.display()))
    })?;
    entries
        .filter_map(Result::ok)
        .filter(|e| Some(e.file_name().as_os_str()) != own)
        .map(|e| e.path())
        .filter(|p| has_conf_extension(p) && p.is_file())
        .min()
        .ok_or_else(|| {
            CniError::try_again(format!(
                "defaultNetwork \"auto\": {} has no network configuration file yet (*.conflist, *.conf or *.json \
                 other than yh-genie's own); waiting for the cluster's network to write one",
                conf_dir.display()
            ))
        })
}

/// Load a resolved network's configuration: the exact text (for the record) and the parsed chain.
/// A chain that would run the selector again is refused: it would call itself without end.
pub fn load(file: &NetworkFile) -> Result<(String, ConfList), CniError> {
    let text = std::fs::read_to_string(&file.path).map_err(|e| {
        CniError::invalid_config(format!("network {}: cannot read {}: {e}", file.network, file.path.display()))
    })?;
    let list = parse_conf(text.as_bytes(), &file.path).map_err(|e| e.context(format!("network {}", file.network)))?;
    Ok((text, list))
}

/// Parse a network's configuration file (`.conflist` is a chain, as libcni reads it) and check that
/// the selector can run it.
pub fn parse_conf(bytes: &[u8], path: &Path) -> Result<ConfList, CniError> {
    refuse_recursion(ConfList::parse_file(bytes, path)?, &path.display().to_string())
}

/// Parse a configuration that is not a file (a NetworkAttachmentDefinition's `spec.config`): a chain
/// when it has `plugins`, one plugin otherwise, as Multus reads it. `origin` names it in errors.
pub fn parse_inline(bytes: &[u8], origin: &str) -> Result<ConfList, CniError> {
    refuse_recursion(ConfList::parse(bytes, false, origin)?, origin)
}

/// A chain that would run the selector again is refused: it would call itself without end. Not only
/// the chain's own plugins count: a meta plugin's delegate or IPAM plugin runs too, and a Go plugin
/// reads `Type` as `type`. A type that is not a plain file name (`/`, `..`) is refused here too, at
/// selection, before anything is recorded.
fn refuse_recursion(list: ConfList, origin: &str) -> Result<ConfList, CniError> {
    let types = plugin_types(&list);
    if let Some((at, _)) = types.iter().find(|(_, t)| t == NAME) {
        return Err(CniError::invalid_config(format!(
            "{origin}: {at} is {}, which would run the selector inside itself",
            NAME
        )));
    }
    for (at, t) in &types {
        crate::programs::selector::netconf::inline::check_type_name(at, t, origin)?;
    }
    Ok(list)
}

/// Every plugin type a chain names, with where (see `inline::plugin_types`).
pub fn plugin_types(list: &ConfList) -> Vec<(String, String)> {
    crate::programs::selector::netconf::inline::plugin_types(list)
}

/// The first configuration file in `dir` by name, as libcni orders them.
fn first_conf_file(dir: &Path) -> Result<PathBuf, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| has_conf_extension(p) && p.is_file())
        .min()
        .ok_or_else(|| format!("{} has no *.conflist, *.conf or *.json file", dir.display()))
}

fn has_conf_extension(p: &Path) -> bool {
    p.extension().and_then(|e| e.to_str()).is_some_and(|e| CONF_EXTENSIONS.contains(&e))
}

/// `path` with `.` dropped and `..` applied, without touching the file system. A leading `..` of a
/// relative path is kept, so the result then fails any `starts_with` check against a real directory.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                // `/..` is `/`, as the kernel sees it.
                Some(Component::RootDir) => {}
                _ => out.push(".."),
            },
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms() {
        assert_eq!(
            NetworkName::parse(r#" {"kubernetes": {"kubeconfig": "/etc/cni/net.d/canal/canal.conf"}} "#).unwrap(),
            NetworkName::KubeconfigJson("/etc/cni/net.d/canal/canal.conf".into())
        );
        assert_eq!(NetworkName::parse("canal\n").unwrap(), NetworkName::Bare("canal".into()));
        assert_eq!(NetworkName::parse("canal/canal.conf").unwrap(), NetworkName::Path("canal/canal.conf".into()));
    }

    #[test]
    fn unparsable_values_say_why() {
        for (value, why) in [
            ("", "empty"),
            ("  ", "empty"),
            ("{nope", "does not parse"),
            (r#"{"kubernetes": {}}"#, "kubeconfig"),
            (r#"{"kubernetes": {"kubeconfig": 5}}"#, "kubeconfig"),
            ("[1]", "kubeconfig"),
            ("..", "not a network name"),
            ("a\u{0}b", "control"),
        ] {
            let e = NetworkName::parse(value).unwrap_err();
            assert!(e.contains(why), "{value:?}: {e}");
        }
    }

    struct Dir(tempfile::TempDir);
    impl Dir {
        fn new() -> Self {
            let d = Dir(tempfile::tempdir().unwrap());
            std::fs::create_dir(d.conf()).unwrap();
            d
        }
        fn conf(&self) -> PathBuf {
            self.0.path().join("net.d")
        }
        fn file(&self, rel: &str) -> PathBuf {
            let p = self.conf().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "{}").unwrap();
            p.canonicalize().unwrap()
        }
        fn resolve(&self, value: &str) -> Result<NetworkFile, CniError> {
            resolve(&self.conf(), &NetworkName::parse(value).unwrap())
        }
    }

    #[test]
    fn a_bare_name_takes_the_first_file_by_name() {
        let d = Dir::new();
        d.file("canal/20-b.conf");
        let first = d.file("canal/10-a.json");
        d.file("canal/05-notes.txt");
        std::fs::create_dir_all(d.conf().join("canal/00-dir.conf")).unwrap();
        assert_eq!(d.resolve("canal").unwrap(), NetworkFile { network: "canal".into(), path: first });
    }

    #[test]
    fn a_path_names_the_file_with_its_network_directory() {
        let d = Dir::new();
        let f = d.file("canal/canal.conf");
        let want = NetworkFile { network: "canal".into(), path: f.clone() };
        assert_eq!(d.resolve("canal/canal.conf").unwrap(), want);
        assert_eq!(d.resolve("./canal/../canal/canal.conf").unwrap(), want);
        assert_eq!(d.resolve("canal/").unwrap(), want);
    }

    #[test]
    fn kubeconfig_json_names_the_file_with_its_network_directory() {
        let d = Dir::new();
        let f = d.file("canal/canal.conf");
        let want = NetworkFile { network: "canal".into(), path: f.clone() };
        let json = format!(r#"{{"kubernetes":{{"kubeconfig":"{}"}}}}"#, d.conf().join("canal/canal.conf").display());
        assert_eq!(d.resolve(&json).unwrap(), want);
    }

    #[test]
    fn leaving_conf_dir_is_refused_however_the_path_gets_out() {
        let d = Dir::new();
        d.file("canal/canal.conf");
        std::fs::write(d.0.path().join("outside.conf"), "{}").unwrap();
        std::fs::create_dir(d.0.path().join("elsewhere")).unwrap();
        std::fs::write(d.0.path().join("elsewhere/x.conf"), "{}").unwrap();
        std::os::unix::fs::symlink(d.0.path().join("elsewhere"), d.conf().join("sneaky")).unwrap();
        std::os::unix::fs::symlink(d.0.path().join("outside.conf"), d.conf().join("canal/link.conf")).unwrap();
        for value in [
            "../outside.conf",
            "canal/../../outside.conf",
            "/etc/passwd",
            r#"{"kubernetes":{"kubeconfig":"/etc/cni/net.d/../../etc/passwd.conf"}}"#,
            "sneaky",
            "sneaky/x.conf",
            "canal/link.conf",
        ] {
            let e = d.resolve(value).unwrap_err();
            assert_eq!(e.code, 7, "{value}");
            assert!(e.msg.contains("outside confDir"), "{value}: {e}");
        }
    }

    #[test]
    fn a_value_naming_no_usable_configuration_is_code_7_naming_the_path() {
        let d = Dir::new();
        d.file("canal/notes.txt");
        d.file("top.conf");
        nix::unistd::mkfifo(&d.conf().join("canal/fifo.conf"), nix::sys::stat::Mode::S_IRUSR).unwrap();
        for (value, want) in [
            ("nothere", "nothere"),
            ("canal", "has no *.conflist"),
            ("canal/notes.txt", "not a .conflist"),
            ("canal/missing.conf", "missing.conf"),
            ("top.conf", "not inside a network directory"),
            ("canal/fifo.conf", "not a regular file"),
        ] {
            let e = d.resolve(value).unwrap_err();
            assert_eq!(e.code, 7, "{value}");
            assert!(e.msg.contains(want), "{value}: {e}");
        }
    }

    #[test]
    fn a_chain_that_runs_the_selector_is_refused() {
        let e = parse_conf(
            br#"{"cniVersion":"1.0.0","name":"loop","plugins":[{"type":"bridge"},{"type":"yh-genie"}]}"#,
            Path::new("/x/loop.conflist"),
        )
        .unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("plugins[1].type"), "{e}");
        let nested = br#"{"cniVersion":"1.0.0","name":"n","type":"yonghui","delegate":{"type":"yh-genie"}}"#;
        let e = parse_inline(nested, "NetworkAttachmentDefinition a/b").unwrap_err();
        assert!(e.msg.contains("NetworkAttachmentDefinition a/b: plugins[0].delegate.type is yh-genie"), "{e}");
        let folded = br#"{"cniVersion":"1.0.0","name":"n","type":"yonghui","delegate":{"TYPE":"yh-genie"}}"#;
        assert!(parse_inline(folded, "x").unwrap_err().msg.contains("delegate.TYPE is yh-genie"));
    }

    #[test]
    fn a_type_that_is_a_path_is_refused_in_a_file() {
        let up = br#"{"cniVersion":"1.0.0","name":"n","type":"../../usr/bin/id"}"#;
        let e = parse_conf(up, Path::new("/x/n.conf")).unwrap_err();
        assert!(e.code == 7 && e.msg.contains("plugins[0].type") && e.msg.contains("not a plugin name"), "{e}");
    }

    #[test]
    fn a_type_that_is_a_path_is_refused_inline() {
        let nested = br#"{"cniVersion":"1.0.0","name":"n","type":"macvlan","ipam":{"Type":"/usr/bin/id"}}"#;
        assert!(parse_inline(nested, "x").unwrap_err().msg.contains("ipam.Type"));
    }

    #[test]
    fn plugin_types_finds_nested_types_with_their_place() {
        let list = parse_inline(
            br#"{"cniVersion":"1.0.0","name":"n","plugins":[
                {"type":"macvlan","ipam":{"type":"host-local","ranges":[[{"subnet":"10.0.0.0/24"}]]}},
                {"type":"tuning","x":[{"Type":"odd"}]}]}"#,
            "inline",
        )
        .unwrap();
        let mut types = plugin_types(&list);
        types.sort();
        assert_eq!(
            types,
            [
                ("plugins[0].ipam.type".to_string(), "host-local".to_string()),
                ("plugins[0].type".into(), "macvlan".into()),
                ("plugins[1].type".into(), "tuning".into()),
                ("plugins[1].x[0].Type".into(), "odd".into()),
            ]
        );
    }

    #[test]
    fn normalize_applies_dots_lexically() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), Path::new("/a/c"));
        assert_eq!(normalize(Path::new("/a/../../b")), Path::new("/b"));
        assert_eq!(normalize(Path::new("a/../../b")), Path::new("../b"));
    }

    #[test]
    fn only_a_plain_file_name_or_auto_is_read_in_place() {
        let d = Dir::new();
        d.file("canal/canal.conf");
        let top = d.file("10-calico.conflist");
        d.file("00-yh-genie.conflist");
        std::fs::create_dir_all(d.conf().join("dir.conf")).unwrap();
        let in_place = |v: &str| resolve_in_place(&d.conf(), v).map(|r| r.map(|f| (f.network, f.path)).unwrap());
        let want = Some(("10-calico.conflist".to_string(), d.conf().join("10-calico.conflist")));
        assert_eq!(in_place("10-calico.conflist"), want);
        assert_eq!(in_place(" auto\n"), want, "not our own 00-");
        assert_eq!(top, d.conf().join("10-calico.conflist").canonicalize().unwrap());
        // Network directories, paths and other names keep their meaning.
        for value in ["canal", "canal/canal.conf", "./10-calico.conflist", "../x.conf", "dir.conf", "notes"] {
            assert!(resolve_in_place(&d.conf(), value).is_none(), "{value}");
        }
        // A network directory named `auto` is still that directory.
        d.file("auto/a.conf");
        assert!(resolve_in_place(&d.conf(), "auto").is_none());
    }
}
