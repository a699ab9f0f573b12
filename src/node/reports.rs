//! How the plugin tells the node agent what each of its operations took and how it ended, for the
//! agent's metrics (ADD, DEL and CHECK latency per network and outcome, errors by reason, the API
//! requests ADD made, where ADD's selection came from): one datagram per operation, sent when the
//! operation is over, without waiting and without an answer, on a unix datagram socket beside the
//! agent's (`paths::reports_socket`). A plugin with no agent to hear it, or one whose queue is full, loses
//! the datagram and nothing else: no operation ever waits on or fails for its report. The agent
//! reads them one at a time; a datagram of another version, or that does not parse, is counted and
//! dropped.

use super::paths::reports_socket;
use crate::platform::cni::Operation;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The reports' version; the agent drops any other.
pub const VERSION: u32 = 1;
/// The largest report the agent reads (a report is a few hundred bytes).
pub const MAX_REPORT: usize = 4096;

/// One plugin operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationReport {
    pub version: u32,
    pub command: Command,
    /// The network on the runtime's interface (the pod's first); empty when none was chosen.
    pub network: String,
    /// Why it failed; none: it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// From the plugin's start to its answer.
    pub seconds: f64,
    /// ADD: where the pod's selection came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selection>,
    /// Requests the plugin made to the API server.
    #[serde(default)]
    pub api_requests: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Command {
    Add,
    Del,
    Check,
}

impl Command {
    pub const ALL: [Command; 3] = [Command::Add, Command::Del, Command::Check];

    pub fn label(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
        }
    }
}

/// Why an operation failed, as an operator sorts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The pod's choice was refused before anything was made: a network the namespace policy does
    /// not allow, one the node does not have, an annotation or a ConfigMap value that does not
    /// parse, a NAD whose plugins the admin did not allow.
    Policy,
    /// A network's plugin failed (or could not be run).
    Plugin,
    /// The API server could not be reached in time (code 11): the runtime tries again.
    ApiUnavailable,
    /// The API server refused (not found, forbidden, an untrusted certificate: code 103).
    ApiRefused,
    /// The node's default network is not ready yet (`readinessindicatorfile`).
    NotReady,
    /// Anything else: the selector's configuration, its records on disk.
    Other,
}

impl Failure {
    pub const ALL: [Failure; 6] = [
        Failure::Policy,
        Failure::Plugin,
        Failure::ApiUnavailable,
        Failure::ApiRefused,
        Failure::NotReady,
        Failure::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Failure::Policy => "policy",
            Failure::Plugin => "plugin",
            Failure::ApiUnavailable => "api_unavailable",
            Failure::ApiRefused => "api_refused",
            Failure::NotReady => "not_ready",
            Failure::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// The agent answered: no API request.
    Agent,
    /// The plugin asked the API server.
    Api,
}

/// How far an operation got, so that a failure is told by where it happened. Noted by the plugin
/// in its operation's context as it goes (`note_stage`), read when it reports (`noted_stage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// Reading the configuration, checking the default network's readiness.
    Starting = 0,
    /// Choosing the pod's networks.
    Selecting = 1,
    /// Running the networks' plugins.
    Attaching = 2,
    /// Recording results, the default route, the status.
    Finishing = 3,
}

/// Note in `op` that it has reached `stage`.
pub fn note_stage(op: &Operation, stage: Stage) {
    op.note_stage(stage as u8);
}

/// How far `op` got.
pub fn noted_stage(op: &Operation) -> Stage {
    match op.noted_stage() {
        1 => Stage::Selecting,
        2 => Stage::Attaching,
        3 => Stage::Finishing,
        _ => Stage::Starting,
    }
}

impl Failure {
    /// A failure of `code` at `stage`.
    pub fn of(stage: Stage, code: u32) -> Failure {
        use crate::platform::cni::code;
        match (stage, code) {
            (_, code::TRY_AGAIN_LATER) if stage == Stage::Starting => Failure::NotReady,
            (Stage::Selecting | Stage::Finishing, code::TRY_AGAIN_LATER) => Failure::ApiUnavailable,
            (Stage::Selecting, code::KUBE_API) => Failure::ApiRefused,
            (Stage::Selecting, _) => Failure::Policy,
            (Stage::Attaching, _) => Failure::Plugin,
            _ => Failure::Other,
        }
    }
}

impl OperationReport {
    /// The datagram.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("reports always serialize")
    }

    /// A datagram read by the agent; why it is not one.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let report: OperationReport =
            serde_json::from_slice(bytes).map_err(|e| format!("the report does not parse: {e}"))?;
        if report.version != VERSION {
            return Err(format!("report version {}, this agent reads {VERSION}", report.version));
        }
        if !report.seconds.is_finite() || report.seconds < 0.0 {
            return Err(format!("a duration of {} seconds", report.seconds));
        }
        Ok(report)
    }
}

/// Send `report` to the agent listening beside `agent_socket`, if any, without waiting.
pub fn send(agent_socket: &Path, report: &OperationReport) {
    let Ok(socket) = std::os::unix::net::UnixDatagram::unbound() else { return };
    if socket.set_nonblocking(true).is_err() {
        return;
    }
    // No agent (ENOENT, ECONNREFUSED) or its queue full (EAGAIN): the report is lost, nothing else.
    let _ = socket.send_to(&report.to_bytes(), reports_socket(agent_socket));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> OperationReport {
        OperationReport {
            version: VERSION,
            command: Command::Add,
            network: "lan".into(),
            failure: Some(Failure::Plugin),
            seconds: 0.0125,
            selection: Some(Selection::Agent),
            api_requests: 0,
        }
    }

    #[test]
    fn a_report_round_trips_as_json() {
        let bytes = report().to_bytes();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap(),
            serde_json::json!({"version": 1, "command": "ADD", "network": "lan", "failure": "plugin",
                               "seconds": 0.0125, "selection": "agent", "apiRequests": 0})
        );
        assert_eq!(OperationReport::parse(&bytes).unwrap(), report());
    }

    #[test]
    fn a_report_of_another_version_or_malformed_is_refused() {
        let other = OperationReport { version: 2, ..report() };
        assert!(OperationReport::parse(&other.to_bytes()).unwrap_err().contains("version 2"));
        let negative = OperationReport { seconds: -1.0, ..report() };
        assert!(OperationReport::parse(&negative.to_bytes()).is_err());
        assert!(OperationReport::parse(b"{\"version\":1}").unwrap_err().contains("does not parse"));
    }

    #[test]
    fn a_failure_is_told_by_its_stage_then_its_cni_code() {
        use crate::platform::cni::code;
        assert_eq!(Failure::of(Stage::Starting, code::TRY_AGAIN_LATER), Failure::NotReady);
        assert_eq!(Failure::of(Stage::Starting, code::INVALID_CONFIG), Failure::Other);
        assert_eq!(Failure::of(Stage::Selecting, code::TRY_AGAIN_LATER), Failure::ApiUnavailable);
        assert_eq!(Failure::of(Stage::Selecting, code::KUBE_API), Failure::ApiRefused);
        assert_eq!(Failure::of(Stage::Selecting, code::INVALID_CONFIG), Failure::Policy);
        assert_eq!(Failure::of(Stage::Attaching, code::INVALID_CONFIG), Failure::Plugin);
        assert_eq!(Failure::of(Stage::Finishing, code::IO_FAILURE), Failure::Other);
    }

    #[test]
    fn sending_without_an_agent_costs_nothing_but_the_report() {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("agent.sock");
        send(&agent, &report());
        let listening = std::os::unix::net::UnixDatagram::bind(reports_socket(&agent)).unwrap();
        send(&agent, &report());
        let mut buf = [0u8; MAX_REPORT];
        let n = listening.recv(&mut buf).unwrap();
        assert_eq!(OperationReport::parse(&buf[..n]).unwrap(), report());
    }
}
