//! Claiming a block for this node: create its `IPBlock` (`platform::kube::ip_block`), whose name
//! is the block itself. Created: the node's. `AlreadyExists`: read it back; this node's when its
//! spec names this node (a claim of this node whose answer was lost, or of its previous life),
//! another node's otherwise. One attempt each: the ADD that needs the block waits on it, and fails
//! with "try again" when the API server does not answer. After the node's lease had run out, each
//! block it holds is confirmed (`confirm`) before more is handed out from it. A pool that seems exhausted lists the
//! blocks there are (`existing`), once per allocation: a block another node held may have been
//! released since (its node dead).

use crate::platform::kube::ip_block::{IpBlockSpec, object_name, resource};
use crate::platform::kube::{Failure, classify};
use ::kube::api::{DynamicObject, ListParams, PostParams};
use ::kube::{Api, Client};
use ipnetwork::IpNetwork;
use std::time::Duration;
use tracing::warn;

/// One request may take this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, PartialEq, Eq)]
pub enum Claimed {
    /// The block is this node's.
    Here,
    /// Not this node's: who holds it.
    Elsewhere(Holder),
    /// The API server did not say: why.
    Unknown(String),
}

/// Who holds a block that is not this node's, as its `IPBlock` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// Another node, by name.
    Node(String),
    /// No node: a fixed block, whose addresses every node hands out one `FixedAddress` at a time
    /// (`super::fixed`, `super::shared`).
    Fixed,
    /// An object this agent cannot read (why): never this node's to use.
    Unreadable(String),
}

impl Holder {
    /// The holder an `IPBlock`'s `spec` names, other than this node.
    fn of(spec: Result<IpBlockSpec, serde_json::Error>) -> Holder {
        match spec {
            Ok(spec) if spec.fixed => Holder::Fixed,
            Ok(spec) => Holder::Node(spec.node),
            Err(e) => Holder::Unreadable(e.to_string()),
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Node(node) => write!(f, "node {node}"),
            Holder::Fixed => write!(f, "no node (it holds the pool's fixed addresses)"),
            Holder::Unreadable(why) => write!(f, "an IPBlock this agent cannot read ({why})"),
        }
    }
}

pub async fn claim(client: &Client, block: IpNetwork, pool: &str, node: &str) -> Claimed {
    let resource = resource();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let name = object_name(block);
    let spec = IpBlockSpec {
        cidr: block,
        pool: pool.to_string(),
        node: node.to_string(),
        fixed: false,
        shared_by: String::new(),
    };
    let object = DynamicObject::new(&name, &resource).data(serde_json::json!({ "spec": spec }));
    let unknown = |what: &str, e: String| Claimed::Unknown(format!("{what} IPBlock {name}: {e}"));
    match tokio::time::timeout(REQUEST_TIMEOUT, api.create(&PostParams::default(), &object)).await {
        Err(_) => return unknown("creating", format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())),
        Ok(Ok(_)) => return Claimed::Here,
        Ok(Err(::kube::Error::Api(status))) if status.code == 409 => {}
        Ok(Err(e)) => return unknown("creating", describe(&e)),
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, api.get(&name)).await {
        Err(_) => unknown("reading", format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())),
        Ok(Err(e)) => unknown("reading", describe(&e)),
        Ok(Ok(found)) => match serde_json::from_value::<IpBlockSpec>(found.data["spec"].clone()) {
            Ok(spec) if !spec.fixed && spec.node == node && spec.cidr == block => Claimed::Here,
            spec => Claimed::Elsewhere(Holder::of(spec)),
        },
    }
}

/// The annotation a node writes on its block to confirm it holds it, after its lease had run out.
pub const CONFIRMED: &str = "ipam.yh-genie.io/confirmed";

/// After the node's lease had run out: whether `block` is still this node's, confirmed by a write
/// to its object (the annotation `CONFIRMED` set to now). The write changes the object's
/// resourceVersion, so a dead-node releaser that listed the block before it (and read the lease
/// before its renewal) cannot delete it any more: its delete's preconditions fail. A block deleted
/// meanwhile is claimed again; one another node holds is `Elsewhere`.
pub async fn confirm(client: &Client, block: IpNetwork, pool: &str, node: &str) -> Claimed {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let name = object_name(block);
    let unknown = |what: &str, e: String| Claimed::Unknown(format!("{what} IPBlock {name}: {e}"));
    // A write that meets another (409) or a deletion (404) reads the block again.
    for _ in 0..3 {
        let mut found = match tokio::time::timeout(REQUEST_TIMEOUT, api.get_opt(&name)).await {
            Err(_) => return unknown("reading", format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())),
            Ok(Err(e)) => return unknown("reading", describe(&e)),
            Ok(Ok(None)) => return claim(client, block, pool, node).await,
            Ok(Ok(Some(found))) => found,
        };
        match serde_json::from_value::<IpBlockSpec>(found.data["spec"].clone()) {
            Ok(spec) if !spec.fixed && spec.node == node && spec.cidr == block => {}
            spec => return Claimed::Elsewhere(Holder::of(spec)),
        }
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        found.metadata.annotations.get_or_insert_default().insert(CONFIRMED.to_string(), now);
        match tokio::time::timeout(REQUEST_TIMEOUT, api.replace(&name, &PostParams::default(), &found)).await {
            Err(_) => return unknown("confirming", format!("no answer within {}s", REQUEST_TIMEOUT.as_secs())),
            Ok(Ok(_)) => return Claimed::Here,
            Ok(Err(::kube::Error::Api(status))) if matches!(status.code, 404 | 409) => continue,
            // An older ClusterRole, without update: the block is this node's as read, as before.
            Ok(Err(::kube::Error::Api(status))) if status.code == 403 => {
                warn!(
                    "confirming IPBlock {name}: {}; it is taken as this node's as read (grant update on ipblocks, \
                     as manifests/yh-genie.yaml does, so that a dead-node releaser cannot delete it meanwhile)",
                    status.message
                );
                return Claimed::Here;
            }
            Ok(Err(e)) => return unknown("confirming", describe(&e)),
        }
    }
    unknown("confirming", "changed by others at every attempt".into())
}

/// Every `IPBlock` there is now, by name, each with its holder: a block found another node's before
/// and absent now was released (its node dead) and may be claimed; one fixed now was shared.
pub async fn existing(client: &Client) -> Result<std::collections::BTreeMap<String, Holder>, String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    match tokio::time::timeout(REQUEST_TIMEOUT, api.list(&ListParams::default())).await {
        Err(_) => Err(format!("listing IPBlocks: no answer within {}s", REQUEST_TIMEOUT.as_secs())),
        Ok(Err(e)) => Err(format!("listing IPBlocks: {}", describe(&e))),
        Ok(Ok(list)) => Ok(list
            .items
            .into_iter()
            .filter_map(|object| {
                let holder = Holder::of(serde_json::from_value::<IpBlockSpec>(object.data["spec"].clone()));
                Some((object.metadata.name?, holder))
            })
            .collect()),
    }
}

fn describe(e: &::kube::Error) -> String {
    match classify(e) {
        Failure::Transient(text) | Failure::Refused { text, .. } | Failure::NotServed(text) => text,
        Failure::Certificate(problem) => format!("the server's certificate: {problem}"),
    }
}
