//! What an ADD changes, as data. A plan is a list of [`Change`]s computed from what is found on the
//! host and in the pod, before anything is touched; the same list, as actually applied, is recorded
//! on disk, and it is all DEL and CHECK need: DEL undoes it in reverse, CHECK verifies it.
//! Interfaces are named, not numbered, so a record stays meaningful whatever indexes the kernel hands out.

use crate::platform::netlink::{MacAddr, Route, RouteProtocol, RouteScope, Rule};
use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;

/// Which network namespace a change is made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ns {
    /// The plugin's own: the node.
    Host,
    /// The container's (`CNI_NETNS`).
    Pod,
}

impl fmt::Display for Ns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ns::Host => "host",
            Ns::Pod => "pod",
        })
    }
}

/// A route, by interface name. `protocol` is kept so a route moved out of a table goes back as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteSpec {
    pub dst: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<IpAddr>,
    pub dev: String,
    pub table: u32,
    /// `scope link`: the destination is on the wire of `dev`, no gateway.
    #[serde(default)]
    pub scope_link: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<u32>,
    #[serde(default = "boot_protocol")]
    pub protocol: u8,
}

fn boot_protocol() -> u8 {
    u8::from(RouteProtocol::Boot)
}

impl RouteSpec {
    /// `dst dev <dev> scope link table <table>`: a destination reached directly on `dev`.
    pub fn on_link(dst: IpNetwork, dev: &str, table: u32) -> Self {
        RouteSpec { dst, via: None, dev: dev.into(), table, scope_link: true, metric: None, protocol: boot_protocol() }
    }

    /// `dst via <gw> dev <dev> table <table>`.
    pub fn via(dst: IpNetwork, gw: IpAddr, dev: &str, table: u32) -> Self {
        RouteSpec { via: Some(gw), scope_link: false, ..Self::on_link(dst, dev, table) }
    }

    /// A route the kernel listed, on interface `dev`.
    pub fn from_kernel(r: &Route, dev: &str) -> Self {
        RouteSpec {
            dst: r.dst,
            via: r.gateway,
            dev: dev.into(),
            table: r.table,
            scope_link: r.scope == RouteScope::Link,
            metric: r.metric,
            protocol: u8::from(r.protocol),
        }
    }

    /// The same route in another table.
    pub fn in_table(&self, table: u32) -> Self {
        RouteSpec { table, ..self.clone() }
    }

    /// The netlink route, with `dev` resolved to its index in the namespace concerned.
    pub fn to_kernel(&self, oif: u32) -> Route {
        let mut r = Route::new(self.dst).dev(oif).table(self.table);
        if let Some(gw) = self.via {
            r = r.via(gw);
        }
        if self.scope_link {
            r = r.scope(RouteScope::Link);
        }
        if let Some(m) = self.metric {
            r = r.metric(m);
        }
        r.protocol = RouteProtocol::from(self.protocol);
        r
    }

    /// Whether the kernel route `r` on interface index `oif` is this route (metric and protocol aside).
    pub fn matches(&self, r: &Route, oif: u32) -> bool {
        r.dst == self.dst && r.gateway == self.via && r.oif == Some(oif) && r.table == self.table
    }

    pub fn is_default(&self) -> bool {
        self.dst.prefix() == 0
    }
}

impl fmt::Display for RouteSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dst)?;
        if let Some(gw) = self.via {
            write!(f, " via {gw}")?;
        }
        write!(f, " dev {}", self.dev)?;
        if self.scope_link {
            write!(f, " scope link")?;
        }
        match self.table {
            super::config::MAIN_TABLE => Ok(()),
            t => write!(f, " table {t}"),
        }
    }
}

/// What a rule selects: a source or a destination prefix (every rule these plugins make has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Selector {
    From(IpNetwork),
    To(IpNetwork),
}

/// `ip rule add from|to <prefix> lookup <table> pref <priority>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleSpec {
    #[serde(flatten)]
    pub selector: Selector,
    pub table: u32,
    pub priority: u32,
}

impl RuleSpec {
    pub fn to_kernel(&self) -> Rule {
        match self.selector {
            Selector::From(net) => Rule::from(net, self.table),
            Selector::To(net) => Rule::to(net, self.table),
        }
        .priority(self.priority)
    }
}

impl fmt::Display for RuleSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_kernel())
    }
}

/// `ip neigh replace <ip> dev <dev> lladdr <mac> nud permanent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighSpec {
    pub ip: IpAddr,
    pub dev: String,
    #[serde(with = "mac_text")]
    pub mac: MacAddr,
}

impl fmt::Display for NeighSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} dev {} lladdr {} nud permanent", self.ip, self.dev, self.mac)
    }
}

/// A veth pair: `host` in the node, `pod` in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VethSpec {
    pub host: String,
    #[serde(with = "mac_text")]
    pub host_mac: MacAddr,
    pub pod: String,
    #[serde(with = "mac_text")]
    pub pod_mac: MacAddr,
    pub mtu: u32,
}

/// A sysctl under /proc/sys, e.g. `net/ipv4/conf/veth0/rp_filter`. `previous` is filled in when the
/// value is written, so DEL can put back what was there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SysctlSpec {
    pub key: String,
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

impl SysctlSpec {
    pub fn new(key: String, value: impl ToString) -> Self {
        SysctlSpec { key, value: value.to_string(), previous: None }
    }
}

/// One change and how it is undone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Create a veth pair, both ends up; undone by deleting it.
    CreateVeth(VethSpec),
    /// Write a sysctl; undone by writing back the previous value.
    SetSysctl(SysctlSpec),
    /// Add a permanent neighbour entry; undone by deleting it.
    AddNeighbour(NeighSpec),
    /// Add a route; undone by deleting it.
    AddRoute(RouteSpec),
    /// Remove a route (a migrated default leaving `main`); undone by adding it back.
    RemoveRoute(RouteSpec),
    /// Add a policy rule; undone by deleting it.
    AddRule(RuleSpec),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub ns: Ns,
    #[serde(flatten)]
    pub op: Op,
}

impl Change {
    pub fn host(op: Op) -> Self {
        Change { ns: Ns::Host, op }
    }
    pub fn pod(op: Op) -> Self {
        Change { ns: Ns::Pod, op }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.ns;
        match &self.op {
            Op::CreateVeth(v) => write!(f, "{ns}: veth pair {} (pod end {}, mtu {})", v.host, v.pod, v.mtu),
            Op::SetSysctl(s) => write!(f, "{ns}: sysctl {}={}", s.key.replace('/', "."), s.value),
            Op::AddNeighbour(n) => write!(f, "{ns}: neighbour {n}"),
            Op::AddRoute(r) => write!(f, "{ns}: route {r}"),
            Op::RemoveRoute(r) => write!(f, "{ns}: route {r} removed"),
            Op::AddRule(r) => write!(f, "{ns}: rule {r}"),
        }
    }
}

/// `MacAddr` as its usual text in records.
mod mac_text {
    use crate::platform::netlink::MacAddr;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(mac: &MacAddr, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(mac)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MacAddr, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A veth pair, a route, a rule and a sysctl.
    fn four_changes() -> Vec<Change> {
        vec![
            Change::host(Op::CreateVeth(VethSpec {
                host: "veth0123456789a".into(),
                host_mac: "02:00:00:00:00:01".parse().unwrap(),
                pod: "veth0".into(),
                pod_mac: "02:00:00:00:00:02".parse().unwrap(),
                mtu: 1500,
            })),
            Change::pod(Op::AddRoute(RouteSpec::via(
                "10.96.0.0/12".parse().unwrap(),
                "192.168.1.2".parse().unwrap(),
                "veth0",
                254,
            ))),
            Change::pod(Op::AddRule(RuleSpec {
                selector: Selector::From("10.1.0.5/32".parse().unwrap()),
                table: 200,
                priority: 1000,
            })),
            Change::host(Op::SetSysctl(SysctlSpec::new("net/ipv4/conf/x/rp_filter".into(), 2))),
        ]
    }

    #[test]
    fn changes_serialize_as_readable_json() {
        let v = serde_json::to_value(four_changes()).unwrap();
        assert_eq!(v[0]["op"], "create_veth");
        assert_eq!(v[0]["ns"], "host");
        assert_eq!(v[0]["host_mac"], "02:00:00:00:00:01");
        assert_eq!(v[2], json!({"ns": "pod", "op": "add_rule", "from": "10.1.0.5/32", "table": 200, "priority": 1000}));
        assert_eq!(
            v[1],
            json!({"ns": "pod", "op": "add_route", "dst": "10.96.0.0/12", "via": "192.168.1.2", "dev": "veth0", "table": 254, "scope_link": false, "protocol": 3})
        );
    }

    #[test]
    fn changes_round_trip_through_json() {
        let changes = four_changes();
        let back: Vec<Change> = serde_json::from_value(serde_json::to_value(&changes).unwrap()).unwrap();
        assert_eq!(back, changes);
    }

    #[test]
    fn changes_print_as_ip_shows_them() {
        let changes = four_changes();
        assert_eq!(changes[1].to_string(), "pod: route 10.96.0.0/12 via 192.168.1.2 dev veth0");
        assert_eq!(changes[2].to_string(), "pod: rule priority 1000 from 10.1.0.5/32 lookup 200");
        assert_eq!(changes[3].to_string(), "host: sysctl net.ipv4.conf.x.rp_filter=2");
    }

    #[test]
    fn kernel_round_trip_keeps_what_matters() {
        let spec =
            RouteSpec { metric: Some(100), ..RouteSpec::on_link("192.168.1.2/32".parse().unwrap(), "veth0", 200) };
        let r = spec.to_kernel(7);
        assert_eq!((r.scope, r.table, r.oif, r.metric), (RouteScope::Link, 200, Some(7), Some(100)));
        assert!(spec.matches(&r, 7));
        assert!(!spec.matches(&r, 8));
        assert_eq!(RouteSpec::from_kernel(&r, "veth0"), spec);
        assert_eq!(spec.in_table(254).to_string(), "192.168.1.2/32 dev veth0 scope link");
    }
}
