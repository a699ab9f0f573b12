//! A pod's `CNI_NETWORK_CONFIG` value read as a list of networks (`a,b@net1`, a JSON array, or one
//! of the single-network forms), and each element resolved against a real conf dir. Must never
//! panic; every element it accepts has text, and every interface name it accepts is a valid one.
#![no_main]
use libfuzzer_sys::fuzz_target;
use support::conf_dir;
use yh_genie::platform::cni::env::validate_ifname;
use yh_genie::programs::selector::netconf::confdir;
use yh_genie::programs::selector::requests::value;

mod support;

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
