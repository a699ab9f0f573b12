//! Permanent neighbour (ARP / NDP) entries.

use super::{IpFamily, MacAddr, Netlink, collect, kernel_err, ok_if_gone};
use crate::platform::cni::CniError;
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState};
use std::net::IpAddr;

/// One neighbour table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    pub index: u32,
    pub ip: IpAddr,
    /// `None` for entries still being resolved (incomplete, failed).
    pub mac: Option<MacAddr>,
    pub permanent: bool,
}

impl Neighbour {
    fn from_message(m: &NeighbourMessage) -> Option<Self> {
        let mut ip = None;
        let mut mac = None;
        for attr in &m.attributes {
            match attr {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => ip = Some(IpAddr::V4(*v4)),
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => ip = Some(IpAddr::V6(*v6)),
                NeighbourAttribute::LinkLayerAddress(b) => mac = MacAddr::from_bytes(b),
                _ => {}
            }
        }
        Some(Neighbour {
            index: m.header.ifindex,
            ip: ip?,
            mac,
            permanent: m.header.state == NeighbourState::Permanent,
        })
    }
}

impl Netlink {
    /// Add or replace a permanent entry `ip` -> `mac` on link `index` (`ip neigh replace ... nud permanent`).
    pub async fn add_neighbour(&self, index: u32, ip: IpAddr, mac: MacAddr) -> Result<(), CniError> {
        self.handle
            .neighbours()
            .add(index, ip)
            .link_layer_address(&mac.0)
            .state(NeighbourState::Permanent)
            .replace()
            .execute()
            .await
            .map_err(kernel_err(format_args!("adding neighbour {ip} lladdr {mac} on link #{index}")))
    }

    /// Remove the entry for `ip` on link `index`; absent is success.
    pub async fn del_neighbour(&self, index: u32, ip: IpAddr) -> Result<(), CniError> {
        let mut msg = NeighbourMessage::default();
        msg.header.family = IpFamily::of(ip).address_family();
        msg.header.ifindex = index;
        msg.attributes.push(NeighbourAttribute::Destination(match ip {
            IpAddr::V4(v4) => NeighbourAddress::Inet(v4),
            IpAddr::V6(v6) => NeighbourAddress::Inet6(v6),
        }));
        ok_if_gone(
            self.handle.neighbours().del(msg).execute().await,
            format_args!("deleting neighbour {ip} on link #{index}"),
        )
    }

    /// IPv4 and IPv6 neighbour entries, of one link when given.
    pub async fn neighbours(&self, index: Option<u32>) -> Result<Vec<Neighbour>, CniError> {
        let msgs = collect(self.handle.neighbours().get().execute(), "listing neighbours").await?;
        Ok(msgs.iter().filter_map(Neighbour::from_message).filter(|n| index.is_none_or(|i| n.index == i)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A permanent neighbour entry on interface 5 with `attributes`.
    fn entry(attributes: Vec<NeighbourAttribute>) -> NeighbourMessage {
        let mut m = NeighbourMessage::default();
        m.header.ifindex = 5;
        m.header.state = NeighbourState::Permanent;
        m.attributes = attributes;
        m
    }

    #[test]
    fn a_neighbour_entry_reads_as_its_ip_with_its_mac() {
        let m = entry(vec![
            NeighbourAttribute::Destination(NeighbourAddress::Inet("169.254.1.1".parse().unwrap())),
            NeighbourAttribute::LinkLayerAddress(vec![0xee; 6]),
        ]);
        let n = Neighbour::from_message(&m).unwrap();
        assert_eq!(
            n,
            Neighbour { index: 5, ip: "169.254.1.1".parse().unwrap(), mac: Some(MacAddr([0xee; 6])), permanent: true }
        );
    }

    #[test]
    fn a_neighbour_entry_without_an_ip_is_skipped() {
        let m = entry(vec![NeighbourAttribute::LinkLayerAddress(vec![0xee; 6])]);
        assert!(Neighbour::from_message(&m).is_none());
    }
}
