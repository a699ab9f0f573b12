//! A plugin's stdin and a network file: `.conf` and `.conflist` shapes, then stdin building for
//! every plugin of a list that parsed. Must never panic, whatever the bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use yh_genie::platform::cni::{ConfList, PluginConf};

fuzz_target!(|data: &[u8]| {
    if let Ok(conf) = PluginConf::parse(data) {
        let _ = conf.prev_result();
        let _ = conf.to_bytes();
    }
    for is_list in [false, true] {
        if let Ok(list) = ConfList::parse(data, is_list, "fuzz") {
            for i in 0..list.plugins.len() {
                let _ = list.plugin_stdin(i, None);
            }
        }
    }
});
