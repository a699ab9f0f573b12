//! Routes (IPv4 and IPv6): add, delete, list, and the kernel's route lookup (`ip route get`).

use super::{IpFamily, Netlink, collect, errno, kernel_err, ok_if_gone};
use crate::platform::cni::CniError;
use futures::TryStreamExt;
use ipnetwork::IpNetwork;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use nix::errno::Errno;
use rtnetlink::RouteMessageBuilder;
use std::net::IpAddr;

fn ip_of(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

/// A unicast route. Build one with [`Route::new`] and the chained setters; routes listed from the
/// kernel come back in the same shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination; host bits are ignored (the kernel wants the network address).
    pub dst: IpNetwork,
    pub gateway: Option<IpAddr>,
    /// Output interface index.
    pub oif: Option<u32>,
    pub table: u32,
    pub scope: RouteScope,
    /// The metric (`RTA_PRIORITY`); `None` = the kernel's default (0 for IPv4, 1024 for IPv6).
    pub metric: Option<u32>,
    /// Who installed it. New routes default to `boot`, as `ip route add` and Go's netlink do, so
    /// they look the same in `ip route` output as routes made by the reference plugins.
    pub protocol: RouteProtocol,
}

impl Route {
    pub const MAIN_TABLE: u32 = RouteHeader::RT_TABLE_MAIN as u32;

    pub fn new(dst: IpNetwork) -> Self {
        Route {
            dst,
            gateway: None,
            oif: None,
            table: Self::MAIN_TABLE,
            scope: RouteScope::Universe,
            metric: None,
            protocol: RouteProtocol::Boot,
        }
    }
    pub fn via(mut self, gateway: IpAddr) -> Self {
        self.gateway = Some(gateway);
        self
    }
    pub fn dev(mut self, oif: u32) -> Self {
        self.oif = Some(oif);
        self
    }
    pub fn table(mut self, table: u32) -> Self {
        self.table = table;
        self
    }
    pub fn scope(mut self, scope: RouteScope) -> Self {
        self.scope = scope;
        self
    }
    pub fn metric(mut self, metric: u32) -> Self {
        self.metric = Some(metric);
        self
    }

    /// Whether this is a default route (`0.0.0.0/0`, `::/0`).
    pub fn is_default(&self) -> bool {
        self.dst.prefix() == 0
    }

    fn to_message(&self) -> Result<RouteMessage, CniError> {
        let invalid = |e: &dyn std::fmt::Display| CniError::invalid_config(format!("route {self}: {e}"));
        let mut b = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(self.dst.network(), self.dst.prefix())
            .map_err(|e| invalid(&e))?
            .table_id(self.table)
            .scope(self.scope)
            .protocol(self.protocol);
        if let Some(gw) = self.gateway {
            b = b.gateway(gw).map_err(|e| invalid(&e))?;
        }
        if let Some(oif) = self.oif {
            b = b.output_interface(oif);
        }
        if let Some(m) = self.metric {
            b = b.priority(m);
        }
        Ok(b.build())
    }

    fn from_message(m: &RouteMessage) -> Option<Self> {
        if m.header.kind != RouteType::Unicast {
            return None;
        }
        let family = IpFamily::from_address_family(m.header.address_family)?;
        let mut dst_ip = family.default_route().ip();
        let mut route = Route::new(family.default_route());
        route.table = u32::from(m.header.table);
        route.scope = m.header.scope;
        route.protocol = m.header.protocol;
        for attr in &m.attributes {
            match attr {
                RouteAttribute::Destination(a) => dst_ip = ip_of(a)?,
                RouteAttribute::Gateway(a) => route.gateway = ip_of(a),
                RouteAttribute::Oif(i) => route.oif = Some(*i),
                RouteAttribute::Table(t) => route.table = *t,
                RouteAttribute::Priority(p) => route.metric = Some(*p),
                _ => {}
            }
        }
        route.dst = IpNetwork::new(dst_ip, m.header.destination_prefix_length).ok()?;
        Some(route)
    }
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.dst)?;
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        if let Some(oif) = self.oif {
            write!(f, " dev #{oif}")?;
        }
        if self.table != Self::MAIN_TABLE {
            write!(f, " table {}", self.table)?;
        }
        if let Some(m) = self.metric {
            write!(f, " metric {m}")?;
        }
        Ok(())
    }
}

impl Netlink {
    /// Add a route. One that already exists is code 106.
    pub async fn add_route(&self, route: &Route) -> Result<(), CniError> {
        let msg = route.to_message()?;
        self.handle.route().add(msg).execute().await.map_err(kernel_err(format_args!("adding route {route}")))
    }

    /// Delete a route; one already gone is success. Matches on destination, table and whichever of
    /// gateway, output interface and metric are set; any scope and protocol.
    pub async fn del_route(&self, route: &Route) -> Result<(), CniError> {
        let mut msg = route.to_message()?;
        // RT_SCOPE_NOWHERE and protocol 0 are the kernel's wildcards for deletion, as `ip route del` uses.
        msg.header.scope = RouteScope::NoWhere;
        msg.header.protocol = RouteProtocol::Unspec;
        ok_if_gone(self.handle.route().del(msg).execute().await, format_args!("deleting route {route}"))
    }

    /// The unicast routes of one family, of one table when given (all tables otherwise).
    pub async fn routes(&self, family: IpFamily, table: Option<u32>) -> Result<Vec<Route>, CniError> {
        let mut query = RouteMessage::default();
        query.header.address_family = family.address_family();
        let msgs = collect(self.handle.route().get(query).execute(), "listing routes").await?;
        Ok(msgs.iter().filter_map(Route::from_message).filter(|r| table.is_none_or(|t| r.table == t)).collect())
    }

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
            Err(e) if matches!(errno(&e), Some(Errno::ENETUNREACH | Errno::EHOSTUNREACH | Errno::ENETDOWN)) => {
                return Ok(None);
            }
            Err(e) => return Err(kernel_err(format_args!("route lookup for {dst}"))(e)),
        };
        Ok(reply.and_then(|m| {
            m.attributes.iter().find_map(|a| match a {
                RouteAttribute::PrefSource(a) => ip_of(a),
                _ => None,
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_message() {
        let r = Route::new("10.1.0.7/16".parse().unwrap())
            .via("10.1.17.1".parse().unwrap())
            .dev(3)
            .table(300)
            .metric(10)
            .scope(RouteScope::Universe);
        let back = Route::from_message(&r.to_message().unwrap()).unwrap();
        // The kernel stores the network address; host bits in `dst` are dropped on the way.
        assert_eq!(back, Route { dst: "10.1.0.0/16".parse().unwrap(), ..r.clone() });
        assert_eq!(r.to_string(), "10.1.0.7/16 via 10.1.17.1 dev #3 table 300 metric 10");

        let v6 = Route::new("::/0".parse().unwrap()).via("fd00::1".parse().unwrap());
        let back = Route::from_message(&v6.to_message().unwrap()).unwrap();
        assert_eq!(back, v6);
        assert!(back.is_default());
    }

    #[test]
    fn default_route_has_no_destination_attribute_in_dumps() {
        let mut m = RouteMessage::default();
        m.header.address_family = netlink_packet_route::AddressFamily::Inet;
        m.header.kind = RouteType::Unicast;
        m.header.table = RouteHeader::RT_TABLE_MAIN;
        m.attributes = vec![RouteAttribute::Gateway(RouteAddress::Inet("10.0.0.1".parse().unwrap()))];
        let r = Route::from_message(&m).unwrap();
        assert_eq!((r.dst.to_string().as_str(), r.gateway), ("0.0.0.0/0", Some("10.0.0.1".parse().unwrap())));
        m.header.kind = RouteType::Local;
        assert!(Route::from_message(&m).is_none());
    }

    #[test]
    fn mismatched_gateway_family_is_refused() {
        let r = Route::new("fd00::/64".parse().unwrap()).via("10.0.0.1".parse().unwrap());
        assert_eq!(r.to_message().unwrap_err().code, 7);
    }
}
