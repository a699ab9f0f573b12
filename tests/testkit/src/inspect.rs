//! What a node holds, read as an operator would read it: files of a state directory, host-local's
//! leases, the NAT rules of CNI plugins, the links of a netns. The suites assert that what pods
//! leave of these is nothing once they are gone.

use crate::netns::Netns;
use serde_json::Value;
use std::path::Path;

/// Names in `dir`, sorted; none if it does not exist.
pub fn list_dir(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Every file (not directory) under `dir`, recursively.
pub fn walk(dir: &Path, found: &mut dyn FnMut(&Path)) {
    for name in list_dir(dir) {
        let path = dir.join(name);
        if path.is_dir() { walk(&path, found) } else { found(&path) }
    }
}

/// Addresses host-local has handed out from its data dir `dir` over every network, with the
/// container id holding each.
pub fn host_local_leases(dir: &Path) -> Vec<(String, String)> {
    let mut leases = Vec::new();
    for net in list_dir(dir) {
        for file in list_dir(&dir.join(&net)) {
            if file.parse::<std::net::IpAddr>().is_ok() {
                let text = std::fs::read_to_string(dir.join(&net).join(&file)).unwrap_or_default();
                leases.push((file, text.lines().next().unwrap_or_default().to_string()));
            }
        }
    }
    leases
}

/// Lines of `netns`'s NAT tables (both families) that belong to CNI plugins: `CNI-` chains and the
/// jumps to them.
pub fn cni_nat_lines(netns: &Netns) -> Vec<String> {
    let dump = netns.must("iptables-save -t nat; ip6tables-save -t nat");
    dump.lines().filter(|l| l.contains("CNI-")).map(String::from).collect()
}

/// Names of the links in `netns` matching `filter` (`ip link show` syntax, e.g. `type veth`).
pub fn link_names(netns: &Netns, filter: &str) -> Vec<String> {
    let out = netns.must(&format!("ip -j link show {filter}"));
    let links: Vec<Value> = serde_json::from_str(&out).unwrap_or_default();
    links.iter().filter_map(|l| l["ifname"].as_str().map(String::from)).collect()
}
