//! CHECK: the pod network ADD made is still there, as prevResult describes it. The bridge exists
//! (same MAC, promiscuous mode as configured); the container interface exists in the sandbox as a
//! veth (same MAC) whose peer is a port of the bridge listed in prevResult; every prevResult address
//! is on the container interface and every prevResult route is in the container's main table.

use super::config::Conf;
use crate::platform::cni::result::Interface;
use crate::platform::cni::{CniError, CniResult, Invocation};
use crate::platform::netlink::{IpFamily, Link, MacAddr, Netlink, Route};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::Path;

pub struct Context<'a> {
    pub inv: &'a Invocation,
    pub conf: &'a Conf,
    pub prev: &'a CniResult,
    pub host: &'a Netlink,
    pub pod: &'a Netlink,
    pub netns_path: &'a Path,
}

/// A difference between the kernel and prevResult. Code 100: the kernel does not hold what it should.
fn mismatch(msg: impl std::fmt::Display) -> CniError {
    CniError::kernel(format!("CHECK failed: {msg}"))
}

pub async fn check(cx: &Context<'_>) -> Result<(), CniError> {
    let bridge = check_bridge(cx).await?;
    let sandbox = cx.netns_path.display().to_string();
    let (pod_index, pod_entry) = cx
        .prev
        .interfaces
        .iter()
        .enumerate()
        .find(|(_, i)| i.name == cx.inv.ifname && i.sandbox.as_deref() == Some(&sandbox))
        .ok_or_else(|| mismatch(format!("prevResult has no interface {:?} in sandbox {sandbox}", cx.inv.ifname)))?;
    let pod_if = cx
        .pod
        .link_by_name(&cx.inv.ifname)
        .await?
        .ok_or_else(|| mismatch(format!("interface {:?} not found in {sandbox}", cx.inv.ifname)))?;
    if pod_if.kind.as_deref() != Some("veth") {
        return Err(mismatch(format!("container interface {:?} is not a veth", pod_if.name)));
    }
    same_mac(pod_entry, &pod_if)?;
    check_port(cx, &bridge, &pod_if).await?;
    check_addresses(cx, &pod_if, pod_index).await?;
    check_routes(cx).await
}

async fn check_bridge(cx: &Context<'_>) -> Result<Link, CniError> {
    let name = &cx.conf.bridge;
    let bridge = cx
        .host
        .link_by_name(name)
        .await?
        .filter(Link::is_bridge)
        .ok_or_else(|| mismatch(format!("bridge {name:?} not found")))?;
    if let Some(entry) = cx.prev.interfaces.iter().find(|i| &i.name == name && i.sandbox.is_none()) {
        same_mac(entry, &bridge)?;
    }
    if bridge.promisc != cx.conf.promisc {
        return Err(mismatch(format!(
            "bridge {name:?} promiscuous mode is {}, configured {}",
            bridge.promisc, cx.conf.promisc
        )));
    }
    Ok(bridge)
}

/// The container interface's peer must be a host interface of prevResult and a port of the bridge.
async fn check_port(cx: &Context<'_>, bridge: &Link, pod_if: &Link) -> Result<(), CniError> {
    let not_found = || mismatch(format!("no port of bridge {:?} is the peer of {:?}", bridge.name, pod_if.name));
    let peer_index = pod_if.link.ok_or_else(not_found)?;
    let port = cx.host.link_by_index(peer_index).await?.ok_or_else(not_found)?;
    let listed = cx.prev.interfaces.iter().find(|i| i.name == port.name && i.sandbox.is_none());
    match listed {
        Some(entry) if port.master == Some(bridge.index) && port.link == Some(pod_if.index) => same_mac(entry, &port),
        _ => Err(not_found()),
    }
}

async fn check_addresses(cx: &Context<'_>, pod_if: &Link, pod_index: usize) -> Result<(), CniError> {
    let present = cx.pod.addresses(Some(pod_if.index), None).await?;
    for ip in cx.prev.ips.iter().filter(|ip| ip.interface.is_none_or(|i| i == pod_index)) {
        if !present.iter().any(|a| a.net == ip.address) {
            return Err(mismatch(format!("address {} is not on {:?}", ip.address, pod_if.name)));
        }
    }
    Ok(())
}

async fn check_routes(cx: &Context<'_>) -> Result<(), CniError> {
    let mut tables: HashMap<IpFamily, Vec<Route>> = HashMap::new();
    for r in &cx.prev.routes {
        let routes = match tables.entry(IpFamily::of_net(&r.dst)) {
            Entry::Occupied(loaded) => loaded.into_mut(),
            Entry::Vacant(family) => {
                // Every table, not `main` alone: a later network of the pod may move this one's
                // routes into a policy table of their own (`router` moves eth0's default route out
                // of `main`, `veth` with `migrate_route` its NIC's), and they are still the pod's.
                let routes = cx.pod.routes(*family.key(), None).await?;
                family.insert(routes)
            }
        };
        let dst = ipnetwork::IpNetwork::new(r.dst.network(), r.dst.prefix()).expect("a network's own prefix is valid");
        if !routes.iter().any(|k| k.dst == dst && (r.gw.is_none() || k.gateway == r.gw)) {
            let via = r.gw.map(|g| format!(" via {g}")).unwrap_or_default();
            return Err(mismatch(format!("route {dst}{via} is missing in the container")));
        }
    }
    Ok(())
}

fn same_mac(entry: &Interface, link: &Link) -> Result<(), CniError> {
    let Some(want) = entry.mac.as_deref() else { return Ok(()) };
    let want: Option<MacAddr> = want.parse().ok();
    if want.is_some() && want != link.mac {
        return Err(mismatch(format!(
            "interface {:?} has MAC {}, prevResult says {}",
            link.name,
            link.mac.map(|m| m.to_string()).unwrap_or_default(),
            entry.mac.as_deref().unwrap_or_default()
        )));
    }
    Ok(())
}
