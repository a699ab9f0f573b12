//! The blocks of a dead node, as listed, and their deletion: each `IPBlock` deleted with the
//! preconditions of the object listed (its uid and resourceVersion), so that a block released by
//! another releaser in between and claimed again by a live node (a new object under the same
//! name) is never deleted: the API server answers `Conflict` and the block stays its new node's.

use super::{Problem, ask};
use crate::platform::kube::delete_as_read;
use crate::platform::kube::ip_block::IpBlockSpec;
use kube::Api;
use kube::api::DynamicObject;
use std::collections::BTreeMap;

/// One block as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    uid: Option<String>,
    resource_version: Option<String>,
}

/// The listed blocks by the node holding them; those this agent cannot read, and fixed blocks, are
/// left out (no node's to release).
pub fn by_node(objects: Vec<DynamicObject>) -> BTreeMap<String, Vec<Listed>> {
    let mut nodes: BTreeMap<String, Vec<Listed>> = BTreeMap::new();
    for object in objects {
        let Ok(spec) = serde_json::from_value::<IpBlockSpec>(object.data["spec"].clone()) else { continue };
        // A fixed block is no node's: its addresses go with their identities (`super::fixed`).
        if spec.fixed || spec.node.is_empty() {
            continue;
        }
        let Some(name) = object.metadata.name else { continue };
        let block = Listed { name, uid: object.metadata.uid, resource_version: object.metadata.resource_version };
        nodes.entry(spec.node).or_default().push(block);
    }
    nodes
}

/// Delete `block` if it is still the object listed: whether it was deleted (not: already gone, or
/// changed since, perhaps claimed again).
pub async fn delete(api: &Api<DynamicObject>, block: &Listed) -> Result<bool, Problem> {
    let params = delete_as_read(block.uid.clone(), block.resource_version.clone());
    match ask(api.delete(&block.name, &params)).await {
        Ok(_) => Ok(true),
        Err(Problem::Conflict(_) | Problem::Gone) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::kube::ip_block::resource;

    #[test]
    fn blocks_are_grouped_by_their_node_with_their_preconditions() {
        let block = |name: &str, node: &str, uid: &str| {
            let mut object = DynamicObject::new(name, &resource())
                .data(serde_json::json!({"spec": {"cidr": "10.0.0.0/30", "pool": "p", "node": node}}));
            object.metadata.uid = Some(uid.into());
            object.metadata.resource_version = Some("7".into());
            object
        };
        let unreadable = DynamicObject::new("x", &resource()).data(serde_json::json!({"spec": {"node": 3}}));
        let fixed = DynamicObject::new("f", &resource())
            .data(serde_json::json!({"spec": {"cidr": "10.0.0.4/30", "pool": "p", "fixed": true}}));
        let nodes =
            by_node(vec![block("a", "n1", "u1"), block("b", "n2", "u2"), block("c", "n1", "u3"), unreadable, fixed]);
        assert_eq!(nodes.keys().collect::<Vec<_>>(), ["n1", "n2"]);
        assert_eq!(nodes["n1"].iter().map(|b| b.name.as_str()).collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(nodes["n1"][1].uid.as_deref(), Some("u3"));
        assert_eq!(nodes["n1"][1].resource_version.as_deref(), Some("7"));
    }
}
