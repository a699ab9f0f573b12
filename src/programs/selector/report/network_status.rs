//! The pod's `k8s.v1.cni.cncf.io/network-status` annotation, in the Network Plumbing WG's format as
//! Multus writes it: one entry per interface the plugins report in the pod's sandbox, with the
//! network's name, interface, addresses, MAC, MTU, DNS, gateways and device-info (when a plugin
//! reports a PCI device), `default: true` on the first network's own interface. Written once, after a successful ADD, in one request that
//! only succeeds while the pod is the one whose networks these are; a failure is a warning in the
//! log, never a failed ADD (the pod's networks are there; only the report is missing).

use crate::platform::cni::CniResult;
use crate::platform::cni::result::Dns;
use crate::platform::kube::PodSource;
use crate::programs::selector::attach::{Attached, Record};
use crate::programs::selector::choose::{PodIdentity, Source};
use serde::Serialize;
use std::collections::BTreeMap;

pub const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// The network: a NetworkAttachmentDefinition's `namespace/name`, or the `confDir` network's name.
    pub name: String,
    pub interface: String,
    pub ips: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    pub dns: Dns,
    /// The gateways of the interface's addresses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gateway: Vec<String>,
    /// The device behind the interface, when the plugin reports one (a CNI 1.1 `pciID`), in the
    /// Network Plumbing WG's device-info format.
    #[serde(rename = "device-info", skip_serializing_if = "Option::is_none")]
    pub device_info: Option<serde_json::Value>,
}

/// The entries of one attachment, one per interface its plugins report in the pod's sandbox, as
/// Multus writes them (`network` and `source` say what it is, `result` what it got); `default` on
/// the attachment's own interface (`ifname`) when it is the pod's first network. The attachment's
/// own interface comes first, even when its plugins do not report it (0.2.0), with the addresses
/// that name no interface.
pub fn entries(network: &str, source: Option<&Source>, ifname: &str, result: &CniResult, default: bool) -> Vec<Entry> {
    let name = source.and_then(Source::nad).unwrap_or(network).to_string();
    let in_sandbox = (0..result.interfaces.len()).filter(|&i| result.interfaces[i].sandbox.is_some());
    let own = in_sandbox.clone().find(|&i| result.interfaces[i].name == ifname);
    let entry = |index: Option<usize>, interface: &str| {
        let ips: Vec<_> = result
            .ips
            .iter()
            .filter(|ip| {
                ip.interface.is_some() && ip.interface == index || ip.interface.is_none() && interface == ifname
            })
            .collect();
        let reported = index.map(|i| &result.interfaces[i]);
        Entry {
            name: name.clone(),
            interface: interface.to_string(),
            ips: ips.iter().map(|ip| ip.address.ip().to_string()).collect(),
            mac: reported.and_then(|i| i.mac.clone()),
            mtu: reported.and_then(|i| i.mtu),
            default: default && interface == ifname,
            dns: result.dns.clone(),
            gateway: ips.iter().filter_map(|ip| ip.gateway).map(|gw| gw.to_string()).collect(),
            device_info: reported
                .and_then(|i| i.pci_id.as_ref())
                .map(|pci| serde_json::json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": pci}})),
        }
    };
    let mut all = vec![entry(own, ifname)];
    all.extend(in_sandbox.filter(|&i| Some(i) != own).map(|i| entry(Some(i), &result.interfaces[i].name)));
    all
}

/// The pod annotations that say `entries`.
pub fn annotations(entries: &[Entry]) -> BTreeMap<String, String> {
    let value = serde_json::to_string_pretty(entries).expect("status entries always serialize");
    BTreeMap::from([(NETWORK_STATUS.to_string(), value)])
}

/// The annotations that say what `attached` got, the first network the pod's default.
pub fn of_attached(attached: &[Attached]) -> BTreeMap<String, String> {
    let all: Vec<Entry> =
        attached.iter().enumerate().flat_map(|(i, a)| of_record(&a.record, &a.result, i == 0)).collect();
    annotations(&all)
}

/// The entries of one attachment's record with its result (`default`: the pod's first network).
pub fn of_record(record: &Record, result: &CniResult, default: bool) -> Vec<Entry> {
    let mut own = entries(&record.network, record.source.as_ref(), &record.ifname, result, default);
    // A device network's device-info, as its device plugin and CNI left it.
    if let Some(info) = record.device.as_ref().and_then(crate::programs::selector::devices::handoff::read_info) {
        own[0].device_info = Some(info);
    }
    own
}

/// Write `annotations` on `pod` (whose uid must still be `uid`). Logs what happened; never fails.
pub fn write(api: &dyn PodSource, pod: &PodIdentity, uid: &str, annotations: &BTreeMap<String, String>) {
    match api.annotate_pod(&pod.namespace, &pod.name, uid, annotations) {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            "{pod} (uid {uid}) is gone or was replaced by another pod of its name; its {NETWORK_STATUS} annotation was not written"
        ),
        Err(e) => {
            tracing::warn!("the {NETWORK_STATUS} annotation of {pod} (uid {uid}) was not written: {e}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_entry_takes_the_pod_side_interface_with_its_addresses() {
        let result = CniResult::from_json(
            &json!({
                "interfaces": [{"name": "veth1234", "mac": "aa:aa:aa:aa:aa:aa"},
                               {"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": "/run/netns/p"}],
                "ips": [{"address": "10.244.0.5/24", "gateway": "10.244.0.1", "interface": 1},
                        {"address": "10.99.0.1/32", "interface": 0}],
                "dns": {"nameservers": ["10.96.0.10"]}
            }),
            crate::platform::cni::CniVersion::LATEST,
        )
        .unwrap();
        let e = entries("ptpnet", None, "eth0", &result, true);
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!([{"name": "ptpnet", "interface": "eth0", "ips": ["10.244.0.5"], "mac": "02:00:00:00:00:01",
                    "default": true, "dns": {"nameservers": ["10.96.0.10"]}, "gateway": ["10.244.0.1"]}])
        );
    }

    #[test]
    fn an_entry_of_a_network_from_a_nad_is_named_for_the_nad() {
        let source = Source::Annotation { element: "lan@net1".into(), nad: "web/lan".into(), inline: false };
        let bare = CniResult::from_json(
            &json!({"ips": [{"address": "192.168.1.5/24"}]}),
            crate::platform::cni::CniVersion::LATEST,
        )
        .unwrap();
        let e = entries("lan", Some(&source), "net1", &bare, false);
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!([{"name": "web/lan", "interface": "net1", "ips": ["192.168.1.5"], "dns": {}}])
        );
    }

    #[test]
    fn each_sandbox_interface_gets_an_entry_with_its_device_details() {
        let result = CniResult::from_json(
            &json!({
                "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:02", "mtu": 9000, "sandbox": "/run/netns/p",
                                "pciID": "0000:03:00.1"},
                               {"name": "net1-mgmt", "sandbox": "/run/netns/p"}],
                "ips": [{"address": "10.9.0.5/24", "gateway": "10.9.0.1", "interface": 0},
                        {"address": "10.8.0.5/24", "interface": 1}]
            }),
            crate::platform::cni::CniVersion::LATEST,
        )
        .unwrap();
        let source = Source::DefaultNetworks { element: "sriov".into(), nad: "kube-system/sriov".into(), inline: true };
        let e = entries("kube-system/sriov", Some(&source), "net1", &result, false);
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!([{"name": "kube-system/sriov", "interface": "net1", "ips": ["10.9.0.5"], "mac": "02:00:00:00:00:02",
                    "mtu": 9000, "dns": {}, "gateway": ["10.9.0.1"],
                    "device-info": {"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:03:00.1"}}},
                   {"name": "kube-system/sriov", "interface": "net1-mgmt", "ips": ["10.8.0.5"], "dns": {}}])
        );
    }
}
