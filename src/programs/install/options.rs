//! The installer's command line. Every flag `--foo-bar` can also come from the environment as
//! `YH_GENIE_FOO_BAR` (a DaemonSet sets env from ConfigMaps more easily than args); a flag given on
//! the command line wins over the environment.

use crate::platform::cni::version::{self, CniVersion};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Everything the installer needs, validated. Paths named "host" are as the host sees them (they go
/// into the conflist); the installer reaches them under `host_root`. The others are local paths.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub host_root: PathBuf,
    pub bin_dir: PathBuf,
    pub conf_dir: PathBuf,
    pub data_dir: PathBuf,
    pub default_network: Option<String>,
    pub cni_version: CniVersion,
    pub selector_config: Option<PathBuf>,
    pub networks_dir: Option<PathBuf>,
    pub sa_dir: PathBuf,
    pub api_server: String,
    pub wait_for: Vec<PathBuf>,
    pub interval: Duration,
    pub once: bool,
    pub cleanup_on_exit: bool,
    /// `--agent`: run the node agent beside the installer's loop.
    pub agent: Option<AgentSettings>,
}

/// The node agent's settings (`--agent`).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    /// The node whose pods it watches.
    pub node_name: String,
    /// Its socket, as the host sees it (the plugin's `agentSocket`).
    pub socket: PathBuf,
    pub metrics_address: std::net::SocketAddr,
    /// `--dynamic-networks`: the agent has the attach worker apply running pods' networks
    /// annotation edits.
    pub dynamic_networks: bool,
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Request {
    Help,
    Install(Box<Options>),
}

/// A command line the installer cannot act on; the message names the flag or variable at fault.
#[derive(Debug, PartialEq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

struct Flag {
    name: &'static str,
    /// `None` for a switch (`--once`), else the value's name in the help.
    value: Option<&'static str>,
    default: Option<&'static str>,
    help: &'static str,
}

const FLAGS: &[Flag] = &[
    Flag {
        name: "host-root",
        value: Some("DIR"),
        default: Some("/"),
        help: "where the host's / is mounted; every host path is reached under it",
    },
    Flag {
        name: "bin-dir",
        value: Some("DIR"),
        default: Some("/opt/cni/bin"),
        help: "host CNI bin dir: the binary and its plugin names go here",
    },
    Flag {
        name: "conf-dir",
        value: Some("DIR"),
        default: Some("/etc/cni/net.d"),
        help: "host CNI conf dir: 00-yh-genie.conflist, yh-genie.d/ and the networks go here",
    },
    Flag {
        name: "data-dir",
        value: Some("DIR"),
        default: Some("/var/lib/cni/yh-genie"),
        help: "the selector's dataDir (host path; written into the conflist)",
    },
    Flag { name: "default-network", value: Some("NAME"), default: None, help: "the selector's defaultNetwork" },
    Flag {
        name: "cni-version",
        value: Some("VERSION"),
        default: Some("1.0.0"),
        help: "cniVersion of the conflist the runtime reads",
    },
    Flag {
        name: "selector-config",
        value: Some("FILE"),
        default: None,
        help: "JSON object of further selector keys (timeouts, logging...), merged into the conflist",
    },
    Flag {
        name: "networks-dir",
        value: Some("DIR"),
        default: None,
        help: "network confs to install: each NAME.conflist, NAME.conf or NAME.json in DIR is copied to <conf-dir>/NAME/",
    },
    Flag {
        name: "sa-dir",
        value: Some("DIR"),
        default: Some("/var/run/secrets/kubernetes.io/serviceaccount"),
        help: "service-account dir holding `token` and `ca.crt` for the kubeconfig",
    },
    Flag {
        name: "api-server",
        value: Some("URL"),
        default: None,
        help: "API server URL for the kubeconfig [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT]",
    },
    Flag {
        name: "wait-for",
        value: Some("PATH"),
        default: None,
        help: "host file that must exist before the conflist is written, e.g. the fabric's subnet.env (repeatable; in the environment, ':'-separated)",
    },
    Flag {
        name: "interval",
        value: Some("SECONDS"),
        default: Some("2"),
        help: "how often to re-check the token, CA, selector config and networks",
    },
    Flag { name: "once", value: None, default: None, help: "converge once and exit instead of keeping watch" },
    Flag {
        name: "cleanup-on-exit",
        value: None,
        default: None,
        help: "on SIGTERM/SIGINT, remove the conflist and the kubeconfig before exiting",
    },
    Flag {
        name: "agent",
        value: None,
        default: None,
        help: "also run the node agent: it watches this node's pods and answers the plugin, so ADD needs no API request",
    },
    Flag {
        name: "node-name",
        value: Some("NAME"),
        default: None,
        help: "the node the agent serves (the DaemonSet sets it from spec.nodeName)",
    },
    Flag {
        name: "agent-socket",
        value: Some("PATH"),
        default: Some(crate::programs::agent::DEFAULT_SOCKET),
        help: "host path of the agent's unix socket (written into the conflist as agentSocket)",
    },
    Flag {
        name: "dynamic-networks",
        value: None,
        default: None,
        help: "with --agent: apply edits of running pods' networks annotation through the attach worker \
               (`yh-genie attach-worker`; needs dynamicNetworks in the selector's configuration)",
    },
    Flag {
        name: "agent-metrics-address",
        value: Some("ADDR:PORT"),
        default: Some(crate::programs::agent::DEFAULT_METRICS_ADDRESS),
        help: "where the agent serves /readyz, /healthz and /metrics",
    },
];

const ENV_PREFIX: &str = "YH_GENIE_";
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

fn env_name(flag: &str) -> String {
    format!("{ENV_PREFIX}{}", flag.to_ascii_uppercase().replace('-', "_"))
}

/// The raw values: from the environment first, then the command line replacing them per flag.
type Raw = BTreeMap<&'static str, Vec<String>>;

impl Options {
    /// Parse `args` (after `install`) with `env` giving environment variables.
    pub fn parse(args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> Result<Request, UsageError> {
        let mut raw = Raw::new();
        for flag in FLAGS {
            if let Some(v) = env(&env_name(flag.name)).filter(|v| !v.is_empty()) {
                let values = match (flag.value, flag.name) {
                    (None, _) => vec![parse_bool(&env_name(flag.name), &v)?.to_string()],
                    (Some(_), "wait-for") => v.split(':').filter(|p| !p.is_empty()).map(str::to_owned).collect(),
                    (Some(_), _) => vec![v],
                };
                raw.insert(flag.name, values);
            }
        }
        let mut from_args = Raw::new();
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if matches!(*arg, "-h" | "--help" | "help") {
                return Ok(Request::Help);
            }
            let Some(body) = arg.strip_prefix("--") else {
                return Err(UsageError(format!("unexpected argument {arg:?}; see `yh-genie install --help`")));
            };
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (body, None),
            };
            let flag = FLAGS
                .iter()
                .find(|f| f.name == name)
                .ok_or_else(|| UsageError(format!("unknown flag --{name}; see `yh-genie install --help`")))?;
            let value = match (flag.value, inline) {
                (None, None) => "true".to_owned(),
                (None, Some(v)) => parse_bool(&format!("--{name}"), &v)?.to_string(),
                (Some(_), Some(v)) => v,
                (Some(what), None) => rest
                    .next()
                    .map(|v| (*v).to_owned())
                    .ok_or_else(|| UsageError(format!("--{name} needs a {what}")))?,
            };
            from_args.entry(flag.name).or_default().push(value);
        }
        raw.extend(from_args);
        Self::from_raw(&raw, env).map(|o| Request::Install(Box::new(o)))
    }

    fn from_raw(raw: &Raw, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, UsageError> {
        let one = |name: &str| -> Result<Option<String>, UsageError> {
            let flag = FLAGS.iter().find(|f| f.name == name).expect("every looked-up flag is in FLAGS");
            match raw.get(name).map(Vec::as_slice) {
                None | Some([]) => Ok(flag.default.map(str::to_owned)),
                Some([v]) => Ok(Some(v.clone())),
                Some(_) => Err(UsageError(format!("--{name} is given more than once"))),
            }
        };
        let required = |name: &str| one(name).map(|v| v.expect("flags read with `required` have defaults"));
        let host_dir = |name: &str| -> Result<PathBuf, UsageError> { absolute(name, PathBuf::from(required(name)?)) };
        let switch = |name: &str| one(name).map(|v| v.as_deref() == Some("true"));

        let cni_version = CniVersion::parse(&required("cni-version")?)
            .map_err(|_| UsageError(format!("--cni-version must be one of {}", version::SUPPORTED.join(", "))))?;
        let default_network = one("default-network")?;
        if default_network.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(UsageError("--default-network is empty".into()));
        }
        let wait_for = raw
            .get("wait-for")
            .into_iter()
            .flatten()
            .map(|p| absolute("wait-for", PathBuf::from(p)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Options {
            host_root: PathBuf::from(required("host-root")?),
            bin_dir: host_dir("bin-dir")?,
            conf_dir: host_dir("conf-dir")?,
            data_dir: host_dir("data-dir")?,
            default_network,
            cni_version,
            selector_config: one("selector-config")?.map(PathBuf::from),
            networks_dir: one("networks-dir")?.map(PathBuf::from),
            sa_dir: PathBuf::from(required("sa-dir")?),
            api_server: api_server(one("api-server")?, env)?,
            wait_for,
            interval: parse_interval(&required("interval")?)?,
            once: switch("once")?,
            cleanup_on_exit: switch("cleanup-on-exit")?,
            agent: agent_settings(
                switch("agent")?,
                switch("once")?,
                one("node-name")?,
                host_dir("agent-socket")?,
                &required("agent-metrics-address")?,
                switch("dynamic-networks")?,
            )?,
        })
    }

    /// The host directories the installer writes into (everything it writes is below one of them,
    /// the agent's socket included); the `wait_for` files are the only other host paths it
    /// touches, and only to see if they exist.
    pub fn host_dirs_written(&self) -> Vec<&Path> {
        let socket_dir = self.agent.as_ref().and_then(|a| a.socket.parent());
        [&*self.bin_dir, &*self.conf_dir].into_iter().chain(socket_dir).collect()
    }

    /// `host_path` as the installer reaches it: under `host_root`.
    pub fn on_host(&self, host_path: &Path) -> PathBuf {
        self.host_root.join(host_path.strip_prefix("/").unwrap_or(host_path))
    }
}

fn absolute(flag: &str, p: PathBuf) -> Result<PathBuf, UsageError> {
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(UsageError(format!("--{flag} must be an absolute host path, not {:?}", p.display().to_string())))
    }
}

fn parse_bool(what: &str, v: &str) -> Result<bool, UsageError> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(UsageError(format!("{what} must be true or false, not {v:?}"))),
    }
}

/// `--agent`'s settings, checked: it needs the long-running mode and a node name that can go into
/// a field selector.
fn agent_settings(
    agent: bool,
    once: bool,
    node_name: Option<String>,
    socket: PathBuf,
    metrics_address: &str,
    dynamic_networks: bool,
) -> Result<Option<AgentSettings>, UsageError> {
    if !agent {
        if dynamic_networks {
            return Err(UsageError("--dynamic-networks is the agent's: it needs --agent".into()));
        }
        return Ok(None);
    }
    if once {
        return Err(UsageError("--agent runs beside the installer's loop; it cannot be used with --once".into()));
    }
    let node_name = node_name.ok_or_else(|| {
        UsageError(format!(
            "--agent needs --node-name (or {}; the DaemonSet sets it from spec.nodeName)",
            env_name("node-name")
        ))
    })?;
    crate::programs::selector::requests::annotation::dns1123(&node_name, 253, true)
        .map_err(|why| UsageError(format!("--node-name {node_name:?} is not a node name: {why}")))?;
    if socket.file_name().is_none() {
        return Err(UsageError(format!("--agent-socket {} names no file", socket.display())));
    }
    let metrics_address = metrics_address.parse().map_err(|_| {
        UsageError(format!(
            "--agent-metrics-address must be an address and port (127.0.0.1:9745), not {metrics_address:?}"
        ))
    })?;
    Ok(Some(AgentSettings { node_name, socket, metrics_address, dynamic_networks }))
}

fn parse_interval(v: &str) -> Result<Duration, UsageError> {
    let bad = || UsageError(format!("--interval must be a number of seconds above 0 and up to 3600, not {v:?}"));
    let secs: f64 = v.parse().map_err(|_| bad())?;
    Duration::try_from_secs_f64(secs).ok().filter(|d| !d.is_zero() && *d <= MAX_INTERVAL).ok_or_else(bad)
}

/// The API server URL the kubeconfig points at: `--api-server`, or the in-cluster service address the
/// kubelet puts into every pod's environment. An IPv6 host is bracketed, as URLs require.
fn api_server(flag: Option<String>, env: &dyn Fn(&str) -> Option<String>) -> Result<String, UsageError> {
    if let Some(url) = flag {
        return if url.starts_with("https://") || url.starts_with("http://") {
            Ok(url.trim_end_matches('/').to_owned())
        } else {
            Err(UsageError(format!("--api-server must be an http(s):// URL, not {url:?}")))
        };
    }
    let host = env("KUBERNETES_SERVICE_HOST").filter(|h| !h.is_empty()).ok_or_else(|| {
        UsageError("KUBERNETES_SERVICE_HOST is not set: run the installer in a pod, or give --api-server".into())
    })?;
    let port = env("KUBERNETES_SERVICE_PORT").unwrap_or_default();
    let port: u16 =
        port.parse().map_err(|_| UsageError(format!("KUBERNETES_SERVICE_PORT must be a port number, not {port:?}")))?;
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
    Ok(format!("https://{host}:{port}"))
}

/// The `--help` text, built from the same table the parser reads.
pub fn help() -> String {
    let mut s = String::from(
        "yh-genie install: put yh-genie on this node and keep it configured.

Copies this binary into the host CNI bin dir (atomically: safe while it is running), points the
plugin names yonghui, yh-bridge, veth and router at it, installs the network confs, writes a
kubeconfig from the service-account token and then 00-yh-genie.conflist, and keeps the kubeconfig
current as the token rotates.

Usage: yh-genie install [FLAGS]

Flags (each also read from the environment variable shown; a flag wins):
",
    );
    for f in FLAGS {
        let head = match f.value {
            Some(v) => format!("--{} {v}", f.name),
            None => format!("--{}", f.name),
        };
        let _ = writeln!(s, "  {head:<26} {}", f.help);
        let default = f.default.map(|d| format!(" [default: {d}]")).unwrap_or_default();
        let _ = writeln!(s, "  {:<26} env {}{default}", "", env_name(f.name));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    const IN_POD: &[(&str, &str)] = &[("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("KUBERNETES_SERVICE_PORT", "443")];

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Options, UsageError> {
        match Options::parse(args, &env_of(env))? {
            Request::Install(o) => Ok(*o),
            Request::Help => panic!("expected options, got help"),
        }
    }

    #[test]
    fn defaults_are_the_standard_cni_paths() {
        let o = parse(&[], IN_POD).unwrap();
        assert_eq!(o.host_root, Path::new("/"));
        assert_eq!(o.bin_dir, Path::new("/opt/cni/bin"));
        assert_eq!(o.conf_dir, Path::new("/etc/cni/net.d"));
        assert_eq!(o.data_dir, Path::new("/var/lib/cni/yh-genie"));
        assert_eq!(o.sa_dir, Path::new("/var/run/secrets/kubernetes.io/serviceaccount"));
        assert_eq!(o.cni_version, CniVersion::V1_0_0);
        assert_eq!(o.api_server, "https://10.96.0.1:443");
        assert_eq!(o.interval, Duration::from_secs(2));
        assert_eq!((o.once, o.cleanup_on_exit, o.default_network, o.wait_for), (false, false, None, vec![]));
        assert_eq!(o.agent, None);
    }

    #[test]
    fn the_agent_needs_a_node_and_the_long_running_mode() {
        let env = [IN_POD[0], IN_POD[1], ("YH_GENIE_NODE_NAME", "worker-1")];
        let o = parse(&["--agent"], &env).unwrap();
        assert_eq!(
            o.agent,
            Some(AgentSettings {
                node_name: "worker-1".into(),
                socket: "/run/yh-genie/agent.sock".into(),
                metrics_address: "127.0.0.1:9745".parse().unwrap(),
                dynamic_networks: false,
            })
        );
        assert!(o.host_dirs_written().contains(&Path::new("/run/yh-genie")));
        let o =
            parse(&["--agent", "--agent-socket=/run/x/a.sock", "--agent-metrics-address", "[::1]:9000"], &env).unwrap();
        let agent = o.agent.unwrap();
        assert_eq!((agent.socket.to_str(), agent.metrics_address.port()), (Some("/run/x/a.sock"), 9000));
        let err = |args: &[&str], env: &[(&str, &str)]| parse(args, env).unwrap_err().0;
        assert!(err(&["--agent"], IN_POD).contains("--agent needs --node-name"));
        assert!(err(&["--agent", "--once"], &env).contains("--once"));
        assert!(err(&["--dynamic-networks"], &env).contains("needs --agent"));
        assert!(parse(&["--agent", "--dynamic-networks"], &env).unwrap().agent.unwrap().dynamic_networks);
        assert!(err(&["--agent", "--node-name", "a,b"], IN_POD).contains("not a node name"));
        assert!(err(&["--agent", "--agent-metrics-address", "9745"], &env).contains("--agent-metrics-address"));
        assert!(err(&["--agent", "--agent-socket", "run/a.sock"], &env).contains("--agent-socket must be an absolute"));
        assert_eq!(parse(&["--node-name", "x"], IN_POD).unwrap().agent, None, "settings without --agent do nothing");
    }

    #[test]
    fn flags_in_both_spellings_and_env_with_flags_winning() {
        let env = [
            ("KUBERNETES_SERVICE_HOST", "h"),
            ("KUBERNETES_SERVICE_PORT", "6443"),
            ("YH_GENIE_DEFAULT_NETWORK", "from-env"),
            ("YH_GENIE_CONF_DIR", "/env/net.d"),
            ("YH_GENIE_CLEANUP_ON_EXIT", "true"),
            ("YH_GENIE_WAIT_FOR", "/run/a:/run/b"),
        ];
        let o =
            parse(&["--host-root=/host", "--default-network", "yonghui", "--once", "--interval", "0.5"], &env).unwrap();
        assert_eq!(o.host_root, Path::new("/host"));
        assert_eq!(o.default_network.as_deref(), Some("yonghui"));
        assert_eq!(o.conf_dir, Path::new("/env/net.d"));
        assert!(o.once && o.cleanup_on_exit);
        assert_eq!(o.wait_for, vec![PathBuf::from("/run/a"), PathBuf::from("/run/b")]);
        assert_eq!(o.interval, Duration::from_millis(500));
        assert_eq!(o.on_host(&o.conf_dir), Path::new("/host/env/net.d"));
        // Flags replace, not extend, the environment's list.
        let o = parse(&["--wait-for", "/x", "--wait-for=/y"], &env).unwrap();
        assert_eq!(o.wait_for, vec![PathBuf::from("/x"), PathBuf::from("/y")]);
    }

    #[test]
    fn ipv6_service_host_is_bracketed() {
        let env = [("KUBERNETES_SERVICE_HOST", "fd00:10:96::1"), ("KUBERNETES_SERVICE_PORT", "443")];
        assert_eq!(parse(&[], &env).unwrap().api_server, "https://[fd00:10:96::1]:443");
        let env = [("KUBERNETES_SERVICE_HOST", "[fd00::1]"), ("KUBERNETES_SERVICE_PORT", "443")];
        assert_eq!(parse(&[], &env).unwrap().api_server, "https://[fd00::1]:443");
        assert_eq!(
            parse(&["--api-server", "https://api.example:6443/"], &[]).unwrap().api_server,
            "https://api.example:6443"
        );
    }

    #[test]
    fn bad_input_is_a_usage_error_naming_the_culprit() {
        let err = |args: &[&str], env: &[(&str, &str)]| parse(args, env).unwrap_err().0;
        assert!(err(&[], &[]).contains("KUBERNETES_SERVICE_HOST"));
        assert!(
            err(&[], &[("KUBERNETES_SERVICE_HOST", "h"), ("KUBERNETES_SERVICE_PORT", "x")])
                .contains("KUBERNETES_SERVICE_PORT")
        );
        assert!(err(&["--bin-dir", "opt/cni/bin"], IN_POD).contains("--bin-dir must be an absolute"));
        assert!(err(&["--wait-for", "run/x"], IN_POD).contains("--wait-for"));
        assert!(err(&["--cni-version", "0.5.0"], IN_POD).contains("--cni-version must be one of"));
        assert!(err(&["--interval", "0"], IN_POD).contains("--interval"));
        assert!(err(&["--interval", "-1"], IN_POD).contains("--interval"));
        assert!(err(&["--interval", "nan"], IN_POD).contains("--interval"));
        assert!(err(&["--frobnicate"], IN_POD).contains("unknown flag --frobnicate"));
        assert!(err(&["stray"], IN_POD).contains("unexpected argument"));
        assert!(err(&["--conf-dir"], IN_POD).contains("--conf-dir needs a DIR"));
        assert!(err(&["--once=maybe"], IN_POD).contains("--once must be true or false"));
        assert!(err(&["--default-network="], IN_POD).contains("--default-network is empty"));
        assert!(err(&["--conf-dir", "/a", "--conf-dir", "/b"], IN_POD).contains("more than once"));
        assert!(err(&["--api-server", "10.0.0.1:6443"], IN_POD).contains("--api-server"));
        assert!(err(&[], &[("YH_GENIE_ONCE", "perhaps"), IN_POD[0], IN_POD[1]]).contains("YH_GENIE_ONCE"));
    }

    #[test]
    fn help_lists_every_flag_and_its_variable() {
        assert_eq!(Options::parse(&["--help"], &env_of(&[])), Ok(Request::Help));
        let h = help();
        for f in FLAGS {
            assert!(h.contains(&format!("--{}", f.name)) && h.contains(&env_name(f.name)), "{}", f.name);
        }
    }
}
