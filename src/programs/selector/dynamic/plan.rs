//! What an edit of a running pod's `k8s.v1.cni.cncf.io/networks` annotation changes: the networks
//! the annotation now asks for (the pod's selection, resolved as at ADD) against the attachments
//! its records hold. Only attachments that came from the annotation take part: the pod's first
//! network, its `CNI_NETWORK_CONFIG` networks and the admin's `defaultNetworks` are never changed
//! here (a ConfigMap edit would re-plumb every pod that refers to it).
//!
//! An attachment is matched by its network and its interface. An element that names its interface
//! (`lan@data0`) takes the attachment of that network on that interface: the same interface with
//! another network behind it is detached and the new network attached there. An element that names
//! none takes an attachment of its network on the interface the selection gives it (`net<position>`)
//! if there is one, else any other attachment of its network that no element claims: a pod author
//! who drops `lan` from the annotation need not know it is on `net2`, and the networks that stay
//! keep their interfaces when one before them goes (`net1` is not renumbered). So a network attached
//! twice (`lan@net1, lan@net2`, or `lan, lan`) loses exactly the attachment an edit drops. A new
//! network without a name takes the lowest free `netN`.

use crate::programs::selector::attach::Record;
use crate::programs::selector::choose::{Attachment, Source};
use crate::programs::selector::requests::annotation;
use std::collections::BTreeSet;

/// The changes to make: detach first (an interface name may be taken over), then attach.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Interfaces to detach, each one the annotation put there.
    pub detach: Vec<String>,
    /// Networks to attach, each on its interface.
    pub attach: Vec<Attachment>,
    /// Elements that cannot be attached, with why (their interface is held by a network the
    /// annotation does not control).
    pub refused: Vec<(String, String)>,
}

#[cfg(test)]
impl Plan {
    pub fn is_empty(&self) -> bool {
        self.detach.is_empty() && self.attach.is_empty() && self.refused.is_empty()
    }
}

/// The plan that takes the attachments of `records` (of one runtime attachment, on `owner`) to
/// the annotation's part of `wanted` (the pod's whole selection, in order).
pub fn plan(records: &[Record], owner: &str, wanted: &[Attachment]) -> Plan {
    let controlled =
        |r: &&Record| r.ifname != owner && r.position > 0 && r.source.as_ref().is_some_and(from_annotation);
    let mut current: Vec<&Record> = records.iter().filter(controlled).collect();
    let fixed: BTreeSet<&str> = records.iter().filter(|r| !controlled(r)).map(|r| r.ifname.as_str()).collect();
    let asked: Vec<(usize, &Attachment, Option<String>)> = wanted
        .iter()
        .skip(1)
        .filter(|a| from_annotation(&a.source))
        .enumerate()
        .map(|(i, a)| (i, a, asked_interface(&a.source)))
        .collect();
    let mut kept = Vec::new();
    let mut new = Vec::new();
    // Named interfaces first, so that an unnamed element of the same network cannot take theirs;
    // then unnamed elements on the interface the selection gives them, so that of two attachments
    // of one network each keeps its own; then unnamed elements on any attachment of their network.
    let (named, unnamed): (Vec<_>, Vec<_>) = asked.into_iter().partition(|(_, _, ifname)| ifname.is_some());
    let mut unmatched = Vec::new();
    for (index, attachment, ifname) in named {
        match current.iter().position(|r| same_network(r, attachment) && ifname.as_deref() == Some(r.ifname.as_str())) {
            Some(i) => kept.push(current.remove(i)),
            None => new.push((index, attachment, ifname)),
        }
    }
    for (index, attachment, ifname) in unnamed {
        match current.iter().position(|r| same_network(r, attachment) && r.ifname == attachment.ifname) {
            Some(i) => kept.push(current.remove(i)),
            None => unmatched.push((index, attachment, ifname)),
        }
    }
    for (index, attachment, ifname) in unmatched {
        match current.iter().position(|r| same_network(r, attachment)) {
            Some(i) => kept.push(current.remove(i)),
            None => new.push((index, attachment, ifname)),
        }
    }
    // Attached in the annotation's order.
    new.sort_by_key(|(index, ..)| *index);
    let new: Vec<(&Attachment, Option<String>)> = new.into_iter().map(|(_, a, ifname)| (a, ifname)).collect();
    let detach: Vec<String> = current.iter().map(|r| r.ifname.clone()).collect();
    let mut taken: BTreeSet<String> = fixed.iter().map(|s| s.to_string()).collect();
    taken.extend(kept.iter().map(|r| r.ifname.clone()));
    let mut plan = Plan { detach, ..Plan::default() };
    // Named ones claim their interfaces before unnamed ones are numbered.
    taken.extend(new.iter().filter_map(|(_, ifname)| ifname.clone()).filter(|i| !fixed.contains(i.as_str())));
    for (attachment, ifname) in new {
        let ifname = match ifname {
            Some(ifname) if fixed.contains(ifname.as_str()) => {
                plan.refused.push((
                    attachment.source.element().to_string(),
                    format!(
                        "interface {ifname} is held by a network the pod got at creation from elsewhere than the \
                         {} annotation; name another interface",
                        annotation::NETWORKS
                    ),
                ));
                continue;
            }
            Some(ifname) => ifname,
            None => lowest_free(&mut taken),
        };
        plan.attach.push(Attachment { ifname, ..attachment.clone() });
    }
    plan
}

/// Whether an attachment came from the networks annotation.
pub fn from_annotation(source: &Source) -> bool {
    matches!(source, Source::Annotation { .. })
}

/// The same network: its name, and the NetworkAttachmentDefinition it came through.
fn same_network(record: &Record, attachment: &Attachment) -> bool {
    record.network == attachment.network && record.source.as_ref().and_then(Source::nad) == attachment.source.nad()
}

/// The interface an element of the annotation names, if it names one (`lan@data0`, or a JSON
/// element's `interface`).
fn asked_interface(source: &Source) -> Option<String> {
    let element = source.element();
    let parsed = annotation::parse(element).or_else(|_| annotation::parse(&format!("[{element}]"))).ok()?;
    parsed.into_iter().next().and_then(|request| request.ifname)
}

/// The lowest `netN` (N from 1) not in `taken`, which it joins.
fn lowest_free(taken: &mut BTreeSet<String>) -> String {
    let name = (1..).map(|n| format!("net{n}")).find(|name| !taken.contains(name)).expect("some netN is free");
    taken.insert(name.clone());
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::{CniArgs, Command, Invocation};
    use crate::programs::selector::requests::annotation::Extras;

    fn source(element: &str, nad: &str) -> Source {
        Source::Annotation { element: element.into(), nad: nad.into(), inline: false }
    }

    fn wanted(ifname: &str, element: &str) -> Attachment {
        let name = element.split('@').next().unwrap();
        Attachment {
            ifname: ifname.into(),
            network: name.into(),
            path: Some(format!("/n/{name}/x.conflist").into()),
            config: "{}".into(),
            source: source(element, &format!("ns/{name}")),
            extras: Extras::default(),
            device: None,
        }
    }

    fn first() -> Attachment {
        Attachment {
            ifname: "eth0".into(),
            network: "ptp".into(),
            path: None,
            config: "{}".into(),
            source: Source::DefaultNetwork { element: "ptp".into() },
            extras: Extras::default(),
            device: None,
        }
    }

    fn record(position: usize, a: &Attachment) -> Record {
        let runtime = Invocation {
            command: Command::Add,
            container_id: "c1".into(),
            netns: Some("/run/netns/p".into()),
            ifname: "eth0".into(),
            args: CniArgs::default(),
            path: vec![],
        };
        Record::new(&runtime, &runtime, position, a, "{}".into(), None)
    }

    fn records(attachments: &[Attachment]) -> Vec<Record> {
        attachments.iter().enumerate().map(|(i, a)| record(i, a)).collect()
    }

    fn ifnames(plan: &Plan) -> Vec<(String, String)> {
        plan.attach.iter().map(|a| (a.network.clone(), a.ifname.clone())).collect()
    }

    #[test]
    fn nothing_changes_when_the_annotation_asks_for_what_is_attached() {
        let now = [first(), wanted("net1", "a"), wanted("net2", "b")];
        assert!(plan(&records(&now), "eth0", &now).is_empty());
    }

    #[test]
    fn a_network_removed_is_matched_by_network_not_by_interface() {
        let now = records(&[first(), wanted("net1", "a"), wanted("net2", "b")]);
        // `a` removed: `b` is net1 in the new selection but stays on net2; nothing else moves.
        let p = plan(&now, "eth0", &[first(), wanted("net1", "b")]);
        assert_eq!(p.detach, ["net1"]);
        assert!(p.attach.is_empty());
    }

    #[test]
    fn a_network_added_takes_the_lowest_free_net_n() {
        // `c` added after `a` went: net1 is free again.
        let now = records(&[first(), wanted("net2", "b")]);
        let p = plan(&now, "eth0", &[first(), wanted("net1", "b"), wanted("net2", "c")]);
        assert_eq!(ifnames(&p), [("c".to_string(), "net1".to_string())]);
        assert!(p.detach.is_empty());
    }

    #[test]
    fn one_edit_swapping_networks_detaches_the_old_before_reusing_its_interface() {
        let now = records(&[first(), wanted("net1", "a")]);
        let p = plan(&now, "eth0", &[first(), wanted("net1", "b")]);
        assert_eq!(p.detach, ["net1"]);
        assert_eq!(ifnames(&p), [("b".to_string(), "net1".to_string())], "a's net1 is detached first");
    }

    #[test]
    fn a_named_interface_with_another_network_behind_it_is_swapped() {
        let now = records(&[first(), wanted("data0", "a@data0")]);
        let p = plan(&now, "eth0", &[first(), wanted("data0", "b@data0")]);
        assert_eq!(p.detach, ["data0"]);
        assert_eq!(ifnames(&p), [("b".to_string(), "data0".to_string())]);
    }

    #[test]
    fn of_a_network_attached_twice_by_name_the_one_dropped_is_detached() {
        let now = records(&[first(), wanted("net1", "a@net1"), wanted("net2", "a@net2")]);
        let p = plan(&now, "eth0", &[first(), wanted("net2", "a@net2")]);
        assert_eq!(p.detach, ["net1"]);
        assert!(p.attach.is_empty());
    }

    #[test]
    fn of_a_network_attached_twice_unnamed_the_last_is_detached() {
        let now = records(&[first(), wanted("net1", "a"), wanted("net2", "a")]);
        let p = plan(&now, "eth0", &[first(), wanted("net1", "a")]);
        assert_eq!(p.detach, ["net2"]);
        assert!(p.attach.is_empty());
    }

    #[test]
    fn a_network_added_a_second_time_attaches_beside_the_first() {
        let now = records(&[first(), wanted("net1", "a@net1")]);
        let p = plan(&now, "eth0", &[first(), wanted("net1", "a@net1"), wanted("net2", "a@net2")]);
        assert!(p.detach.is_empty());
        assert_eq!(ifnames(&p), [("a".to_string(), "net2".to_string())]);
        let now = records(&[first(), wanted("net1", "a")]);
        let p = plan(&now, "eth0", &[first(), wanted("net1", "a"), wanted("net2", "a")]);
        assert!(p.detach.is_empty());
        assert_eq!(ifnames(&p), [("a".to_string(), "net2".to_string())]);
    }

    #[test]
    fn an_unnamed_network_moved_by_a_removal_before_it_keeps_its_interface() {
        // `a, b, a` to `b, a`: b (now net1) stays on net2, a (now net2) on net1; net3's a goes.
        let now = records(&[first(), wanted("net1", "a"), wanted("net2", "b"), wanted("net3", "a")]);
        let p = plan(&now, "eth0", &[first(), wanted("net1", "b"), wanted("net2", "a")]);
        assert_eq!(p.detach, ["net3"]);
        assert!(p.attach.is_empty());
    }

    /// The admin's default network `d` on net1.
    fn default_networks_d() -> Attachment {
        let mut default_networks = wanted("net1", "d");
        default_networks.source = Source::DefaultNetworks { element: "d".into(), nad: "ns/d".into(), inline: false };
        default_networks
    }

    #[test]
    fn networks_from_elsewhere_are_never_changed() {
        let now = records(&[first(), default_networks_d()]);
        // The annotation emptied: neither eth0 nor the admin's net1 goes.
        assert!(plan(&now, "eth0", &[first(), default_networks_d()]).is_empty());
    }

    #[test]
    fn the_interfaces_of_networks_from_elsewhere_are_never_taken() {
        let now = records(&[first(), default_networks_d()]);
        let p = plan(&now, "eth0", &[first(), default_networks_d(), wanted("net2", "a@net1")]);
        assert!(p.attach.is_empty() && p.detach.is_empty());
        assert!(p.refused[0].1.contains("interface net1 is held"), "{:?}", p.refused);
        let p = plan(&now, "eth0", &[first(), default_networks_d(), wanted("net2", "a")]);
        assert_eq!(ifnames(&p), [("a".to_string(), "net2".to_string())]);
    }
}
