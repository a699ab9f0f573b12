//! What a pod author writes that reaches the kernel or a record: interface names (a value's
//! `@name`, the annotation's `interface`) and `cni-args` nested as deep as the input says. An
//! interface name accepted is one the kernel takes literally and never `lo`; a selection accepted
//! with `cni-args` serializes and parses back (as the agent's answer and the records carry it),
//! and its `cni-args` still parses once nested in a plugin's `args.cni`. Must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::OnceLock;
use yh_genie::cni::PluginConf;
use yh_genie::selector::choose;
use yh_genie::selector::choose::selection::Selection;
use yh_genie::selector::config::SelectorConfig;
use yh_genie::selector::requests::annotation::{self, NETWORKS};
use yh_genie::selector::requests::value;

/// The kernel's rule for a literal name, written out independently of the code under test.
fn kernel_takes_literally(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name.chars().any(|c| matches!(c, '/' | ':' | '%') || c.is_whitespace() || c.is_control())
}

fn conf_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("yh-genie-fuzz-names-{}", std::process::id()));
        for name in ["blue", "lan"] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            let conf = format!(r#"{{"cniVersion":"1.0.0","name":"{name}","plugins":[{{"type":"bridge"}}]}}"#);
            std::fs::write(dir.join(name).join("1.conflist"), conf).unwrap();
        }
        dir
    })
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

struct Annotated(k8s_openapi::api::core::v1::Pod);

impl yh_genie::kube::PodSource for Annotated {
    fn pod(&self, _: &str, _: &str) -> Result<Option<k8s_openapi::api::core::v1::Pod>, yh_genie::cni::CniError> {
        Ok(Some(self.0.clone()))
    }
    fn config_map(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<k8s_openapi::api::core::v1::ConfigMap>, yh_genie::cni::CniError> {
        Ok(None)
    }
    fn network_attachment(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<yh_genie::kube::NetworkAttachmentDefinition>, yh_genie::cni::CniError> {
        Ok(Some(Default::default()))
    }
    fn annotate_pod(
        &self,
        _: &str,
        _: &str,
        _: &str,
        _: &std::collections::BTreeMap<String, String>,
    ) -> Result<bool, yh_genie::cni::CniError> {
        Ok(true)
    }
    fn resource_claim(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<k8s_openapi::api::resource::v1::ResourceClaim>, yh_genie::cni::CniError> {
        Ok(None)
    }
    fn node_resource_slices(
        &self,
        _: &str,
    ) -> Result<Vec<k8s_openapi::api::resource::v1::ResourceSlice>, yh_genie::cni::CniError> {
        Ok(Vec::new())
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
    let conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"g","type":"yh-genie","confDir":{:?},"defaultNetwork":"blue"}}"#,
        conf_dir()
    );
    let config = SelectorConfig::from_plugin_conf(&PluginConf::parse(conf.as_bytes()).unwrap()).unwrap();
    let Ok(selection) = choose::select(&config, "eth0", Some(("default", "web-0")), None, Some(&Annotated(pod))) else {
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
