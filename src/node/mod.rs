//! The node-local wires: what passes between yh-genie's programs on one node, below every program
//! that uses it so that none reaches into another.
//!
//! - `agent_socket`: the node agent's socket: what the selector asks and the agent answers;
//! - `reports`: the datagram each plugin operation sends the agent, for its metrics;
//! - `worker_protocol`: what the agent and the attach worker say;
//! - `paths`: where each of them keeps what lives on the node, and the variable that moves it.

pub mod agent_socket;
pub mod paths;
pub mod reports;
pub mod worker_protocol;
