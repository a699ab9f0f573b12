//! Carrying out, undoing and verifying [`Change`]s in the node and the pod, and the few lookups both
//! plugins make before they plan.

use super::model::{Change, Ns, Op, RouteSpec, RuleSpec, SysctlSpec, VethSpec};
use super::plan::{self, NodeAddresses};
use crate::platform::cni::{CniError, code};
use crate::platform::netlink::{AddressScope, IpFamily, Link, Netlink, Route, VethPair};
use crate::platform::netns;
use ipnetwork::IpNetwork;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// The two namespaces a plugin works in. `pod` is `None` on DEL when the pod's netns is gone.
pub struct Namespaces {
    pub host: Netlink,
    pub pod: Option<Netlink>,
    pub pod_path: PathBuf,
}

impl Namespaces {
    /// Sockets in the host netns and in the pod's at `pod_path`, which must exist. Inside a runtime.
    pub fn open(pod_path: &Path) -> Result<Self, CniError> {
        Ok(Namespaces { host: Netlink::host()?, pod: Some(Netlink::in_netns(pod_path)?), pod_path: pod_path.into() })
    }

    /// For DEL: the pod's socket only if its netns still exists.
    pub fn open_if_present(pod_path: &Path) -> Result<Self, CniError> {
        let pod = if netns::exists(pod_path) { Netlink::in_netns(pod_path).ok() } else { None };
        Ok(Namespaces { host: Netlink::host()?, pod, pod_path: pod_path.into() })
    }

    pub fn pod(&self) -> Result<&Netlink, CniError> {
        self.pod
            .as_ref()
            .ok_or_else(|| CniError::new(code::NETNS, format!("netns {} is gone", self.pod_path.display())))
    }

    fn nl(&self, ns: Ns) -> Option<&Netlink> {
        match ns {
            Ns::Host => Some(&self.host),
            Ns::Pod => self.pod.as_ref(),
        }
    }

    /// The index of interface `dev` in `ns`, if it exists there.
    async fn index(&self, ns: Ns, dev: &str) -> Result<Option<u32>, CniError> {
        match self.nl(ns) {
            Some(nl) => Ok(nl.link_by_name(dev).await?.map(|l| l.index)),
            None => Ok(None),
        }
    }

    async fn require_index(&self, ns: Ns, dev: &str) -> Result<u32, CniError> {
        self.index(ns, dev).await?.ok_or_else(|| CniError::kernel(format!("{ns}: no interface {dev:?}")))
    }

    /// Make `changes` in order. Returns the changes really made, with previous sysctl values filled
    /// in, and without those that were already in place (a route or rule another NIC's ADD made),
    /// which therefore are not undone later. On failure, what was made is undone before returning.
    pub async fn apply(&self, changes: &[Change]) -> Result<Vec<Change>, CniError> {
        let mut made = Vec::new();
        for c in changes {
            match self.apply_one(c).await {
                Ok(Some(done)) => {
                    tracing::debug!("made {done}");
                    made.push(done)
                }
                Ok(None) => tracing::debug!("already in place: {c}"),
                Err(e) => {
                    tracing::error!("{c}: {e}; undoing what this ADD made");
                    if let Err(undo) = self.undo(&made).await {
                        tracing::error!("undo after a failed ADD: {undo}");
                    }
                    return Err(e.context(format_args!("{c}")));
                }
            }
        }
        Ok(made)
    }

    async fn apply_one(&self, c: &Change) -> Result<Option<Change>, CniError> {
        let nl = self.nl(c.ns).ok_or_else(|| CniError::new(code::NETNS, "the pod's netns is gone"))?;
        let made = |op| Ok(Some(Change { ns: c.ns, op }));
        match &c.op {
            Op::CreateVeth(v) => {
                self.create_veth(v).await?;
                made(c.op.clone())
            }
            Op::SetSysctl(s) => {
                // Read and write on one trip into the namespace: in the pod, each is a thread.
                let previous = self.in_ns(c.ns, || {
                    let previous = netns::read_sysctl(&s.key)?;
                    if previous != s.value {
                        netns::write_sysctl(&s.key, &s.value)?;
                    }
                    Ok::<_, CniError>(previous)
                })??;
                if previous == s.value {
                    return Ok(None);
                }
                made(Op::SetSysctl(SysctlSpec { previous: Some(previous), ..s.clone() }))
            }
            Op::AddNeighbour(n) => {
                let index = self.require_index(c.ns, &n.dev).await?;
                let present = nl.neighbours(Some(index)).await?;
                if present.iter().any(|e| e.ip == n.ip && e.permanent && e.mac == Some(n.mac)) {
                    return Ok(None);
                }
                nl.add_neighbour(index, n.ip, n.mac).await?;
                made(c.op.clone())
            }
            Op::AddRoute(r) => {
                let index = self.require_index(c.ns, &r.dev).await?;
                match nl.add_route(&r.to_kernel(index)).await {
                    Err(e) if e.code == code::ALREADY_EXISTS => Ok(None),
                    Err(e) => Err(e),
                    Ok(()) => made(c.op.clone()),
                }
            }
            Op::RemoveRoute(r) => {
                let index = self.require_index(c.ns, &r.dev).await?;
                if !route_present(nl, r, index).await? {
                    return Ok(None);
                }
                nl.del_route(&r.to_kernel(index)).await?;
                made(c.op.clone())
            }
            Op::AddRule(r) => match nl.add_rule(&r.to_kernel()).await {
                Err(e) if e.code == code::ALREADY_EXISTS => Ok(None),
                Err(e) => Err(e),
                Ok(()) => made(c.op.clone()),
            },
        }
    }

    async fn create_veth(&self, v: &VethSpec) -> Result<(), CniError> {
        let pod_ns = netns::open(&self.pod_path)?;
        let pair = VethPair {
            name: &v.host,
            peer_name: &v.pod,
            peer_netns: Some(pod_ns.as_fd()),
            mtu: Some(v.mtu),
            mac: Some(v.host_mac),
            peer_mac: Some(v.pod_mac),
            up: true,
            ..Default::default()
        };
        self.host.add_veth(&pair).await?;
        let pod_end_up = async { self.pod()?.set_up(self.require_index(Ns::Pod, &v.pod).await?).await };
        if let Err(e) = pod_end_up.await {
            let _ = self.host.del_link_by_name(&v.host).await;
            return Err(e);
        }
        Ok(())
    }

    /// Undo `changes` in reverse order, best effort: everything is tried, what is already gone is
    /// fine, and the first real failure is returned. Changes in a pod whose netns is gone are gone
    /// with it.
    pub async fn undo(&self, changes: &[Change]) -> Result<(), CniError> {
        let mut first_error = None;
        for c in changes.iter().rev() {
            if self.nl(c.ns).is_none() {
                continue;
            }
            match self.undo_one(c).await {
                Ok(()) => tracing::debug!("undid {c}"),
                Err(e) => {
                    tracing::error!("undoing {c}: {e}");
                    first_error.get_or_insert(e.context(format_args!("undoing {c}")));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn undo_one(&self, c: &Change) -> Result<(), CniError> {
        let Some(nl) = self.nl(c.ns) else { return Ok(()) };
        match &c.op {
            Op::CreateVeth(v) => nl.del_link_by_name(&v.host).await.map(drop),
            Op::SetSysctl(s) => match &s.previous {
                // A sysctl of an interface that is gone went with it.
                Some(previous) => self.in_ns(c.ns, || {
                    if Path::new("/proc/sys").join(&s.key).exists() {
                        netns::write_sysctl(&s.key, previous)
                    } else {
                        Ok(())
                    }
                })?,
                None => Ok(()),
            },
            Op::AddNeighbour(n) => match self.index(c.ns, &n.dev).await? {
                Some(index) => nl.del_neighbour(index, n.ip).await,
                None => Ok(()),
            },
            Op::AddRoute(r) => match self.index(c.ns, &r.dev).await? {
                Some(index) => nl.del_route(&r.to_kernel(index)).await,
                None => Ok(()),
            },
            Op::RemoveRoute(r) => match self.index(c.ns, &r.dev).await? {
                Some(index) => match nl.add_route(&r.to_kernel(index)).await {
                    Err(e) if e.code == code::ALREADY_EXISTS => Ok(()),
                    other => other,
                },
                None => Ok(()),
            },
            Op::AddRule(r) => nl.del_rule(&r.to_kernel()).await,
        }
    }

    /// Check that every change is still in place; the first that is not is the error.
    pub async fn verify(&self, changes: &[Change]) -> Result<(), CniError> {
        for c in changes {
            let missing = |what: &str| CniError::kernel(format!("{c}: {what}"));
            let nl = self.nl(c.ns).ok_or_else(|| missing("the pod's netns is gone"))?;
            let index = |dev: &str| {
                let dev = dev.to_string();
                async move { self.index(c.ns, &dev).await?.ok_or_else(|| missing(&format!("interface {dev} is gone"))) }
            };
            match &c.op {
                Op::CreateVeth(v) => {
                    self.verify_veth_end(Ns::Host, &v.host, v.host_mac).await.map_err(|e| missing(&e))?;
                    self.verify_veth_end(Ns::Pod, &v.pod, v.pod_mac).await.map_err(|e| missing(&e))?;
                }
                Op::SetSysctl(s) => {
                    let now = self.in_ns(c.ns, || netns::read_sysctl(&s.key))??;
                    if now != s.value {
                        return Err(missing(&format!("the value is now {now}")));
                    }
                }
                Op::AddNeighbour(n) => {
                    let i = index(&n.dev).await?;
                    if !nl
                        .neighbours(Some(i))
                        .await?
                        .iter()
                        .any(|e| e.ip == n.ip && e.permanent && e.mac == Some(n.mac))
                    {
                        return Err(missing("the entry is missing or changed"));
                    }
                }
                Op::AddRoute(r) => {
                    if !route_present(nl, r, index(&r.dev).await?).await? {
                        return Err(missing("the route is missing"));
                    }
                }
                Op::RemoveRoute(r) => {
                    if route_present(nl, r, index(&r.dev).await?).await? {
                        return Err(missing("the route is back"));
                    }
                }
                Op::AddRule(r) => {
                    if !rule_present(nl, r).await? {
                        return Err(missing("the rule is missing"));
                    }
                }
            }
        }
        Ok(())
    }

    async fn verify_veth_end(&self, ns: Ns, name: &str, mac: crate::platform::netlink::MacAddr) -> Result<(), String> {
        let nl = self.nl(ns).ok_or("the pod's netns is gone")?;
        match nl.link_by_name(name).await {
            Ok(Some(l)) if l.kind.as_deref() == Some("veth") && l.up && l.mac == Some(mac) => Ok(()),
            Ok(Some(l)) => Err(format!("{ns} end {name} changed (kind {:?}, up {}, mac {:?})", l.kind, l.up, l.mac)),
            Ok(None) => Err(format!("{ns} end {name} is gone")),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Run `f` in the namespace `ns` (a thread in the pod's netns for the pod).
    fn in_ns<T: Send>(&self, ns: Ns, f: impl FnOnce() -> T + Send) -> Result<T, CniError> {
        match ns {
            Ns::Host => Ok(f()),
            Ns::Pod => netns::run_in(&self.pod_path, f),
        }
    }
}

async fn route_present(nl: &Netlink, r: &RouteSpec, index: u32) -> Result<bool, CniError> {
    Ok(nl.routes(IpFamily::of_net(&r.dst), Some(r.table)).await?.iter().any(|k| r.matches(k, index)))
}

async fn rule_present(nl: &Netlink, r: &RuleSpec) -> Result<bool, CniError> {
    let want = r.to_kernel();
    Ok(nl.rules(want.family).await?.contains(&want))
}

/// The global (not link-local) addresses of link `index`, with their prefix lengths.
pub async fn global_addresses(nl: &Netlink, index: u32) -> Result<Vec<IpNetwork>, CniError> {
    Ok(nl
        .addresses(Some(index), None)
        .await?
        .into_iter()
        .filter(|a| a.scope == AddressScope::Universe)
        .map(|a| a.net)
        .collect())
}

/// Every unicast route in the namespace, both families, every table: one dump per family (the
/// kernel dumps all tables either way), from which a plugin's lookups are then taken.
pub async fn all_routes(nl: &Netlink) -> Result<Vec<Route>, CniError> {
    let mut routes = nl.routes(IpFamily::V4, None).await?;
    routes.extend(nl.routes(IpFamily::V6, None).await?);
    Ok(routes)
}

/// The routes of link `link` in `table`, among `routes`.
pub fn routes_of(routes: &[Route], link: &Link, table: u32) -> Vec<RouteSpec> {
    routes
        .iter()
        .filter(|r| r.oif == Some(link.index) && r.table == table)
        .map(|r| RouteSpec::from_kernel(r, &link.name))
        .collect()
}

/// The pod's NICs other than `lo` and the `veth` plugin's `veth0`.
pub async fn pod_nics(pod: &Netlink) -> Result<Vec<Link>, CniError> {
    Ok(pod.links().await?.into_iter().filter(|l| l.name != "lo" && l.name != plan::POD_VETH).collect())
}

/// The node's addresses of `families` for a pod NIC with addresses `pod_ips`: the source the node
/// routes from toward each of them, then the global addresses of the node's own links (see
/// `plan::is_node_link`).
pub async fn node_addresses(
    host: &Netlink,
    pod_ips: &[IpNetwork],
    families: &[IpFamily],
) -> Result<NodeAddresses, CniError> {
    let mut toward_pod = Vec::new();
    for ip in pod_ips {
        toward_pod.extend(host.route_source(ip.ip()).await?);
    }
    let node_links: Vec<u32> =
        host.links().await?.into_iter().filter(|l| plan::is_node_link(&l.name)).map(|l| l.index).collect();
    let found: Vec<IpAddr> = host
        .addresses(None, None)
        .await?
        .into_iter()
        .filter(|a| a.scope == AddressScope::Universe && node_links.contains(&a.index))
        .map(|a| a.net.ip())
        .collect();
    Ok(NodeAddresses::new(&found, &toward_pod, families))
}

/// The host end of a pod interface that is a veth (the overlay CNI's `eth0`): the host link whose
/// index the pod end names as its peer, and which names the pod end back.
pub async fn host_peer(ns: &Namespaces, pod_link: &Link) -> Result<Option<Link>, CniError> {
    if pod_link.kind.as_deref() != Some("veth") {
        return Ok(None);
    }
    let Some(peer) = pod_link.link else { return Ok(None) };
    let Some(host) = ns.host.link_by_index(peer).await? else { return Ok(None) };
    let names_back = host.link == Some(pod_link.index);
    Ok((host.kind.as_deref() == Some("veth") && names_back).then_some(host))
}
