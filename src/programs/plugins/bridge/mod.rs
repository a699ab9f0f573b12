//! The `yh-bridge` plugin: the reference `bridge` plugin's configuration and resulting pod network,
//! on rtnetlink. Pods are plugged into a Linux bridge through a veth pair; the IPAM plugin named by
//! `ipam.type` gives the addresses; the bridge can be the pods' gateway; `ipMasq` adds per-pod NAT.
//!
//! Namespaces: the plugin works from its own (host) netns with two netlink sockets, one opened there
//! and one opened inside the container's netns by a dedicated thread (see `Netlink::in_netns`). The
//! only other work inside the container's netns, its sysctls, is done on a dedicated thread too. No
//! runtime worker ever changes netns.
//!
//! Differences from the reference, all deliberate (docs/yh-bridge.md lists them): the configuration
//! and the netns are checked before anything is made; the host veth is created already up and
//! enslaved; the bridge port's state is polled with a short backoff instead of fixed sleeps; DEL
//! removes NAT rules by name and container id, so it works when the netns is gone; CHECK also checks
//! the host veth is the peer of the container interface.

mod check;
mod config;
mod links;
mod plan;

use crate::platform::cni::result::Interface;
use crate::platform::cni::{CniError, CniResult, Invocation, Operation, Plugin, PluginConf, code};
use crate::platform::netlink::{IpFamily, Link, MacAddr, Netlink, OPER_UP_TIMEOUT, Route};
use crate::platform::{async_runtime, crash_point, netns};
use crate::programs::plugins::firewall::{Firewall, Owner};
use crate::programs::plugins::ipam::Ipam;
use config::Conf;
use ipnetwork::IpNetwork;
use links::Port;
use plan::Plan;
use std::os::fd::AsFd;
use std::path::Path;

pub const NAME: &str = "yh-bridge";

pub struct Bridge;

impl Plugin for Bridge {
    fn name(&self) -> &'static str {
        NAME
    }

    fn add(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<CniResult, CniError> {
        let c = Conf::parse(conf, &inv.args)?;
        let ipam = Ipam::from_conf(conf, inv)?;
        let netns_path = inv.container_netns()?;
        let pod_ns = netns::open(netns_path)?;
        async_runtime::block_on(async {
            let host = Netlink::host()?;
            let pod = Netlink::in_netns(netns_path)?;
            let bridge = links::ensure_bridge(&host, &c).await?;
            let port =
                links::add_bridge_port(&host, &bridge, Port::for_pod(&c), &inv.ifname, Some(pod_ns.as_fd()), c.mac)
                    .await?;
            crash_point::reached("yh-bridge.add.veth-made");
            let attachment =
                Attachment { inv, conf: &c, host: &host, pod: &pod, netns_path, bridge, port: port.clone() };
            let outcome = match &ipam {
                Some(ipam) => ipam.add_with_rollback(async |answer| attachment.finish(Some(answer)).await).await,
                None => attachment.finish(None).await,
            };
            if outcome.is_err() {
                // Deleting the host end deletes the pair: the pod is left as it was found.
                if let Err(e) = host.del_link(port.index).await {
                    tracing::warn!("undoing the veth {:?} after a failed ADD: {e}", port.name);
                }
            }
            outcome
        })
    }

    fn del(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<(), CniError> {
        let masquerade = Conf::masquerade_for_del(conf);
        let ipam = Ipam::from_conf(conf, inv)?;
        // The pod's addresses, for NAT teardown: prevResult's when the runtime passes it, else those
        // on the interface about to be deleted. Only a hint that saves execs: the rules are found
        // by network name and container id.
        let mut addresses: Vec<IpNetwork> = conf
            .prev_result()
            .ok()
            .flatten()
            .map(|prev| prev.ips.iter().map(|ip| ip.address).collect())
            .unwrap_or_default();
        async_runtime::block_on(async {
            if let Some(path) = inv.netns.as_deref().filter(|p| netns::exists(p)) {
                match Netlink::in_netns(path) {
                    Ok(pod) => {
                        if let Some(link) = pod.link_by_name(&inv.ifname).await? {
                            if addresses.is_empty() {
                                let found = pod.addresses(Some(link.index), None).await?;
                                addresses = found.into_iter().filter(|a| !a.is_link_local()).map(|a| a.net).collect();
                            }
                            pod.del_link(link.index).await?;
                            crash_point::reached("yh-bridge.del.interface-deleted");
                        }
                    }
                    // Gone (or no longer a netns) between the check and the open: nothing left there.
                    Err(e) if e.code == code::NETNS => {}
                    Err(e) => return Err(e),
                }
            }
            if let Some(ipam) = &ipam {
                ipam.del().await?;
                crash_point::reached("yh-bridge.del.address-released");
                if let Some(firewall) = masquerade {
                    firewall
                        .del_masquerade(&Owner::new(&conf.name, &inv.container_id, &inv.ifname), &addresses)
                        .await?;
                }
            }
            Ok(())
        })
    }

    fn check(&self, inv: &Invocation, conf: &PluginConf, _op: &Operation) -> Result<(), CniError> {
        let c = Conf::parse(conf, &inv.args)?;
        let prev = conf
            .prev_result()?
            .ok_or_else(|| CniError::invalid_config("CHECK needs prevResult, the result of the ADD being checked"))?;
        let ipam = Ipam::from_conf(conf, inv)?;
        let netns_path = inv.container_netns()?;
        async_runtime::block_on(async {
            if let Some(ipam) = &ipam {
                ipam.check().await?;
            }
            let host = Netlink::host()?;
            let pod = Netlink::in_netns(netns_path)?;
            check::check(&check::Context { inv, conf: &c, prev: &prev, host: &host, pod: &pod, netns_path }).await
        })
    }
}

/// A pod plugged into the bridge, not yet configured: what ADD has made so far.
struct Attachment<'a> {
    inv: &'a Invocation,
    conf: &'a Conf,
    host: &'a Netlink,
    pod: &'a Netlink,
    netns_path: &'a Path,
    /// As found or made before the pod's port was added (its MAC is the one the reference pins).
    bridge: Link,
    /// The host end of the pod's veth.
    port: Link,
}

impl Attachment<'_> {
    /// Configure the pod (L3 with an IPAM answer, L2 without), wait for the bridge port, and build
    /// the result. NAT comes last, so nothing after it can fail and leave rules behind.
    async fn finish(&self, ipam_answer: Option<CniResult>) -> Result<CniResult, CniError> {
        crash_point::reached("yh-bridge.add.address-allocated");
        let pod_if = self.pod.link_by_name(&self.inv.ifname).await?.ok_or_else(|| {
            CniError::kernel(format!("{:?} vanished from the container right after it was made", self.inv.ifname))
        })?;
        let plan = ipam_answer.map(|answer| Plan::new(answer, self.conf));
        match &plan {
            Some(plan) => {
                self.configure_pod(&pod_if, plan).await?;
                self.configure_gateway(plan).await?;
            }
            None => self.pod.set_up(pod_if.index).await?,
        }
        let port = self
            .host
            .wait_oper_up(self.port.index, OPER_UP_TIMEOUT)
            .await
            .map_err(|e| e.context("bridge port in error state"))?;
        // The bridge's MAC changes when its first port arrives, unless pinned by the gateway step.
        let bridge = self.host.link_by_index(self.bridge.index).await?.unwrap_or_else(|| self.bridge.clone());
        let mut result = match plan {
            Some(plan) => plan.result,
            None => CniResult { dns: self.conf.dns.clone().unwrap_or_default(), ..CniResult::default() },
        };
        result.interfaces = vec![
            Interface { name: bridge.name, mac: bridge.mac.map(|m| m.to_string()), ..Interface::default() },
            Interface { name: port.name, mac: port.mac.map(|m| m.to_string()), ..Interface::default() },
            Interface {
                name: pod_if.name,
                mac: pod_if.mac.map(|m| m.to_string()),
                sandbox: Some(self.netns_path.display().to_string()),
                ..Interface::default()
            },
        ];
        if let Some(firewall) = self.conf.ip_masq.filter(|_| !result.ips.is_empty()) {
            crash_point::reached("yh-bridge.add.before-nat");
            let owner = Owner::new(&self.conf.network, &self.inv.container_id, &self.inv.ifname);
            let ips: Vec<_> = result.ips.iter().map(|ip| ip.address).collect();
            if let Err(e) = firewall.add_masquerade(&owner, &ips).await {
                if let Err(undo) = firewall.del_masquerade(&owner, &ips).await {
                    tracing::warn!("undoing NAT rules after a failed ADD: {undo}");
                }
                return Err(e);
            }
            crash_point::reached("yh-bridge.add.nat-added");
        }
        Ok(result)
    }

    /// Inside the pod: sysctls, link up, addresses, routes (the reference's `ConfigureIface`).
    async fn configure_pod(&self, pod_if: &Link, plan: &Plan) -> Result<(), CniError> {
        let ifname = pod_if.name.clone();
        let has_v6 = plan.result.ips.iter().any(|ip| ip.address.is_ipv6());
        netns::run_in(self.netns_path, move || pod_sysctls(&ifname, has_v6))??;
        self.pod.set_up(pod_if.index).await?;
        for ip in &plan.result.ips {
            self.pod.add_address(pod_if.index, ip.address).await?;
        }
        for (dst, gw) in &plan.container_routes {
            let mut route = Route::new(*dst).dev(pod_if.index);
            if let Some(gw) = gw {
                route = route.via(*gw);
            }
            match self.pod.add_route(&route).await {
                // The reference skips duplicates: the first route to a destination wins.
                Err(e) if e.code == code::ALREADY_EXISTS => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// isGateway: the gateway addresses on the bridge (or its VLAN interface), forwarding on.
    async fn configure_gateway(&self, plan: &Plan) -> Result<(), CniError> {
        if plan.bridge_addresses.is_empty() {
            return Ok(());
        }
        let link = links::gateway_link(self.host, &self.bridge, self.conf).await?;
        let mut added = false;
        for gw in &plan.bridge_addresses {
            added |= links::ensure_gateway(self.host, &link, *gw, self.conf.force_address)
                .await
                .map_err(|e| e.context("failed to set bridge addr"))?;
        }
        if added {
            // Pin the MAC; otherwise the bridge takes the lowest port MAC, which changes as pods come
            // and go. The reference pins the MAC from before the pod's port was added, which is all
            // zeroes on a bridge whose last port left (the kernel refuses that); then pin the current one.
            let usable = |mac: &MacAddr| *mac != MacAddr::ZERO;
            let mut mac = link.mac.filter(usable);
            if mac.is_none() {
                mac = self.host.link_by_index(link.index).await?.and_then(|l| l.mac).filter(usable);
            }
            if let Some(mac) = mac {
                self.host.set_mac(link.index, mac).await?;
            }
        }
        for family in IpFamily::distinct(&plan.bridge_addresses) {
            links::enable_forwarding(family)?;
        }
        Ok(())
    }
}

/// Run inside the pod's netns: DAD off (the addresses are the IPAM plugin's, unique by
/// construction), gratuitous ARP on address changes, and IPv6 enabled on `lo` and the interface
/// when IPv6 addresses are coming (the reference's sysctls).
fn pod_sysctls(ifname: &str, has_v6: bool) -> Result<(), CniError> {
    // Best effort, as in the reference: a pod without IPv6 has no accept_dad to set.
    let _ = netns::write_sysctl(&format!("net/ipv6/conf/{ifname}/accept_dad"), "0");
    let _ = netns::write_sysctl(&format!("net/ipv4/conf/{ifname}/arp_notify"), "1");
    if has_v6 {
        for dev in ["lo", ifname] {
            let key = format!("net/ipv6/conf/{dev}/disable_ipv6");
            if netns::read_sysctl(&key).is_ok_and(|v| v != "0") {
                netns::write_sysctl(&key, "0").map_err(|e| e.context(format!("enabling IPv6 on {dev}")))?;
            }
        }
    }
    Ok(())
}
