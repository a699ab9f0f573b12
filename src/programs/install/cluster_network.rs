//! The cluster's own network when `defaultNetwork` reads it in place (a file directly in the conf
//! dir, such as `10-calico.conflist`, or `auto`): what the installer needs of it. The capabilities
//! its plugins declare go into `00-yh-genie.conflist`, so that the runtime hands their values
//! (hostPorts, bandwidth...) to the selector, which passes them on as the runtime did before. It is
//! ready when its file parses and every plugin it names is in the bin dir: such networks declare
//! CNI 0.3.1 and have no STATUS to ask.

use super::options::Options;
use crate::platform::cni::exec::find_plugin;
use crate::programs::selector::netconf::confdir;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// What the installer found of the cluster's network.
#[derive(Debug, Default, PartialEq)]
pub struct InPlace {
    /// The capabilities its plugins declare `true`, by name.
    pub capabilities: Vec<String>,
    /// Why it cannot network a pod yet; `None` when it can.
    pub not_ready: Option<String>,
}

/// The cluster's network `defaultNetwork` (the flag, else the selector config's key) reads in
/// place; `None` when it names a network directory or nothing.
pub fn read(opts: &Options, extra: &Map<String, Value>) -> Option<InPlace> {
    let value = opts.default_network.clone().or_else(|| extra.get("defaultNetwork")?.as_str().map(str::to_string))?;
    let conf_dir = opts.on_host(&opts.conf_dir);
    let not_ready = |why: String| Some(InPlace { capabilities: Vec::new(), not_ready: Some(why) });
    let file = match confdir::resolve_in_place(&conf_dir, &value)? {
        Ok(file) => file,
        Err(e) => return not_ready(e.msg),
    };
    let list = match confdir::load(&file) {
        Ok((_, list)) => list,
        Err(e) => return not_ready(e.msg),
    };
    let capabilities: BTreeSet<String> = list
        .plugins
        .iter()
        .filter_map(|plugin| plugin.get("capabilities")?.as_object())
        .flat_map(|caps| caps.iter().filter(|(_, on)| on.as_bool() == Some(true)).map(|(name, _)| name.clone()))
        .collect();
    let bin_dir = [opts.on_host(&opts.bin_dir)];
    let missing: Vec<String> = confdir::plugin_types(&list)
        .into_iter()
        .filter(|(_, plugin)| find_plugin(plugin, &bin_dir).is_err())
        .map(|(at, plugin)| format!("{plugin} ({at})"))
        .collect();
    let not_ready = (!missing.is_empty()).then(|| {
        format!(
            "the default network {} names plugins that are not in {}: {}",
            file.path.display(),
            opts.bin_dir.display(),
            missing.join(", ")
        )
    });
    Some(InPlace { capabilities: capabilities.into_iter().collect(), not_ready })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// kind's kindnet conflist, as kindnetd writes it.
    const KINDNET: &str = r#"{"cniVersion":"0.3.1","name":"kindnet","plugins":[
        {"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.0.0/24"}]]},"mtu":1500},
        {"type":"portmap","capabilities":{"portMappings":true}},
        {"type":"bandwidth","capabilities":{"bandwidth":true,"futureThing":true,"off":false}}]}"#;

    /// A host root with kindnet's conflist and the plugins in `installed` in the bin dir.
    fn host(installed: &[&str]) -> (tempfile::TempDir, Options) {
        let root = tempfile::tempdir().unwrap();
        let opts = Options { host_root: root.path().into(), ..Options::standard() };
        let (conf, bin) = (opts.on_host(&opts.conf_dir), opts.on_host(&opts.bin_dir));
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(conf.join("10-kindnet.conflist"), KINDNET).unwrap();
        for plugin in installed {
            std::fs::write(bin.join(plugin), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(bin.join(plugin), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        (root, opts)
    }

    fn default_network(value: &str) -> Map<String, Value> {
        let mut extra = Map::new();
        extra.insert("defaultNetwork".into(), value.into());
        extra
    }

    #[test]
    fn the_networks_capabilities_are_declared_and_it_is_ready_with_its_plugins() {
        let (_root, opts) = host(&["ptp", "host-local", "portmap", "bandwidth"]);
        let found = read(&opts, &default_network("auto")).unwrap();
        let want = ["bandwidth", "futureThing", "portMappings"].map(String::from).to_vec();
        assert_eq!(found, InPlace { capabilities: want.clone(), not_ready: None });
        let conflist: Value =
            serde_json::from_slice(&super::super::conflist::render(&opts, Map::new(), &want)).unwrap();
        let declared = &conflist["plugins"][0]["capabilities"];
        for capability in ["portMappings", "bandwidth", "futureThing", "dns"] {
            assert_eq!(declared[capability], true, "{capability}");
        }
        assert_eq!(declared.get("off"), None);
    }

    #[test]
    fn it_is_not_ready_naming_the_missing_plugins_or_the_missing_file() {
        let (_root, opts) = host(&["ptp", "portmap", "bandwidth"]);
        let by_flag = Options { default_network: Some("10-kindnet.conflist".into()), ..opts.clone() };
        let why = read(&by_flag, &Map::new()).unwrap().not_ready.unwrap();
        assert!(why.contains("host-local (plugins[0].ipam.type)") && why.contains("/opt/cni/bin"), "{why}");
        let why = read(&opts, &default_network("20-flannel.conflist")).unwrap().not_ready.unwrap();
        assert!(why.contains("20-flannel.conflist"), "{why}");
        std::fs::write(opts.on_host(&opts.conf_dir).join("10-kindnet.conflist"), "{ half").unwrap();
        assert!(read(&opts, &default_network("auto")).unwrap().not_ready.is_some());
    }

    #[test]
    fn a_network_directory_or_no_default_is_not_read_in_place() {
        let (_root, opts) = host(&[]);
        assert_eq!(read(&opts, &default_network("yonghui")), None);
        assert_eq!(read(&opts, &Map::new()), None);
    }
}
