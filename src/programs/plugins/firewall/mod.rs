//! Per-pod NAT: masquerade what a pod sends beyond its own subnets, and take it away again on DEL.
//!
//! Two backends behind one trait. `iptables` writes exactly the rules the reference bridge plugin
//! writes (a `CNI-<hash>` chain in the `nat` table, a POSTROUTING jump per pod address, the same
//! comments), through `iptables-restore`, so each family costs one exec on ADD. On today's nodes
//! `iptables` is usually iptables-nft, so these rules live in nftables too, under the tables
//! iptables-nft manages. `nftables` keeps its own table (`inet yh_bridge`) with one NAT base chain per
//! attachment (network, container and interface), so DEL is a single `nft -f` transaction that
//! needs neither the pod's addresses nor rule handles.
//!
//! Rules are keyed by network name, container id and interface ([`Owner`]), never by the addresses
//! on the pod's interface alone: DEL must clean up even when the netns or the interface is already
//! gone. The iptables chain is the reference's, one per network and container, so a network
//! attached twice to one pod shares it: each attachment's DEL removes its own jumps, and the chain
//! goes with the last.

mod command;
mod iptables;
mod nftables;

pub use iptables::Iptables;
pub use nftables::Nftables;

use crate::platform::cni::CniError;
use crate::platform::netlink::IpFamily;
use ipnetwork::IpNetwork;
use serde::Deserialize;
use sha2::{Digest, Sha512};

/// A NAT backend.
#[allow(async_fn_in_trait)] // Used by static dispatch only (see `Backend`); no Send bound is needed.
pub trait Firewall {
    /// Masquerade traffic from each address in `ips` to anywhere outside the subnets of `ips`
    /// (multicast excepted), as rules owned by `owner`.
    async fn add_masquerade(&self, owner: &Owner, ips: &[IpNetwork]) -> Result<(), CniError>;
    /// Remove every rule `owner` has, whatever addresses they name; nothing to remove is success.
    /// `known` is what the caller knows of the pod's addresses (prevResult, its interface): it only
    /// makes removal cheaper, and its families narrow the search. Empty: search every family.
    async fn del_masquerade(&self, owner: &Owner, known: &[IpNetwork]) -> Result<(), CniError>;
}

/// The `ipMasqBackend` configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Iptables,
    Nftables,
}

/// The backend chosen for a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Iptables(Iptables),
    Nftables(Nftables),
}

impl Backend {
    pub fn new(kind: BackendKind) -> Self {
        match kind {
            BackendKind::Iptables => Backend::Iptables(Iptables),
            BackendKind::Nftables => Backend::Nftables(Nftables),
        }
    }

    /// The configured backend, or the default: iptables when `iptables-restore` is installed (every
    /// Kubernetes node has it, and it is what the reference plugin uses, so existing tooling sees the
    /// rules where it expects them), otherwise nftables if `nft` is, otherwise iptables (whose
    /// error then says what is missing).
    pub fn select(configured: Option<BackendKind>) -> Self {
        let kind = configured.unwrap_or_else(|| {
            if !command::on_path("iptables-restore") && command::on_path("nft") {
                BackendKind::Nftables
            } else {
                BackendKind::Iptables
            }
        });
        Self::new(kind)
    }
}

impl Firewall for Backend {
    async fn add_masquerade(&self, owner: &Owner, ips: &[IpNetwork]) -> Result<(), CniError> {
        match self {
            Backend::Iptables(b) => b.add_masquerade(owner, ips).await,
            Backend::Nftables(b) => b.add_masquerade(owner, ips).await,
        }
    }
    async fn del_masquerade(&self, owner: &Owner, known: &[IpNetwork]) -> Result<(), CniError> {
        match self {
            Backend::Iptables(b) => b.del_masquerade(owner, known).await,
            Backend::Nftables(b) => b.del_masquerade(owner, known).await,
        }
    }
}

/// Who owns a set of rules: one attachment of one network to one container, on one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    network: String,
    container_id: String,
    ifname: String,
}

impl Owner {
    pub fn new(network: &str, container_id: &str, ifname: &str) -> Self {
        Owner { network: network.to_string(), container_id: container_id.to_string(), ifname: ifname.to_string() }
    }

    /// `CNI-` and the first 24 hex digits of sha512(network + container id): the reference plugins'
    /// chain name (28 characters, under the iptables limit of 29), shared by the attachments of
    /// one network to one container.
    pub fn chain(&self) -> String {
        // The digest's first 24 hex digits (its `LowerHex` with a precision).
        format!("CNI-{:.24x}", Sha512::digest(format!("{}{}", self.network, self.container_id)))
    }

    /// The chain of this attachment alone: as `chain`, of network, container id, `/` and interface
    /// (an interface name has no `/`).
    pub fn attachment_chain(&self) -> String {
        format!("CNI-{:.24x}", Sha512::digest(format!("{}{}/{}", self.network, self.container_id, self.ifname)))
    }

    /// `name: "<network>" id: "<container id>"`, the reference's comment. Quotes and backslashes in
    /// the network name (the container id cannot have any) become `_`, so the comment survives every
    /// rule syntax unescaped.
    pub fn comment(&self) -> String {
        let mut c = format!(r#"name: "{}" id: "{}""#, printable(&self.network), self.container_id);
        truncate_on_char_boundary(&mut c, 255);
        c
    }
}

fn printable(s: &str) -> String {
    s.chars().map(|c| if c == '"' || c == '\\' || c.is_control() { '_' } else { c }).collect()
}

fn truncate_on_char_boundary(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// The networks of `ips` of one family, deduplicated, in order.
fn subnets(ips: &[IpNetwork], family: IpFamily) -> Vec<IpNetwork> {
    let mut out: Vec<IpNetwork> = Vec::new();
    for ip in ips.iter().filter(|ip| IpFamily::of_net(ip) == family) {
        let net = IpNetwork::new(ip.network(), ip.prefix()).expect("a network's own prefix is valid");
        if !out.contains(&net) {
            out.push(net);
        }
    }
    out
}

/// Multicast, which the reference never masquerades so pods can use it on the local network.
fn multicast(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "224.0.0.0/4",
        IpFamily::V6 => "ff00::/8",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_name_matches_the_reference_plugins() {
        // utils.FormatChainName("mynet", "abc123") of containernetworking/plugins is "CNI-" and
        // `printf 'mynetabc123' | sha512sum | cut -c1-24`. (tests/netns/bridge.rs also compares the chains
        // the reference plugin makes with ours.)
        assert_eq!(Owner::new("mynet", "abc123", "eth0").chain(), "CNI-70a29d9dc18bc4d652ea5d59");
        assert_ne!(Owner::new("mynet", "abc124", "eth0").chain(), Owner::new("mynet", "abc123", "eth0").chain());
        assert_eq!(Owner::new("mynet", "abc123", "net1").chain(), Owner::new("mynet", "abc123", "eth0").chain());
    }

    #[test]
    fn each_attachment_has_a_chain_of_its_own() {
        let (eth0, net1) = (Owner::new("mynet", "abc123", "eth0"), Owner::new("mynet", "abc123", "net1"));
        assert_ne!(eth0.attachment_chain(), net1.attachment_chain());
        assert_ne!(eth0.attachment_chain(), eth0.chain());
        assert_eq!(eth0.attachment_chain().len(), 28);
    }

    #[test]
    fn the_comment_is_the_reference_plugins_text() {
        assert_eq!(Owner::new("mynet", "abc", "eth0").comment(), r#"name: "mynet" id: "abc""#);
    }

    #[test]
    fn a_comment_replaces_quotes_or_backslashes_in_the_name() {
        assert_eq!(Owner::new("my\"n\\et", "abc", "eth0").comment(), r#"name: "my_n_et" id: "abc""#);
    }

    #[test]
    fn a_long_comment_is_cut_to_255_bytes() {
        let long = Owner::new(&"é".repeat(200), "abc", "eth0").comment();
        assert!(long.len() <= 255 && long.starts_with("name: \"é"));
    }

    #[test]
    fn subnets_are_listed_once_per_family() {
        let ips: Vec<IpNetwork> =
            ["10.1.17.2/24", "10.1.17.3/24", "fd00::5/64", "10.2.0.9/16"].iter().map(|s| s.parse().unwrap()).collect();
        let v4: Vec<String> = subnets(&ips, IpFamily::V4).iter().map(ToString::to_string).collect();
        assert_eq!(v4, ["10.1.17.0/24", "10.2.0.0/16"]);
        assert_eq!(subnets(&ips, IpFamily::V6)[0].to_string(), "fd00::/64");
    }

    #[test]
    fn configured_backend_wins() {
        assert_eq!(Backend::select(Some(BackendKind::Nftables)), Backend::Nftables(Nftables));
        assert_eq!(Backend::select(Some(BackendKind::Iptables)), Backend::Iptables(Iptables));
        let kind: BackendKind = serde_json::from_str(r#""nftables""#).unwrap();
        assert_eq!(kind, BackendKind::Nftables);
        assert!(serde_json::from_str::<BackendKind>(r#""ipfw""#).is_err());
    }
}
