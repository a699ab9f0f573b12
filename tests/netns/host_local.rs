//! The built-in plugins' host-local (run in process) and Debian's `host-local` on one `dataDir`:
//! the same files, the same round-robin order and the same releases, whichever of the two
//! allocates or releases.

use crate::support::driver::{Call, PLUGINS, cni};
use serde_json::{Value, json};
use testkit::netns::Netns;
use testkit::require_root;
use testkit::sandbox::Sandbox;

fn call(sb: &Sandbox, plugin: &str, command: &str, cid: &str, netns: &str, conf: &Value) -> Value {
    cni(
        sb,
        &Call {
            plugin,
            command,
            container_id: cid,
            netns,
            ifname: "eth0",
            args: "IgnoreUnknown=1",
            config: &conf.to_string(),
        },
    )
    .ok()
}

#[test]
fn in_process_host_local_shares_debians_store() {
    require_root();
    let node = Netns::new("hln");
    let sb = Sandbox::on_node(&node, &PLUGINS);
    let data = sb.path().join("ipam");
    let ipam = json!({"type": "host-local", "dataDir": data, "ranges": [[{"subnet": "10.67.0.0/24"}]]});
    let bridge = json!({"cniVersion": "1.0.0", "name": "shared", "type": "yh-bridge", "bridge": "hlbr0", "ipam": ipam});
    let alone = json!({"cniVersion": "1.0.0", "name": "shared", "ipam": ipam});
    let pods = [Netns::new("hlp"), Netns::new("hlp")];
    let netns = |i: usize| pods[i].path().display().to_string();
    let address = |r: &Value| r["ips"][0]["address"].as_str().unwrap().to_string();
    let store = data.join("shared");
    let file = |ip: &str| std::fs::read_to_string(store.join(ip)).ok();

    // yh-bridge allocates in process, Debian's host-local goes on from there, and back.
    assert_eq!(address(&call(&sb, "yh-bridge", "ADD", "pod-a", &netns(0), &bridge)), "10.67.0.2/24");
    assert_eq!(file("10.67.0.2").as_deref(), Some("pod-a\r\neth0"));
    assert_eq!(address(&call(&sb, "host-local", "ADD", "other", "/nonexistent", &alone)), "10.67.0.3/24");
    assert_eq!(address(&call(&sb, "yh-bridge", "ADD", "pod-b", &netns(1), &bridge)), "10.67.0.4/24");
    assert_eq!(std::fs::read_to_string(store.join("last_reserved_ip.0")).unwrap(), "10.67.0.4");

    // Debian's host-local releases what yh-bridge took; yh-bridge's DEL releases its own only.
    call(&sb, "host-local", "DEL", "pod-a", "/nonexistent", &alone);
    assert_eq!(file("10.67.0.2"), None);
    call(&sb, "yh-bridge", "DEL", "pod-b", &netns(1), &bridge);
    assert_eq!(file("10.67.0.4"), None);
    assert_eq!(file("10.67.0.3").as_deref(), Some("other\r\neth0"));
    call(&sb, "host-local", "DEL", "other", "/nonexistent", &alone);
    node.must("ip link del hlbr0");
}
