//! Each attachment's interface, and the limits on the whole (`name`): the first attachment is on
//! the runtime's interface (`CNI_IFNAME`, the one whose address the runtime takes as the pod's IP);
//! each later one on the name it asks for, or `net<position>` (the second is `net1`). A name given
//! twice and more than `MAX_ATTACHMENTS` networks are code 7 naming them.
//!
//! A network may attach more than once, each time on an interface of its own (`sriov-net@net1,
//! sriov-net@net2`, as Multus allows): everything an attachment leaves is keyed by its interface
//! (the selector's records and results, the device it is given, host-local's and whereabouts'
//! leases, the network-status entry), so two attachments of one network are two attachments.

use super::chosen::Attachment;
use crate::platform::cni::CniError;
use std::collections::BTreeMap;

/// The most networks one pod may have.
pub const MAX_ATTACHMENTS: usize = 16;

/// An attachment before it has its interface name.
#[derive(Debug, Clone)]
pub struct Planned {
    pub attachment: Attachment,
    /// The interface the element asked for, if any.
    pub ifname: Option<String>,
    /// Two plans for the same identity are the same network (a file, or a NAD's inline config):
    /// containers agree when they choose the same ones.
    pub identity: String,
}

/// Give each plan its interface and check the whole: at most `MAX_ATTACHMENTS`, no interface twice.
/// `runtime_ifname` is the runtime's `CNI_IFNAME`; `whose` names the pod in errors.
pub fn name(plans: Vec<Planned>, runtime_ifname: &str, whose: &str) -> Result<Vec<Attachment>, CniError> {
    let bad = |msg: String| CniError::invalid_config(format!("{whose}: {msg}"));
    check_count(plans.len(), whose, plans.iter().map(|p| p.attachment.source.element()))?;
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    let mut attachments = Vec::with_capacity(plans.len());
    for (i, plan) in plans.iter().enumerate() {
        let ifname = match (i, &plan.ifname) {
            (0, Some(asked)) if asked != runtime_ifname => {
                return Err(bad(format!(
                    "{} asks for interface {asked}, but the first network is on the runtime's interface {runtime_ifname} \
                     (CNI_IFNAME)",
                    describe(0, plan)
                )));
            }
            (0, _) => runtime_ifname.to_string(),
            (_, Some(asked)) => asked.clone(),
            (_, None) => format!("net{i}"),
        };
        if let Some(first) = taken.insert(ifname.clone(), i) {
            return Err(bad(format!(
                "interface {ifname} is given twice: to {} and to {}",
                describe(first, &plans[first]),
                describe(i, plan)
            )));
        }
        attachments.push(Attachment { ifname, ..plan.attachment.clone() });
    }
    Ok(attachments)
}

/// More than `MAX_ATTACHMENTS` is refused before anything is fetched for them.
pub fn check_count<'a>(count: usize, whose: &str, elements: impl Iterator<Item = &'a str>) -> Result<(), CniError> {
    if count <= MAX_ATTACHMENTS {
        return Ok(());
    }
    let all: Vec<&str> = elements.collect();
    Err(CniError::invalid_config(format!(
        "{whose}: {count} networks are chosen ({}); at most {MAX_ATTACHMENTS} are allowed",
        all.join(", ")
    )))
}

/// `network 2 ("b@net1", from CNI_NETWORK_CONFIG)`.
fn describe(i: usize, plan: &Planned) -> String {
    let source = &plan.attachment.source;
    format!("network {} ({:?}, from {})", i + 1, source.element(), source.origin())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs::selector::choose::chosen::{Choice, PodIdentity, Reason, Selection, Source, ValueSource};
    use crate::programs::selector::requests::annotation::Extras;

    fn plan(element: &str, network: &str, ifname: Option<&str>) -> Planned {
        Planned {
            attachment: Attachment {
                ifname: String::new(),
                network: network.into(),
                path: Some(format!("/n/{network}/a.conflist").into()),
                config: "{}".into(),
                source: Source::Value { element: element.into(), form: "network name".into() },
                extras: Extras::default(),
                device: None,
            },
            ifname: ifname.map(String::from),
            identity: format!("/n/{network}/a.conflist"),
        }
    }

    fn ifnames(plans: Vec<Planned>) -> Result<Vec<String>, CniError> {
        name(plans, "eth0", "pod default/p").map(|a| a.into_iter().map(|a| a.ifname).collect())
    }

    #[test]
    fn each_network_gets_cni_ifname_or_net_by_position_unless_named() {
        assert_eq!(ifnames(vec![plan("a", "a", None)]).unwrap(), ["eth0"]);
        assert_eq!(
            ifnames(vec![
                plan("a", "a", None),
                plan("b", "b", None),
                plan("c@lan0", "c", Some("lan0")),
                plan("d", "d", None)
            ])
            .unwrap(),
            ["eth0", "net1", "lan0", "net3"]
        );
        assert_eq!(ifnames(vec![plan("a@eth0", "a", Some("eth0")), plan("b", "b", None)]).unwrap(), ["eth0", "net1"]);
    }

    #[test]
    fn an_interface_given_twice_is_refused_naming_both_elements() {
        let e =
            ifnames(vec![plan("a", "a", None), plan("b", "b", None), plan("c@net1", "c", Some("net1"))]).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(
            e.msg.contains("interface net1 is given twice") && e.msg.contains("\"b\"") && e.msg.contains("\"c@net1\""),
            "{e}"
        );
        let e = ifnames(vec![plan("a", "a", None), plan("b@eth0", "b", Some("eth0"))]).unwrap_err();
        assert!(e.msg.contains("interface eth0 is given twice"), "{e}");
    }

    #[test]
    fn a_first_network_naming_another_interface_than_the_runtimes_is_refused() {
        let e = ifnames(vec![plan("a@lan0", "a", Some("lan0"))]).unwrap_err();
        assert!(e.msg.contains("runtime's interface eth0") && e.msg.contains("pod default/p"), "{e}");
    }

    #[test]
    fn a_network_chosen_twice_attaches_on_two_interfaces() {
        let names = ifnames(vec![plan("a", "a", None), plan("b", "b", None), plan("a@net5", "a", Some("net5"))]);
        assert_eq!(names.unwrap(), ["eth0", "net1", "net5"]);
        assert_eq!(ifnames(vec![plan("a", "a", None), plan("b", "b", None), plan("b", "b", None)]).unwrap()[2], "net2");
    }

    #[test]
    fn a_network_chosen_twice_on_one_interface_is_refused_naming_both_elements() {
        let e =
            ifnames(vec![plan("a", "a", None), plan("b@net1", "b", Some("net1")), plan("b@net1", "b", Some("net1"))])
                .unwrap_err();
        assert!(e.msg.contains("interface net1 is given twice") && e.msg.contains("network 3"), "{e}");
    }

    #[test]
    fn at_most_sixteen() {
        let plans = |n: usize| (0..n).map(|i| plan(&format!("n{i}"), &format!("n{i}"), None)).collect::<Vec<_>>();
        assert_eq!(ifnames(plans(16)).unwrap().last().unwrap(), "net15");
        let e = ifnames(plans(17)).unwrap_err();
        assert!(e.msg.contains("17 networks") && e.msg.contains("n16") && e.msg.contains("at most 16"), "{e}");
    }

    #[test]
    fn a_selection_round_trips_through_json() {
        let attachments = name(vec![plan("a", "a", None), plan("b@lan0", "b", Some("lan0"))], "eth0", "p").unwrap();
        let s = Selection {
            pod: Some(PodIdentity { namespace: "default".into(), name: "p".into(), uid: Some("u1".into()) }),
            reason: Reason::Chosen {
                choices: vec![Choice {
                    container: "app".into(),
                    source: ValueSource::ConfigMap { name: "cm".into(), key: "k".into() },
                    value: "a,b@lan0".into(),
                }],
            },
            attachments,
            notes: vec![],
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Selection>(&json).unwrap(), s);
    }
}
