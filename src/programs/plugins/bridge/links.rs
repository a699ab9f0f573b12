//! The host side of the pod network: the bridge (made on first use, never removed: other pods share
//! it), the veth pair whose host end is a bridge port, and the bridge's gateway addresses.

use super::config::Conf;
use crate::platform::cni::{CniError, code};
use crate::platform::netlink::{Address, IpFamily, Link, MacAddr, Netlink, VethPair};
use crate::platform::netns;
use ipnetwork::IpNetwork;
use std::os::fd::BorrowedFd;

/// How many random host-side names to try before giving up (the reference's count). Eight hex
/// digits make a collision among a node's few hundred veths a one-in-ten-million event.
const VETH_NAME_ATTEMPTS: usize = 10;

/// The bridge named in the configuration, made (up, with the configured MTU) if absent. An existing
/// link of that name that is not a bridge is an error, before anything is made.
pub async fn ensure_bridge(host: &Netlink, conf: &Conf) -> Result<Link, CniError> {
    let name = &conf.bridge;
    let mut bridge = host.link_by_name(name).await?;
    if bridge.is_none() {
        // Made with a MAC of its own, which the kernel then keeps. Without one, a bridge takes the
        // lowest MAC among its ports, which changes as pods come and go (and, until the gateway step
        // pins it, while the first pods are being set up at once): every pod's result names the
        // bridge's MAC, and CHECK would fail for pods that recorded an earlier one.
        match host.add_bridge(name, conf.mtu, conf.vlan.is_some(), Some(MacAddr::random()?)).await {
            // Another ADD made it between our lookup and our create: use theirs.
            Err(e) if e.code == code::ALREADY_EXISTS => {}
            other => other?,
        }
        bridge = host.link_by_name(name).await?;
    }
    let bridge = bridge.ok_or_else(|| CniError::kernel(format!("bridge {name:?} vanished right after it was made")))?;
    if !bridge.is_bridge() {
        return Err(CniError::new(
            code::ALREADY_EXISTS,
            format!(
                "{name:?} already exists but is not a bridge (it is a {})",
                bridge.kind.as_deref().unwrap_or("device")
            ),
        ));
    }
    if conf.promisc && !bridge.promisc {
        host.set_promisc(bridge.index, true).await?;
    }
    disable_accept_ra(name);
    if !bridge.up {
        host.set_up(bridge.index).await?;
    }
    Ok(bridge)
}

/// How a bridge port is set up.
#[derive(Debug, Clone, Copy)]
pub struct Port {
    /// MTU of both veth ends; `None` = kernel default.
    pub mtu: Option<u32>,
    pub hairpin: bool,
    /// Untagged member (PVID) of this VLAN.
    pub vlan: Option<u16>,
}

impl Port {
    /// A pod's port, as configured.
    pub fn for_pod(conf: &Conf) -> Self {
        Port { mtu: conf.mtu, hairpin: conf.hairpin, vlan: conf.vlan }
    }
}

/// A veth pair whose host end, named `veth` + 8 random hex digits, is created up and already a port
/// of `bridge`; the other end is `peer_name`, in `peer_netns` when given (the pod) or beside the
/// host end. Returns the host end. A taken host name is retried with a new one; a taken peer name is
/// code 106.
pub async fn add_bridge_port(
    host: &Netlink,
    bridge: &Link,
    port: Port,
    peer_name: &str,
    peer_netns: Option<BorrowedFd<'_>>,
    peer_mac: Option<MacAddr>,
) -> Result<Link, CniError> {
    for _ in 0..VETH_NAME_ATTEMPTS {
        let name = random_veth_name()?;
        let pair = VethPair {
            name: &name,
            peer_name,
            peer_netns,
            mtu: port.mtu,
            peer_mac,
            master: Some(bridge.index),
            up: true,
            ..Default::default()
        };
        match host.add_veth(&pair).await {
            Ok(()) => return configure_port(host, &name, port).await,
            // EEXIST names neither end: only a name still free on the host means the peer's is taken.
            Err(e) if e.code == code::ALREADY_EXISTS && host.link_by_name(&name).await?.is_some() => continue,
            Err(e) if e.code == code::ALREADY_EXISTS => {
                return Err(CniError::new(
                    code::ALREADY_EXISTS,
                    format!("interface {peer_name:?} already exists in the container's network namespace"),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    Err(CniError::new(code::ALREADY_EXISTS, format!("no free veth name after {VETH_NAME_ATTEMPTS} random tries")))
}

/// Port settings the reference applies to the host end: accept_ra off, hairpin, the VLAN's PVID.
async fn configure_port(host: &Netlink, name: &str, port: Port) -> Result<Link, CniError> {
    let link = host
        .link_by_name(name)
        .await?
        .ok_or_else(|| CniError::kernel(format!("veth {name:?} vanished right after it was made")))?;
    disable_accept_ra(name);
    if port.hairpin {
        host.set_hairpin(link.index, true).await?;
    }
    if let Some(vid) = port.vlan {
        host.set_port_vlan(link.index, vid).await?;
    }
    Ok(link)
}

/// Where the gateway addresses go: the bridge, or with a VLAN, a `<bridge>.<vlan>` veth whose other
/// end is a port of that VLAN (made on first use, as the reference does).
pub async fn gateway_link(host: &Netlink, bridge: &Link, conf: &Conf) -> Result<Link, CniError> {
    let Some(vid) = conf.vlan else {
        return Ok(bridge.clone());
    };
    let name = format!("{}.{vid}", conf.bridge);
    if let Some(link) = host.link_by_name(&name).await? {
        return Ok(link);
    }
    // The reference's gateway port: the bridge's MTU, no hairpin, the VLAN untagged.
    let port = Port { mtu: Some(bridge.mtu), hairpin: false, vlan: Some(vid) };
    add_bridge_port(host, bridge, port, &name, None, None).await?;
    let link = host
        .link_by_name(&name)
        .await?
        .ok_or_else(|| CniError::kernel(format!("{name:?} vanished right after it was made")))?;
    host.set_up(link.index).await?;
    Ok(link)
}

/// Put `gateway` (address/prefix) on `link` unless it is there. Another IPv4 address, or an IPv6 one
/// overlapping it, is an error unless `force` (then it is replaced). Returns whether it was added.
pub async fn ensure_gateway(host: &Netlink, link: &Link, gateway: IpNetwork, force: bool) -> Result<bool, CniError> {
    let family = IpFamily::of_net(&gateway);
    let present = host.addresses(Some(link.index), Some(family)).await?;
    if present.iter().any(|a| a.net == gateway) {
        return Ok(false);
    }
    for other in present.iter().filter(|a| conflicts(a, &gateway)) {
        if !force {
            return Err(CniError::new(
                code::ALREADY_EXISTS,
                format!("{:?} already has an IP address different from {gateway} ({})", link.name, other.net),
            ));
        }
        host.del_address(link.index, other.net).await?;
    }
    match host.add_address(link.index, gateway).await {
        // A concurrent ADD of a pod on the same bridge put it there first.
        Err(e) if e.code == code::ALREADY_EXISTS => Ok(false),
        other => other.map(|()| true),
    }
}

/// The reference's rule: one IPv4 address per bridge; IPv6 addresses may coexist if their subnets
/// do not overlap. Kernel-made link-local addresses never conflict.
fn conflicts(existing: &Address, wanted: &IpNetwork) -> bool {
    if existing.is_link_local() {
        return false;
    }
    wanted.is_ipv4() || existing.net.contains(wanted.ip()) || wanted.contains(existing.net.ip())
}

/// Turn on forwarding for `family` in the plugin's (host) netns, as the reference does for gateways.
pub fn enable_forwarding(family: IpFamily) -> Result<(), CniError> {
    let key = match family {
        IpFamily::V4 => "net/ipv4/ip_forward",
        IpFamily::V6 => "net/ipv6/conf/all/forwarding",
    };
    // Read first: a node that already forwards may mount /proc/sys read-only.
    if netns::read_sysctl(key).is_ok_and(|v| v == "1") {
        return Ok(());
    }
    netns::write_sysctl(key, "1")
}

/// The plugin owns the routes of the bridge and its ports: router advertisements must not add any
/// (the reference sets the same). A node without IPv6 has nothing to set, which is fine.
fn disable_accept_ra(ifname: &str) {
    if let Err(e) = netns::write_sysctl(&format!("net/ipv6/conf/{ifname}/accept_ra"), "0")
        && std::path::Path::new("/proc/sys/net/ipv6").exists()
    {
        tracing::warn!("{e}");
    }
}

fn random_veth_name() -> Result<String, CniError> {
    let n = getrandom::u32().map_err(|e| CniError::kernel(format!("no randomness for a veth name: {e}")))?;
    Ok(format!("veth{n:08x}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::netlink::AddressScope;

    fn addr(s: &str) -> Address {
        let scope = if s.starts_with("fe80") { AddressScope::Link } else { AddressScope::Universe };
        Address { index: 1, net: s.parse().unwrap(), scope }
    }

    #[test]
    fn gateway_conflicts_follow_the_reference() {
        let gw: IpNetwork = "10.1.0.1/24".parse().unwrap();
        assert!(conflicts(&addr("192.168.0.1/24"), &gw), "one IPv4 address per bridge");
        let gw6: IpNetwork = "fd00:1::1/64".parse().unwrap();
        assert!(!conflicts(&addr("fd00:2::1/64"), &gw6), "disjoint IPv6 subnets coexist");
        assert!(conflicts(&addr("fd00:1::99/64"), &gw6));
        assert!(!conflicts(&addr("fe80::1/64"), &gw6), "link-local is the kernel's");
    }

    #[test]
    fn veth_names_look_like_the_reference_ones() {
        let n = random_veth_name().unwrap();
        assert_eq!(n.len(), 12);
        assert!(n.starts_with("veth") && n[4..].chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(n, random_veth_name().unwrap());
    }
}
