//! `subnet.env`: what the yonghui fabric daemon tells the plugin about this node's share of the
//! cluster network. The format is flanneld's, so a node can switch daemons without touching CNI:
//!
//! ```text
//! FLANNEL_NETWORK=10.1.0.0/16
//! FLANNEL_SUBNET=10.1.17.1/24
//! FLANNEL_MTU=1472
//! FLANNEL_IPMASQ=true
//! ```
//!
//! plus `FLANNEL_IPV6_NETWORK` / `FLANNEL_IPV6_SUBNET` for IPv6. The network keys take a comma
//! list (a cluster may have several networks). Flannel accepts any text after `FLANNEL_IPMASQ=`
//! and stops at the first bad line without naming it; here every key is checked and every error
//! names the file, the line and the key, because this file is the first thing to read when pods
//! get no network.

use crate::platform::cni::CniError;
use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};
use std::collections::HashMap;
use std::path::Path;

pub const NETWORK: &str = "FLANNEL_NETWORK";
pub const SUBNET: &str = "FLANNEL_SUBNET";
pub const IPV6_NETWORK: &str = "FLANNEL_IPV6_NETWORK";
pub const IPV6_SUBNET: &str = "FLANNEL_IPV6_SUBNET";
pub const MTU: &str = "FLANNEL_MTU";
pub const IPMASQ: &str = "FLANNEL_IPMASQ";

const KEYS: [&str; 6] = [NETWORK, SUBNET, IPV6_NETWORK, IPV6_SUBNET, MTU, IPMASQ];

/// Linux's bounds for an interface MTU: the IPv4 minimum (RFC 791) and the largest IP packet.
const MTU_RANGE: std::ops::RangeInclusive<u32> = 68..=65535;

/// This node's view of the yonghui network. Always complete: at least one network, at least one
/// subnet, and for each address family either both a network and a subnet or neither.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetEnv {
    /// `FLANNEL_NETWORK`: the IPv4 cluster networks, host bits cleared, de-duplicated, in file order.
    pub ipv4_networks: Vec<Ipv4Network>,
    /// `FLANNEL_SUBNET` with host bits cleared: this node's IPv4 pod subnet.
    pub ipv4_subnet: Option<Ipv4Network>,
    /// `FLANNEL_IPV6_NETWORK`, like `ipv4_networks`.
    pub ipv6_networks: Vec<Ipv6Network>,
    /// `FLANNEL_IPV6_SUBNET`, like `ipv4_subnet`.
    pub ipv6_subnet: Option<Ipv6Network>,
    /// `FLANNEL_MTU`: the MTU pods must use so that encapsulated packets fit the fabric.
    pub mtu: u32,
    /// `FLANNEL_IPMASQ`: whether the daemon itself masquerades traffic leaving the cluster networks.
    pub ipmasq: bool,
}

impl SubnetEnv {
    /// Read and parse the file at `path`. An unreadable file is code 5, bad content code 6.
    pub fn load(path: &Path) -> Result<Self, CniError> {
        let bytes = std::fs::read(path).map_err(|e| {
            CniError::io(format!(
                "cannot read yonghui subnet file {}: {e} (is the yonghui daemon running on this node?)",
                path.display()
            ))
        })?;
        let text = String::from_utf8(bytes)
            .map_err(|_| CniError::decode(format!("yonghui subnet file {} is not UTF-8 text", path.display())))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parse the text of a subnet file; `origin` names it in errors (code 6).
    pub fn parse(text: &str, origin: &str) -> Result<Self, CniError> {
        let lines = KnownLines::collect(text, origin)?;
        let ipv4_networks = lines.networks(NETWORK, as_ipv4)?;
        let ipv4_subnet = lines.subnet(SUBNET, as_ipv4)?;
        let ipv6_networks = lines.networks(IPV6_NETWORK, as_ipv6)?;
        let ipv6_subnet = lines.subnet(IPV6_SUBNET, as_ipv6)?;
        let mtu = lines.parsed(MTU, parse_mtu)?;
        let ipmasq = lines.parsed(IPMASQ, parse_bool)?;

        // Flannel's rule for what a usable file has; every missing key is named at once.
        let mut missing = Vec::new();
        if ipv4_networks.is_empty() && ipv6_networks.is_empty() {
            missing.push(format!("{NETWORK} (or {IPV6_NETWORK})"));
        }
        if ipv4_subnet.is_none() && ipv6_subnet.is_none() {
            missing.push(format!("{SUBNET} (or {IPV6_SUBNET})"));
        }
        missing.extend(mtu.is_none().then(|| MTU.to_string()));
        missing.extend(ipmasq.is_none().then(|| IPMASQ.to_string()));
        if !missing.is_empty() {
            return Err(CniError::decode(format!("{origin} is missing {}", missing.join(", "))));
        }
        // Flannel does not check this, and the result is a pod with an address but no route to
        // the cluster (or a route but no address): refuse it here, where the cause is visible.
        for (network_key, has_network, subnet_key, has_subnet) in [
            (NETWORK, !ipv4_networks.is_empty(), SUBNET, ipv4_subnet.is_some()),
            (IPV6_NETWORK, !ipv6_networks.is_empty(), IPV6_SUBNET, ipv6_subnet.is_some()),
        ] {
            if has_network != has_subnet {
                let (has, lacks) = if has_network { (network_key, subnet_key) } else { (subnet_key, network_key) };
                return Err(CniError::decode(format!("{origin} has {has} but no {lacks}")));
            }
        }
        Ok(SubnetEnv {
            ipv4_networks,
            ipv4_subnet,
            ipv6_networks,
            ipv6_subnet,
            mtu: mtu.unwrap_or_default(),
            ipmasq: ipmasq.unwrap_or_default(),
        })
    }

    /// Every cluster network, IPv4 first: the pod gets one route to each.
    pub fn networks(&self) -> impl Iterator<Item = IpNetwork> + '_ {
        let v4 = self.ipv4_networks.iter().copied().map(IpNetwork::V4);
        v4.chain(self.ipv6_networks.iter().copied().map(IpNetwork::V6))
    }

    /// This node's subnets, IPv4 first: the pod gets one address from each.
    pub fn subnets(&self) -> impl Iterator<Item = IpNetwork> + '_ {
        self.ipv4_subnet.map(IpNetwork::V4).into_iter().chain(self.ipv6_subnet.map(IpNetwork::V6))
    }
}

/// The known keys of a subnet file with their values and line numbers, each key at most once.
struct KnownLines<'a> {
    origin: &'a str,
    values: HashMap<&'static str, (usize, &'a str)>,
}

impl<'a> KnownLines<'a> {
    /// Blank lines and `#` comments are skipped; keys yonghui does not know are ignored (the daemon
    /// may write more than the plugin needs); a line that is not `KEY=VALUE` or a known key given
    /// twice is an error, since either means the file is not what the daemon wrote.
    fn collect(text: &'a str, origin: &'a str) -> Result<Self, CniError> {
        let mut values: HashMap<&'static str, (usize, &'a str)> = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                // The line itself is not quoted: the file may not be what the daemon wrote (a
                // subnetFile naming another file), and an error must not show what it holds.
                return Err(CniError::decode(format!("{origin} line {line_no} is not KEY=VALUE")));
            };
            let Some(&key) = KEYS.iter().find(|k| **k == key.trim()) else {
                continue;
            };
            if let Some((first, _)) = values.insert(key, (line_no, value.trim())) {
                return Err(CniError::decode(format!(
                    "{origin} line {line_no}: {key} is set twice (first on line {first})"
                )));
            }
        }
        Ok(KnownLines { origin, values })
    }

    /// The value of `key` run through `parse`, or None if the key is absent. The error names the
    /// line and the key and says what is wrong, never quoting the value (see `collect`).
    fn parsed<T>(&self, key: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Option<T>, CniError> {
        let Some(&(line_no, value)) = self.values.get(key) else {
            return Ok(None);
        };
        parse(value).map(Some).map_err(|why| CniError::decode(format!("{} line {line_no}: {key}: {why}", self.origin)))
    }

    /// A comma list of networks of one family, host bits cleared, duplicates dropped.
    fn networks<N: PartialEq>(
        &self,
        key: &str,
        family: impl Fn(IpNetwork) -> Result<N, String>,
    ) -> Result<Vec<N>, CniError> {
        let list = self.parsed(key, |value| {
            let mut networks = Vec::new();
            for item in value.split(',').map(str::trim) {
                let network = family(parse_cidr(item)?)?;
                if !networks.contains(&network) {
                    networks.push(network);
                }
            }
            Ok(networks)
        })?;
        Ok(list.unwrap_or_default())
    }

    /// One subnet of one family, host bits cleared (`10.1.17.1/24` is the subnet `10.1.17.0/24`).
    fn subnet<N>(&self, key: &str, family: impl Fn(IpNetwork) -> Result<N, String>) -> Result<Option<N>, CniError> {
        self.parsed(key, |value| family(parse_cidr(value)?))
    }
}

/// A CIDR as Go's `net.ParseCIDR` reads it (`ADDRESS/LENGTH`, decimal length, no netmask form),
/// returned with its host bits cleared. The error says what is wrong without quoting `text`, for
/// the caller to place (and quote, where what it parsed may be shown).
pub fn parse_cidr(text: &str) -> Result<IpNetwork, String> {
    let bad = || {
        let what = if text.is_empty() { "an empty item" } else { "the value" };
        format!("{what} is not a CIDR (ADDRESS/PREFIX-LENGTH)")
    };
    let (addr, len) = text.split_once('/').ok_or_else(bad)?;
    let addr: std::net::IpAddr = addr.parse().map_err(|_| bad())?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let prefix: u8 = len.parse().map_err(|_| bad())?;
    let network = IpNetwork::new(addr, prefix).map_err(|_| "the prefix length is out of range".to_string())?;
    Ok(IpNetwork::new(network.network(), prefix).expect("the prefix was just accepted for this family"))
}

fn as_ipv4(network: IpNetwork) -> Result<Ipv4Network, String> {
    match network {
        IpNetwork::V4(n) => Ok(n),
        IpNetwork::V6(_) => Err(format!("an IPv6 network; IPv6 goes in {IPV6_NETWORK} and {IPV6_SUBNET}")),
    }
}

fn as_ipv6(network: IpNetwork) -> Result<Ipv6Network, String> {
    match network {
        IpNetwork::V6(n) => Ok(n),
        IpNetwork::V4(_) => Err(format!("an IPv4 network; IPv4 goes in {NETWORK} and {SUBNET}")),
    }
}

fn parse_mtu(value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|mtu| value.bytes().all(|b| b.is_ascii_digit()) && MTU_RANGE.contains(mtu))
        .ok_or_else(|| format!("not an MTU ({}-{})", MTU_RANGE.start(), MTU_RANGE.end()))
}

/// `true` or `false`, as the daemon writes them. Flannel reads anything but `true` as false, which
/// turns a typo into silently different NAT; here a typo is an error.
fn parse_bool(value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("must be true or false".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "/run/yonghui/subnet.env";

    fn parse(text: &str) -> Result<SubnetEnv, CniError> {
        SubnetEnv::parse(text, ORIGIN)
    }

    fn v4(s: &str) -> Ipv4Network {
        s.parse().unwrap()
    }

    fn v6(s: &str) -> Ipv6Network {
        s.parse().unwrap()
    }

    /// The error message, after checking it is code 6 and names the file.
    fn decode_error(text: &str) -> String {
        let e = parse(text).unwrap_err();
        assert_eq!(e.code, 6, "{e}");
        assert!(e.msg.contains(ORIGIN), "{e}");
        e.msg
    }

    #[test]
    fn node_file_masks_the_subnet() {
        let env =
            parse("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n")
                .unwrap();
        assert_eq!(
            env,
            SubnetEnv {
                ipv4_networks: vec![v4("10.1.0.0/16")],
                ipv4_subnet: Some(v4("10.1.17.0/24")),
                ipv6_networks: vec![],
                ipv6_subnet: None,
                mtu: 1472,
                ipmasq: true,
            }
        );
        assert_eq!(env.ipv4_subnet.unwrap().to_string(), "10.1.17.0/24");
    }

    #[test]
    fn dual_stack_several_networks_deduplicated_in_order() {
        let env = parse(
            "FLANNEL_NETWORK=10.1.0.0/16, 10.2.0.0/16,10.1.0.0/16,10.1.3.4/16\n\
             FLANNEL_SUBNET=10.1.17.1/24\n\
             FLANNEL_IPV6_NETWORK=fd00:1::/56,fd00:2::/56\n\
             FLANNEL_IPV6_SUBNET=fd00:1:0:11::1/64\n\
             FLANNEL_MTU=1450\n\
             FLANNEL_IPMASQ=false\n",
        )
        .unwrap();
        assert_eq!(env.ipv4_networks, vec![v4("10.1.0.0/16"), v4("10.2.0.0/16")]);
        assert_eq!(env.ipv6_networks, vec![v6("fd00:1::/56"), v6("fd00:2::/56")]);
        assert_eq!(env.ipv6_subnet, Some(v6("fd00:1:0:11::/64")));
        assert!(!env.ipmasq);
        let nets: Vec<String> = env.networks().map(|n| n.to_string()).collect();
        assert_eq!(nets, ["10.1.0.0/16", "10.2.0.0/16", "fd00:1::/56", "fd00:2::/56"]);
        let subnets: Vec<String> = env.subnets().map(|n| n.to_string()).collect();
        assert_eq!(subnets, ["10.1.17.0/24", "fd00:1:0:11::/64"]);
    }

    #[test]
    fn ipv6_only() {
        let env =
            parse("FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:5::/64\nFLANNEL_MTU=1400\nFLANNEL_IPMASQ=true")
                .unwrap();
        assert!(env.ipv4_networks.is_empty() && env.ipv4_subnet.is_none());
        assert_eq!(env.subnets().collect::<Vec<_>>(), vec![IpNetwork::V6(v6("fd00:0:0:5::/64"))]);
    }

    #[test]
    fn a_subnet_env_with_comments_crlf_spaces_or_unknown_keys_parses() {
        let env = parse(
            "# written by yonghui\r\n\r\n  FLANNEL_NETWORK = 10.1.0.0/16\r\nFLANNEL_SUBNET=10.1.17.1/24\r\n\
             FLANNEL_MTU=1472\r\nFLANNEL_IPMASQ=true\r\nFLANNEL_FUTURE=whatever=x\r\n",
        )
        .unwrap();
        assert_eq!(env.mtu, 1472);
    }

    #[test]
    fn every_missing_key_is_named() {
        let msg = decode_error("foo=bar\n");
        assert_eq!(
            msg,
            format!(
                "{ORIGIN} is missing FLANNEL_NETWORK (or FLANNEL_IPV6_NETWORK), \
                 FLANNEL_SUBNET (or FLANNEL_IPV6_SUBNET), FLANNEL_MTU, FLANNEL_IPMASQ"
            )
        );
        let msg = decode_error("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\n");
        assert!(msg.ends_with("is missing FLANNEL_MTU, FLANNEL_IPMASQ"), "{msg}");
        let msg = decode_error("FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_MTU=1400\nFLANNEL_IPMASQ=true\n");
        assert!(msg.ends_with("is missing FLANNEL_SUBNET (or FLANNEL_IPV6_SUBNET)"), "{msg}");
        assert!(decode_error("").contains("FLANNEL_IPMASQ"));
    }

    #[test]
    fn a_family_needs_its_network_with_its_subnet() {
        let tail = "FLANNEL_MTU=1400\nFLANNEL_IPMASQ=true\n";
        let msg = decode_error(&format!("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_IPV6_SUBNET=fd00::/64\n{tail}"));
        assert!(msg.ends_with("has FLANNEL_NETWORK but no FLANNEL_SUBNET"), "{msg}");
        let msg = decode_error(&format!(
            "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.1.0/24\nFLANNEL_IPV6_SUBNET=fd00::/64\n{tail}"
        ));
        assert!(msg.ends_with("has FLANNEL_IPV6_SUBNET but no FLANNEL_IPV6_NETWORK"), "{msg}");
    }

    #[test]
    fn duplicate_keys_are_refused_with_both_lines() {
        let msg = decode_error("FLANNEL_MTU=1400\nFLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_MTU=1500\n");
        assert!(msg.contains("line 3: FLANNEL_MTU is set twice (first on line 1)"), "{msg}");
    }

    #[test]
    fn an_unparsable_value_is_named_by_line_with_key_without_quoting_it() {
        let good = [
            "FLANNEL_NETWORK=10.1.0.0/16",
            "FLANNEL_SUBNET=10.1.17.1/24",
            "FLANNEL_IPV6_NETWORK=fd00::/48",
            "FLANNEL_IPV6_SUBNET=fd00:0:0:1::/64",
            "FLANNEL_MTU=1472",
            "FLANNEL_IPMASQ=true",
        ];
        for (line, bad, want) in [
            (0, "FLANNEL_NETWORK=10.1.0.0", "not a CIDR"),
            (0, "FLANNEL_NETWORK=10.1.0.0/33", "prefix length is out of range"),
            (0, "FLANNEL_NETWORK=10.1.0.0/255.255.0.0", "not a CIDR"),
            (0, "FLANNEL_NETWORK=10.1.0.0/+16", "not a CIDR"),
            (0, "FLANNEL_NETWORK=10.1.0.0/16,", "an empty item is not a CIDR"),
            (0, "FLANNEL_NETWORK=", "an empty item is not a CIDR"),
            (0, "FLANNEL_NETWORK=fd00::/48", "an IPv6 network"),
            (1, "FLANNEL_SUBNET=10.1.17.300/24", "not a CIDR"),
            (1, "FLANNEL_SUBNET=10.1.17.1/24,10.1.18.1/24", "not a CIDR"),
            (2, "FLANNEL_IPV6_NETWORK=10.0.0.0/8", "an IPv4 network"),
            (3, "FLANNEL_IPV6_SUBNET=fd00::/129", "out of range"),
            (4, "FLANNEL_MTU=abc", "not an MTU"),
            (4, "FLANNEL_MTU=0", "not an MTU"),
            (4, "FLANNEL_MTU=65536", "not an MTU"),
            (4, "FLANNEL_MTU=-1", "not an MTU"),
            (4, "FLANNEL_MTU=+1400", "not an MTU"),
            (5, "FLANNEL_IPMASQ=yes", "must be true or false"),
            (5, "FLANNEL_IPMASQ=", "must be true or false"),
        ] {
            let mut lines = good;
            lines[line] = bad;
            let msg = decode_error(&lines.join("\n"));
            let key = bad.split('=').next().unwrap();
            assert!(msg.contains(&format!("line {}: {key}: ", line + 1)), "{bad}: {msg}");
            assert!(msg.contains(want), "{bad}: {msg}");
            let value = bad.split_once('=').unwrap().1;
            assert!(value.is_empty() || !msg.contains(value), "the value is not quoted: {msg}");
        }
    }

    #[test]
    fn a_line_that_is_not_key_value_is_refused() {
        let msg = decode_error("FLANNEL_NETWORK=10.1.0.0/16\ngarbage\n");
        assert!(msg.contains("line 2 is not KEY=VALUE"), "{msg}");
        let msg = decode_error("FLANNEL_NETWORK=10.1.0.0/16\nroot:$6$secret-hash:19000:0:99999:7:::\n");
        assert!(msg.contains("line 2 is not KEY=VALUE") && !msg.contains("secret"), "nothing of the line: {msg}");
    }

    #[test]
    fn a_missing_subnet_env_is_code_5_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("subnet.env");
        let e = SubnetEnv::load(&path).unwrap_err();
        assert_eq!(e.code, 5);
        assert!(e.msg.contains(&path.display().to_string()), "{e}");
    }

    #[test]
    fn a_subnet_env_that_is_not_utf_8_is_code_6() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("subnet.env");
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert_eq!(SubnetEnv::load(&path).unwrap_err().code, 6);
    }

    #[test]
    fn a_subnet_env_lacking_a_key_names_the_file_with_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("subnet.env");
        std::fs::write(&path, "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\n").unwrap();
        let e = SubnetEnv::load(&path).unwrap_err();
        assert_eq!(e.msg, format!("{} is missing FLANNEL_IPMASQ", path.display()));
    }

    #[test]
    fn a_cidr_is_masked_to_its_network() {
        assert_eq!(parse_cidr("10.1.17.9/24").unwrap().to_string(), "10.1.17.0/24");
        assert_eq!(parse_cidr("fd00::1/64").unwrap().to_string(), "fd00::/64");
        assert_eq!(parse_cidr("0.0.0.0/0").unwrap().to_string(), "0.0.0.0/0");
    }

    #[test]
    fn cidr_parsing_is_strict() {
        for bad in ["10.1.17.9", "10.1.17.9/", "/24", "10.1/16", " 10.1.0.0/16", "10.1.0.0/16/1", "x/8"] {
            assert!(parse_cidr(bad).is_err(), "{bad}");
        }
    }
}
