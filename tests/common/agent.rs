//! What the node agent answers on its socket (the product's protocol, asked with the product's own
//! client), and a test node's agent.

use super::node::Node;
use std::path::Path;
use std::time::{Duration, Instant};
pub use testkit::agent::{Agent, METRICS_PORT};
use yh_genie::kube::agent_socket::client::exchange;
use yh_genie::kube::agent_socket::protocol::{Answer, Ask, PodObjects, Request};

/// What the agent listening on `socket` answers for the pod (`uid`, or any), right now, without
/// waiting for a pod it has not seen; why there is no answer.
pub fn answer(socket: &Path, namespace: &str, name: &str, uid: Option<&str>) -> Result<Answer, String> {
    let ask = Ask::Selection { namespace: namespace.into(), name: name.into(), uid: uid.map(String::from), wait_ms: 0 };
    exchange(socket, &Request::new(ask), Instant::now() + Duration::from_secs(5))
}

/// An agent's answers on its socket.
pub trait Answers {
    /// What the agent answers for the pod (`uid`, or any), right now; why there is no answer.
    fn answer(&self, socket: &Path, namespace: &str, name: &str, uid: Option<&str>) -> Result<Answer, String>;

    /// Wait until the agent (listening by then) holds pod `name` (namespace default) with `uid`
    /// and all its objects, and `check` holds of them.
    fn wait_holds(&self, socket: &Path, name: &str, uid: &str, check: impl Fn(&PodObjects) -> bool);
}

impl Answers for Agent {
    fn answer(&self, socket: &Path, namespace: &str, name: &str, uid: Option<&str>) -> Result<Answer, String> {
        answer(socket, namespace, name, uid)
    }

    fn wait_holds(&self, socket: &Path, name: &str, uid: &str, check: impl Fn(&PodObjects) -> bool) {
        self.wait_for(
            &format!("the agent to hold pod default/{name} uid {uid}"),
            || matches!(answer(socket, "default", name, Some(uid)), Ok(Answer::Objects(o)) if check(&o)),
        );
    }
}

impl Node {
    /// Start the agent, as `yh-genie install --agent` with the DaemonSet's flags.
    pub fn start_agent(&self) -> Agent {
        Agent::start(&self.netns, &self.api, self.sb.path(), &self.agent_socket(), METRICS_PORT, &[])
    }
}
