//! The nftables backend: table `inet yh_bridge`, one NAT base chain per attachment (network,
//! container and interface: `Owner::attachment_chain`). Each chain matches only its own source
//! addresses, so chains never interfere, and DEL is one transaction: flush the chain and delete it,
//! which needs no rule handles. When that fails (the chain is not there), DEL (re)declares, flushes
//! and deletes both the attachment's chain and the chain 0.1.0 named after the network
//! and container alone (`Owner::chain`), which an attachment made by them still has: that succeeds
//! whether or not either was there.

use super::{Firewall, Owner, command, multicast, subnets};
use crate::platform::cni::CniError;
use crate::platform::netlink::IpFamily;
use ipnetwork::IpNetwork;
use std::fmt::Write;

pub const TABLE: &str = "inet yh_bridge";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nftables;

/// Declare `chain` as a NAT hook at the source-NAT priority (100), in its table.
fn declare(chain: &str) -> String {
    format!(
        "add table {TABLE}\nadd chain {TABLE} {chain} {{ type nat hook postrouting priority 100; policy accept; }}\n"
    )
}

fn add_script(owner: &Owner, ips: &[IpNetwork]) -> String {
    let chain = owner.attachment_chain();
    // nft strings cannot hold a `"`; drop the reference comment's quotes.
    let comment = owner.comment().replace('"', "");
    let mut s = declare(&chain);
    writeln!(s, "flush chain {TABLE} {chain}").unwrap();
    for ip in ips {
        let family = IpFamily::of_net(ip);
        let proto = if family == IpFamily::V4 { "ip" } else { "ip6" };
        let mut keep: Vec<String> = subnets(ips, family).iter().map(ToString::to_string).collect();
        keep.push(multicast(family).to_string());
        writeln!(
            s,
            "add rule {TABLE} {chain} {proto} saddr {} {proto} daddr != {{ {} }} masquerade comment \"{comment}\"",
            ip.ip(),
            keep.join(", ")
        )
        .unwrap();
    }
    s
}

/// Removes the attachment's chain; fails (changing nothing) when it is not there.
fn del_script(owner: &Owner) -> String {
    let chain = owner.attachment_chain();
    format!("flush chain {TABLE} {chain}\ndelete chain {TABLE} {chain}\n")
}

/// Removes the attachment's chain and the one 0.1.0 named after the network and
/// container, whichever are there.
fn del_any_script(owner: &Owner) -> String {
    [owner.attachment_chain(), owner.chain()]
        .iter()
        .map(|chain| format!("{}flush chain {TABLE} {chain}\ndelete chain {TABLE} {chain}\n", declare(chain)))
        .collect()
}

impl Firewall for Nftables {
    async fn add_masquerade(&self, owner: &Owner, ips: &[IpNetwork]) -> Result<(), CniError> {
        command::run("nft", &["-f", "-"], &add_script(owner, ips)).await.map(drop)
    }

    /// One chain holds both families and goes whole: the addresses do not matter here.
    async fn del_masquerade(&self, owner: &Owner, _known: &[IpNetwork]) -> Result<(), CniError> {
        if command::run("nft", &["-f", "-"], &del_script(owner)).await.is_ok() {
            return Ok(());
        }
        command::run("nft", &["-f", "-"], &del_any_script(owner)).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_masquerades_except_toward_its_subnet_or_multicast() {
        let ips: Vec<IpNetwork> = ["10.1.17.2/24", "fd00::2/64"].iter().map(|s| s.parse().unwrap()).collect();
        let owner = Owner::new("mynet", "abc123", "eth0");
        let s = add_script(&owner, &ips);
        let c = owner.attachment_chain();
        assert_eq!(
            s,
            format!(
                "add table inet yh_bridge\n\
                 add chain inet yh_bridge {c} {{ type nat hook postrouting priority 100; policy accept; }}\n\
                 flush chain inet yh_bridge {c}\n\
                 add rule inet yh_bridge {c} ip saddr 10.1.17.2 ip daddr != {{ 10.1.17.0/24, 224.0.0.0/4 }} masquerade comment \"name: mynet id: abc123\"\n\
                 add rule inet yh_bridge {c} ip6 saddr fd00::2 ip6 daddr != {{ fd00::/64, ff00::/8 }} masquerade comment \"name: mynet id: abc123\"\n"
            )
        );
    }

    #[test]
    fn del_removes_the_attachments_own_chain() {
        let owner = Owner::new("mynet", "abc123", "net2");
        let c = owner.attachment_chain();
        assert_eq!(del_script(&owner), format!("flush chain inet yh_bridge {c}\ndelete chain inet yh_bridge {c}\n"));
    }

    #[test]
    fn del_of_an_absent_chain_is_one_idempotent_transaction_taking_an_earlier_releases_chain_too() {
        let owner = Owner::new("mynet", "abc123", "eth0");
        let s = del_any_script(&owner);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 8);
        for (chain, at) in [(owner.attachment_chain(), 0), (owner.chain(), 4)] {
            assert!(lines[at + 1].contains(&chain) && lines[at + 1].starts_with("add chain"), "{s}");
            assert!(lines[at + 2].starts_with("flush chain") && lines[at + 3].starts_with("delete chain"), "{s}");
        }
    }
}
