//! The runtime's `CNI_*` environment, validated per command.

use super::args::CniArgs;
use super::error::CniError;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
    Gc,
    Status,
}

impl Command {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "VERSION" => Command::Version,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            _ => return None,
        })
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
            Command::Gc => "GC",
            Command::Status => "STATUS",
        }
    }
}

/// One invocation's parameters: what the runtime put in the environment.
/// Fields a command does not need are empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub command: Command,
    pub container_id: String,
    /// `None` when unset or empty (allowed for DEL).
    pub netns: Option<PathBuf>,
    pub ifname: String,
    pub args: CniArgs,
    pub path: Vec<PathBuf>,
}

impl Invocation {
    /// Read and validate the environment through `get` (the process env in production, a map in tests).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, CniError> {
        let var = |name: &str| get(name).filter(|v| !v.is_empty());
        let command_raw =
            var("CNI_COMMAND").ok_or_else(|| CniError::invalid_env("required env variables [CNI_COMMAND] missing"))?;
        let command = Command::parse(&command_raw).ok_or_else(|| {
            CniError::invalid_env(format!(
                "CNI_COMMAND {command_raw:?} is not one of ADD, DEL, CHECK, VERSION, GC, STATUS"
            ))
        })?;
        let required: &[&str] = match command {
            Command::Add | Command::Check => &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
            Command::Del => &["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
            Command::Gc | Command::Status => &["CNI_PATH"],
            Command::Version => &[],
        };
        let missing: Vec<&str> = required.iter().copied().filter(|n| var(n).is_none()).collect();
        if !missing.is_empty() {
            return Err(CniError::invalid_env(format!("required env variables [{}] missing", missing.join(","))));
        }
        let inv = Invocation {
            command,
            container_id: var("CNI_CONTAINERID").unwrap_or_default(),
            netns: var("CNI_NETNS").map(PathBuf::from),
            ifname: var("CNI_IFNAME").unwrap_or_default(),
            args: CniArgs::parse(&var("CNI_ARGS").unwrap_or_default())?,
            path: var("CNI_PATH")
                .map(|p| std::env::split_paths(&p).filter(|d| !d.as_os_str().is_empty()).collect())
                .unwrap_or_default(),
        };
        if required.contains(&"CNI_CONTAINERID") {
            validate_container_id(&inv.container_id)?;
        }
        if required.contains(&"CNI_IFNAME") {
            validate_ifname(&inv.ifname).map_err(|e| CniError::invalid_env(format!("CNI_IFNAME: {e}")))?;
        }
        Ok(inv)
    }

    /// The environment a delegate gets for the same call (`command` may differ, e.g. DEL on rollback).
    pub fn env_for(&self, command: Command) -> Vec<(&'static str, String)> {
        let path = std::env::join_paths(&self.path).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        vec![
            ("CNI_COMMAND", command.as_str().to_string()),
            ("CNI_CONTAINERID", self.container_id.clone()),
            ("CNI_NETNS", self.netns.as_ref().map(|p| p.display().to_string()).unwrap_or_default()),
            ("CNI_IFNAME", self.ifname.clone()),
            ("CNI_ARGS", self.args.to_env_string()),
            ("CNI_PATH", path),
        ]
    }

    /// The same invocation with another command (for rollback DELs and for chains).
    pub fn with_command(&self, command: Command) -> Self {
        Invocation { command, ..self.clone() }
    }

    /// `CNI_NETNS`, which every built-in plugin's ADD and CHECK need. The runtime's environment is
    /// validated to have it for those commands; this is the same error for a caller that bypassed that.
    pub fn container_netns(&self) -> Result<&Path, CniError> {
        self.netns.as_deref().ok_or_else(|| CniError::invalid_env("required env variables [CNI_NETNS] missing"))
    }
}

/// Container ids start with a letter or digit, then letters, digits, `_`, `.`, `-` (the spec's rule).
pub fn validate_container_id(id: &str) -> Result<(), CniError> {
    let mut chars = id.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(CniError::invalid_env(format!(
            "CNI_CONTAINERID {id:?} is invalid: it must start with a letter or digit and contain only letters, digits, '_', '.', '-'"
        )))
    }
}

/// A name the kernel takes literally as an interface's name (`dev_valid_name`, and not a pattern):
/// 1-15 bytes, not `.` or `..`, no `/`, `:` or white space (the kernel's rules), no `%` (a name
/// with `%d` is a pattern the kernel fills in: the plugin would make `net0` and record `net%d`),
/// and no control characters or NUL (they break the environment a delegate gets and every log).
pub fn validate_ifname(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("interface name is empty".into());
    }
    if name.len() > 15 {
        return Err(format!("interface name {name:?} is longer than 15 bytes"));
    }
    let forbidden = |c: char| c == '/' || c == ':' || c == '%' || c.is_whitespace() || c.is_control();
    if name == "." || name == ".." || name.chars().any(forbidden) {
        return Err(format!(
            "interface name {name:?} is invalid (not '.' or '..'; no '/', ':', '%', white space or control characters)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<Invocation, CniError> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Invocation::from_env(|k| m.get(k).cloned())
    }

    #[test]
    fn add_without_required_variables_names_each_missing_one() {
        let e = env(&[("CNI_COMMAND", "ADD"), ("CNI_IFNAME", "eth0")]).unwrap_err();
        assert_eq!(e.code, 4);
        assert_eq!(e.msg, "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_PATH] missing");
    }

    #[test]
    fn del_does_not_need_netns() {
        let i =
            env(&[("CNI_COMMAND", "DEL"), ("CNI_CONTAINERID", "c1"), ("CNI_IFNAME", "eth0"), ("CNI_PATH", "/a:/b")])
                .unwrap();
        assert_eq!(i.netns, None);
        assert_eq!(i.path, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
    }

    #[test]
    fn version_needs_no_other_variable() {
        assert_eq!(env(&[("CNI_COMMAND", "VERSION")]).unwrap().command, Command::Version);
    }

    #[test]
    fn an_unknown_or_missing_command_is_refused() {
        assert_eq!(env(&[("CNI_COMMAND", "BOGUS")]).unwrap_err().code, 4);
        assert_eq!(env(&[]).unwrap_err().code, 4);
    }

    #[test]
    fn a_malformed_container_id_is_refused() {
        let base = [("CNI_COMMAND", "DEL"), ("CNI_PATH", "/x"), ("CNI_IFNAME", "eth0")];
        for bad in ["-abc", "a b", "a/b", "_x"] {
            let mut e = base.to_vec();
            e.push(("CNI_CONTAINERID", bad));
            assert_eq!(env(&e).unwrap_err().code, 4, "{bad}");
        }
    }

    #[test]
    fn a_malformed_ifname_is_refused() {
        assert!(validate_ifname("eth0").is_ok());
        assert!(validate_ifname("a-very-long-name").is_err());
        assert!(validate_ifname("..").is_err());
        assert!(validate_ifname("a:b").is_err());
    }

    #[test]
    fn only_names_the_kernel_takes_literally() {
        for good in ["eth0", "net1", "lan-0.10", "a", "fifteen-bytes-x", "lo"] {
            assert!(validate_ifname(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "net%d",
            "%",
            "a\u{1}",
            "a\u{7f}",
            "a\0b",
            "sixteen-bytes-xx",
            "\u{2003}x",
        ] {
            assert!(validate_ifname(bad).is_err(), "{bad:?}");
        }
        assert!(validate_ifname("ééééééééé").is_err(), "15 bytes, not 15 characters");
    }

    #[test]
    fn delegate_env_round_trips() {
        let i = env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
            ("CNI_ARGS", "A=1"),
        ])
        .unwrap();
        let e: HashMap<_, _> = i.env_for(Command::Del).into_iter().collect();
        assert_eq!(e["CNI_COMMAND"], "DEL");
        assert_eq!(e["CNI_NETNS"], "/run/netns/x");
        assert_eq!(e["CNI_ARGS"], "A=1");
        assert_eq!(e["CNI_PATH"], "/opt/cni/bin");
    }
}
