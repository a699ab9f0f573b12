//! `yh-genie agent`: the node agent alone, in the foreground (`programs::agent`), apart from the
//! installer that runs it in the DaemonSet (`yh-genie install --agent`); e.g. to debug it. Its own
//! flags (`AgentArgs`: `--node-name`, `--agent-socket`, `--dynamic-networks`,
//! `--agent-metrics-address`) are `install --agent`'s too, and both commands start the agent with
//! the same `programs::agent::Options::new` and `spawn`.

use super::api_access::ApiAccessArgs;
use super::environment::Lookup;
use super::host_path::absolute;
use crate::programs::agent::watching::Access;
use crate::programs::agent::{self, AgentSettings, DEFAULT_METRICS_ADDRESS, DEFAULT_SOCKET, NetworkReadiness};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
#[command(
    about = "run the node agent alone, in the foreground (the DaemonSet runs it with `install --agent`)",
    before_help = "yh-genie agent: the node agent alone, in the foreground, until SIGTERM or SIGINT.

The DaemonSet runs the agent beside the installer (`yh-genie install --agent`); this runs it apart,
e.g. to debug it or to try a setting, with the same flags and variables. It installs nothing and
does not wait for the default network: its /readyz says whether the node's pods are listed and
watched. A flag on the command line wins over its variable. Exit status: 0 stopped by a signal,
1 it could not start, 2 the command line or environment is unusable."
)]
pub struct AgentCommandArgs {
    #[command(flatten)]
    agent: AgentArgs,
    #[command(flatten)]
    api: ApiAccessArgs,
    /// a kubeconfig to reach the API server with, instead of --sa-dir and the in-cluster address
    #[arg(long, value_name = "FILE", env = "YH_GENIE_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// JSON object of further selector keys: its NetworkAttachmentDefinition policy says which
    /// NADs the agent watches
    #[arg(long, value_name = "FILE", env = "YH_GENIE_SELECTOR_CONFIG")]
    selector_config: Option<PathBuf>,
}

impl AgentCommandArgs {
    /// The agent's options, checked; `env` gives the in-cluster API server's address.
    pub fn options(&self, env: Lookup) -> Result<agent::Options, String> {
        let settings = self.agent.settings("the agent")?;
        let access = match &self.kubeconfig {
            Some(_) if self.api.api_server.is_some() => {
                return Err("--kubeconfig and --api-server both say where the API server is: give one".into());
            }
            Some(kubeconfig) => Access::Kubeconfig(kubeconfig.clone()),
            None => Access::ServiceAccount {
                dir: self.api.sa_dir.clone(),
                server: self.api.url(env, "run the agent in a pod, or give --api-server or --kubeconfig")?,
            },
        };
        // Nothing here installs the default network: it is not the agent's to wait for.
        Ok(agent::Options::new(&settings, access, self.selector_config.clone(), NetworkReadiness::default(), |p| {
            p.to_owned()
        }))
    }
}

/// Run `yh-genie agent`; returns the exit code (2: the options are unusable).
pub fn run(args: &AgentCommandArgs, env: Lookup) -> i32 {
    match args.options(env) {
        Ok(options) => agent::main(options),
        Err(e) => {
            eprintln!("yh-genie agent: {e}");
            2
        }
    }
}

/// The agent's own flags, `yh-genie agent`'s and `yh-genie install --agent`'s.
#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    /// the node the agent serves (the DaemonSet sets it from spec.nodeName)
    #[arg(long, value_name = "NAME", env = "YH_GENIE_NODE_NAME")]
    node_name: Option<String>,
    /// host path of the agent's unix socket (the selector's agentSocket: the installer writes it
    /// into the conflist)
    #[arg(long, value_name = "PATH", env = "YH_GENIE_AGENT_SOCKET", default_value = DEFAULT_SOCKET)]
    agent_socket: PathBuf,
    /// apply edits of running pods' networks annotation through the attach worker
    /// (`yh-genie attach-worker`; needs dynamicNetworks in the selector's configuration)
    #[arg(long, env = "YH_GENIE_DYNAMIC_NETWORKS")]
    dynamic_networks: bool,
    /// where the agent serves /readyz, /healthz and /metrics
    #[arg(long, value_name = "ADDR:PORT", env = "YH_GENIE_AGENT_METRICS_ADDRESS", default_value = DEFAULT_METRICS_ADDRESS)]
    agent_metrics_address: String,
    /// host directory of the agent's records of the yh-ipam addresses it handed out
    #[arg(long, value_name = "DIR", env = "YH_GENIE_IPAM_RECORDS", default_value = crate::node::paths::IPAM_RECORDS)]
    ipam_records: PathBuf,
    /// how long a pod must be gone (its object deleted) before the agent gives back its yh-ipam
    /// addresses, if its DEL has not
    #[arg(long, value_name = "SECONDS", env = "YH_GENIE_IPAM_RECLAIM_AFTER", default_value_t = 30)]
    ipam_reclaim_after: u64,
    /// how long the node's yh-ipam lease holds without a renewal: an agent that could not renew it
    /// for that long hands out no yh-ipam address
    #[arg(long, value_name = "SECONDS", env = "YH_GENIE_IPAM_LEASE_DURATION", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    ipam_lease_duration: u64,
    /// how far apart the nodes' clocks may be: a dead node's yh-ipam blocks are released once its
    /// Node is deleted or tainted out-of-service and its lease is older than its duration plus this
    #[arg(long, value_name = "SECONDS", env = "YH_GENIE_IPAM_CLOCK_SKEW", default_value_t = 30)]
    ipam_clock_skew: u64,
}

impl AgentArgs {
    /// `--agent-socket`, a host path.
    pub fn socket(&self) -> Result<PathBuf, String> {
        absolute("agent-socket", self.agent_socket.clone())
    }

    pub fn dynamic_networks(&self) -> bool {
        self.dynamic_networks
    }

    /// The settings, checked: a node name that can go into a field selector, a socket, an address.
    /// `needs_a_node` names what needs the node name (`--agent`).
    pub fn settings(&self, needs_a_node: &str) -> Result<AgentSettings, String> {
        let socket = self.socket()?;
        let node_name = self.node_name.clone().ok_or_else(|| {
            format!(
                "{needs_a_node} needs --node-name (or YH_GENIE_NODE_NAME; the DaemonSet sets it from spec.nodeName)"
            )
        })?;
        crate::programs::selector::requests::annotation::dns1123(&node_name, 253, true)
            .map_err(|why| format!("--node-name {node_name:?} is not a node name: {why}"))?;
        if socket.file_name().is_none() {
            return Err(format!("--agent-socket {} names no file", socket.display()));
        }
        let address = &self.agent_metrics_address;
        let metrics_address = address.parse().map_err(|_| {
            format!("--agent-metrics-address must be an address and port (127.0.0.1:9745), not {address:?}")
        })?;
        let ipam_records = absolute("ipam-records", self.ipam_records.clone())?;
        Ok(AgentSettings {
            node_name,
            socket,
            metrics_address,
            dynamic_networks: self.dynamic_networks,
            ipam_records,
            ipam_reclaim_after: std::time::Duration::from_secs(self.ipam_reclaim_after),
            ipam_lease_duration: std::time::Duration::from_secs(self.ipam_lease_duration),
            ipam_clock_skew: std::time::Duration::from_secs(self.ipam_clock_skew),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};
    use std::collections::BTreeMap;
    use std::ffi::OsString;

    const IN_POD: &[(&str, &str)] = &[("KUBERNETES_SERVICE_HOST", "10.96.0.1"), ("KUBERNETES_SERVICE_PORT", "443")];

    /// `yh-genie agent ARGS` in an environment of `env` alone: its options, or the error it prints.
    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<agent::Options, String> {
        let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let env = |k: &str| env.get(k).cloned();
        let args: Vec<OsString> = std::iter::once(&"agent").chain(args).map(OsString::from).collect();
        let command = AgentCommandArgs::augment_args(clap::Command::new("agent"));
        let matches = crate::programs::commands::environment::parse(command, &args, &env).map_err(|e| e.to_string())?;
        AgentCommandArgs::from_arg_matches(&matches).map_err(|e| e.to_string())?.options(&env)
    }

    #[test]
    fn defaults_are_the_daemonsets() {
        let o = parse(&["--node-name", "worker-1"], IN_POD).unwrap();
        assert_eq!(o.node, "worker-1");
        assert_eq!(
            o.access,
            Access::ServiceAccount {
                dir: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
                server: "https://10.96.0.1:443".into()
            }
        );
        assert_eq!(o.socket, PathBuf::from("/run/yh-genie/agent.sock"));
        assert_eq!(o.metrics_address, "127.0.0.1:9745".parse().unwrap());
        assert_eq!((o.selector_config, o.dynamic_networks), (None, None));
        assert_eq!(o.default_network.waiting_for(), None, "no installer to wait for");
    }

    /// What the installer's DaemonSet sets for the agent.
    const INSTALLER_ENV: [(&str, &str); 5] = [
        ("YH_GENIE_NODE_NAME", "worker-1"),
        ("YH_GENIE_API_SERVER", "https://api:6443"),
        ("YH_GENIE_AGENT_SOCKET", "/run/x/agent.sock"),
        ("YH_GENIE_DYNAMIC_NETWORKS", "true"),
        ("YH_GENIE_SELECTOR_CONFIG", "/etc/yh-genie/selector.json"),
    ];

    #[test]
    fn the_installers_variables_configure_the_agent() {
        let o = parse(&["--node-name=worker-2"], &INSTALLER_ENV).unwrap();
        assert_eq!(
            o.access,
            Access::ServiceAccount {
                dir: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
                server: "https://api:6443".into()
            }
        );
        assert_eq!(o.socket, PathBuf::from("/run/x/agent.sock"));
        assert_eq!(o.dynamic_networks, Some(PathBuf::from("/run/x/dynamic-networks.sock")));
        assert_eq!(o.selector_config, Some(PathBuf::from("/etc/yh-genie/selector.json")));
    }

    #[test]
    fn flags_win_over_the_installers_variables() {
        let o = parse(&["--node-name=worker-2"], &INSTALLER_ENV).unwrap();
        assert_eq!(o.node, "worker-2");
        let o = parse(&["--kubeconfig", "/root/.kube/config"], &[INSTALLER_ENV[0]]).unwrap();
        assert_eq!(o.access, Access::Kubeconfig("/root/.kube/config".into()));
    }

    /// Every flag `--foo-bar` is read from `YH_GENIE_FOO_BAR`, as the installer's are.
    #[test]
    fn every_flag_has_its_variable() {
        let command = AgentCommandArgs::augment_args(clap::Command::new("agent"));
        for arg in command.get_arguments() {
            let long = arg.get_long().unwrap();
            let variable = format!("YH_GENIE_{}", long.to_ascii_uppercase().replace('-', "_"));
            assert_eq!(arg.get_env().and_then(|v| v.to_str()), Some(variable.as_str()), "--{long}");
        }
    }

    #[test]
    fn bad_input_is_a_usage_error_naming_the_culprit() {
        let err = |args: &[&str], env: &[(&str, &str)]| parse(args, env).unwrap_err();
        assert!(err(&[], IN_POD).starts_with("the agent needs --node-name (or YH_GENIE_NODE_NAME"));
        assert!(err(&["--node-name", "Worker_1"], IN_POD).contains("is not a node name"));
        assert!(err(&["--node-name", "w", "--agent-metrics-address", "9745"], IN_POD).contains("address and port"));
        assert!(err(&["--node-name", "w"], &[]).contains("give --api-server or --kubeconfig"));
        assert!(err(&["--node-name", "w", "--kubeconfig=/k", "--api-server=https://a"], &[]).contains("give one"));
        assert_eq!(
            err(&["--node-name", "w"], &[("YH_GENIE_DYNAMIC_NETWORKS", "maybe"), IN_POD[0], IN_POD[1]]),
            "YH_GENIE_DYNAMIC_NETWORKS must be true or false, not \"maybe\""
        );
        assert!(err(&["--once"], IN_POD).contains("unexpected argument '--once'"), "the installer's only");
    }
}
