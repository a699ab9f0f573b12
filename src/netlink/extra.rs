//! Two lookups the chained `veth` and `router` plugins need beyond the common layer: the source
//! address the kernel would use toward a destination (`ip route get`), and the peer of a veth end.

use super::{Netlink, kernel_err};
use crate::cni::CniError;
use futures::TryStreamExt;
use netlink_packet_route::link::LinkAttribute;
use netlink_packet_route::route::{RouteAddress, RouteAttribute};
use rtnetlink::RouteMessageBuilder;
use std::net::IpAddr;

impl Netlink {
    /// The preferred source address of the route the kernel would take to `dst` (`ip route get dst`,
    /// field `src`); `None` when `dst` is unreachable or the route names no source.
    pub async fn route_source(&self, dst: IpAddr) -> Result<Option<IpAddr>, CniError> {
        let prefix = if dst.is_ipv4() { 32 } else { 128 };
        let msg = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst, prefix)
            .map_err(|e| CniError::kernel(format!("route lookup for {dst}: {e}")))?
            .build();
        let reply = match self.handle.route().get(msg).execute().try_next().await {
            Ok(reply) => reply,
            // ENETUNREACH, EHOSTUNREACH...: no route, so no source either.
            Err(rtnetlink::Error::NetlinkError(_)) => return Ok(None),
            Err(e) => return Err(kernel_err(format_args!("route lookup for {dst}"))(e)),
        };
        Ok(reply.and_then(|m| {
            m.attributes.iter().find_map(|a| match a {
                RouteAttribute::PrefSource(RouteAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
                RouteAttribute::PrefSource(RouteAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
                _ => None,
            })
        }))
    }

    /// `IFLA_LINK` of link `index`: for a veth end, the index of its peer in the peer's namespace;
    /// for a macvlan, its parent's. `None` when the link has no such attribute (or is gone).
    pub async fn link_peer_index(&self, index: u32) -> Result<Option<u32>, CniError> {
        let mut stream = self.handle.link().get().match_index(index).execute();
        match stream.try_next().await {
            Ok(Some(m)) => Ok(m.attributes.iter().find_map(|a| match a {
                LinkAttribute::Link(peer) if *peer != 0 => Some(*peer),
                _ => None,
            })),
            Ok(None) => Ok(None),
            Err(e) if super::is_not_found(&e) => Ok(None),
            Err(e) => Err(kernel_err(format_args!("looking up link #{index}"))(e)),
        }
    }
}
