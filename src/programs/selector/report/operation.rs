//! How an ADD, DEL or CHECK went, told to the node agent for its metrics: one datagram, sent
//! without waiting (`node::reports`), with what the operation noted in its context: its first
//! network, its outcome and why it failed (told by how far it got: `to_agent::note_stage`, which
//! the verbs note), its time, the API requests it made and, for ADD, where the selection came from.

use crate::node::reports as to_agent;
use crate::platform::cni::{CniError, Command, Invocation, Operation, PluginConf};
use crate::programs::selector::config::SelectorConfig;
use std::time::Duration;

/// Send the report of the operation `op`, which `inv` ran with `conf`, if the configuration names an
/// agent.
pub fn operation(inv: &Invocation, conf: &PluginConf, op: &Operation, outcome: Result<(), &CniError>, took: Duration) {
    let command = match inv.command {
        Command::Add => to_agent::Command::Add,
        Command::Del => to_agent::Command::Del,
        Command::Check => to_agent::Command::Check,
        _ => return,
    };
    let Some(socket) = SelectorConfig::from_plugin_conf(conf).ok().and_then(|c| c.agent_socket) else { return };
    let noted = op.noted_networks().unwrap_or_default();
    let selection = op.noted_selection().filter(|_| command == to_agent::Command::Add);
    let report = to_agent::OperationReport {
        version: to_agent::VERSION,
        command,
        network: noted.split(',').next().unwrap_or_default().to_string(),
        failure: outcome.err().map(|e| to_agent::Failure::of(to_agent::noted_stage(op), e.code)),
        seconds: took.as_secs_f64(),
        selection: selection.map(|s| if s == "agent" { to_agent::Selection::Agent } else { to_agent::Selection::Api }),
        api_requests: op.api_requests().made(),
    };
    to_agent::send(&socket, &report);
}
