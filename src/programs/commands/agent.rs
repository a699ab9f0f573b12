//! The node agent's flags: `--node-name`, `--agent-socket`, `--dynamic-networks`,
//! `--agent-metrics-address`, as `yh-genie install --agent` takes them.

use super::host_path::absolute;
use crate::programs::agent::{AgentSettings, DEFAULT_METRICS_ADDRESS, DEFAULT_SOCKET};
use std::path::PathBuf;

/// The agent's own flags.
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
        Ok(AgentSettings { node_name, socket, metrics_address, dynamic_networks: self.dynamic_networks })
    }
}
