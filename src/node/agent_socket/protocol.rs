//! What the plugin and the agent say to each other over the agent's unix socket: one JSON line
//! each way per connection, each carrying the protocol's `version`. A side that gets a version it
//! does not speak, or a line it cannot parse, treats the exchange as failed (the plugin then takes
//! the direct path to the API server), so an agent and a plugin of different releases never act on
//! a misread message.
//!
//! - `Ask::Selection`: the objects of one pod, for the plugin to `resolve` itself. `uid` is the
//!   sandbox's `K8S_POD_UID`: the agent answers only for that pod, waiting up to `waitMs` for its
//!   watch to deliver it. Without `uid` (`yh-genie explain`) it answers with whatever it holds.
//! - `Ask::Annotate`: annotations to write on the pod after its ADD, only while the pod under that
//!   name is still `uid`, and the messages of the `AddedInterface` events to create about it. The
//!   agent takes it (`Accepted`) and writes them on its own time. With `noAnswer` (only events, which
//!   the plugin would not write itself anyway) the plugin has closed its end once the line is sent:
//!   the agent sends no reply, and says itself when it cannot take the request.
//! - `Ask::Allocate` and `Ask::Release`: `yh-ipam`'s addresses (`addresses`): one address of each
//!   range set of the pool for its owner, the same ones again for an owner that holds them already
//!   (`Allocated`), or why there are none (`NoAddress`); and their release (`Released`). An
//!   `Allocate` may name the addresses the runtime asked for (`requested`, its `ips`).
//! - `Ask::AllocateFromPoolObject`: an `Allocate` from the pool an `AddressPool` object of that
//!   name defines (a network that names a pool and gives no ranges), which only the agent can read;
//!   answered with the addresses and the pool as read (`AllocatedFromPoolObject`), for the result's
//!   prefixes, gateways and routes. An agent that does not know it refuses it (the line does not parse).

use super::addresses::{AddressOwner, Allocated, PoolSpec};
use super::pool_definition::PoolDefinition;
use crate::platform::kube::NetworkAttachmentDefinition;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The protocol's version; both sides refuse any other.
pub const VERSION: u32 = 1;

/// The longest line either side reads: a pod's trimmed objects (ConfigMaps of up to 1 MiB each)
/// fit many times over; anything longer is refused rather than buffered.
pub const MAX_LINE: usize = 16 << 20;

/// The longest an agent waits for a pod it has not seen, whatever a request asks.
pub const MAX_WAIT_MS: u64 = 1000;

/// One request: a line from the plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub version: u32,
    #[serde(flatten)]
    pub ask: Ask,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ask", rename_all = "camelCase")]
pub enum Ask {
    #[serde(rename_all = "camelCase")]
    Selection {
        namespace: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uid: Option<String>,
        #[serde(default)]
        wait_ms: u64,
    },
    Annotate {
        namespace: String,
        name: String,
        uid: String,
        annotations: BTreeMap<String, String>,
        /// Messages of `AddedInterface` events to create about the pod (`Add eth0 [10.1.2.3/24]
        /// from default/lan`), as Multus creates them. An agent that does not know the field ignores them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        events: Vec<String>,
        /// The plugin does not wait for the answer. An agent that does not know the field answers
        /// all the same, to a connection already closed.
        #[serde(default, rename = "noAnswer", skip_serializing_if = "std::ops::Not::not")]
        no_answer: bool,
    },
    /// An address of each of the pool's range sets for `owner`: `requested` (the runtime's `ips`,
    /// at most one per range set) where asked, any free one elsewhere. An agent that does not know
    /// `requested` hands out any address; the plugin checks the answer has the ones it asked for.
    Allocate {
        pool: PoolSpec,
        owner: AddressOwner,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        requested: Vec<std::net::IpAddr>,
        /// The IPAMClaim of the pod's namespace whose address this is (the pod's
        /// `ipam-claim-reference`): a fixed address, which an agent that does not know `claim`
        /// does not mark `fixed`; the plugin checks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claim: Option<String>,
    },
    /// `Allocate`, from the pool the `AddressPool` object named `pool` defines.
    #[serde(rename_all = "camelCase")]
    AllocateFromPoolObject {
        pool: String,
        owner: AddressOwner,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        requested: Vec<std::net::IpAddr>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claim: Option<String>,
    },
    /// Give back what (`containerId`, `ifname`) holds in `pool`, only the pod `uid`'s when given.
    #[serde(rename_all = "camelCase")]
    Release {
        pool: String,
        container_id: String,
        ifname: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uid: Option<String>,
    },
}

/// One reply: a line from the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub version: u32,
    #[serde(flatten)]
    pub answer: Answer,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "camelCase")]
pub enum Answer {
    /// The pod (trimmed to what selection reads) and every object it refers to.
    Objects(Box<PodObjects>),
    /// The agent does not have the pod (or not the asked uid, or not all its objects yet).
    Unknown { why: String },
    /// An `Annotate` was taken.
    Accepted,
    /// The request was not understood or cannot be served (wrong version, bad line, queue full).
    Refused { why: String },
    /// The addresses of an `Allocate`, one per range set, in the pool's order.
    Allocated { addresses: Vec<Allocated> },
    /// An `Allocate` that cannot be served: the pool is exhausted, an address asked for is taken,
    /// or the API server could not be asked for a block (`retry`: asking again later may help); an
    /// address asked for that the pool can never hand out (`invalid`: outside its ranges, excluded,
    /// its gateway).
    NoAddress {
        why: String,
        #[serde(default)]
        retry: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        invalid: bool,
    },
    /// The addresses of an `AllocateFromPoolObject`, and the pool as its object defines it.
    AllocatedFromPoolObject { addresses: Vec<Allocated>, pool: PoolDefinition },
    /// A `Release` done (also when nothing was held).
    Released,
}

/// A pod and the objects it refers to, as the agent holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodObjects {
    pub pod: Pod,
    #[serde(default)]
    pub config_maps: Vec<Held<ConfigMap>>,
    #[serde(default)]
    pub network_attachments: Vec<Held<NetworkAttachmentDefinition>>,
    /// The pod's DRA resource claims, trimmed to their allocation and consumers. An agent that does
    /// not know the field sends none: a plugin that needs one then takes the direct path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_claims: Vec<Held<ResourceClaim>>,
    /// The network attributes of the devices allocated to those claims, as the ResourceSlices of
    /// the pod's node publish them; `None` when the agent does not hold the node's slices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_devices: Option<Vec<PublishedDevice>>,
}

/// A device of the node's ResourceSlices and what they publish of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedDevice {
    pub driver: String,
    pub pool: String,
    pub device: String,
    #[serde(default, rename = "deviceID", skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    #[serde(default, rename = "resourceName", skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
}

/// One referenced object: its namespace and name, and the object, or `None` when it does not exist.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Held<T> {
    pub namespace: String,
    pub name: String,
    #[serde(default = "Option::default")]
    pub object: Option<T>,
}

impl<T> Held<T> {
    pub fn is(&self, namespace: &str, name: &str) -> bool {
        self.namespace == namespace && self.name == name
    }
}

impl Request {
    pub fn new(ask: Ask) -> Self {
        Request { version: VERSION, ask }
    }

    /// Parse a request line; the reason when it cannot be served.
    pub fn parse(line: &[u8]) -> Result<Self, String> {
        parse_versioned(line, "request", |r: &Self| r.version)
    }
}

impl Reply {
    pub fn new(answer: Answer) -> Self {
        Reply { version: VERSION, answer }
    }

    /// Parse a reply line; the reason when it cannot be used.
    pub fn parse(line: &[u8]) -> Result<Self, String> {
        parse_versioned(line, "reply", |r: &Self| r.version)
    }

    /// The line to send, newline included.
    pub fn line(&self) -> Vec<u8> {
        to_line(self)
    }
}

/// A message as one line, newline included.
pub fn to_line<T: Serialize>(message: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).expect("protocol messages always serialize");
    line.push(b'\n');
    line
}

/// A message of this side's version. The line is parsed once when it is one (the plugin's ADD reads
/// the largest of them); only a line that is not is read again for its version, so that a message
/// of another version is told apart from a malformed one.
fn parse_versioned<T: serde::de::DeserializeOwned>(
    line: &[u8],
    what: &str,
    version: impl Fn(&T) -> u32,
) -> Result<T, String> {
    match serde_json::from_slice::<T>(line) {
        Ok(message) if version(&message) == VERSION => Ok(message),
        Ok(message) => Err(format!("protocol version {}, this side speaks {VERSION}", version(&message))),
        Err(e) => Err(check_version(line).err().unwrap_or_else(|| format!("the {what} does not parse: {e}"))),
    }
}

fn check_version(line: &[u8]) -> Result<(), String> {
    #[derive(Deserialize)]
    struct Versioned {
        version: Option<u32>,
    }
    let versioned: Versioned =
        serde_json::from_slice(line).map_err(|e| format!("not a JSON object with a version: {e}"))?;
    match versioned.version {
        Some(VERSION) => Ok(()),
        Some(other) => Err(format!("protocol version {other}, this side speaks {VERSION}")),
        None => Err("no protocol version".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_round_trips_as_one_json_line() {
        let ask = Request::new(Ask::Selection {
            namespace: "default".into(),
            name: "web-0".into(),
            uid: Some("u1".into()),
            wait_ms: 1000,
        });
        let line = to_line(&ask);
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&line).unwrap(),
            json!({"version": 1, "ask": "selection", "namespace": "default", "name": "web-0", "uid": "u1", "waitMs": 1000})
        );
        assert_eq!(Request::parse(&line).unwrap(), ask);
    }

    #[test]
    fn a_reply_round_trips_through_its_line() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web-0", "uid": "u1"}})).unwrap();
        let reply = Reply::new(Answer::Objects(Box::new(PodObjects {
            pod,
            config_maps: vec![Held { namespace: "default".into(), name: "nets".into(), object: None }],
            network_attachments: vec![],
            resource_claims: vec![],
            node_devices: None,
        })));
        assert_eq!(Reply::parse(&reply.line()).unwrap(), reply);
    }

    #[test]
    fn an_annotate_says_no_answer_only_when_none_is_wanted() {
        let annotate = |no_answer| Ask::Annotate {
            namespace: "default".into(),
            name: "web-0".into(),
            uid: "u1".into(),
            annotations: BTreeMap::new(),
            events: vec!["Add eth0 [10.1.2.3/24] from default/lan".into()],
            no_answer,
        };
        let line = to_line(&Request::new(annotate(true)));
        let sent: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(sent["noAnswer"], true, "{sent}");
        assert_eq!(Request::parse(&line).unwrap(), Request::new(annotate(true)));
        // Waiting for the answer is what a line without the key means, as an older plugin sends it.
        let line = to_line(&Request::new(annotate(false)));
        assert!(!String::from_utf8_lossy(&line).contains("noAnswer"));
        assert_eq!(Request::parse(&line).unwrap(), Request::new(annotate(false)));
    }

    #[test]
    fn an_allocation_from_a_pool_object_names_the_pool_and_is_answered_with_it() {
        let owner = AddressOwner {
            uid: "u1".into(),
            container_id: "c1".into(),
            ifname: "net1".into(),
            pod: "default/a".into(),
        };
        let ask =
            Request::new(Ask::AllocateFromPoolObject { pool: "lan".into(), owner, requested: vec![], claim: None });
        let sent: serde_json::Value = serde_json::from_slice(&to_line(&ask)).unwrap();
        assert_eq!(
            (sent["ask"].as_str(), sent["pool"].as_str()),
            (Some("allocateFromPoolObject"), Some("lan")),
            "{sent}"
        );
        assert_eq!(Request::parse(&to_line(&ask)).unwrap(), ask);
        let keys = json!({"ranges": [[{"subnet": "10.80.0.0/24"}]], "routes": [{"dst": "10.0.0.0/8"}]});
        let pool = super::super::pool_definition::read("lan", keys.as_object().unwrap()).unwrap();
        let reply = Reply::new(Answer::AllocatedFromPoolObject { addresses: vec![], pool });
        assert_eq!(Reply::parse(&reply.line()).unwrap(), reply);
    }

    #[test]
    fn another_version_or_garbage_is_refused_with_the_reason() {
        let v2 = br#"{"version": 2, "answer": "accepted"}"#;
        assert!(Reply::parse(v2).unwrap_err().contains("protocol version 2"));
        assert!(Reply::parse(br#"{"answer": "accepted"}"#).unwrap_err().contains("no protocol version"));
        assert!(Reply::parse(b"<html>").unwrap_err().contains("not a JSON object"));
        assert!(Reply::parse(br#"{"version": 1, "answer": "objects"}"#).unwrap_err().contains("does not parse"));
        assert!(Request::parse(br#"{"version": 1, "ask": "launch"}"#).unwrap_err().contains("does not parse"));
    }
}
