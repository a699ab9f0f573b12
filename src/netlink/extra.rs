//! A lookup the chained `veth` and `router` plugins need beyond the common layer: the source address
//! the kernel would use toward a destination (`ip route get`).

use super::{Netlink, kernel_err};
use crate::cni::CniError;
use futures::TryStreamExt;
use netlink_packet_route::route::{RouteAddress, RouteAttribute};
use nix::errno::Errno;
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
            // No route, so no source either.
            Err(e) if matches!(super::errno(&e), Some(Errno::ENETUNREACH | Errno::EHOSTUNREACH | Errno::ENETDOWN)) => {
                return Ok(None);
            }
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
}
