//! A pool carved into blocks: which blocks a range set may take, in order, and which of a block's
//! addresses may be handed out. Pure arithmetic on addresses as numbers.

use crate::node::agent_socket::addresses::{PoolRange, PoolSpec};
use ipnetwork::IpNetwork;
use std::net::IpAddr;

pub fn number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

pub fn address(n: u128, v4: bool) -> IpAddr {
    if v4 { IpAddr::V4((n as u32).into()) } else { IpAddr::V6(n.into()) }
}

/// The block of `size` addresses (a power of two) that holds `n`.
pub fn block_of(n: u128, size: u32, v4: bool) -> IpNetwork {
    let bits: u8 = if v4 { 32 } else { 128 };
    let prefix = bits - size.trailing_zeros() as u8;
    let start = n & !(u128::from(size) - 1);
    IpNetwork::new(address(start, v4), prefix).expect("a prefix within the family's bits")
}

/// The addresses of `block`, as numbers: (first, last).
pub fn bounds(block: IpNetwork) -> (u128, u128) {
    let bits: u32 = if block.is_ipv4() { 32 } else { 128 };
    let host = u128::MAX.checked_shr(u32::from(block.prefix()) + (128 - bits)).unwrap_or(0);
    let first = number(block.network());
    (first, first | host)
}

/// Whether `ip` may be handed out from range set `set` of `spec`: inside one of its ranges, not that
/// range's gateway, not excluded.
pub fn usable(spec: &PoolSpec, set: &[PoolRange], ip: IpAddr) -> bool {
    let n = number(ip);
    set.iter().any(|r| {
        r.subnet.is_ipv4() == ip.is_ipv4()
            && r.subnet.contains(ip)
            && (number(r.start)..=number(r.end)).contains(&n)
            && r.gateway != ip
    }) && !spec.exclude.iter().any(|x| x.contains(ip))
}

/// The first address of `block` usable in `set` for which `free` holds.
pub fn first_free(
    spec: &PoolSpec,
    set: &[PoolRange],
    block: IpNetwork,
    free: impl Fn(IpAddr) -> bool,
) -> Option<IpAddr> {
    let (first, last) = bounds(block);
    (first..=last).map(|n| address(n, block.is_ipv4())).find(|ip| usable(spec, set, *ip) && free(*ip))
}

/// How many addresses of `block` `spec` may hand out (from any of its range sets).
pub fn usable_in(spec: &PoolSpec, block: IpNetwork) -> usize {
    let sets: Vec<&Vec<PoolRange>> = spec.range_sets.iter().filter(|set| within(set, block)).collect();
    let (first, last) = bounds(block);
    (first..=last)
        .map(|n| address(n, block.is_ipv4()))
        .filter(|ip| sets.iter().any(|set| usable(spec, set, *ip)))
        .count()
}

/// Whether `block` holds an address of `set` (it is one of the set's blocks).
pub fn within(set: &[PoolRange], block: IpNetwork) -> bool {
    let (first, last) = bounds(block);
    set.iter().any(|r| {
        r.subnet.is_ipv4() == block.is_ipv4()
            && first <= number(r.end)
            && number(r.start) <= last
            && r.subnet.contains(block.network())
    })
}

/// The blocks of range set `set`, in order: each range's blocks from the one holding its start to
/// the one holding its end, those without a usable address left out. Lazy: an IPv6 range may hold
/// more blocks than could ever be listed.
pub fn candidates<'a>(spec: &'a PoolSpec, set: &'a [PoolRange]) -> impl Iterator<Item = IpNetwork> + 'a {
    let size = u128::from(spec.block_size);
    set.iter()
        .flat_map(move |r| {
            let v4 = r.subnet.is_ipv4();
            let (start, end) = (number(r.start) / size, number(r.end) / size);
            (start..=end).map(move |index| block_of(index * size, spec.block_size, v4))
        })
        .filter(move |block| first_free(spec, set, *block, |_| true).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn spec(ranges: &[(&str, &str, &str, &str)], exclude: &[&str], block_size: u32) -> PoolSpec {
        PoolSpec {
            name: "lan".into(),
            range_sets: vec![
                ranges
                    .iter()
                    .map(|(subnet, start, end, gateway)| PoolRange {
                        subnet: subnet.parse().unwrap(),
                        start: start.parse().unwrap(),
                        end: end.parse().unwrap(),
                        gateway: gateway.parse().unwrap(),
                    })
                    .collect(),
            ],
            exclude: exclude.iter().map(|x| x.parse().unwrap()).collect(),
            block_size,
        }
    }

    #[test]
    fn a_range_is_carved_into_aligned_blocks_with_room() {
        let s = spec(&[("10.80.0.0/24", "10.80.0.1", "10.80.0.40", "10.80.0.1")], &["10.80.0.16/28"], 16);
        let blocks: Vec<String> = candidates(&s, &s.range_sets[0]).map(|b| b.to_string()).collect();
        // .16/28 is all excluded; .32/28 holds .32 to .40.
        assert_eq!(blocks, ["10.80.0.0/28", "10.80.0.32/28"]);
        let first = first_free(&s, &s.range_sets[0], "10.80.0.0/28".parse().unwrap(), |_| true);
        assert_eq!(first, Some("10.80.0.2".parse().unwrap()), "neither the network address nor the gateway");
        assert_eq!(
            bounds("10.80.0.32/28".parse().unwrap()),
            (number("10.80.0.32".parse().unwrap()), number("10.80.0.47".parse().unwrap()))
        );
    }

    #[test]
    fn ipv6_blocks_are_found_without_listing_the_range() {
        let s = spec(&[("fd80::/64", "fd80::1", "fd80::ffff:ffff:ffff:fffe", "fd80::1")], &[], 64);
        let first: Vec<String> = candidates(&s, &s.range_sets[0]).take(2).map(|b| b.to_string()).collect();
        assert_eq!(first, ["fd80::/122", "fd80::40/122"]);
        assert!(within(&s.range_sets[0], "fd80::40/122".parse().unwrap()));
        assert!(!within(&s.range_sets[0], "fd81::/122".parse().unwrap()));
    }
}
