//! `yh-genie install`: what the DaemonSet runs on every node (`programs::install`), and with
//! `--agent` the node agent beside it. Every flag can also come from its environment variable
//! (`environment`); a flag on the command line wins.

use super::agent::AgentArgs;
use super::api_access::ApiAccessArgs;
use super::environment::Lookup;
use super::host_path::absolute;
use crate::node::paths;
use crate::platform::cni::version::{self, CniVersion};
use crate::programs::install::{self, Options};
use std::path::PathBuf;
use std::time::Duration;

/// The longest `--interval`.
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

#[derive(clap::Args, Debug)]
#[command(
    about = "put yh-genie on this node and keep it configured",
    before_help = "yh-genie install: put yh-genie on this node and keep it configured.

Copies this binary into the host CNI bin dir (atomically: safe while it is running), points the
plugin names yonghui, yh-bridge, veth and router at it, installs the network confs, writes a
kubeconfig from the service-account token and then 00-yh-genie.conflist, and keeps the kubeconfig
current as the token rotates. With --agent it also runs the node agent beside it (`yh-genie agent`
runs the agent alone).

Each flag is also read from the environment variable shown; a flag on the command line wins. Exit
status: 0 done (or stopped by a signal), 1 the install failed, 2 the command line or environment is
unusable."
)]
pub struct InstallArgs {
    /// where the host's / is mounted; every host path is reached under it
    #[arg(long, value_name = "DIR", env = "YH_GENIE_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,
    /// host CNI bin dir: the binary and its plugin names go here
    #[arg(long, value_name = "DIR", env = "YH_GENIE_BIN_DIR", default_value = paths::BIN_DIR)]
    bin_dir: PathBuf,
    /// host CNI conf dir: 00-yh-genie.conflist, yh-genie.d/ and the networks go here
    #[arg(long, value_name = "DIR", env = "YH_GENIE_CONF_DIR", default_value = paths::CONF_DIR)]
    conf_dir: PathBuf,
    /// the selector's dataDir (host path; written into the conflist)
    #[arg(long, value_name = "DIR", env = "YH_GENIE_DATA_DIR", default_value = paths::DATA_DIR)]
    data_dir: PathBuf,
    /// the selector's defaultNetwork
    #[arg(long, value_name = "NAME", env = "YH_GENIE_DEFAULT_NETWORK")]
    default_network: Option<String>,
    /// cniVersion of the conflist the runtime reads
    #[arg(long, value_name = "VERSION", env = "YH_GENIE_CNI_VERSION", default_value = "1.0.0")]
    cni_version: String,
    /// JSON object of further selector keys (timeouts, logging...), merged into the conflist
    #[arg(long, value_name = "FILE", env = "YH_GENIE_SELECTOR_CONFIG")]
    selector_config: Option<PathBuf>,
    /// network confs to install: each NAME.conflist, NAME.conf or NAME.json in DIR is copied to
    /// <conf-dir>/NAME/
    #[arg(long, value_name = "DIR", env = "YH_GENIE_NETWORKS_DIR")]
    networks_dir: Option<PathBuf>,
    #[command(flatten)]
    api: ApiAccessArgs,
    /// host file that must exist before the conflist is written, e.g. the fabric's subnet.env
    /// (repeatable; in the environment, ':'-separated)
    #[arg(long, value_name = "PATH", env = "YH_GENIE_WAIT_FOR")]
    wait_for: Vec<PathBuf>,
    /// how often to re-check the token, CA, selector config and networks
    #[arg(long, value_name = "SECONDS", env = "YH_GENIE_INTERVAL", default_value = "2")]
    interval: String,
    /// converge once and exit instead of keeping watch
    #[arg(long, env = "YH_GENIE_ONCE")]
    once: bool,
    /// on SIGTERM/SIGINT, remove the conflist and the kubeconfig before exiting
    #[arg(long, env = "YH_GENIE_CLEANUP_ON_EXIT")]
    cleanup_on_exit: bool,
    /// also run the node agent: it watches this node's pods and answers the plugin, so ADD needs no
    /// API request
    #[arg(long, env = "YH_GENIE_AGENT")]
    agent: bool,
    #[command(flatten, next_help_heading = "Node agent (with --agent)")]
    agent_args: AgentArgs,
}

impl InstallArgs {
    /// The installer's options, checked; `env` gives the in-cluster API server's address.
    pub fn options(&self, env: Lookup) -> Result<Options, String> {
        let cni_version = CniVersion::parse(&self.cni_version)
            .map_err(|_| format!("--cni-version must be one of {}", version::SUPPORTED.join(", ")))?;
        if self.default_network.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err("--default-network is empty".into());
        }
        let wait_for = self.wait_for.iter().map(|p| absolute("wait-for", p.clone())).collect::<Result<Vec<_>, _>>()?;
        Ok(Options {
            host_root: self.host_root.clone(),
            bin_dir: absolute("bin-dir", self.bin_dir.clone())?,
            conf_dir: absolute("conf-dir", self.conf_dir.clone())?,
            data_dir: absolute("data-dir", self.data_dir.clone())?,
            default_network: self.default_network.clone(),
            cni_version,
            selector_config: self.selector_config.clone(),
            networks_dir: self.networks_dir.clone(),
            sa_dir: self.api.sa_dir.clone(),
            api_server: self.api.url(env, "run the installer in a pod, or give --api-server")?,
            wait_for,
            interval: interval(&self.interval)?,
            once: self.once,
            cleanup_on_exit: self.cleanup_on_exit,
            agent: self.agent_settings()?,
        })
    }

    /// `--agent`'s settings: it needs the long-running mode, and a node.
    fn agent_settings(&self) -> Result<Option<crate::programs::agent::AgentSettings>, String> {
        self.agent_args.socket()?;
        if !self.agent {
            if self.agent_args.dynamic_networks() {
                return Err("--dynamic-networks is the agent's: it needs --agent".into());
            }
            return Ok(None);
        }
        if self.once {
            return Err("--agent runs beside the installer's loop; it cannot be used with --once".into());
        }
        self.agent_args.settings("--agent").map(Some)
    }
}

/// Run `yh-genie install`; returns the exit code (2: the options are unusable).
pub fn run(args: &InstallArgs, env: Lookup) -> i32 {
    match args.options(env) {
        Ok(options) => install::main(&options),
        Err(e) => {
            eprintln!("yh-genie install: {e}");
            2
        }
    }
}

fn interval(v: &str) -> Result<Duration, String> {
    let bad = || format!("--interval must be a number of seconds above 0 and up to 3600, not {v:?}");
    let secs: f64 = v.parse().map_err(|_| bad())?;
    Duration::try_from_secs_f64(secs).ok().filter(|d| !d.is_zero() && *d <= MAX_INTERVAL).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs::agent::AgentSettings;
    use clap::{Args, FromArgMatches};
    use std::collections::BTreeMap;
    use std::ffi::OsString;
    use std::path::Path;

    const IN_POD: &[(&str, &str)] = &[("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("KUBERNETES_SERVICE_PORT", "443")];

    /// `yh-genie install ARGS` in an environment of `env` alone: its options, or the error it prints.
    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Options, String> {
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let env = |k: &str| env.get(k).cloned();
        let args: Vec<OsString> = std::iter::once(&"install").chain(args).map(OsString::from).collect();
        let command = InstallArgs::augment_args(clap::Command::new("install"));
        let matches = crate::programs::commands::environment::parse(command, &args, &env).map_err(|e| e.to_string())?;
        InstallArgs::from_arg_matches(&matches).map_err(|e| e.to_string())?.options(&env)
    }

    fn err(args: &[&str], env: &[(&str, &str)]) -> String {
        parse(args, env).unwrap_err()
    }

    #[test]
    fn defaults_are_the_standard_cni_paths() {
        assert_eq!(parse(&[], IN_POD).unwrap(), Options::standard());
    }

    /// In a pod, on node worker-1.
    const ON_WORKER_1: [(&str, &str); 3] = [IN_POD[0], IN_POD[1], ("YH_GENIE_NODE_NAME", "worker-1")];

    #[test]
    fn the_agents_settings_have_defaults_that_flags_override() {
        let o = parse(&["--agent"], &ON_WORKER_1).unwrap();
        assert_eq!(
            o.agent,
            Some(AgentSettings {
                node_name: "worker-1".into(),
                socket: "/run/yh-genie/agent.sock".into(),
                metrics_address: "127.0.0.1:9745".parse().unwrap(),
                dynamic_networks: false,
                ipam_records: crate::node::paths::IPAM_RECORDS.into(),
                ipam_reclaim_after: std::time::Duration::from_secs(30),
                ipam_lease_duration: std::time::Duration::from_secs(60),
                ipam_clock_skew: std::time::Duration::from_secs(30),
            })
        );
        let o =
            parse(&["--agent", "--agent-socket=/run/x/a.sock", "--agent-metrics-address", "[::1]:9000"], &ON_WORKER_1)
                .unwrap();
        let agent = o.agent.unwrap();
        assert_eq!((agent.socket.to_str(), agent.metrics_address.port()), (Some("/run/x/a.sock"), 9000));
    }

    #[test]
    fn the_agent_needs_a_node_name() {
        assert!(err(&["--agent"], IN_POD).contains("--agent needs --node-name (or YH_GENIE_NODE_NAME"));
    }

    #[test]
    fn the_agent_needs_the_long_running_mode() {
        assert!(err(&["--agent", "--once"], &ON_WORKER_1).contains("--once"));
    }

    #[test]
    fn dynamic_networks_need_the_agent() {
        assert!(err(&["--dynamic-networks"], &ON_WORKER_1).contains("needs --agent"));
        assert!(parse(&["--agent", "--dynamic-networks"], &ON_WORKER_1).unwrap().agent.unwrap().dynamic_networks);
    }

    #[test]
    fn malformed_agent_settings_are_refused_naming_the_flag() {
        assert!(err(&["--agent", "--node-name", "a,b"], IN_POD).contains("not a node name"));
        assert!(err(&["--agent", "--agent-metrics-address", "9745"], &ON_WORKER_1).contains("--agent-metrics-address"));
        assert!(
            err(&["--agent", "--agent-socket", "run/a.sock"], &ON_WORKER_1)
                .contains("--agent-socket must be an absolute")
        );
    }

    #[test]
    fn agent_settings_without_agent_do_nothing() {
        assert_eq!(parse(&["--node-name", "x"], IN_POD).unwrap().agent, None, "settings without --agent do nothing");
    }

    /// In a pod, with every setting the environment may carry.
    const INSTALL_ENV: [(&str, &str); 7] = [
        ("KUBERNETES_SERVICE_HOST", "h"),
        ("KUBERNETES_SERVICE_PORT", "6443"),
        ("YH_GENIE_DEFAULT_NETWORK", "from-env"),
        ("YH_GENIE_CONF_DIR", "/env/net.d"),
        ("YH_GENIE_CLEANUP_ON_EXIT", "true"),
        ("YH_GENIE_WAIT_FOR", "/run/a:/run/b"),
        ("YH_GENIE_DATA_DIR", ""),
    ];

    /// Flags in both spellings (`--flag=value`, `--flag value`) over `INSTALL_ENV`.
    fn flags_in_both_spellings() -> Options {
        parse(&["--host-root=/host", "--default-network", "yonghui", "--once", "--interval", "0.5"], &INSTALL_ENV)
            .unwrap()
    }

    #[test]
    fn flags_are_read_in_both_spellings() {
        let o = flags_in_both_spellings();
        assert_eq!(o.host_root, Path::new("/host"));
        assert_eq!(o.interval, Duration::from_millis(500));
    }

    #[test]
    fn the_environment_sets_what_the_flags_leave_unset() {
        let o = flags_in_both_spellings();
        assert_eq!(o.conf_dir, Path::new("/env/net.d"));
        assert_eq!(o.data_dir, Path::new("/var/lib/cni/yh-genie"), "an empty variable is unset");
        assert!(o.once && o.cleanup_on_exit);
        assert_eq!(o.wait_for, vec![PathBuf::from("/run/a"), PathBuf::from("/run/b")]);
    }

    #[test]
    fn flags_win_over_the_environment() {
        assert_eq!(flags_in_both_spellings().default_network.as_deref(), Some("yonghui"));
        // Flags replace, not extend, the environment's list.
        let o = parse(&["--wait-for", "/x", "--wait-for=/y", "--cleanup-on-exit=no"], &INSTALL_ENV).unwrap();
        assert_eq!(o.wait_for, vec![PathBuf::from("/x"), PathBuf::from("/y")]);
        assert!(!o.cleanup_on_exit);
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
        assert!(err(&[], &[]).contains("KUBERNETES_SERVICE_HOST is not set"));
        assert!(
            err(&[], &[("KUBERNETES_SERVICE_HOST", "h"), ("KUBERNETES_SERVICE_PORT", "x")])
                .contains("KUBERNETES_SERVICE_PORT")
        );
        assert!(err(&["--bin-dir", "opt/cni/bin"], IN_POD).contains("--bin-dir must be an absolute"));
        assert!(err(&["--wait-for", "run/x"], IN_POD).contains("--wait-for"));
        assert!(err(&["--cni-version", "0.5.0"], IN_POD).contains("--cni-version must be one of"));
        assert!(err(&["--interval", "0"], IN_POD).contains("--interval"));
        assert!(err(&["--interval=-1"], IN_POD).contains("--interval"));
        assert!(err(&["--interval", "nan"], IN_POD).contains("--interval"));
        assert!(err(&[], &[("YH_GENIE_INTERVAL", "0"), IN_POD[0], IN_POD[1]]).contains("--interval must be"));
        assert!(err(&["--frobnicate"], IN_POD).contains("unexpected argument '--frobnicate'"));
        assert!(err(&["stray"], IN_POD).contains("unexpected argument 'stray'"));
        assert!(err(&["--conf-dir"], IN_POD).contains("a value is required for '--conf-dir <DIR>'"));
        assert!(err(&["--once=maybe"], IN_POD).contains("must be true or false"));
        assert!(err(&["--default-network="], IN_POD).contains("--default-network is empty"));
        assert!(err(&["--conf-dir", "/a", "--conf-dir", "/b"], IN_POD).contains("cannot be used multiple times"));
        assert!(err(&["--api-server", "10.0.0.1:6443"], IN_POD).contains("--api-server"));
        assert_eq!(
            err(&[], &[("YH_GENIE_ONCE", "perhaps"), IN_POD[0], IN_POD[1]]),
            "YH_GENIE_ONCE must be true or false, not \"perhaps\""
        );
    }

    /// Every flag `--foo-bar` is read from `YH_GENIE_FOO_BAR`, and `--help` says so.
    #[test]
    fn every_flag_has_its_variable() {
        let command = InstallArgs::augment_args(clap::Command::new("install"));
        for arg in command.get_arguments() {
            let long = arg.get_long().unwrap();
            let variable = format!("YH_GENIE_{}", long.to_ascii_uppercase().replace('-', "_"));
            assert_eq!(arg.get_env().and_then(|v| v.to_str()), Some(variable.as_str()), "--{long}");
        }
        assert!(command.get_arguments().count() >= 19);
    }
}
