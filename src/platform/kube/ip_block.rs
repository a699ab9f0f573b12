//! The `IPBlock` (`ipam.yh-genie.io/v1alpha1`, cluster-scoped; manifests/ipam-crd.yaml): one block
//! of a pool's addresses, claimed by one node (or held for the pool's fixed addresses). Its name is the block itself, so that of two nodes
//! creating the same block the API server's `AlreadyExists` tells the second it is the other's.

use ::kube::core::{ApiResource, GroupVersionKind};
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "ipam.yh-genie.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "IPBlock";
pub const PLURAL: &str = "ipblocks";

/// What an `IPBlock` says: which block, of which pool, held by which node; or, `fixed`, held by no
/// node, for the pool's fixed addresses (`super::fixed_address`), which every agent hands out.
/// `sharedBy` names the node that held it until the pool ran low and shared it (a fixed block
/// since): for the operator, nothing reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpBlockSpec {
    pub cidr: IpNetwork,
    pub pool: String,
    #[serde(default)]
    pub node: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed: bool,
    #[serde(rename = "sharedBy", default, skip_serializing_if = "String::is_empty")]
    pub shared_by: String,
}

/// The resource, for kube's dynamic API.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// The object's name for `block`: the block itself, as a DNS subdomain (`10.80.0.16-28`,
/// `v6-fd80--10-124`): the same block always has the same name, whatever pool or node asks.
pub fn object_name(block: IpNetwork) -> String {
    match block {
        IpNetwork::V4(b) => format!("{}-{}", b.network(), b.prefix()),
        IpNetwork::V6(b) => format!("v6-{}-{}", b.network().to_string().replace(':', "-"), b.prefix()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_is_the_crds() {
        let r = resource();
        assert_eq!(
            (r.api_version.as_str(), r.kind.as_str(), r.plural.as_str()),
            ("ipam.yh-genie.io/v1alpha1", "IPBlock", "ipblocks")
        );
        let claims = crate::platform::kube::fixed_address::ipam_claim_resource();
        assert_eq!((claims.api_version.as_str(), claims.plural.as_str()), ("k8s.cni.cncf.io/v1alpha1", "ipamclaims"));
    }

    #[test]
    fn a_blocks_name_is_the_block_as_a_dns_subdomain() {
        assert_eq!(object_name("10.80.0.16/28".parse().unwrap()), "10.80.0.16-28");
        assert_eq!(object_name("fd80::10/124".parse().unwrap()), "v6-fd80--10-124");
        assert_eq!(object_name("::/124".parse().unwrap()), "v6----124");
    }
}
