//! Handing an attachment's device to its plugins, as the SR-IOV device plugin and CNIs expect from
//! Multus:
//!
//! - `deviceID` and `pciBusID` (the same value) in every plugin of the configuration, replacing any
//!   key of those names in whatever case (Go plugins read keys case-insensitively, so a key the
//!   NetworkAttachmentDefinition's author wrote as `deviceid` must not survive beside ours);
//! - `runtimeConfig.deviceID` and `runtimeConfig.CNIDeviceInfoFile` for the plugins that declare
//!   those capabilities, as libcni gives capability arguments;
//! - the device-info file: the device plugin writes `<dir>/dp/<resource>-<device>-device.json`
//!   when it allocates; before the CNI runs it is copied to the attachment's own
//!   `<dir>/cni/<network>-<container>_<interface>` (the `CNIDeviceInfoFile`), which the CNI may
//!   complete, and which becomes the attachment's `device-info` in the network-status annotation.
//!   DEL removes the attachment's file; the device plugin's is the device plugin's.
//!
//! `<dir>` is `/var/run/k8s.cni.cncf.io/devinfo` (`DEVICE_INFO_DIR`), with `/` in names as `-`.

use super::Device;
use serde_json::{Map, Value};
use std::io;
use std::path::{Path, PathBuf};

/// Where device plugins and device CNIs keep device-info files.
pub const DEVICE_INFO_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo";

/// The keys every plugin of a device attachment gets, with the device's ID.
const DEVICE_KEYS: [&str; 2] = ["deviceID", "pciBusID"];
/// The capability arguments a device attachment's plugins get when they declare them.
const CAPABILITY_DEVICE_ID: &str = "deviceID";
const CAPABILITY_INFO_FILE: &str = "CNIDeviceInfoFile";

fn file_name(name: &str) -> String {
    name.replace('/', "-")
}

/// The device plugin's device-info file of `id` of `resource`.
pub fn plugin_info_file(dir: &Path, resource: &str, id: &str) -> PathBuf {
    dir.join("dp").join(format!("{}-{}-device.json", file_name(resource), file_name(id)))
}

/// The device-info file of one attachment: its network (the configuration's `name`), the
/// container and the interface.
pub fn attachment_info_file(dir: &Path, network: &str, container_id: &str, ifname: &str) -> PathBuf {
    dir.join("cni").join(file_name(&format!("{network}-{container_id}_{ifname}")))
}

/// `config` (a plugin's configuration or a conflist, parsed before: a JSON object) with `device`
/// given to every plugin. Unchanged when it is not a JSON object.
pub fn apply_to_config(config: &str, device: &Device) -> String {
    let Ok(Value::Object(mut top)) = serde_json::from_str::<Value>(config) else {
        return config.to_string();
    };
    match top.get_mut("plugins") {
        Some(Value::Array(plugins)) => {
            for plugin in plugins.iter_mut().filter_map(Value::as_object_mut) {
                apply_to_plugin(plugin, device);
            }
        }
        _ => apply_to_plugin(&mut top, device),
    }
    Value::Object(top).to_string()
}

fn apply_to_plugin(plugin: &mut Map<String, Value>, device: &Device) {
    plugin.retain(|key, _| !DEVICE_KEYS.iter().any(|k| k.eq_ignore_ascii_case(key)));
    for key in DEVICE_KEYS {
        plugin.insert(key.to_string(), Value::String(device.id.clone()));
    }
    let declares =
        |name: &str| plugin.get("capabilities").and_then(|c| c.get(name)).and_then(Value::as_bool).unwrap_or(false);
    let mut runtime = Map::new();
    if declares(CAPABILITY_DEVICE_ID) {
        runtime.insert(CAPABILITY_DEVICE_ID.to_string(), Value::String(device.id.clone()));
    }
    if let (true, Some(file)) = (declares(CAPABILITY_INFO_FILE), &device.info_file) {
        runtime.insert(CAPABILITY_INFO_FILE.to_string(), Value::String(file.display().to_string()));
    }
    if !runtime.is_empty() {
        let entry = plugin.entry("runtimeConfig").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(existing) = entry {
            existing.extend(runtime);
        }
    }
}

/// Copies the device plugin's device-info file of `device` to the attachment's, written whole
/// (a retried ADD overwrites what the first left). `Ok(false)`: the device plugin wrote none,
/// which is not an error (not every device plugin writes one).
pub fn copy_plugin_info(dir: &Path, device: &Device) -> io::Result<bool> {
    let Some(to) = &device.info_file else { return Ok(false) };
    let bytes = match std::fs::read(plugin_info_file(dir, &device.resource, &device.id)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    crate::platform::durable::write_atomic(to, &bytes, 0o444)?;
    Ok(true)
}

/// The attachment's device-info, as its CNI left it, for the network-status annotation: `None`
/// when there is no file or it is not a JSON object.
pub fn read_info(device: &Device) -> Option<Value> {
    let bytes = std::fs::read(device.info_file.as_ref()?).ok()?;
    serde_json::from_slice::<Value>(&bytes).ok().filter(Value::is_object)
}

/// Removes the attachment's device-info file (DEL); absent is done.
pub fn remove_info(device: &Device) -> io::Result<()> {
    match device.info_file.as_ref().map(std::fs::remove_file) {
        Some(Err(e)) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn device(info_file: Option<&Path>) -> Device {
        Device {
            resource: "intel.com/sriov".into(),
            id: "0000:03:00.2".into(),
            info_file: info_file.map(PathBuf::from),
        }
    }

    /// An SR-IOV list (the author's device keys cased otherwise, two capabilities declared) and a
    /// tuning plugin, given the device with its info file.
    fn sriov_list_given_the_device() -> Value {
        let config = json!({"cniVersion": "1.0.0", "name": "sriov-net", "plugins": [
            {"type": "sriov", "deviceid": "0000:81:00.1", "PCIBUSID": "x",
             "capabilities": {"CNIDeviceInfoFile": true, "deviceID": true}},
            {"type": "tuning", "runtimeConfig": {"mac": "02:00:00:00:00:01"}}]});
        let file = Path::new("/run/devinfo/cni/sriov-net-c1_net1");
        serde_json::from_str(&apply_to_config(&config.to_string(), &device(Some(file)))).unwrap()
    }

    /// A single plugin's configuration, given the device without an info file.
    fn single_plugin_given_the_device() -> Value {
        let single = json!({"cniVersion": "0.4.0", "name": "n", "type": "host-device"}).to_string();
        serde_json::from_str(&apply_to_config(&single, &device(None))).unwrap()
    }

    #[test]
    fn every_plugin_gets_the_device() {
        let out = sriov_list_given_the_device();
        let sriov = out["plugins"][0].as_object().unwrap();
        // The author's differently-cased keys are gone: a Go plugin would have read them.
        let device_keys: Vec<&str> = sriov
            .keys()
            .filter(|k| k.eq_ignore_ascii_case("deviceid") || k.eq_ignore_ascii_case("pcibusid"))
            .map(String::as_str)
            .collect();
        assert_eq!(device_keys, ["deviceID", "pciBusID"]);
        assert_eq!(sriov["deviceID"], "0000:03:00.2");
        assert_eq!(sriov["pciBusID"], "0000:03:00.2");
        assert_eq!(out["plugins"][1]["deviceID"], "0000:03:00.2");
        assert_eq!(single_plugin_given_the_device()["deviceID"], "0000:03:00.2");
    }

    #[test]
    fn only_plugins_declaring_a_device_capability_get_it_in_runtime_config() {
        let out = sriov_list_given_the_device();
        assert_eq!(
            out["plugins"][0]["runtimeConfig"],
            json!({"deviceID": "0000:03:00.2", "CNIDeviceInfoFile": "/run/devinfo/cni/sriov-net-c1_net1"})
        );
        assert_eq!(out["plugins"][1]["runtimeConfig"], json!({"mac": "02:00:00:00:00:01"}));
        assert_eq!(single_plugin_given_the_device().get("runtimeConfig"), None);
    }

    #[test]
    fn the_device_plugins_info_is_copied_per_attachment() {
        let dir = tempfile::tempdir().unwrap();
        let info_file = attachment_info_file(dir.path(), "web/sriov-net", "c1", "net1");
        assert_eq!(info_file, dir.path().join("cni/web-sriov-net-c1_net1"));
        let device = device(Some(&info_file));
        // No file from the device plugin: nothing to copy, not an error.
        assert!(!copy_plugin_info(dir.path(), &device).unwrap());
        assert_eq!(read_info(&device), None);
        let plugin_file = plugin_info_file(dir.path(), "intel.com/sriov", "0000:03:00.2");
        assert_eq!(plugin_file, dir.path().join("dp/intel.com-sriov-0000:03:00.2-device.json"));
        std::fs::create_dir_all(plugin_file.parent().unwrap()).unwrap();
        let info = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:03:00.2"}});
        std::fs::write(&plugin_file, info.to_string()).unwrap();
        assert!(copy_plugin_info(dir.path(), &device).unwrap());
        // A retried ADD finds the file there and writes it again.
        assert!(copy_plugin_info(dir.path(), &device).unwrap());
        assert_eq!(read_info(&device), Some(info));
    }

    #[test]
    fn del_removes_the_attachments_copy_only() {
        let dir = tempfile::tempdir().unwrap();
        let info_file = attachment_info_file(dir.path(), "web/sriov-net", "c1", "net1");
        let device = device(Some(&info_file));
        let plugin_file = plugin_info_file(dir.path(), "intel.com/sriov", "0000:03:00.2");
        std::fs::create_dir_all(plugin_file.parent().unwrap()).unwrap();
        std::fs::write(&plugin_file, "{}").unwrap();
        assert!(copy_plugin_info(dir.path(), &device).unwrap());
        remove_info(&device).unwrap();
        assert!(!info_file.exists());
        assert!(plugin_file.exists(), "the device plugin's file is the device plugin's");
        remove_info(&device).unwrap();
    }
}
