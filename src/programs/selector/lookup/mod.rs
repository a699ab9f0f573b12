//! Where each verb learns about the pod, decided here for all of them: from the node agent, which
//! holds its node's pods and the objects they refer to (no API request), or from the API server;
//! and, for ADD, who hears what it reports. What was learned is one type (`learned::Learned`: the agent's
//! answer, the API server's pod object, or nothing), and each verb has its own policy:
//!
//! - ADD (`for_add`): the agent, waiting for a pod its watch has not delivered yet; else the API
//!   server, as without an agent. A refusal the agent's objects decide is final.
//! - ADD's device step (`AddLookup::dra_devices`, `devices`): the pod's DRA claims from what ADD
//!   learned; the API server for a claim or the node's slices the agent's answer lacks.
//! - ADD's report (`deliver`): the network-status annotation and the `AddedInterface` events to the
//!   agent when it is up; else the status alone, to the API server.
//! - DEL without a usable record (`for_del_without_record`): the agent, without waiting; the API
//!   server only for a record that exists but cannot be used, once, in a single attempt.
//! - `yh-genie explain` (`explain`): the API server, and beside it the agent, without waiting.
//! - a hot-plug (`for_hotplug`): the agent alone.
//!
//! `agent` asks the agent and `api_server` makes the API client, for all of them.

mod add;
mod agent;
mod api_server;
mod del;
mod deliver;
mod devices;
pub mod explain;
mod hotplug;
mod learned;

pub use add::for_add;
pub use agent::ANSWER_WAIT;
pub use del::for_del_without_record;
pub use deliver::deliver;
pub use hotplug::for_hotplug;
