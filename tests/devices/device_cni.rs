//! TEST SUPPORT ONLY, not shipped: a device CNI that behaves as sriov-cni does where yh-genie is
//! concerned. ADD fails without `deviceID` in its configuration, and moves the link of that name
//! (a "VF": in the tests, one end of a veth pair in the node's network namespace) into the pod's
//! namespace as `CNI_IFNAME`; DEL moves it back under its own name. It reports the interface, no
//! address. Built as an example (`cargo build --example test-device-cni`) so that the suites find
//! it beside their binaries; the cluster suite and the DRA tests share it.

use serde_json::{Value, json};
use std::io::Read;
use std::process::{Command, exit};

fn fail(code: u32, msg: &str) -> ! {
    println!("{}", json!({"cniVersion": "1.0.0", "code": code, "msg": msg}));
    exit(1)
}

fn ip(netns: Option<&str>, args: &[&str]) -> Result<String, String> {
    let mut cmd = match netns {
        Some(path) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={path}")).arg("ip");
            c
        }
        None => Command::new("ip"),
    };
    let out = cmd.args(args).output().map_err(|e| format!("ip {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("ip {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| fail(4, &format!("{name} is not set")))
}

fn main() {
    let command = env("CNI_COMMAND");
    if command == "VERSION" {
        println!("{}", json!({"cniVersion": "1.0.0", "supportedVersions": ["0.4.0", "1.0.0", "1.1.0"]}));
        return;
    }
    let mut stdin = String::new();
    std::io::stdin().read_to_string(&mut stdin).unwrap_or_else(|e| fail(6, &e.to_string()));
    let conf: Value = serde_json::from_str(&stdin).unwrap_or_else(|e| fail(6, &format!("configuration: {e}")));
    let version = conf["cniVersion"].as_str().unwrap_or("1.0.0").to_string();
    let device = conf.get("deviceID").and_then(Value::as_str).map(String::from);
    let own_netns = format!("/proc/{}/ns/net", std::process::id());
    match command.as_str() {
        "ADD" => {
            // As sriov-cni: without a device there is nothing to attach.
            let Some(device) = device else {
                fail(7, "VF pci addr is required: no deviceID in the configuration (is the NAD's resourceName set?)")
            };
            if conf.get("pciBusID").and_then(Value::as_str) != Some(device.as_str()) {
                fail(7, "pciBusID differs from deviceID");
            }
            let netns = env("CNI_NETNS");
            let ifname = env("CNI_IFNAME");
            ip(None, &["link", "set", "dev", &device, "netns", &netns])
                .unwrap_or_else(|e| fail(11, &format!("device {device}: {e}")));
            ip(Some(&netns), &["link", "set", "dev", &device, "name", &ifname, "up"]).unwrap_or_else(|e| fail(11, &e));
            let shown = ip(Some(&netns), &["-j", "link", "show", "dev", &ifname]).unwrap_or_else(|e| fail(11, &e));
            let mac =
                serde_json::from_str::<Value>(&shown).ok().and_then(|v| v[0]["address"].as_str().map(String::from));
            println!(
                "{}",
                json!({"cniVersion": version, "interfaces": [{"name": ifname, "mac": mac, "sandbox": netns}], "ips": []})
            );
        }
        "DEL" => {
            let (Some(device), Ok(netns)) = (device, std::env::var("CNI_NETNS")) else { return };
            let ifname = env("CNI_IFNAME");
            if netns.is_empty() || !std::path::Path::new(&netns).exists() {
                return;
            }
            // Back to the node under its own name, when it is still in the pod.
            if ip(Some(&netns), &["link", "show", "dev", &ifname]).is_ok() {
                ip(Some(&netns), &["link", "set", "dev", &ifname, "down"]).ok();
                ip(Some(&netns), &["link", "set", "dev", &ifname, "name", &device]).unwrap_or_else(|e| fail(11, &e));
                ip(Some(&netns), &["link", "set", "dev", &device, "netns", &own_netns])
                    .unwrap_or_else(|e| fail(11, &e));
            }
        }
        _ => {}
    }
}
