//! Links: lookup, bridges, veth pairs (the peer made directly in another netns), attributes, bridge
//! port options, deletion, and waiting for the operational state.

use super::{Netlink, collect, kernel_err, ok_if_gone};
use crate::platform::cni::CniError;
use futures::TryStreamExt;
use netlink_packet_route::link::{
    BridgeVlanInfoFlags, InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use rtnetlink::{LinkBridge, LinkBridgePort, LinkBridgeVlan, LinkMessageBuilder, LinkUnspec, LinkVeth};
use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::str::FromStr;
use std::time::{Duration, Instant};

/// The kernel's operational state of a link (`IF_OPER_*`), as `ip link` shows it.
pub use netlink_packet_route::link::State as OperState;

/// An Ethernet hardware address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl FromStr for MacAddr {
    type Err = String;
    /// `aa:bb:cc:dd:ee:ff` (case-insensitive; `-` accepted as separator, as Go's `net.ParseMAC` does).
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split([':', '-']).collect();
        let bad = || format!("invalid MAC address {s:?}");
        if parts.len() != 6 {
            return Err(bad());
        }
        let mut mac = [0u8; 6];
        for (byte, part) in mac.iter_mut().zip(parts) {
            if part.len() != 2 {
                return Err(bad());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        Ok(MacAddr(mac))
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl MacAddr {
    /// What a bridge reports once its last port has left.
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// `text` as an address an interface can be given: unicast (a multicast or broadcast address,
    /// low bit of the first octet set, is refused by the kernel and by plugins) and not all zeros.
    pub fn assignable(text: &str) -> Result<Self, String> {
        let mac: MacAddr = text.parse().map_err(|_| format!("{text:?} is not a MAC address"))?;
        if mac.0[0] & 1 == 1 {
            return Err(format!("{text} is a multicast address, not usable by an interface"));
        }
        if mac == MacAddr::ZERO {
            return Err(format!("{text} is all zeros, not usable by an interface"));
        }
        Ok(mac)
    }

    /// A random locally administered unicast address, the kind the kernel picks for a device
    /// without one. Plugins set it explicitly when a MAC must not change after creation (a bridge's,
    /// one that neighbour entries name), which udev's MACAddressPolicy could otherwise do.
    pub fn random() -> Result<Self, CniError> {
        let mut mac = [0u8; 6];
        getrandom::fill(&mut mac).map_err(|e| CniError::kernel(format!("no randomness for a MAC address: {e}")))?;
        mac[0] = (mac[0] & 0xfe) | 0x02;
        Ok(MacAddr(mac))
    }

    pub(super) fn from_bytes(b: &[u8]) -> Option<Self> {
        <[u8; 6]>::try_from(b).ok().map(MacAddr)
    }
}

/// What the kernel says about one link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND`: "bridge", "veth", "macvlan"...; `None` for physical devices and `lo`.
    pub kind: Option<String>,
    pub mtu: u32,
    pub mac: Option<MacAddr>,
    /// Index of the bridge (or bond) this link is a port of.
    pub master: Option<u32>,
    /// `IFLA_LINK`: a veth's peer, a macvlan's or vlan's parent. The index may be in another netns
    /// (a veth whose peer was moved away reports the peer's index there).
    pub link: Option<u32>,
    /// Administratively up (`ip link set up`).
    pub up: bool,
    pub promisc: bool,
    pub oper_state: OperState,
}

impl Link {
    pub fn is_bridge(&self) -> bool {
        self.kind.as_deref() == Some("bridge")
    }

    fn from_message(m: &LinkMessage) -> Self {
        let mut link = Link {
            index: m.header.index,
            name: String::new(),
            kind: None,
            mtu: 0,
            mac: None,
            master: None,
            link: None,
            up: m.header.flags.contains(LinkFlags::Up),
            promisc: m.header.flags.contains(LinkFlags::Promisc),
            oper_state: OperState::Unknown,
        };
        for attr in &m.attributes {
            match attr {
                LinkAttribute::IfName(n) => link.name = n.clone(),
                LinkAttribute::Mtu(v) => link.mtu = *v,
                LinkAttribute::Address(a) => link.mac = MacAddr::from_bytes(a),
                LinkAttribute::Controller(i) if *i != 0 => link.master = Some(*i),
                LinkAttribute::Link(i) if *i != 0 => link.link = Some(*i),
                LinkAttribute::OperState(s) => link.oper_state = *s,
                LinkAttribute::LinkInfo(infos) => {
                    link.kind = infos.iter().find_map(|i| match i {
                        LinkInfo::Kind(k) => Some(k.to_string()),
                        _ => None,
                    })
                }
                _ => {}
            }
        }
        link
    }
}

/// A veth pair to create. The first end is made in the socket's netns; the peer in `peer_netns` (an
/// open netns file, as Go's `PeerNamespace`), or beside it when `None`. Creating the peer directly where
/// it belongs means it never appears, even briefly, under its name in the wrong namespace.
/// Build one with a struct literal ending in `..Default::default()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct VethPair<'a> {
    pub name: &'a str,
    pub peer_name: &'a str,
    pub peer_netns: Option<BorrowedFd<'a>>,
    /// MTU of both ends; `None` = kernel default.
    pub mtu: Option<u32>,
    pub mac: Option<MacAddr>,
    pub peer_mac: Option<MacAddr>,
    /// Make the first end a port of this bridge as it is created (no window where it is unattached).
    pub master: Option<u32>,
    /// Create the first end administratively up.
    pub up: bool,
}

/// How long `wait_oper_up` waits at most. The reference bridge plugin sleeps up to 2.55 s in fixed steps;
/// a veth whose both ends are up reports UP within a few milliseconds, so polling with a short
/// doubling backoff is both faster and as patient.
pub const OPER_UP_TIMEOUT: Duration = Duration::from_millis(2500);

impl Netlink {
    /// The link named `name`, if there is one.
    pub async fn link_by_name(&self, name: &str) -> Result<Option<Link>, CniError> {
        let req = self.handle.link().get().match_name(name).execute();
        self.one_link(req, format_args!("looking up link {name:?}")).await
    }

    /// The link with index `index`, if there is one.
    pub async fn link_by_index(&self, index: u32) -> Result<Option<Link>, CniError> {
        let req = self.handle.link().get().match_index(index).execute();
        self.one_link(req, format_args!("looking up link #{index}")).await
    }

    async fn one_link(
        &self,
        mut stream: impl futures::Stream<Item = Result<LinkMessage, rtnetlink::Error>> + Unpin,
        what: fmt::Arguments<'_>,
    ) -> Result<Option<Link>, CniError> {
        match stream.try_next().await {
            Ok(m) => Ok(m.as_ref().map(Link::from_message)),
            Err(e) if super::is_not_found(&e) => Ok(None),
            Err(e) => Err(kernel_err(what)(e)),
        }
    }

    /// Every link in the namespace.
    pub async fn links(&self) -> Result<Vec<Link>, CniError> {
        let msgs = collect(self.handle.link().get().execute(), "listing links").await?;
        Ok(msgs.iter().map(Link::from_message).collect())
    }

    /// Create bridge `name`, up, with `mtu` (None = kernel default), VLAN filtering if asked, and
    /// `mac` if given: a bridge created with a MAC keeps it, one without takes the lowest MAC of its
    /// ports, which changes as ports come and go. An existing link of that name is code 106
    /// (callers decide whether that is fine).
    pub async fn add_bridge(
        &self,
        name: &str,
        mtu: Option<u32>,
        vlan_filtering: bool,
        mac: Option<MacAddr>,
    ) -> Result<(), CniError> {
        let mut b = LinkBridge::new(name);
        if let Some(mtu) = mtu {
            b = b.mtu(mtu);
        }
        if let Some(mac) = mac {
            b = b.address(mac.0.to_vec());
        }
        if vlan_filtering {
            b = b.vlan_filtering(true);
        }
        self.handle.link().add(b.build()).execute().await.map_err(kernel_err(format_args!("creating bridge {name:?}")))
    }

    /// Create a veth pair (see [`VethPair`]). EEXIST (either name taken) is code 106.
    pub async fn add_veth(&self, pair: &VethPair<'_>) -> Result<(), CniError> {
        let mut peer = LinkUnspec::new_with_name(pair.peer_name);
        if let Some(fd) = pair.peer_netns {
            peer = peer.setns_by_fd(fd.as_raw_fd());
        }
        let mut local = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth).name(pair.name);
        if let Some(mtu) = pair.mtu {
            peer = peer.mtu(mtu);
            local = local.mtu(mtu);
        }
        if let Some(mac) = pair.peer_mac {
            peer = peer.address(mac.0.to_vec());
        }
        if let Some(mac) = pair.mac {
            local = local.address(mac.0.to_vec());
        }
        if let Some(master) = pair.master {
            local = local.controller(master);
        }
        if pair.up {
            local = local.up();
        }
        let msg = local.set_info_data(InfoData::Veth(InfoVeth::Peer(peer.build()))).build();
        self.handle
            .link()
            .add(msg)
            .execute()
            .await
            .map_err(kernel_err(format_args!("creating veth pair {:?}/{:?}", pair.name, pair.peer_name)))
    }

    async fn set(&self, msg: LinkMessage, what: fmt::Arguments<'_>) -> Result<(), CniError> {
        self.handle.link().set(msg).execute().await.map_err(kernel_err(what))
    }

    pub async fn set_up(&self, index: u32) -> Result<(), CniError> {
        self.set(LinkUnspec::new_with_index(index).up().build(), format_args!("setting link #{index} up")).await
    }

    pub async fn set_mac(&self, index: u32, mac: MacAddr) -> Result<(), CniError> {
        let msg = LinkUnspec::new_with_index(index).address(mac.0.to_vec()).build();
        self.set(msg, format_args!("setting MAC {mac} on link #{index}")).await
    }

    pub async fn set_promisc(&self, index: u32, on: bool) -> Result<(), CniError> {
        let msg = LinkUnspec::new_with_index(index).promiscuous(on).build();
        self.set(msg, format_args!("setting promiscuous mode {on} on link #{index}")).await
    }

    /// Hairpin (reflective relay) on a bridge port: frames may go back out the port they came in on.
    pub async fn set_hairpin(&self, port: u32, on: bool) -> Result<(), CniError> {
        self.handle
            .link()
            .set_port(LinkBridgePort::new(port).hairpin(on).build())
            .execute()
            .await
            .map_err(kernel_err(format_args!("setting hairpin mode {on} on bridge port #{port}")))
    }

    /// Give a bridge port VLAN `vid` as its PVID, untagged on egress (`bridge vlan add vid V pvid untagged`).
    pub async fn set_port_vlan(&self, port: u32, vid: u16) -> Result<(), CniError> {
        let msg =
            LinkBridgeVlan::new(port).vlan(vid, BridgeVlanInfoFlags::Pvid | BridgeVlanInfoFlags::Untagged).build();
        self.set(msg, format_args!("adding vlan {vid} to bridge port #{port}")).await
    }

    /// Delete a link; one already gone is success.
    pub async fn del_link(&self, index: u32) -> Result<(), CniError> {
        ok_if_gone(self.handle.link().del(index).execute().await, format_args!("deleting link #{index}"))
    }

    /// Delete the link named `name` if it exists; returns whether there was one.
    pub async fn del_link_by_name(&self, name: &str) -> Result<bool, CniError> {
        match self.link_by_name(name).await? {
            Some(l) => self.del_link(l.index).await.map(|()| true),
            None => Ok(false),
        }
    }

    /// Wait until link `index` is operationally UP, polling with a doubling backoff (1 ms .. 100 ms)
    /// for at most `timeout`. Returns the link's last state on timeout as an error.
    pub async fn wait_oper_up(&self, index: u32, timeout: Duration) -> Result<Link, CniError> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            let link = self.link_by_index(index).await?.ok_or_else(|| {
                CniError::kernel(format!("link #{index} disappeared while waiting for it to come up"))
            })?;
            if link.oper_state == OperState::Up {
                return Ok(link);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(CniError::kernel(format!(
                    "link {:?} is not operationally up after {} ms (state {})",
                    link.name,
                    timeout.as_millis(),
                    link.oper_state
                )));
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mac_parses_with_colons_or_dashes_in_either_case() {
        let m: MacAddr = "0A:58:0a:f4:01:02".parse().unwrap();
        assert_eq!(m.0, [0x0a, 0x58, 0x0a, 0xf4, 0x01, 0x02]);
        assert_eq!("0a-58-0a-f4-01-02".parse::<MacAddr>().unwrap(), m);
    }

    #[test]
    fn a_mac_prints_in_lower_case_with_colons() {
        let m: MacAddr = "0A:58:0a:f4:01:02".parse().unwrap();
        assert_eq!(m.to_string(), "0a:58:0a:f4:01:02");
    }

    #[test]
    fn a_malformed_mac_is_refused() {
        for bad in ["", "0a:58:0a:f4:01", "0a:58:0a:f4:01:02:03", "0a:58:0a:f4:01:zz", "a:58:0a:f4:01:002"] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn random_macs_are_locally_administered_unicast() {
        for _ in 0..64 {
            let mac = MacAddr::random().unwrap();
            assert_eq!(mac.0[0] & 0x03, 0x02, "{mac}");
        }
        assert_ne!(MacAddr::random().unwrap(), MacAddr::random().unwrap());
    }

    #[test]
    fn link_from_message_reads_what_plugins_need() {
        let mut m = LinkMessage::default();
        m.header.index = 7;
        m.header.flags = LinkFlags::Up | LinkFlags::Promisc;
        m.attributes = vec![
            LinkAttribute::IfName("cni0".into()),
            LinkAttribute::Mtu(1450),
            LinkAttribute::Address(vec![1, 2, 3, 4, 5, 6]),
            LinkAttribute::Controller(3),
            LinkAttribute::Link(11),
            LinkAttribute::OperState(OperState::Up),
            LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Bridge)]),
        ];
        let l = Link::from_message(&m);
        assert_eq!(
            l,
            Link {
                index: 7,
                name: "cni0".into(),
                kind: Some("bridge".into()),
                mtu: 1450,
                mac: Some(MacAddr([1, 2, 3, 4, 5, 6])),
                master: Some(3),
                link: Some(11),
                up: true,
                promisc: true,
                oper_state: OperState::Up,
            }
        );
        assert!(l.is_bridge());
    }
}
