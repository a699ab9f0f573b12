//! The nftables backend: table `inet yh_bridge`, one NAT base chain per pod named like the iptables
//! chain. Each pod's chain matches only its own source addresses, so chains never interfere, and DEL
//! is one transaction: (re)declare the chain, flush it, delete it, which succeeds whether or not it
//! was there and needs no rule handles.

use super::{Firewall, Owner, command, multicast, subnets};
use crate::platform::cni::CniError;
use crate::platform::netlink::IpFamily;
use ipnetwork::IpNetwork;
use std::fmt::Write;

pub const TABLE: &str = "inet yh_bridge";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nftables;

/// Declare `owner`'s chain as a NAT hook at the source-NAT priority (100), in its table.
fn declare(owner: &Owner) -> String {
    format!(
        "add table {TABLE}\nadd chain {TABLE} {} {{ type nat hook postrouting priority 100; policy accept; }}\n",
        owner.chain()
    )
}

fn add_script(owner: &Owner, ips: &[IpNetwork]) -> String {
    let chain = owner.chain();
    // nft strings cannot hold a `"`; drop the reference comment's quotes.
    let comment = owner.comment().replace('"', "");
    let mut s = declare(owner);
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

fn del_script(owner: &Owner) -> String {
    let chain = owner.chain();
    format!("{}flush chain {TABLE} {chain}\ndelete chain {TABLE} {chain}\n", declare(owner))
}

impl Firewall for Nftables {
    async fn add_masquerade(&self, owner: &Owner, ips: &[IpNetwork]) -> Result<(), CniError> {
        command::run("nft", &["-f", "-"], &add_script(owner, ips)).await.map(drop)
    }

    /// One chain holds both families and goes whole: the addresses do not matter here.
    async fn del_masquerade(&self, owner: &Owner, _known: &[IpNetwork]) -> Result<(), CniError> {
        command::run("nft", &["-f", "-"], &del_script(owner)).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_masquerades_except_toward_its_subnet_or_multicast() {
        let ips: Vec<IpNetwork> = ["10.1.17.2/24", "fd00::2/64"].iter().map(|s| s.parse().unwrap()).collect();
        let s = add_script(&Owner::new("mynet", "abc123"), &ips);
        let c = "CNI-70a29d9dc18bc4d652ea5d59";
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
    fn del_is_one_idempotent_transaction() {
        let s = del_script(&Owner::new("mynet", "abc123"));
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[2].starts_with("flush chain") && lines[3].starts_with("delete chain"));
    }
}
