//! What a pod author writes that reaches the kernel or a record: interface names (a value's
//! `@name`, the annotation's `interface`) and `cni-args` nested as deep as the input says. An
//! interface name accepted is one the kernel takes literally and never `lo`; a selection accepted
//! with `cni-args` serializes and parses back (as the agent's answer and the records carry it),
//! and its `cni-args` still parses once nested in a plugin's `args.cni`. Must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use support::{Nads, Objects, selector_config};
use yh_genie::programs::selector::choose;
use yh_genie::programs::selector::choose::chosen::Selection;
use yh_genie::programs::selector::requests::annotation::{self, NETWORKS};
use yh_genie::programs::selector::requests::value;

mod support;

/// The kernel's rule for a literal name, written out independently of the code under test.
fn kernel_takes_literally(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name.chars().any(|c| matches!(c, '/' | ':' | '%') || c.is_whitespace() || c.is_control())
}

/// A JSON value nested as the bytes say: each byte opens an object or an array, or ends in a leaf.
fn nested(bytes: &[u8]) -> Value {
    match bytes.split_first() {
        None => json!("leaf"),
        Some((b, rest)) => match b % 4 {
            0 => json!({ format!("k{b}"): nested(rest) }),
            1 => json!([nested(rest)]),
            2 => json!({ "ips": nested(rest) }),
            _ => Value::String(String::from_utf8_lossy(rest).into_owned()),
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((mode, rest)) = data.split_first() else { return };
    if mode % 2 == 0 {
        let name = String::from_utf8_lossy(rest);
        if value::interface(&name).is_ok() {
            assert!(kernel_takes_literally(&name) && name != "lo", "{name:?}");
        }
        let text = json!([{"name": "lan", "interface": name}]).to_string();
        if let Ok(requests) = annotation::parse(&text) {
            let ifname = requests[0].ifname.as_deref().unwrap();
            assert!(kernel_takes_literally(ifname) && ifname != "lo", "{ifname:?}");
        }
        return;
    }
    let cni_args = nested(rest);
    let text = json!([{"name": "lan", "cni-args": {"a": cni_args}}]).to_string();
    let mut pod = k8s_openapi::api::core::v1::Pod::default();
    pod.metadata.annotations = Some([(NETWORKS.to_string(), text)].into_iter().collect());
    let objects = Objects { pod, config_map: None, nads: Nads::NamingTheirNetwork };
    let Ok(selection) = choose::select(&selector_config(""), "eth0", Some(("default", "web-0")), None, Some(&objects))
    else {
        return;
    };
    let json = serde_json::to_string(&selection).unwrap();
    let back: Selection = serde_json::from_str(&json).expect("an accepted selection parses back");
    assert_eq!(back, selection);
    for attachment in &selection.attachments {
        if let Some(args) = &attachment.extras.cni_args {
            let plugin = json!({"plugins": [{"args": {"cni": args}, "prevResult": {"x": [{}]}}]}).to_string();
            serde_json::from_str::<Value>(&plugin).expect("cni-args nested in a plugin's configuration parses");
        }
    }
});
