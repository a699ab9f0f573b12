//! The operation log: every call leaves one line with the pod, container id, network, result or
//! error code, and duration, in the file the config names (or on stderr); never on stdout.

use crate::support::driver::{Call, PLUGINS, cni};
use serde_json::json;
use testkit::netns::Netns;
use testkit::process::unique;
use testkit::require_root;
use testkit::sandbox::Sandbox;

fn read_log(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.path().join("log/ops.log")).unwrap_or_default()
}

#[test]
fn a_failed_call_logs_what_failed_keeping_stdout_for_the_error() {
    let sb = Sandbox::new(&PLUGINS);
    let log = sb.path().join("log/ops.log");
    let config = json!({"cniVersion": "1.0.0", "name": "n", "type": "yh-bridge", "mtu": "abc",
                        "logFile": log, "logLevel": "info"})
    .to_string();
    let reply = cni(
        &sb,
        &Call {
            plugin: "yh-bridge",
            command: "ADD",
            container_id: "ctr-log-1",
            netns: "/run/netns/none",
            ifname: "eth0",
            args: "K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-1",
            config: &config,
        },
    );
    assert_eq!(reply.err()["code"], 7);
    let line = read_log(&sb);
    assert_eq!(line.lines().count(), 1, "one line per operation: {line}");
    for want in [
        "ERROR",
        "failed",
        r#"command="ADD""#,
        r#"container="ctr-log-1""#,
        r#"pod="ns1/web-1""#,
        "code=7",
        "duration_ms=",
    ] {
        assert!(line.contains(want), "{want:?} missing from {line}");
    }
    assert!(reply.stderr.is_empty(), "with logFile set nothing goes to stderr: {}", reply.stderr);
}

#[test]
fn selector_logs_its_choice_with_the_addresses() {
    require_root();
    let node = Netns::new("lgn");
    let pod = Netns::new("lgp");
    let sb = Sandbox::on_node(&node, &PLUGINS);
    let bridge = unique("lgb");
    sb.write(
        "net.d/blue/blue.conflist",
        &json!({"cniVersion": "1.0.0", "name": "blue", "plugins": [{"type": "bridge", "bridge": bridge, "isGateway": true,
                "ipam": {"type": "host-local", "subnet": "10.77.0.0/24", "dataDir": sb.path().join("ipam")}}]})
        .to_string(),
    );
    let config =
        json!({"cniVersion": "1.0.0", "name": "yh-genie", "type": "yh-genie", "confDir": sb.path().join("net.d"),
                        "dataDir": sb.path().join("data"), "binDir": sb.bin(), "defaultNetwork": "blue",
                        "logFile": sb.path().join("log/ops.log")})
        .to_string();
    let netns = pod.path().display().to_string();
    let call = |command| Call {
        plugin: "yh-genie",
        command,
        container_id: "ctr-log-2",
        netns: &netns,
        ifname: "eth0",
        args: "",
        config: &config,
    };
    let added = cni(&sb, &call("ADD")).ok();
    assert_eq!(added["ips"][0]["address"], "10.77.0.2/24");
    cni(&sb, &call("DEL")).ok();
    let log = read_log(&sb);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].contains(r#"command="ADD""#)
            && lines[0].contains(r#"network="blue""#)
            && lines[0].contains("ips=10.77.0.2/24"),
        "{log}"
    );
    assert!(
        lines[1].contains(r#"command="DEL""#) && lines[1].contains(r#"network="blue""#) && lines[1].contains(" ok "),
        "{log}"
    );
}
