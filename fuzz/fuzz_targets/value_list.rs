//! A pod's `CNI_NETWORK_CONFIG` value read as a list of networks (`a,b@net1`, a JSON array, or one
//! of the single-network forms), and each element resolved against a real conf dir. Must never
//! panic; every element it accepts has text, and every interface name it accepts is a valid one.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;
use yh_genie::cni::env::validate_ifname;
use yh_genie::selector::netconf::confdir;
use yh_genie::selector::requests::value;

/// A conf dir with one network, `blue`, and a link that leads outside it.
fn conf_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("yh-genie-fuzz-values-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("blue")).unwrap();
        std::fs::write(
            dir.join("blue/blue.conflist"),
            r#"{"cniVersion":"1.0.0","name":"blue","plugins":[{"type":"bridge"}]}"#,
        )
        .unwrap();
        let _ = std::os::unix::fs::symlink("/etc", dir.join("escape"));
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(elements) = value::parse(text) {
        assert!(!elements.is_empty());
        for element in &elements {
            assert!(!element.text.is_empty());
            if let Some(ifname) = &element.ifname {
                assert!(validate_ifname(ifname).is_ok(), "{ifname:?}");
            }
            let _ = confdir::resolve(conf_dir(), &element.name);
        }
    }
    if let Some(single) = value::legacy_single(text) {
        let _ = confdir::resolve(conf_dir(), &single);
    }
});
