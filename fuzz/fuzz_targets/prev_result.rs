//! A previous plugin's result in any version, read as a config of the newest and of the oldest
//! version would read it. Must never panic; what parses must print in every version (0.1.0/0.2.0
//! only with an address) and parse back with the same addresses (in 0.1.0/0.2.0: the first of
//! each family, with its gateway).
#![no_main]
use libfuzzer_sys::fuzz_target;
use yh_genie::platform::cni::{CniResult, CniVersion};

fuzz_target!(|data: &[u8]| {
    for assumed in [CniVersion::LATEST, CniVersion::V0_1_0] {
        let Ok(result) = CniResult::from_slice(data, assumed) else { continue };
        for v in CniVersion::ALL {
            let printed = match result.to_json(v) {
                Ok(printed) => printed,
                Err(_) => {
                    assert!(v.has_ip4_ip6_result() && result.ips.is_empty(), "only an address-less 0.2.0 fails");
                    continue;
                }
            };
            let back = CniResult::from_json(&printed, CniVersion::LATEST).expect("a printed result reparses");
            if v.has_ip4_ip6_result() {
                let first = |v4: bool| result.ips.iter().find(|ip| ip.address.is_ipv4() == v4);
                let kept: Vec<_> =
                    [first(true), first(false)].into_iter().flatten().map(|ip| (ip.address, ip.gateway)).collect();
                assert_eq!(back.ips.iter().map(|ip| (ip.address, ip.gateway)).collect::<Vec<_>>(), kept);
            } else {
                assert_eq!(back.ips, result.ips);
            }
        }
    }
});
