//! What the API server sends and what ConfigMaps hold: a pod object (as JSON) whose containers'
//! `CNI_NETWORK_CONFIG` names a network literally or through a ConfigMap, and the ConfigMap values
//! themselves, resolved against a real conf dir. Must never panic, whatever the objects hold.
#![no_main]
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use libfuzzer_sys::fuzz_target;
use support::{Nads, Objects, conf_dir, selector_config};
use yh_genie::programs::selector::choose;
use yh_genie::programs::selector::netconf::confdir::{self, NetworkName};

mod support;

fuzz_target!(|data: &[u8]| {
    let dir = conf_dir();
    if let Ok(value) = std::str::from_utf8(data)
        && let Ok(name) = NetworkName::parse(value)
    {
        let _ = confdir::resolve(dir, &name);
    }
    let Ok(pod) = serde_json::from_slice::<Pod>(data) else { return };
    let config_map = ConfigMap {
        data: Some([("net".to_string(), String::from_utf8_lossy(data).into_owned())].into()),
        ..Default::default()
    };
    let objects = Objects { pod, config_map: Some(config_map), nads: Nads::Absent };
    let _ = choose::select(&selector_config(""), "eth0", Some(("default", "web-0")), None, Some(&objects));
});
