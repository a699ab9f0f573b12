//! Which networks a pod gets, and why: the pod's `Selection` (`chosen`), decided in one pass.
//!
//! The rules: a caller that is not a Kubernetes pod gets `defaultNetwork`. A pod's containers may
//! carry the env var `CNI_NETWORK_CONFIG`, as a literal `value` or from `valueFrom.configMapKeyRef`
//! (a ConfigMap in the pod's namespace); its value names one network or a list (see
//! `requests::value`), the first on the runtime's interface. Containers whose values differ are an
//! error naming both; a pod that names none gets `defaultNetwork` (which may be a list too).
//! Multus's default-network annotation and CNI-Genie's `cni` annotation choose the first networks
//! too, by one precedence rule (`precedence`). The admin's `defaultNetworks` and the pod's
//! `k8s.v1.cni.cncf.io/networks` annotation (see `requests::annotation`) then add their networks
//! after those, each through a NetworkAttachmentDefinition, as Multus adds them to the cluster's
//! default network. Init containers are not consulted: the network belongs to the pod's long-lived
//! containers, and init containers are often injected by tooling the pod's author does not
//! control. `explain` mentions an init container that carries the variable, so the choice is never
//! silent. The rules for users: docs/selector.md.
//!
//! The pass: `from_api_server` (the API server's objects, `select`) or `from_agent_answer` (the node
//! agent's) hands the pod and an `Objects` (`objects`) to `from_objects::resolve`, which decides
//! from them and nothing else: `precedence` picks the first networks (from the containers' value,
//! `containers`, or an annotation), `by_value` and `by_nad` turn what was named into planned
//! attachments (a `confDir` network, or one through a NetworkAttachmentDefinition, within the
//! admin's policy), and `interfaces` gives each its interface. `pod` is what the pass reads of the
//! pod object; `inputs` tells the node agent which objects to hold and what of a pod, by the same
//! reading. Where each verb gets the objects from is not decided here: `lookup` does.

mod by_nad;
mod by_value;
pub mod chosen;
mod containers;
pub mod from_agent_answer;
mod from_api_server;
mod from_objects;
mod inputs;
mod interfaces;
mod objects;
mod pod;
mod precedence;
mod sandbox;

pub use chosen::{Attachment, DeviceUse, PodIdentity, Selection, Source};
pub use from_api_server::{Fetching, select, select_with_pod};
pub use from_objects::resolve;
pub use inputs::{references, trimmed, trimmed_meta};
pub use objects::Objects;
pub use sandbox::{CONFIG_MIRROR, check_uid, is_sandbox_pod};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_compat;
