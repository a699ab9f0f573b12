//! The `AddedInterface` Events of an ADD, one per network, as Multus creates them
//! (`Add eth0 [10.1.2.3/24] from default/lan`). The node agent creates them (`lookup::deliver`).

use super::network_status;
use crate::platform::cni::CniResult;
use crate::programs::selector::attach::Attached;
use crate::programs::selector::choose::Source;

/// One message per network, as Multus words its `AddedInterface` events: the interface, the
/// addresses its result gave it (with prefix length), the network (a NAD's `namespace/name`).
pub fn messages(attached: &[Attached]) -> Vec<String> {
    attached
        .iter()
        .map(|a| added_interface(&a.record.network, a.record.source.as_ref(), &a.record.ifname, &a.result))
        .collect()
}

fn added_interface(network: &str, source: Option<&Source>, ifname: &str, result: &CniResult) -> String {
    let entry = network_status::entries(network, source, ifname, result, false).remove(0);
    message("Add", ifname, result, &entry.name)
}

/// `<verb> <ifname> [<its addresses>] from <network>`, as Multus words its interface events: the
/// addresses of the result that are the pod's interface's own, or of no interface in particular.
pub fn message(verb: &str, ifname: &str, result: &CniResult, network: &str) -> String {
    let own = result.interfaces.iter().position(|i| i.name == ifname && i.sandbox.is_some());
    let ips: Vec<String> = result
        .ips
        .iter()
        .filter(|ip| ip.interface.is_none() || ip.interface == own)
        .map(|ip| ip.address.to_string())
        .collect();
    format!("{verb} {ifname} [{}] from {network}", ips.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::CniVersion;
    use serde_json::json;

    #[test]
    fn added_interface_messages_read_as_multus_writes_them() {
        let result = CniResult::from_json(
            &json!({"interfaces": [{"name": "veth1"}, {"name": "net1", "sandbox": "/run/netns/p"}],
                    "ips": [{"address": "10.1.2.3/24", "interface": 1}, {"address": "fd00::3/64", "interface": 1},
                            {"address": "10.9.9.9/32", "interface": 0}]}),
            CniVersion::LATEST,
        )
        .unwrap();
        let source = Source::Annotation { element: "lan".into(), nad: "web/lan".into(), inline: false };
        assert_eq!(
            added_interface("lan", Some(&source), "net1", &result),
            "Add net1 [10.1.2.3/24 fd00::3/64] from web/lan"
        );
        let bare = CniResult::from_json(&json!({"ips": [{"address": "10.244.0.5/24"}]}), CniVersion::LATEST).unwrap();
        assert_eq!(added_interface("ptpnet", None, "eth0", &bare), "Add eth0 [10.244.0.5/24] from ptpnet");
    }
}
