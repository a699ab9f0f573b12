//! Asking the node agent (`crate::programs::agent`) about a pod, over its socket
//! (`node::agent_socket`): it answers with the pod and the objects the pod refers to, as it holds
//! them, and the plugin decides from them itself (`choose::from_agent_answer`), with its own view of
//! `confDir`; the only thing the agent decides is which objects it holds.
//!
//! Every way the agent cannot answer is a reason not to use it (`NotUsed`): no socket, nobody
//! listening, no answer within `ANSWER_WAIT`, an answer of another protocol version or that does not
//! parse, "unknown", and what `choose::from_agent_answer` finds unusable in an answer (the pod of another
//! uid, an object it lacks). Whether the verb then asks the API server is its own policy
//! (`lookup`).

use crate::node::agent_socket::client::exchange;
use crate::node::agent_socket::protocol::{Answer, Ask, PodObjects, Request};
use crate::programs::selector::choose::Selection;
use crate::programs::selector::choose::from_agent_answer::{self, NotUsed};
use crate::programs::selector::config::SelectorConfig;
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest a verb waits for the agent's answer, all included: ADD lets the agent wait
/// `ADD_POD_WAIT` for a pod its watch has not delivered yet, and the exchange must be over by
/// `ANSWER_WAIT`.
pub const ANSWER_WAIT: Duration = Duration::from_millis(1000);
pub const ADD_POD_WAIT: Duration = Duration::from_millis(900);

/// Ask the agent at `socket` for the objects of `pod` (namespace, name) whose sandbox is for `uid`
/// (none: whatever pod it holds under that name), which it waits up to `agent_wait` for, the whole
/// exchange over by `deadline`. Its answer, or why there is none.
pub fn ask(
    socket: &Path,
    pod: (&str, &str),
    uid: Option<&str>,
    agent_wait: Duration,
    deadline: Instant,
) -> Result<Answer, String> {
    let (namespace, name) = pod;
    let ask = Ask::Selection {
        namespace: namespace.into(),
        name: name.into(),
        uid: uid.map(String::from),
        wait_ms: agent_wait.as_millis() as u64,
    };
    exchange(socket, &Request::new(ask), deadline)
}

/// The networks of `pod` (namespace, name), whose sandbox is for `uid`, from the agent at `socket`,
/// which waits up to `agent_wait` for a pod its watch has not delivered yet, with the agent's
/// answer (the device step reads the pod's DRA claims from it); why not, when its answer cannot be
/// used.
pub fn selection(
    config: &SelectorConfig,
    runtime_ifname: &str,
    pod: (&str, &str),
    uid: &str,
    socket: &Path,
    agent_wait: Duration,
) -> Result<(Selection, Box<PodObjects>), NotUsed> {
    let answer = ask(socket, pod, Some(uid), agent_wait, Instant::now() + ANSWER_WAIT)
        .map_err(|why| NotUsed::new(why, false))?;
    let not_used = |why: String| NotUsed::new(why, true);
    let objects = match answer {
        Answer::Objects(objects) => objects,
        Answer::Unknown { why } => return Err(not_used(format!("the agent does not have it: {why}"))),
        Answer::Refused { why } => return Err(not_used(format!("the agent refused the request: {why}"))),
        Answer::Accepted => return Err(not_used("the agent answered a selection request with \"accepted\"".into())),
        other => return Err(not_used(format!("the agent answered a selection request with {other:?}"))),
    };
    let selection = from_agent_answer::resolve(config, runtime_ifname, pod, uid, &objects)?;
    Ok((selection, objects))
}
