//! ADD's lookup: the pod's selection from the node agent when there is one that knows the pod (no
//! API request at all), waiting `ADD_POD_WAIT` for a pod its watch has not delivered yet; else from
//! the API server, exactly as without an agent. A refusal the agent's objects decide is the ADD's
//! error, without asking the API server (`choose::from_agent_answer`). Without `K8S_POD_UID` the agent is
//! not asked: it could not tell the sandbox's pod from another of the same name. The operation's
//! log line says which (`selection="agent"`, or `"api: <why not the agent>"`).
//!
//! What ADD learned serves it twice more: its device step reads the pod's DRA claims from it
//! (`devices`), and its report goes to the agent that answered, or through the client that looked
//! the pod up (`deliver`).

use super::agent::{self, ADD_POD_WAIT};
use super::api_server;
use super::deliver::Audience;
use super::devices;
use super::learned::Learned;
use crate::platform::cni::{CniError, Invocation, Operation};
use crate::platform::kube::PodSource;
use crate::programs::selector::choose::from_agent_answer::NotUsed;
use crate::programs::selector::choose::{self, Selection};
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::devices::dra::DraDevices;

/// What ADD learned about the pod beside its selection, and who hears what ADD reports.
pub struct AddLookup {
    learned: Learned,
    audience: Audience,
}

/// The pod's selection, and what ADD learned with it; `op` notes where the selection came from.
pub fn for_add(config: &SelectorConfig, inv: &Invocation, op: &Operation) -> Result<(Selection, AddLookup), CniError> {
    let mut agent_up = None;
    if let (Some(_), Some(pod)) = (&config.kubeconfig, inv.args.pod()) {
        let why_not = match (&config.agent_socket, inv.args.pod_uid()) {
            (None, _) => None,
            (Some(_), None) => Some("no K8S_POD_UID in CNI_ARGS to ask the agent with".to_string()),
            (Some(socket), Some(uid)) => {
                match agent::selection(config, &inv.ifname, pod, uid, socket, ADD_POD_WAIT) {
                    Ok((selection, objects)) => {
                        op.note_selection("agent");
                        let audience = Audience { agent: Some(socket.clone()), api: None };
                        return Ok((selection, AddLookup { learned: Learned::Agent(objects), audience }));
                    }
                    Err(NotUsed { refusal: Some(refusal), .. }) => {
                        op.note_selection("agent");
                        return Err(refusal);
                    }
                    Err(not_used) => {
                        // Up, but without the pod yet: it still takes the status and the events.
                        agent_up = not_used.answered.then(|| socket.clone());
                        Some(not_used.why)
                    }
                }
            }
        };
        op.note_selection(&why_not.map_or_else(|| "api".to_string(), |why| format!("api: {why}")));
    }
    let api = api_server::client(config, inv, config.api, op)?;
    let source = api.as_ref().map(|a| a as &dyn PodSource);
    let (selection, pod) = choose::select_with_pod(config, &inv.ifname, inv.args.pod(), inv.args.pod_uid(), source)?;
    let learned = pod.map_or(Learned::Nothing, |pod| Learned::ApiServer(Box::new(pod)));
    Ok((selection, AddLookup { learned, audience: Audience { agent: agent_up, api } }))
}

impl AddLookup {
    /// The network devices of the pod's DRA claims (the pod is in `namespace`), read where ADD
    /// learned about the pod (`devices`).
    pub fn dra_devices(
        &self,
        config: &SelectorConfig,
        runtime: &Invocation,
        op: &Operation,
        namespace: &str,
    ) -> Result<DraDevices, CniError> {
        devices::dra_devices(config, runtime, op, namespace, &self.learned, self.audience.api.as_ref())
    }

    /// Who hears what ADD reports, once its device step is done: the pod's objects are not kept
    /// while the plugins run, nor the client, unless a status is to be written (`status_wanted`).
    pub fn into_audience(self, status_wanted: bool) -> Audience {
        let Audience { agent, api } = self.audience;
        Audience { agent, api: api.filter(|_| status_wanted) }
    }
}
