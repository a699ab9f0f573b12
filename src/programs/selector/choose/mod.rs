//! Which networks a pod gets, and why: the pod's `Selection` (`selection`), decided in one pass.
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
//! The pass: `select` (the API server) or `from_agent` (the node agent's answer) hands the pod and
//! an `Objects` to `resolve`, which decides from them and nothing else: `precedence` picks the first
//! networks (from the containers' value, `containers`, or an annotation), `by_value` and `by_nad`
//! turn what was named into planned attachments (a `confDir` network, or one through a
//! NetworkAttachmentDefinition, within the admin's policy), and `interfaces` gives each its
//! interface. `pod` is what the pass reads of the pod object; `for_agent` tells the node agent
//! which objects to hold and what of a pod, by the same reading.

mod by_nad;
mod by_value;
mod containers;
mod for_agent;
pub mod from_agent;
mod interfaces;
mod objects;
mod pod;
mod precedence;
mod resolve;
mod sandbox;
mod select;
pub mod selection;

pub use for_agent::{references, trimmed, trimmed_meta};
pub use objects::{Fetching, Objects};
pub use resolve::resolve;
pub use sandbox::{CONFIG_MIRROR, check_uid, is_sandbox_pod};
pub use select::{select, select_with_pod};
pub use selection::{Attachment, DeviceUse, PodIdentity, Selection, Source};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_compat;
