//! `CNI_ARGS` as the runtime sends it. Must never panic; what parses must print back and reparse equal.
#![no_main]
use libfuzzer_sys::fuzz_target;
use yh_genie::platform::cni::CniArgs;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(args) = CniArgs::parse(s) {
        let again = CniArgs::parse(&args.to_env_string()).expect("printed args reparse");
        assert_eq!(args.pod(), again.pod());
    }
});
