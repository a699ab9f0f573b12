//! A `yh-ipam` pool's definition as an admin writes it, read into the `PoolSpec` the agent
//! allocates from: `ranges` (host-local's range sets), `exclude`, `blockSize` and `routes`. Two
//! places hold one: a network's `ipam` section (read by the plugin, `plugins::ipam::cluster_wide`)
//! and an `AddressPool` object's `spec` (read by the agent, `programs::agent::address_pools`). Both
//! go through `read`, so that a pool object is held to exactly the checks an inline pool is.

use super::addresses::{PoolRange, PoolSpec};
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::net::IpAddr;

/// The keys of a definition: what an `AddressPool`'s spec holds, and what a network's `ipam` gives
/// instead of naming one.
pub const KEYS: [&str; 4] = ["ranges", "exclude", "blockSize", "routes"];
/// The keys that say which addresses the pool holds and how they are carved: a network naming an
/// `AddressPool` must leave them to it (`routes` it may set for itself).
pub const ADDRESS_KEYS: [&str; 3] = ["ranges", "exclude", "blockSize"];
pub const DEFAULT_BLOCK_SIZE: u32 = 16;
pub const MAX_BLOCK_SIZE: u32 = 1 << 16;

/// A pool read: what the agent allocates from, and the routes of an ADD's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolDefinition {
    pub spec: PoolSpec,
    #[serde(default)]
    pub routes: Vec<Value>,
}

/// The pool `name` as `keys` define it (the other keys of `keys` are not looked at); why not, for
/// a definition that is wrong, saying which key and what is wrong with it.
pub fn read(name: &str, keys: &Map<String, Value>) -> Result<PoolDefinition, String> {
    if !pool_name(name) {
        return Err(format!(
            "pool {name:?} must be 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
        ));
    }
    let block_size = match keys.get("blockSize") {
        None | Some(Value::Null) => DEFAULT_BLOCK_SIZE,
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| n.is_power_of_two() && (4..=MAX_BLOCK_SIZE).contains(n))
            .ok_or_else(|| format!("'blockSize' must be a power of two from 4 to {MAX_BLOCK_SIZE}, not {v}"))?,
    };
    let sets = keys.get("ranges").and_then(Value::as_array).filter(|s| !s.is_empty());
    let sets = sets.ok_or("'ranges' must be a list of range sets (lists of ranges)")?;
    let mut range_sets = Vec::new();
    for set in sets {
        let set = set.as_array().filter(|s| !s.is_empty()).ok_or("a range set must be a list of ranges")?;
        let ranges: Vec<PoolRange> = set.iter().map(|r| range(r, block_size)).collect::<Result<_, _>>()?;
        if ranges.iter().any(|r| r.subnet.is_ipv4() != ranges[0].subnet.is_ipv4()) {
            return Err("a range set mixes IPv4 and IPv6".into());
        }
        range_sets.push(ranges);
    }
    let all: Vec<&PoolRange> = range_sets.iter().flatten().collect();
    for (n, a) in all.iter().enumerate() {
        if let Some(b) = all[n + 1..].iter().find(|b| {
            a.subnet.is_ipv4() == b.subnet.is_ipv4()
                && number(a.start) <= number(b.end)
                && number(b.start) <= number(a.end)
        }) {
            return Err(format!("ranges {}-{} and {}-{} overlap", a.start, a.end, b.start, b.end));
        }
    }
    let exclude = match keys.get("exclude") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(x)) => x
            .iter()
            .map(|x| {
                x.as_str()
                    .and_then(|s| s.parse::<IpNetwork>().ok())
                    .ok_or_else(|| format!("'exclude' holds {x}, not a CIDR"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("'exclude' must be a list of CIDRs".into()),
    };
    let routes = routes(keys)?.unwrap_or_default();
    Ok(PoolDefinition { spec: PoolSpec { name: name.to_string(), range_sets, exclude, block_size }, routes })
}

/// `routes`, when `keys` gives them: a list, as host-local's.
pub fn routes(keys: &Map<String, Value>) -> Result<Option<Vec<Value>>, String> {
    match keys.get("routes") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(r)) => Ok(Some(r.clone())),
        Some(_) => Err("'routes' must be a list".into()),
    }
}

/// A DNS label: what both the pool's records directory and its objects can be named by.
pub fn pool_name(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&name.len())
        && name.chars().all(|c| alnum(c) || c == '-')
        && name.starts_with(alnum)
        && name.ends_with(alnum)
}

/// A range completed as host-local completes it; why not, for one that cannot be.
fn range(v: &Value, block_size: u32) -> Result<PoolRange, String> {
    let object = v.as_object().ok_or("a range must be an object")?;
    if let Some(key) = object.keys().find(|k| !["subnet", "rangeStart", "rangeEnd", "gateway"].contains(&k.as_str())) {
        return Err(format!("unknown key {key:?} in a range"));
    }
    let text = object.get("subnet").and_then(Value::as_str).ok_or("a range needs a 'subnet'")?;
    let subnet: IpNetwork = text.parse().map_err(|e| format!("subnet {text:?}: {e}"))?;
    let bits: u32 = if subnet.is_ipv4() { 32 } else { 128 };
    if subnet.ip() != subnet.network() {
        return Err(format!("subnet {subnet} has host bits set"));
    }
    if u32::from(subnet.prefix()) + block_size.trailing_zeros() > bits {
        return Err(format!("subnet {subnet} is smaller than a block of {block_size} addresses"));
    }
    let ip = |key: &str| -> Result<Option<IpAddr>, String> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => {
                let ip: IpAddr = s.parse().map_err(|_| format!("{key} {s:?} is not an address"))?;
                if !subnet.contains(ip) {
                    return Err(format!("{key} {ip} is outside {subnet}"));
                }
                Ok(Some(ip))
            }
            Some(other) => Err(format!("{key} must be an address, not {other}")),
        }
    };
    let v4 = subnet.is_ipv4();
    let first = number(subnet.network()) + 1;
    let host = u128::MAX.checked_shr(u32::from(subnet.prefix()) + (128 - bits)).unwrap_or(0);
    let last = (number(subnet.network()) | host) - u128::from(v4);
    let start = ip("rangeStart")?.unwrap_or(address(first, v4));
    let end = ip("rangeEnd")?.unwrap_or(address(last, v4));
    let gateway = ip("gateway")?.unwrap_or(address(first, v4));
    if number(start) > number(end) {
        return Err(format!("rangeStart {start} is after rangeEnd {end}"));
    }
    Ok(PoolRange { subnet, start, end, gateway })
}

fn number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn address(n: u128, v4: bool) -> IpAddr {
    if v4 { IpAddr::V4((n as u32).into()) } else { IpAddr::V6(n.into()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read_json(keys: Value) -> Result<PoolDefinition, String> {
        read("lan", keys.as_object().unwrap())
    }

    #[test]
    fn a_definition_is_completed_with_host_locals_defaults() {
        let pool = read_json(
            json!({"ranges": [[{"subnet": "10.80.0.0/24"}], [{"subnet": "fd80::/64", "gateway": "fd80::fe"}]],
                                    "exclude": ["10.80.0.128/25"], "blockSize": 32, "routes": [{"dst": "10.0.0.0/8"}]}),
        )
        .unwrap();
        assert_eq!((pool.spec.name.as_str(), pool.spec.block_size), ("lan", 32));
        let v4 = &pool.spec.range_sets[0][0];
        assert_eq!(
            (v4.start.to_string(), v4.end.to_string(), v4.gateway.to_string()),
            ("10.80.0.1".into(), "10.80.0.254".into(), "10.80.0.1".into())
        );
        assert_eq!(pool.spec.exclude, ["10.80.0.128/25".parse::<IpNetwork>().unwrap()]);
        assert_eq!(pool.routes, [json!({"dst": "10.0.0.0/8"})]);
        assert_eq!(read_json(json!({"ranges": [[{"subnet": "10.80.0.0/24"}]]})).unwrap().spec.block_size, 16);
    }

    #[test]
    fn a_wrong_definition_says_what_is_wrong() {
        for (keys, says) in [
            (json!({}), "'ranges'"),
            (json!({"ranges": []}), "'ranges'"),
            (json!({"ranges": [[{"subnet": "10.80.0.1/24"}]]}), "host bits"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24"}]], "blockSize": 12}), "power of two"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/30"}]]}), "smaller than a block"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24"}], [{"subnet": "10.80.0.0/25"}]]}), "overlap"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24"}, {"subnet": "fd80::/64"}]]}), "mixes"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24", "rangeEnd": "10.81.0.9"}]]}), "outside"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24"}]], "exclude": ["10.80.0.300/32"]}), "not a CIDR"),
            (json!({"ranges": [[{"subnet": "10.80.0.0/24"}]], "routes": {"dst": "0.0.0.0/0"}}), "'routes'"),
        ] {
            let why = read_json(keys.clone()).unwrap_err();
            assert!(why.contains(says), "{keys}: {why}");
        }
        let why = read("Lan", json!({"ranges": [[{"subnet": "10.80.0.0/24"}]]}).as_object().unwrap()).unwrap_err();
        assert!(why.contains("lowercase"), "{why}");
    }
}
