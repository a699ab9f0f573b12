//! The `AddressPool` (`ipam.yh-genie.io/v1alpha1`, cluster-scoped; manifests/ipam-crd.yaml): a
//! `yh-ipam` pool an admin defines once for the cluster, which networks name by its name
//! (`"ipam": {"type": "yh-ipam", "pool": "lan"}`, no `ranges`). Its `spec` holds what a network's
//! `ipam` would: `ranges`, `exclude`, `blockSize`, `routes`; the agent reads it with the same
//! checks (`node::agent_socket::pool_definition`). Cluster-scoped, so that only whoever may write
//! cluster-wide objects (the admin) defines which addresses a pool hands out.

use super::ip_block::{GROUP, VERSION};
use ::kube::core::{ApiResource, GroupVersionKind};

pub const KIND: &str = "AddressPool";
pub const PLURAL: &str = "addresspools";

/// The resource, for kube's dynamic API.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_resource_is_the_crds() {
        let r = super::resource();
        assert_eq!(
            (r.api_version.as_str(), r.kind.as_str(), r.plural.as_str()),
            ("ipam.yh-genie.io/v1alpha1", "AddressPool", "addresspools")
        );
    }
}
