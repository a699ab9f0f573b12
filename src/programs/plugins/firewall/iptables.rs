//! The iptables backend: the reference bridge plugin's rules, written and removed with one
//! `iptables-restore` transaction per address family.

use super::{Firewall, Owner, command, multicast, subnets};
use crate::platform::cni::CniError;
use crate::platform::netlink::IpFamily;
use ipnetwork::IpNetwork;
use std::fmt::Write;
use std::net::IpAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iptables;

fn tools(family: IpFamily) -> (&'static str, &'static str) {
    match family {
        IpFamily::V4 => ("iptables-save", "iptables-restore"),
        IpFamily::V6 => ("ip6tables-save", "ip6tables-restore"),
    }
}

/// `iptables-restore --noflush` input that creates `owner`'s chain with its rules and the
/// POSTROUTING jumps for the `family` addresses among `ips`; `None` if there are none.
/// Declaring the chain (`:CHAIN`) creates it, or empties it if it is left over from an earlier try.
fn add_script(owner: &Owner, ips: &[IpNetwork], family: IpFamily) -> Option<String> {
    let nets = subnets(ips, family);
    if nets.is_empty() {
        return None;
    }
    let (chain, comment) = (owner.chain(), quoted(&owner.comment()));
    let mut s = format!("*nat\n:{chain} - [0:0]\n");
    for net in &nets {
        // Traffic between the pod and its own subnets keeps its source address.
        writeln!(s, "-A {chain} -d {net} -j ACCEPT -m comment --comment {comment}").unwrap();
    }
    writeln!(s, "-A {chain} ! -d {} -j MASQUERADE -m comment --comment {comment}", multicast(family)).unwrap();
    for ip in ips.iter().filter(|ip| IpFamily::of_net(ip) == family) {
        writeln!(s, "-A POSTROUTING -s {} -j {chain} -m comment --comment {comment}", ip.ip()).unwrap();
    }
    s.push_str("COMMIT\n");
    Some(s)
}

/// `iptables-restore --noflush` input that removes `owner`'s rules for `ips` (the `family` ones)
/// without looking first: the jumps as ADD wrote them, then the chain. `None` without such
/// addresses. The transaction fails as a whole if a jump is not there (then `del_script` is used).
fn del_known_script(owner: &Owner, ips: &[IpNetwork], family: IpFamily) -> Option<String> {
    let ips: Vec<&IpNetwork> = ips.iter().filter(|ip| IpFamily::of_net(ip) == family).collect();
    if ips.is_empty() {
        return None;
    }
    let (chain, comment) = (owner.chain(), quoted(&owner.comment()));
    let mut s = format!("*nat\n:{chain} - [0:0]\n");
    for ip in ips {
        writeln!(s, "-D POSTROUTING -s {} -j {chain} -m comment --comment {comment}", ip.ip()).unwrap();
    }
    writeln!(s, "-X {chain}\nCOMMIT").unwrap();
    Some(s)
}

/// `iptables-restore --noflush` input that removes what `owner` has in `save` (the output of
/// `iptables-save -t nat`): the POSTROUTING jumps to its chain from the `family` addresses of
/// `known` (every jump when it names none of the family), then the chain, unless jumps of another
/// attachment of the network to the container (the chain is the reference's, shared by them) are
/// left. `None` when nothing of it is there.
fn del_script(owner: &Owner, save: &str, known: &[IpNetwork], family: IpFamily) -> Option<String> {
    let chain = owner.chain();
    let declared = save.lines().any(|l| l.strip_prefix(':').and_then(|l| l.split_whitespace().next()) == Some(&chain));
    let jump_suffix = format!(" -j {chain}");
    let jumps: Vec<&str> =
        save.lines().filter(|l| l.starts_with("-A POSTROUTING ") && l.ends_with(&jump_suffix)).collect();
    let known: Vec<IpAddr> = known.iter().filter(|ip| IpFamily::of_net(ip) == family).map(IpNetwork::ip).collect();
    let (own, others): (Vec<&str>, Vec<&str>) =
        jumps.into_iter().partition(|jump| known.is_empty() || jump_source(jump).is_some_and(|s| known.contains(&s)));
    if !others.is_empty() {
        if own.is_empty() {
            return None;
        }
        let mut s = String::from("*nat\n");
        for jump in own {
            writeln!(s, "-D{}", &jump[2..]).unwrap();
        }
        s.push_str("COMMIT\n");
        return Some(s);
    }
    if !declared && own.is_empty() {
        return None;
    }
    // Declaring the chain empties it (or makes it, so the -X below cannot fail on a half-removed one).
    let mut s = format!("*nat\n:{chain} - [0:0]\n");
    for jump in own {
        writeln!(s, "-D{}", &jump[2..]).unwrap();
    }
    writeln!(s, "-X {chain}\nCOMMIT").unwrap();
    Some(s)
}

/// The source address of a jump as `iptables-save` prints it (`-s 10.1.17.2/32`).
fn jump_source(jump: &str) -> Option<IpAddr> {
    let mut words = jump.split_whitespace();
    words.find(|w| *w == "-s")?;
    words.next()?.split('/').next()?.parse().ok()
}

/// A string as one iptables-restore argument: in quotes, its own quotes escaped. (`Owner::comment`
/// has no backslash to escape.)
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\\\""))
}

impl Firewall for Iptables {
    async fn add_masquerade(&self, owner: &Owner, ips: &[IpNetwork]) -> Result<(), CniError> {
        for family in [IpFamily::V4, IpFamily::V6] {
            if let Some(script) = add_script(owner, ips, family) {
                let (_, restore) = tools(family);
                command::run(restore, &["-w", "--noflush"], &script).await?;
            }
        }
        Ok(())
    }

    async fn del_masquerade(&self, owner: &Owner, known: &[IpNetwork]) -> Result<(), CniError> {
        let families = if known.is_empty() { vec![IpFamily::V4, IpFamily::V6] } else { IpFamily::distinct(known) };
        for family in families {
            let (save, restore) = tools(family);
            // Usually one exec: the rules are where ADD put them.
            if let Some(script) = del_known_script(owner, known, family)
                && command::run(restore, &["-w", "--noflush"], &script).await.is_ok()
            {
                continue;
            }
            // Otherwise look, and remove what is there of this attachment.
            let current = command::run(save, &["-t", "nat"], "").await?;
            if let Some(script) = del_script(owner, &current, known, family) {
                command::run(restore, &["-w", "--noflush"], &script).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner::new("mynet", "abc123", "eth0")
    }

    #[test]
    fn add_writes_the_reference_rules_per_family() {
        let ips: Vec<IpNetwork> = ["10.1.17.2/24", "fd00::2/64"].iter().map(|s| s.parse().unwrap()).collect();
        let c = r#""name: \"mynet\" id: \"abc123\"""#;
        assert_eq!(
            add_script(&owner(), &ips, IpFamily::V4).unwrap(),
            format!(
                "*nat\n:CNI-70a29d9dc18bc4d652ea5d59 - [0:0]\n\
                 -A CNI-70a29d9dc18bc4d652ea5d59 -d 10.1.17.0/24 -j ACCEPT -m comment --comment {c}\n\
                 -A CNI-70a29d9dc18bc4d652ea5d59 ! -d 224.0.0.0/4 -j MASQUERADE -m comment --comment {c}\n\
                 -A POSTROUTING -s 10.1.17.2 -j CNI-70a29d9dc18bc4d652ea5d59 -m comment --comment {c}\n\
                 COMMIT\n"
            )
        );
        let v6 = add_script(&owner(), &ips, IpFamily::V6).unwrap();
        assert!(v6.contains("-d fd00::/64 -j ACCEPT") && v6.contains("! -d ff00::/8 -j MASQUERADE"));
        assert!(v6.contains("-A POSTROUTING -s fd00::2 -j"));
        assert!(add_script(&owner(), &ips[..1], IpFamily::V6).is_none());
    }

    #[test]
    fn del_of_known_addresses_scripts_each_family_blind() {
        let ips: Vec<IpNetwork> = ["10.1.17.2/24", "fd00::2/64"].iter().map(|s| s.parse().unwrap()).collect();
        let chain = owner().chain();
        assert_eq!(
            del_known_script(&owner(), &ips, IpFamily::V4).unwrap(),
            format!(
                "*nat\n:{chain} - [0:0]\n\
                 -D POSTROUTING -s 10.1.17.2 -j {chain} -m comment --comment \"name: \\\"mynet\\\" id: \\\"abc123\\\"\"\n\
                 -X {chain}\nCOMMIT\n"
            )
        );
        assert!(del_known_script(&owner(), &ips[..1], IpFamily::V6).is_none());
    }

    #[test]
    fn del_removes_only_what_this_owner_added() {
        let chain = owner().chain();
        let other = Owner::new("mynet", "zzz", "eth0").chain();
        let save = format!(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:{chain} - [0:0]\n:{other} - [0:0]\n\
             -A POSTROUTING -s 10.1.17.2/32 -m comment --comment \"name: \\\"mynet\\\" id: \\\"abc123\\\"\" -j {chain}\n\
             -A POSTROUTING -s 10.1.17.3/32 -j {other}\n\
             -A {chain} -d 10.1.17.0/24 -j ACCEPT\nCOMMIT\n"
        );
        assert_eq!(
            del_script(&owner(), &save, &[], IpFamily::V4).unwrap(),
            format!(
                "*nat\n:{chain} - [0:0]\n\
                 -D POSTROUTING -s 10.1.17.2/32 -m comment --comment \"name: \\\"mynet\\\" id: \\\"abc123\\\"\" -j {chain}\n\
                 -X {chain}\nCOMMIT\n"
            )
        );
        assert!(del_script(&Owner::new("mynet", "gone", "eth0"), &save, &[], IpFamily::V4).is_none());
    }

    #[test]
    fn del_removes_a_chain_left_without_its_jump() {
        let chain = owner().chain();
        // A chain left without its jump (an interrupted DEL) is still removed.
        let half = format!("*nat\n:{chain} - [0:0]\nCOMMIT\n");
        assert_eq!(
            del_script(&owner(), &half, &[], IpFamily::V4).unwrap(),
            format!("*nat\n:{chain} - [0:0]\n-X {chain}\nCOMMIT\n")
        );
    }

    /// The nat table with the jumps of two attachments of `mynet` to container abc123 (net1 from
    /// 10.1.17.2, net2 from 10.1.17.3) to their shared chain.
    fn two_attachments() -> String {
        let chain = owner().chain();
        format!(
            "*nat\n:POSTROUTING ACCEPT [0:0]\n:{chain} - [0:0]\n\
             -A POSTROUTING -s 10.1.17.2/32 -m comment --comment \"x\" -j {chain}\n\
             -A POSTROUTING -s 10.1.17.3/32 -m comment --comment \"x\" -j {chain}\n\
             -A {chain} -d 10.1.17.0/24 -j ACCEPT\nCOMMIT\n"
        )
    }

    #[test]
    fn del_of_one_of_two_attachments_of_a_network_keeps_the_others_jump_and_the_chain() {
        let chain = owner().chain();
        let net2: Vec<IpNetwork> = vec!["10.1.17.3/24".parse().unwrap()];
        assert_eq!(
            del_script(&owner(), &two_attachments(), &net2, IpFamily::V4).unwrap(),
            format!("*nat\n-D POSTROUTING -s 10.1.17.3/32 -m comment --comment \"x\" -j {chain}\nCOMMIT\n")
        );
        let gone: Vec<IpNetwork> = vec!["10.1.17.9/24".parse().unwrap()];
        assert!(del_script(&owner(), &two_attachments(), &gone, IpFamily::V4).is_none(), "nothing of its own");
    }

    #[test]
    fn del_of_the_last_attachment_of_a_network_removes_the_chain() {
        let save = two_attachments().replace("-A POSTROUTING -s 10.1.17.3/32 -m comment --comment \"x\" -j ", "#");
        let net1: Vec<IpNetwork> = vec!["10.1.17.2/24".parse().unwrap()];
        let script = del_script(&owner(), &save, &net1, IpFamily::V4).unwrap();
        assert!(script.ends_with(&format!("-X {}\nCOMMIT\n", owner().chain())), "{script}");
    }
}
