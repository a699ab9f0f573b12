//! What the node agent answers on its socket: the product's protocol, asked with the product's own
//! client (testkit::agent runs the agent's process).

use std::path::Path;
use std::time::{Duration, Instant};
use testkit::agent::Agent;
use yh_genie::node::agent_socket::client::exchange;
use yh_genie::node::agent_socket::protocol::{Answer, Ask, PodObjects, Request};

/// What the agent listening on `socket` answers for the pod (`uid`, or any), right now, without
/// waiting for a pod it has not seen; why there is no answer.
pub fn answer(socket: &Path, namespace: &str, name: &str, uid: Option<&str>) -> Result<Answer, String> {
    let ask = Ask::Selection { namespace: namespace.into(), name: name.into(), uid: uid.map(String::from), wait_ms: 0 };
    exchange(socket, &Request::new(ask), Instant::now() + Duration::from_secs(5))
}

/// Waiting for an agent's answers on its socket.
pub trait AgentAnswers {
    /// Wait until the agent (listening by then) holds pod `name` (namespace default) with `uid`
    /// and all its objects, and `check` holds of them.
    fn wait_holds(&self, socket: &Path, name: &str, uid: &str, check: impl Fn(&PodObjects) -> bool);
}

impl AgentAnswers for Agent {
    fn wait_holds(&self, socket: &Path, name: &str, uid: &str, check: impl Fn(&PodObjects) -> bool) {
        self.wait_for(
            &format!("the agent to hold pod default/{name} uid {uid}"),
            || matches!(answer(socket, "default", name, Some(uid)), Ok(Answer::Objects(o)) if check(&o)),
        );
    }
}
