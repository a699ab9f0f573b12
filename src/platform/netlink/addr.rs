//! Interface addresses (IPv4 and IPv6).

use super::{IpFamily, Netlink, collect, kernel_err, ok_if_gone};
use crate::platform::cni::CniError;
use ipnetwork::IpNetwork;
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};

/// One address on one link, with its prefix length (`10.1.17.2/24`, host bits kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub index: u32,
    pub net: IpNetwork,
    pub scope: AddressScope,
}

impl Address {
    fn from_message(m: &AddressMessage) -> Option<Self> {
        // For IPv4, IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer on point-to-point
        // links); IPv6 has only IFA_ADDRESS.
        let local = m.attributes.iter().find_map(|a| match a {
            AddressAttribute::Local(ip) => Some(*ip),
            _ => None,
        });
        let address = m.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        });
        let ip = local.or(address)?;
        let net = IpNetwork::new(ip, m.header.prefix_len).ok()?;
        Some(Address { index: m.header.index, net, scope: m.header.scope })
    }

    /// Link-local (fe80::/10, 169.254/16): made by the kernel, never by a plugin.
    pub fn is_link_local(&self) -> bool {
        self.scope == AddressScope::Link
    }
}

impl Netlink {
    /// Addresses, of one link and/or one family when given.
    pub async fn addresses(&self, index: Option<u32>, family: Option<IpFamily>) -> Result<Vec<Address>, CniError> {
        let mut req = self.handle.address().get();
        if let Some(i) = index {
            req = req.set_link_index_filter(i);
        }
        if let Some(f) = family {
            req.message_mut().header.family = f.address_family();
        }
        let msgs = collect(req.execute(), "listing addresses").await?;
        Ok(msgs
            .iter()
            .filter_map(Address::from_message)
            .filter(|a| family.is_none_or(|f| f == IpFamily::of_net(&a.net)))
            .collect())
    }

    /// Add `net` (address/prefix) to link `index`. Already present is code 106.
    pub async fn add_address(&self, index: u32, net: IpNetwork) -> Result<(), CniError> {
        self.handle
            .address()
            .add(index, net.ip(), net.prefix())
            .execute()
            .await
            .map_err(kernel_err(format_args!("adding address {net} to link #{index}")))
    }

    /// Remove `net` from link `index`; absent is success.
    pub async fn del_address(&self, index: u32, net: IpNetwork) -> Result<(), CniError> {
        let mut msg = AddressMessage::default();
        msg.header.family = IpFamily::of_net(&net).address_family();
        msg.header.prefix_len = net.prefix();
        msg.header.index = index;
        msg.attributes.push(AddressAttribute::Address(net.ip()));
        if net.is_ipv4() {
            msg.attributes.push(AddressAttribute::Local(net.ip()));
        }
        ok_if_gone(
            self.handle.address().del(msg).execute().await,
            format_args!("removing address {net} from link #{index}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::AddressFamily;

    /// An address message on interface 4 with `attributes`, the family left IPv4 as the kernel's
    /// header is read only for its prefix length, scope and index.
    fn message(prefix_len: u8, scope: AddressScope, attributes: Vec<AddressAttribute>) -> AddressMessage {
        let mut m = AddressMessage::default();
        m.header.family = AddressFamily::Inet;
        m.header.prefix_len = prefix_len;
        m.header.index = 4;
        m.header.scope = scope;
        m.attributes = attributes;
        m
    }

    #[test]
    fn an_ipv4_address_is_its_local_attribute_not_the_peer() {
        let m = message(
            24,
            AddressScope::default(),
            vec![
                AddressAttribute::Address("10.0.0.9".parse().unwrap()),
                AddressAttribute::Local("10.0.0.2".parse().unwrap()),
            ],
        );
        assert_eq!(Address::from_message(&m).unwrap().net.to_string(), "10.0.0.2/24");
    }

    #[test]
    fn an_ipv6_address_is_its_address_attribute() {
        let mut m = message(64, AddressScope::Link, vec![AddressAttribute::Address("fe80::1".parse().unwrap())]);
        let a = Address::from_message(&m).unwrap();
        assert_eq!((a.net.to_string().as_str(), a.is_link_local()), ("fe80::1/64", true));
        m.attributes.clear();
        assert!(Address::from_message(&m).is_none());
    }
}
