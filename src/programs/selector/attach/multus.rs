//! The pods Multus attached, on a node that has moved to yh-genie: their DEL.
//!
//! Multus (thin and thick alike) keeps, per sandbox, the list of the pod's delegates in
//! `<cniDir>/<containerID>` (a JSON array: each delegate's configuration in `Bytes`, base64, its
//! interface in `ifnameRequest`; the first is on the runtime's interface, the others without a
//! request on `net<position>`), and runs each delegate through libcni with `cniDir` as libcni's
//! cache, which keeps what each ADD was given and returned in
//! `<cniDir>/results/<network>-<containerID>-<ifname>`. The runtime's DEL of such a pod finds no
//! record of yh-genie's; it DELs the delegates from those files, in reverse, as Multus's own DEL
//! would (the configuration, capability arguments, `CNI_ARGS` and `prevResult` of the ADD), so the
//! pod's addresses and host state are released without Multus on the node. The files go once every
//! delegate is DELeted.

use super::call::delegate_call;
use super::chain;
use crate::platform::cni::{CniArgs, CniError, CniResult, ConfList, Invocation};
use crate::programs::selector::config::SelectorConfig;
use crate::programs::selector::netconf::{capabilities, confdir, inline};
use crate::programs::selector::requests::value;
use base64::Engine;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// One delegate of Multus's cache, as far as its DEL needs it (`DelegateNetConf` in Multus).
#[derive(Debug, Deserialize)]
struct CachedDelegate {
    /// Set when the delegate is a conflist (`ConfList.plugins`).
    #[serde(rename = "ConfList", default)]
    conf_list: Option<Value>,
    #[serde(rename = "ifnameRequest", default)]
    ifname_request: Option<String>,
    /// The delegate's configuration as its ADD ran it (JSON, base64 as Go writes a byte slice).
    #[serde(rename = "Bytes")]
    bytes: String,
}

/// What libcni cached of one ADD (its `cniCacheV1`).
#[derive(Debug, Deserialize)]
struct CachedResult {
    /// The configuration the ADD ran (base64).
    #[serde(default)]
    config: Option<String>,
    #[serde(rename = "cniArgs", default)]
    cni_args: Option<Vec<[String; 2]>>,
    #[serde(rename = "capabilityArgs", default)]
    capability_args: Option<Map<String, Value>>,
    #[serde(default)]
    result: Option<Value>,
}

/// One of the pod's attachments as Multus made it, ready to be DELeted.
#[derive(Debug)]
pub struct MultusAttachment {
    pub ifname: String,
    pub list: ConfList,
    call: Invocation,
    prev: Option<CniResult>,
    /// libcni's cache of its ADD, if there is one: the ADD completed.
    result_file: Option<PathBuf>,
}

/// The pod of `runtime`'s sandbox as Multus attached it: `None` when Multus left nothing for it.
/// A cache that cannot be read or parsed is code 5 or 6 naming the file.
pub fn attachments(runtime: &Invocation, config: &SelectorConfig) -> Result<Option<Vec<MultusAttachment>>, CniError> {
    let Some(dir) = &config.multus_dir else { return Ok(None) };
    let path = dir.join(&runtime.container_id);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CniError::io(format!("cannot read Multus's cache {}: {e}", path.display()))),
    };
    let bad = |why: String| CniError::decode(format!("Multus's cache {}: {why}", path.display()));
    let delegates: Vec<CachedDelegate> =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not a list of Multus delegates: {e}")))?;
    delegates
        .iter()
        .enumerate()
        .map(|(position, delegate)| attachment(runtime, config, dir, position, delegate).map_err(bad))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn attachment(
    runtime: &Invocation,
    config: &SelectorConfig,
    dir: &Path,
    position: usize,
    delegate: &CachedDelegate,
) -> Result<MultusAttachment, String> {
    // Multus's getIfname: the request, else the runtime's for the first, else net<position>.
    // A requested name is a pod author's (the networks annotation): held to the rules every name a
    // pod writes is held to, before it names a file or an interface.
    let ifname = match delegate.ifname_request.as_deref().filter(|i| !i.is_empty()) {
        Some(asked) => value::interface(asked).map_err(|why| format!("delegate {position}: {why}"))?,
        None if position == 0 => runtime.ifname.clone(),
        None => format!("net{position}"),
    };
    let origin = format!("delegate {position} ({ifname})");
    let decode = |text: &str| {
        base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| format!("{origin}: not base64: {e}"))
    };
    let is_list = delegate
        .conf_list
        .as_ref()
        .and_then(|l| l.get("plugins"))
        .and_then(Value::as_array)
        .is_some_and(|p| !p.is_empty());
    let mut conf_bytes = decode(&delegate.bytes)?;
    let name = ConfList::parse(&conf_bytes, is_list, &origin).map_err(|e| e.msg)?.name;
    let cached = inline::valid_network_name(&name)
        .then(|| dir.join("results").join(format!("{name}-{}-{ifname}", runtime.container_id)))
        .and_then(|file| Some((std::fs::read(&file).ok()?, file)));
    let mut args = runtime.args.clone();
    let mut capability_args = if position == 0 { config.capability_args.clone() } else { Map::new() };
    let mut prev_json = None;
    let mut result_file = None;
    if let Some((bytes, file)) = cached {
        let what: CachedResult = serde_json::from_slice(&bytes)
            .map_err(|e| format!("libcni's cache {} does not parse: {e}", file.display()))?;
        if let Some(config) = &what.config {
            conf_bytes = decode(config)?;
        }
        if let Some(pairs) = &what.cni_args {
            let text: Vec<String> = pairs.iter().map(|[k, v]| format!("{k}={v}")).collect();
            args = CniArgs::parse(&text.join(";")).map_err(|e| format!("{}: {}", file.display(), e.msg))?;
        }
        if let Some(cached_args) = what.capability_args {
            capability_args = cached_args;
        }
        prev_json = what.result;
        result_file = Some(file);
    }
    let conf_text = String::from_utf8(conf_bytes).map_err(|e| format!("{origin}: not UTF-8: {e}"))?;
    let conf_text = capabilities::inject(&conf_text, &capability_args);
    let list = ConfList::parse(conf_text.as_bytes(), is_list, &origin).map_err(|e| e.msg)?;
    for (at, t) in confdir::plugin_types(&list) {
        inline::check_type_name(&at, &t, &origin).map_err(|e| e.msg)?;
    }
    // libcni gives DEL the cached result from 0.4.0 on.
    let prev = match prev_json {
        Some(result) if list.cni_version.has_check() => Some(
            CniResult::from_json(&result, list.cni_version)
                .map_err(|e| format!("{origin}: cached result: {}", e.msg))?,
        ),
        _ => None,
    };
    Ok(MultusAttachment {
        ifname: ifname.clone(),
        call: delegate_call(runtime, config, &ifname, args),
        list,
        prev,
        result_file,
    })
}

/// DEL every attachment in reverse, all of them even if one fails. A failure counts unless the
/// attachment's ADD never completed (libcni cached no result) and nothing of it is in the pod's
/// netns; then Multus's files go. Otherwise they stay for the runtime's next DEL.
pub fn del(runtime: &Invocation, config: &SelectorConfig, attachments: &[MultusAttachment]) -> Result<(), CniError> {
    let mut first_error = None;
    for a in attachments.iter().rev() {
        if let Err(e) = chain::del(&a.list, &a.call, a.prev.as_ref()) {
            let e = e.context(format!("network {} on interface {} (attached by Multus)", a.list.name, a.ifname));
            let forgettable = a.result_file.is_none()
                && super::settle::forgettable_without_record(runtime.netns.as_deref(), &a.ifname, &a.list.name, &e);
            if !forgettable {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let dir = config.multus_dir.as_deref().expect("attachments were read from it");
    let files = attachments.iter().filter_map(|a| a.result_file.clone()).chain([dir.join(&runtime.container_id)]);
    for file in files {
        if let Err(e) = std::fs::remove_file(&file)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("cannot remove Multus's cache {}: {e}", file.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::{Command, PluginConf};
    use serde_json::json;

    fn b64(v: &Value) -> String {
        base64::engine::general_purpose::STANDARD.encode(v.to_string())
    }

    /// A node as Multus leaves it for sandbox `c1`: three delegates (the cluster network, a conflist
    /// of two plugins; a single-plugin NAD on net1 by position; one on the interface it asked for),
    /// and libcni's cache of the first's ADD. Every plugin is a script logging its call.
    struct MultusNode {
        dir: tempfile::TempDir,
        config: SelectorConfig,
    }

    impl MultusNode {
        fn new(second_plugin: &str) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let bin = dir.path().join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            let log = dir.path().join("calls.log");
            for name in ["ptp", "portmap", "macvlan"] {
                crate::platform::cni::testing::script(
                    &bin,
                    name,
                    &format!(
                        "{{ echo \"$CNI_COMMAND $CNI_IFNAME {name} $CNI_ARGS\"; cat; echo; }} >>{}",
                        log.display()
                    ),
                );
            }
            crate::platform::cni::testing::script(&bin, "failing", "echo '{\"code\":11,\"msg\":\"no\"}'; exit 1");
            let cluster = json!({"cniVersion": "1.0.0", "name": "cbr0", "plugins": [
                {"type": "ptp"}, {"type": second_plugin, "capabilities": {"portMappings": true}}]});
            let lan = json!({"cniVersion": "1.0.0", "name": "lan", "type": "macvlan"});
            let multus = dir.path().join("multus");
            std::fs::create_dir_all(multus.join("results")).unwrap();
            let delegates = json!([
                {"Conf": {}, "ConfList": cluster, "Name": "cbr0", "Bytes": b64(&cluster),
                 "IsFilterV4Gateway": false, "IsFilterV6Gateway": false},
                {"Conf": lan, "ConfList": {"plugins": null}, "Name": "default/lan", "Bytes": b64(&lan),
                 "IsFilterV4Gateway": false, "IsFilterV6Gateway": false},
                {"Conf": lan, "ConfList": {"plugins": null}, "Name": "default/lan", "ifnameRequest": "lan0",
                 "Bytes": b64(&lan), "IsFilterV4Gateway": false, "IsFilterV6Gateway": false}
            ]);
            std::fs::write(multus.join("c1"), delegates.to_string()).unwrap();
            let cached = json!({"kind": "cniCacheV1", "containerId": "c1", "config": b64(&cluster), "ifName": "eth0",
                "networkName": "cbr0", "cniArgs": [["IgnoreUnknown", "1"], ["K8S_POD_NAME", "web-0"]],
                "capabilityArgs": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
                "result": {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/run/netns/pod"}],
                           "ips": [{"address": "10.244.1.5/24", "interface": 0}]}});
            std::fs::write(multus.join("results/cbr0-c1-eth0"), cached.to_string()).unwrap();
            let conf = json!({"cniVersion": "1.0.0", "name": "yh-genie", "type": "yh-genie",
                "binDir": bin, "cniDir": multus});
            let config = SelectorConfig::from_plugin_conf(&PluginConf::from_value(conf).unwrap()).unwrap();
            MultusNode { dir, config }
        }

        fn runtime(&self) -> Invocation {
            crate::platform::cni::testing::invocation(Command::Del, &self.dir.path().join("empty"))
        }

        fn calls(&self) -> String {
            std::fs::read_to_string(self.dir.path().join("calls.log")).unwrap_or_default()
        }

        fn multus_files(&self) -> Vec<String> {
            let mut files = Vec::new();
            for sub in ["", "results"] {
                for e in std::fs::read_dir(self.dir.path().join("multus").join(sub)).unwrap() {
                    let e = e.unwrap();
                    if e.file_type().unwrap().is_file() {
                        files.push(format!("{sub}/{}", e.file_name().to_string_lossy()));
                    }
                }
            }
            files.sort();
            files
        }
    }

    #[test]
    fn multus_delegates_are_deleted_in_reverse_from_its_cache_as_its_add_ran_them() {
        let node = MultusNode::new("portmap");
        let runtime = node.runtime();
        let attached = attachments(&runtime, &node.config).unwrap().expect("Multus's cache of c1");
        let ifnames: Vec<&str> = attached.iter().map(|a| a.ifname.as_str()).collect();
        assert_eq!(ifnames, ["eth0", "net1", "lan0"], "the runtime's, by position, as asked");
        del(&runtime, &node.config, &attached).unwrap();
        let calls = node.calls();
        let order: Vec<&str> = calls.lines().filter(|l| l.starts_with("DEL ")).collect();
        assert_eq!(order.len(), 4, "{calls}");
        assert!(order[0].starts_with("DEL lan0 macvlan") && order[1].starts_with("DEL net1 macvlan"), "{calls}");
        assert!(order[2].starts_with("DEL eth0 portmap") && order[3].starts_with("DEL eth0 ptp"), "{calls}");
        // The cluster network's DEL gets what its ADD had: the CNI_ARGS, the capability arguments
        // (to the plugin declaring them) and the result as prevResult.
        assert!(order[2].ends_with("IgnoreUnknown=1;K8S_POD_NAME=web-0"), "{calls}");
        let portmap: Value = serde_json::from_str(calls.lines().nth(5).unwrap()).unwrap();
        assert_eq!(portmap["runtimeConfig"]["portMappings"][0]["hostPort"], 8080, "{portmap}");
        assert_eq!(portmap["prevResult"]["ips"][0]["address"], "10.244.1.5/24", "{portmap}");
        // Multus's files go once every delegate is DELeted.
        assert!(node.multus_files().is_empty(), "{:?}", node.multus_files());
        assert!(attachments(&runtime, &node.config).unwrap().is_none());
    }

    #[test]
    fn a_failed_del_of_a_completed_add_keeps_multus_files_for_the_next_del() {
        let node = MultusNode::new("failing");
        let runtime = node.runtime();
        let attached = attachments(&runtime, &node.config).unwrap().unwrap();
        let e = del(&runtime, &node.config, &attached).unwrap_err();
        assert!(e.msg.contains("network cbr0 on interface eth0 (attached by Multus)"), "{e}");
        assert_eq!(node.multus_files(), ["/c1", "results/cbr0-c1-eth0"]);
        // The others were DELeted all the same (DEL is idempotent: the next one does them again).
        assert_eq!(node.calls().lines().filter(|l| l.starts_with("DEL ")).count(), 3, "{}", node.calls());
    }

    #[test]
    fn without_a_multus_cache_a_container_has_no_multus_attachments() {
        let node = MultusNode::new("portmap");
        let mut runtime = node.runtime();
        runtime.container_id = "c2".into();
        assert!(attachments(&runtime, &node.config).unwrap().is_none(), "no cache: nothing of Multus's");
    }

    #[test]
    fn a_multus_cache_naming_what_a_pod_may_not_is_refused() {
        let node = MultusNode::new("portmap");
        let mut runtime = node.runtime();
        runtime.container_id = "c2".into();
        let multus = node.dir.path().join("multus");
        let bad = json!([{"ConfList": {}, "Bytes": b64(&json!({"cniVersion": "1.0.0", "name": "x", "type": "../../bin/sh"}))}]);
        std::fs::write(multus.join("c2"), bad.to_string()).unwrap();
        let e = attachments(&runtime, &node.config).unwrap_err();
        assert!(e.msg.contains("Multus's cache") && e.msg.contains("not a plugin name"), "{e}");
        let bad = json!([{"ConfList": {}, "Bytes": b64(&json!({"name": "x", "type": "macvlan"}))},
                         {"ConfList": {}, "ifnameRequest": "../x", "Bytes": b64(&json!({"name": "x", "type": "macvlan"}))}]);
        std::fs::write(multus.join("c2"), bad.to_string()).unwrap();
        let e = attachments(&runtime, &node.config).unwrap_err();
        assert!(e.msg.contains("delegate 1") && e.msg.contains("../x"), "{e}");
        std::fs::write(multus.join("c2"), "{oops").unwrap();
        assert_eq!(attachments(&runtime, &node.config).unwrap_err().code, 6);
    }
}
