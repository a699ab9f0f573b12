//! whereabouts' objects (whereabouts.cni.cncf.io/v1alpha1, namespaced), read when a whereabouts
//! configuration moves to yh-ipam (docs/migrate.md, "From whereabouts"): an `IPPool` per range,
//! whose `spec.allocations` maps an address's offset from the range's first address (the address
//! `spec.range` is written with, as whereabouts' `IPAddOffset` counts it) to the pod holding it;
//! and an `OverlappingRangeIPReservation` per address, named by the address (IPv6's `:` as `-`, a
//! trailing `:` completed by `0`, and `<network>-` before it for a named network).

use ::kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const GROUP: &str = "whereabouts.cni.cncf.io";
const VERSION: &str = "v1alpha1";

/// One address whereabouts handed out: to the sandbox `container_id`, interface `ifname`, of pod
/// `pod_ref` (`namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub address: IpAddr,
    pub container_id: String,
    pub pod_ref: String,
    pub ifname: String,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

/// The `IPPool` resource, for kube's dynamic API.
pub fn ip_pool_resource() -> ApiResource {
    resource("IPPool", "ippools")
}

/// The `OverlappingRangeIPReservation` resource, for kube's dynamic API.
pub fn reservation_resource() -> ApiResource {
    resource("OverlappingRangeIPReservation", "overlappingrangeipreservations")
}

/// `offset` after `first`, as whereabouts counts it (`None` past the family's last address).
pub fn offset_address(first: IpAddr, offset: u128) -> Option<IpAddr> {
    match first {
        IpAddr::V4(a) => {
            let n = u128::from(u32::from(a)).checked_add(offset)?;
            u32::try_from(n).ok().map(|n| IpAddr::V4(Ipv4Addr::from(n)))
        }
        IpAddr::V6(a) => u128::from(a).checked_add(offset).map(|n| IpAddr::V6(Ipv6Addr::from(n))),
    }
}

/// The addresses an `IPPool` object says are handed out (what cannot be read is left out).
pub fn pool_reservations(pool: &Value) -> Vec<Reservation> {
    let spec = &pool["spec"];
    let first = spec["range"].as_str().and_then(|r| r.split('/').next()).and_then(|ip| ip.parse::<IpAddr>().ok());
    let (Some(first), Some(allocations)) = (first, spec["allocations"].as_object()) else {
        return Vec::new();
    };
    allocations
        .iter()
        .filter_map(|(offset, allocation)| {
            let address = offset_address(first, offset.parse().ok()?)?;
            Some(reservation(address, allocation))
        })
        .collect()
}

/// The addresses an `OverlappingRangeIPReservation` object's name may stand for: the name itself,
/// or, for a named network (`<network>-<address>`), what follows one of its `-`; the importer takes
/// the one inside its pool's ranges.
pub fn reserved_addresses(name: &str) -> Vec<IpAddr> {
    std::iter::once(name)
        .chain(name.match_indices('-').map(|(i, _)| &name[i + 1..]))
        .filter_map(|candidate| {
            candidate
                .parse::<Ipv4Addr>()
                .map(IpAddr::V4)
                .or_else(|_| candidate.replace('-', ":").parse::<Ipv6Addr>().map(IpAddr::V6))
                .ok()
        })
        .collect()
}

/// What an `OverlappingRangeIPReservation` object may reserve (`reserved_addresses`).
pub fn object_reservations(object: &Value) -> Vec<Reservation> {
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    reserved_addresses(name).into_iter().map(|address| reservation(address, &object["spec"])).collect()
}

fn reservation(address: IpAddr, fields: &Value) -> Reservation {
    let text = |key: &str| fields[key].as_str().unwrap_or_default().to_string();
    // An IPPool's allocation names the sandbox `id`, a reservation `containerid`.
    let container_id = fields["id"].as_str().map_or_else(|| text("containerid"), String::from);
    Reservation { address, container_id, pod_ref: text("podref"), ifname: text("ifname") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_ip_pools_offsets_count_from_the_address_its_range_is_written_with() {
        let pool = json!({"spec": {"range": "10.80.0.0/16", "allocations": {
            "5": {"id": "cid-a", "podref": "default/a", "ifname": "net1"},
            "300": {"id": "cid-b", "podref": "default/b", "ifname": "net1"},
            "x": {"id": "cid-c", "podref": "default/c"}}}});
        let mut found: Vec<(String, String)> =
            pool_reservations(&pool).into_iter().map(|r| (r.address.to_string(), r.pod_ref)).collect();
        found.sort();
        assert_eq!(found, [("10.80.0.5".into(), "default/a".into()), ("10.80.1.44".into(), "default/b".into())]);
        let v6 = json!({"spec": {"range": "fd80::/64", "allocations": {"65536": {"id": "c", "podref": "d/e"}}}});
        assert_eq!(pool_reservations(&v6)[0].address, "fd80::1:0".parse::<IpAddr>().unwrap());
        let started = json!({"spec": {"range": "10.80.0.8/29", "allocations": {"1": {"id": "c", "podref": "d/e"}}}});
        assert_eq!(pool_reservations(&started)[0].address.to_string(), "10.80.0.9");
        assert_eq!(offset_address("255.255.255.255".parse().unwrap(), 1), None);
    }

    #[test]
    fn a_reservations_name_is_its_address() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(reserved_addresses("10.80.0.7"), [ip("10.80.0.7")]);
        assert_eq!(reserved_addresses("fd80--7"), [ip("fd80::7")]);
        assert_eq!(reserved_addresses("fd80--0"), [ip("fd80::0")]);
        assert_eq!(reserved_addresses("fd80-0-0-0-0-0-0-7"), [ip("fd80::7")]);
        assert_eq!(reserved_addresses("lan-10.80.0.7"), [ip("10.80.0.7")]);
        // A named network's: the candidates, of which the pool's range tells.
        assert!(reserved_addresses("lan-b-fd80--7").contains(&ip("fd80::7")));
        assert!(reserved_addresses("not-an-address").is_empty());
        let object = json!({"metadata": {"name": "10.80.0.7"},
                            "spec": {"containerid": "cid", "podref": "default/a", "ifname": "net1"}});
        let found = &object_reservations(&object)[0];
        assert_eq!(
            (found.container_id.as_str(), found.pod_ref.as_str(), found.ifname.as_str()),
            ("cid", "default/a", "net1")
        );
        assert_eq!(
            pool_reservations(&json!({"spec": {"range": "10.80.0.0/24",
            "allocations": {"1": {"id": "cid-a", "podref": "default/a"}}}}))[0]
                .container_id,
            "cid-a"
        );
    }
}
