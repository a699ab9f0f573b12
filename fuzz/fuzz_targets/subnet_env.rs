//! The fabric daemon's subnet.env, then delegate generation from it for a fixed netconf on both
//! platforms. Must never panic, whatever the file holds.
#![no_main]
use libfuzzer_sys::fuzz_target;
use yh_genie::platform::cni::PluginConf;
use yh_genie::programs::plugins::yonghui::config::NetConf;
use yh_genie::programs::plugins::yonghui::delegate::{self, Platform};
use yh_genie::programs::plugins::yonghui::subnet_env::SubnetEnv;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(env) = SubnetEnv::parse(text, "fuzz") else { return };
    let conf = PluginConf::parse(
        br#"{"cniVersion":"1.0.0","name":"n","type":"yonghui","ipam":{"routes":[{"dst":"10.96.0.0/12"}]},"delegate":{"type":"win-overlay"}}"#,
    )
    .unwrap();
    let conf = NetConf::from_plugin_conf(&conf).unwrap();
    for platform in [Platform::Linux, Platform::Windows] {
        let _ = delegate::generate(&conf, &env, platform);
    }
});
