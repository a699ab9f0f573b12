//! The pod's `k8s.v1.cni.cncf.io/network-status` annotation, in the Network Plumbing WG's format: one
//! entry per network with its name, interface, addresses, MAC and DNS, `default: true` on the first
//! (the one on the runtime's interface). Written once, after a successful ADD, in one request that
//! only succeeds while the pod is the one whose networks these are; a failure is a warning in the
//! log, never a failed ADD (the pod's networks are there; only the report is missing).

use super::selection::{PodIdentity, Source};
use crate::cni::CniResult;
use crate::cni::result::Dns;
use crate::kube::PodSource;
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
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    pub dns: Dns,
}

/// The entry of one attachment: `network` and `source` say what it is, `result` what it got.
pub fn entry(network: &str, source: Option<&Source>, ifname: &str, result: &CniResult, default: bool) -> Entry {
    let name = source.and_then(Source::nad).unwrap_or(network).to_string();
    // The pod's end of the attachment: the interface in the sandbox with this name.
    let own = result.interfaces.iter().position(|i| i.name == ifname && i.sandbox.is_some());
    let ips = result
        .ips
        .iter()
        .filter(|ip| ip.interface.is_none() || ip.interface == own)
        .map(|ip| ip.address.ip().to_string())
        .collect();
    let mac = own.and_then(|i| result.interfaces[i].mac.clone());
    Entry { name, interface: ifname.to_string(), ips, mac, default, dns: result.dns.clone() }
}

/// The pod annotations that say `entries`.
pub fn annotations(entries: &[Entry]) -> BTreeMap<String, String> {
    let value = serde_json::to_string_pretty(entries).expect("status entries always serialize");
    BTreeMap::from([(NETWORK_STATUS.to_string(), value)])
}

/// Write `annotations` on `pod` (whose uid must still be `uid`). Logs what happened; never fails.
pub fn write(api: &dyn PodSource, pod: &PodIdentity, uid: &str, annotations: &BTreeMap<String, String>) {
    match api.annotate_pod(&pod.namespace, &pod.name, uid, annotations) {
        Ok(true) => {}
        Ok(false) => super::warn(format!(
            "{pod} (uid {uid}) is gone or was replaced by another pod of its name; its {NETWORK_STATUS} annotation was not written"
        )),
        Err(e) => super::warn(format!("the {NETWORK_STATUS} annotation of {pod} (uid {uid}) was not written: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_take_the_pod_side_interface_and_its_addresses() {
        let result = CniResult::from_json(
            &json!({
                "interfaces": [{"name": "veth1234", "mac": "aa:aa:aa:aa:aa:aa"},
                               {"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": "/run/netns/p"}],
                "ips": [{"address": "10.244.0.5/24", "gateway": "10.244.0.1", "interface": 1},
                        {"address": "10.99.0.1/32", "interface": 0}],
                "dns": {"nameservers": ["10.96.0.10"]}
            }),
            crate::cni::CniVersion::LATEST,
        )
        .unwrap();
        let e = entry("ptpnet", None, "eth0", &result, true);
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"name": "ptpnet", "interface": "eth0", "ips": ["10.244.0.5"], "mac": "02:00:00:00:00:01",
                   "default": true, "dns": {"nameservers": ["10.96.0.10"]}})
        );
        let source = Source::Annotation { element: "lan@net1".into(), nad: "web/lan".into(), inline: false };
        let bare =
            CniResult::from_json(&json!({"ips": [{"address": "192.168.1.5/24"}]}), crate::cni::CniVersion::LATEST)
                .unwrap();
        let e = entry("lan", Some(&source), "net1", &bare, false);
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"name": "web/lan", "interface": "net1", "ips": ["192.168.1.5"], "dns": {}})
        );
    }
}
