//! The pod annotation `k8s.v1.cni.cncf.io/networks` (text and JSON forms) and what a
//! NetworkAttachmentDefinition's `spec.config` holds: parsed, then a whole selection made from a pod
//! carrying the annotation, every NAD answering with the same bytes as its inline configuration
//! (inline configurations allowed, so that they are parsed and checked). Must never panic.
#![no_main]
use k8s_openapi::api::core::v1::Pod;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;
use support::{Nads, Objects, selector_config};
use yh_genie::platform::cni::env::validate_ifname;
use yh_genie::programs::selector::choose;
use yh_genie::programs::selector::requests::annotation::{self, NETWORKS};

mod support;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data).into_owned();
    if let Ok(requests) = annotation::parse(&text) {
        for request in &requests {
            assert!(!request.name.is_empty());
            if let Some(ifname) = &request.ifname {
                assert!(validate_ifname(ifname).is_ok(), "{ifname:?}");
            }
        }
    }
    let mut pod = Pod::default();
    pod.metadata.annotations = Some(BTreeMap::from([(NETWORKS.to_string(), text.clone())]));
    let objects = Objects { pod, config_map: None, nads: Nads::Inline(text) };
    let config = selector_config(r#""allowInlineConfig":true"#);
    let _ = choose::select(&config, "eth0", Some(("default", "web-0")), None, Some(&objects));
});
