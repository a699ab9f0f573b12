//! `default-route` of the networks annotation, as Multus does it: once every network is attached,
//! the pod's default route (of the gateway's address family) goes by the interface that asked for
//! it, via that gateway, and the default routes of that family by any other interface leave the
//! pod's main table. Nothing needs undoing at DEL: the routes go with the pod's interfaces.
//!
//! The attachments' results are adjusted to match (`adjust`), as Multus rewrites its cached
//! results: the runtime gets a primary result without a default route that is no longer there, and
//! each network's CHECK, which may verify its result's routes, finds what the result says.

use crate::platform::cni::result::Route as ResultRoute;
use crate::platform::cni::{CniError, CniResult, Invocation};
use crate::platform::netlink::{IpFamily, Netlink, Route};
use crate::programs::selector::choose::chosen::Attachment;
use std::net::IpAddr;

/// (interface, gateway) for every default route the attachments ask for (at most one per family:
/// the selection refuses more).
fn requested<'a>(attachments: impl IntoIterator<Item = (&'a str, &'a [IpAddr])>) -> Vec<(String, IpAddr)> {
    attachments.into_iter().flat_map(|(ifname, gws)| gws.iter().map(move |gw| (ifname.to_string(), *gw))).collect()
}

/// The requests of a selection's attachments.
pub fn requested_by(attachments: &[Attachment]) -> Vec<(String, IpAddr)> {
    requested(attachments.iter().map(|a| (a.ifname.as_str(), a.extras.default_route.as_slice())))
}

/// Make the pod's routes what `requests` ask for, in the netns of the runtime's call `runtime`.
/// Nothing asked, nothing done.
pub fn apply(runtime: &Invocation, requests: &[(String, IpAddr)]) -> Result<(), CniError> {
    if requests.is_empty() {
        return Ok(());
    }
    let netns = runtime.container_netns()?;
    crate::platform::async_runtime::block_on(async {
        let nl = Netlink::in_netns(netns)?;
        for (ifname, gateway) in requests {
            let link = nl.link_by_name(ifname).await?.ok_or_else(|| {
                CniError::kernel(format!("default-route via {gateway}: the pod has no interface {ifname}"))
            })?;
            let family = IpFamily::of(*gateway);
            for route in nl.routes(family, Some(Route::MAIN_TABLE)).await? {
                if route.is_default() {
                    nl.del_route(&route).await?;
                }
            }
            nl.add_route(&Route::new(family.default_route()).via(*gateway).dev(link.index)).await?;
        }
        Ok(())
    })
    .map_err(|e: CniError| e.context("default-route"))
}

/// The results as the routes now are: for each request, no default route of its family in any
/// result but the asking interface's, which gets one via the gateway.
pub fn adjust(results: &mut [(&str, &mut CniResult)], requests: &[(String, IpAddr)]) {
    for (ifname, gateway) in requests {
        let family = IpFamily::of(*gateway);
        for (owner, result) in results.iter_mut() {
            result.routes.retain(|r| r.dst.prefix() != 0 || IpFamily::of_net(&r.dst) != family);
            if owner == ifname {
                result.routes.push(ResultRoute { gw: Some(*gateway), ..ResultRoute::to(family.default_route()) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_default_moves_to_the_asking_interface_in_the_results() {
        let mut eth0 = CniResult::from_json(
            &json!({"routes": [
            {"dst": "0.0.0.0/0", "gw": "10.244.0.1"}, {"dst": "::/0", "gw": "fd00::1"}, {"dst": "10.96.0.0/12"}]}),
            crate::platform::cni::CniVersion::LATEST,
        )
        .unwrap();
        let mut net1 = CniResult::from_json(
            &json!({"routes": [{"dst": "0.0.0.0/0", "gw": "192.168.1.9"}]}),
            crate::platform::cni::CniVersion::LATEST,
        )
        .unwrap();
        let requests = requested([("eth0", &[][..]), ("net1", &["192.168.1.1".parse().unwrap()][..])]);
        assert_eq!(requests, [("net1".to_string(), "192.168.1.1".parse().unwrap())]);
        adjust(&mut [("eth0", &mut eth0), ("net1", &mut net1)], &requests);
        let dsts = |r: &CniResult| r.routes.iter().map(|r| format!("{} {:?}", r.dst, r.gw)).collect::<Vec<_>>();
        assert_eq!(dsts(&eth0), ["::/0 Some(fd00::1)", "10.96.0.0/12 None"], "the other family's default stays");
        assert_eq!(dsts(&net1), ["0.0.0.0/0 Some(192.168.1.1)"]);
    }
}
