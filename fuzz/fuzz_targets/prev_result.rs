//! A previous plugin's result in any version. Must never panic; what parses must convert to every
//! version and parse back with the same addresses.
#![no_main]
use libfuzzer_sys::fuzz_target;
use yh_genie::cni::{CniResult, CniVersion};

fuzz_target!(|data: &[u8]| {
    let Ok(result) = CniResult::from_slice(data) else { return };
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let v = CniVersion::parse(v).unwrap();
        let back = CniResult::from_json(&result.to_json(v)).expect("a printed result reparses");
        assert_eq!(back.ips, result.ips);
    }
});
