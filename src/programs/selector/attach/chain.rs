//! Running a network's chain of plugins as libcni does: ADD in order, each plugin getting the
//! previous result as `prevResult`; DEL in reverse with the final result; CHECK in order. Built-in
//! plugins run in process, others by exec (`programs::plugins::invoke`).

use crate::platform::cni::{CniError, CniResult, Command, ConfList, Invocation, code};
use crate::programs::plugins;

/// An ADD that failed, and what its plugins may have made, for `undo` to take back.
#[derive(Debug)]
pub struct AddFailed {
    pub error: CniError,
    /// How many plugins were tried, in order: the last one failed (maybe half-way).
    pub tried: usize,
    /// The last result a plugin gave, if any.
    pub prev: Option<Box<CniResult>>,
}

/// ADD every plugin in order, up to the first that fails. What the plugins tried may have made is
/// not undone here: `undo` does it, with what else the ADD made.
pub fn add(list: &ConfList, inv: &Invocation) -> Result<CniResult, AddFailed> {
    let mut prev: Option<CniResult> = None;
    for i in 0..list.plugins.len() {
        let outcome = list.plugin_stdin(i, prev.as_ref()).and_then(|stdin| {
            plugins::invoke(list.plugin_type(i), Command::Add, inv, &stdin)?
                .ok_or_else(|| CniError::new(code::DELEGATE_FAILED, "returned no result".to_string()))
        });
        match outcome {
            Ok(result) => prev = Some(result),
            Err(e) => {
                return Err(AddFailed {
                    error: e.context(step(list, i, Command::Add)),
                    tried: i + 1,
                    prev: prev.map(Box::new),
                });
            }
        }
    }
    Ok(prev.expect("a loaded chain has at least one plugin"))
}

/// DEL every plugin in reverse with `prev` (the ADD result) as `prevResult` where the version has it.
/// All plugins are called even if one fails; the first failure is returned.
pub fn del(list: &ConfList, inv: &Invocation, prev: Option<&CniResult>) -> Result<(), CniError> {
    del_first(list, inv, list.plugins.len(), prev)
}

/// CHECK every plugin in order with the ADD result. Skipped for chains with `disableCheck`, as
/// libcni skips them, and for networks before 0.4.0, which have no CHECK: libcni refuses those,
/// but the runtime asked the selector at a version that has CHECK, and the network's plugins
/// cannot be asked, so there is nothing of theirs to check.
pub fn check(list: &ConfList, inv: &Invocation, prev: &CniResult) -> Result<(), CniError> {
    if !list.cni_version.has_check() || list.disable_check {
        return Ok(());
    }
    for i in 0..list.plugins.len() {
        list.plugin_stdin(i, Some(prev))
            .and_then(|stdin| {
                if bandwidth_without_limits(list.plugin_type(i), &stdin) {
                    return Ok(None);
                }
                plugins::invoke(list.plugin_type(i), Command::Check, inv, &stdin)
            })
            .map_err(|e| e.context(step(list, i, Command::Check)))?;
    }
    Ok(())
}

/// The reference `bandwidth` asked to CHECK with no limit to check: it has nothing to compare, and
/// its releases before v1.9.1 crash on it (a nil dereference, containernetworking/plugins#1221),
/// which Debian 12 and other distributions still ship. Runtimes that CHECK (CRI-O, on every pod
/// status) would then report the pod's network broken; v1.9.1 and later answer success. Limits
/// come from `runtimeConfig.bandwidth` (the pod's annotations) or the plugin's own rate keys, read
/// as Go reads them, whatever their case.
fn bandwidth_without_limits(plugin_type: &str, stdin: &[u8]) -> bool {
    if plugin_type != "bandwidth" {
        return false;
    }
    let Ok(serde_json::Value::Object(conf)) = serde_json::from_slice::<serde_json::Value>(stdin) else {
        return false;
    };
    let has_limit = |object: &serde_json::Map<String, serde_json::Value>| {
        object.iter().any(|(key, value)| {
            let key = key.to_ascii_lowercase();
            ["ingressrate", "ingressburst", "egressrate", "egressburst"].contains(&key.as_str())
                && value.as_f64().is_some_and(|v| v > 0.0)
        })
    };
    let runtime_limits = conf
        .iter()
        .filter(|(key, _)| key.eq_ignore_ascii_case("runtimeConfig"))
        .filter_map(|(_, value)| value.as_object())
        .flat_map(|runtime| runtime.iter().filter(|(key, _)| key.eq_ignore_ascii_case("bandwidth")))
        .any(|(_, bandwidth)| bandwidth.as_object().is_some_and(has_limit));
    !runtime_limits && !has_limit(&conf)
}

/// STATUS of every plugin in order, as libcni asks a network: only from 1.1.0 on (before, a network
/// has no STATUS and is ready), the first plugin that is not ready answers for the network.
pub fn status(list: &ConfList, inv: &Invocation) -> Result<(), CniError> {
    if !list.cni_version.has_gc_and_status() {
        return Ok(());
    }
    for i in 0..list.plugins.len() {
        list.plugin_stdin(i, None)
            .and_then(|stdin| plugins::invoke(list.plugin_type(i), Command::Status, inv, &stdin))
            .map_err(|e| e.context(step(list, i, Command::Status)))?;
    }
    Ok(())
}

/// GC of every plugin with `valid` (`{containerID, ifname}` objects) as the network's valid
/// attachments, as libcni gives it (under both of the spec's names for it). Only from 1.1.0 on and
/// unless `disableGC`; every plugin is asked even if one fails; the first failure is returned.
pub fn gc(list: &ConfList, inv: &Invocation, valid: &serde_json::Value) -> Result<(), CniError> {
    if !list.cni_version.has_gc_and_status() || list.disable_gc {
        return Ok(());
    }
    let mut first_error = None;
    for i in 0..list.plugins.len() {
        let outcome = list.plugin_stdin(i, None).and_then(|stdin| {
            let mut conf: serde_json::Map<String, serde_json::Value> =
                serde_json::from_slice(&stdin).expect("plugin_stdin writes a JSON object");
            conf.insert(VALID_ATTACHMENTS.into(), valid.clone());
            conf.insert("cni.dev/attachments".into(), valid.clone());
            let stdin = serde_json::to_vec(&conf).expect("a JSON map always serializes");
            plugins::invoke(list.plugin_type(i), Command::Gc, inv, &stdin)
        });
        if let Err(e) = outcome {
            let e = e.context(step(list, i, Command::Gc));
            tracing::warn!("{e}");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The key of a GC call's valid attachments.
pub const VALID_ATTACHMENTS: &str = "cni.dev/valid-attachments";

/// DEL the first `count` plugins, `count-1` down to 0, as `del` DELs them all.
pub fn del_first(list: &ConfList, inv: &Invocation, count: usize, prev: Option<&CniResult>) -> Result<(), CniError> {
    let prev = prev.filter(|_| list.cni_version.del_gets_prev_result());
    let mut first_error = None;
    for i in (0..count).rev() {
        let outcome = list
            .plugin_stdin(i, prev)
            .and_then(|stdin| plugins::invoke(list.plugin_type(i), Command::Del, inv, &stdin));
        if let Err(e) = outcome {
            let e = e.context(step(list, i, Command::Del));
            tracing::warn!("{e}");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// `network blue: plugin 2 of 2 (portmap) ADD`, for error messages.
fn step(list: &ConfList, i: usize, command: Command) -> String {
    format!(
        "network {}: plugin {} of {} ({}) {}",
        list.name,
        i + 1,
        list.plugins.len(),
        list.plugin_type(i),
        command.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::cni::testing::{invocation, script};
    use std::path::PathBuf;

    /// A bin dir of shell plugins that log `COMMAND name prev=yes|no` and answer ADD with an address.
    struct Plugins {
        dir: tempfile::TempDir,
    }

    impl Plugins {
        fn new() -> Self {
            let p = Plugins { dir: tempfile::tempdir().unwrap() };
            p.plugin("a", "10.0.0.1/24", false);
            p.plugin("b", "10.0.0.2/24", false);
            p.plugin("fail", "", true);
            p
        }
        fn plugin(&self, name: &str, address: &str, fail: bool) {
            let log = self.log_path();
            let add = if fail {
                r#"echo '{"code":7,"msg":"boom"}'; exit 1"#.to_string()
            } else {
                format!(r#"echo '{{"cniVersion":"1.0.0","ips":[{{"address":"{address}"}}]}}'"#)
            };
            let body = format!(
                "in=$(cat)\nprev=no\ncase \"$in\" in *prevResult*) prev=yes;; esac\n\
                 echo \"$CNI_COMMAND {name} prev=$prev\" >> {log}\n\
                 if [ \"$CNI_COMMAND\" = ADD ]; then {add}; fi",
                log = log.display()
            );
            script(self.dir.path(), name, &body);
        }
        fn log_path(&self) -> PathBuf {
            self.dir.path().join("log")
        }
        fn log(&self) -> Vec<String> {
            let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            let _ = std::fs::remove_file(self.log_path());
            text.lines().map(String::from).collect()
        }
        fn inv(&self) -> Invocation {
            invocation(Command::Add, self.dir.path())
        }
    }

    fn chain(version: &str, types: &[&str], disable_check: bool) -> ConfList {
        let plugins: Vec<_> = types.iter().map(|t| serde_json::json!({ "type": t })).collect();
        let json = serde_json::json!({"cniVersion": version, "name": "net", "disableCheck": disable_check, "plugins": plugins});
        ConfList::parse(json.to_string().as_bytes(), true, "net.conflist").unwrap()
    }

    fn address(r: &CniResult) -> String {
        r.ips[0].address.to_string()
    }

    #[test]
    fn bandwidth_is_checked_only_with_a_limit_to_check() {
        let without = |conf: serde_json::Value| bandwidth_without_limits("bandwidth", conf.to_string().as_bytes());
        assert!(without(serde_json::json!({"type": "bandwidth", "capabilities": {"bandwidth": true}})));
        assert!(without(serde_json::json!({"type": "bandwidth", "runtimeConfig": {"bandwidth": {}}})));
        assert!(!without(
            serde_json::json!({"type": "bandwidth", "runtimeConfig": {"bandwidth": {"ingressRate": 1000}}})
        ));
        // Go's decoder matches keys whatever their case: so does the check.
        assert!(!without(serde_json::json!({"type": "bandwidth", "RuntimeConfig": {"Bandwidth": {"EGRESSRATE": 8}}})));
        assert!(!without(serde_json::json!({"type": "bandwidth", "IngressBurst": 100})));
        assert!(!bandwidth_without_limits("portmap", br#"{"type": "portmap"}"#));
    }

    #[test]
    fn check_skips_a_bandwidth_without_limits_and_asks_one_with_them() {
        let p = Plugins::new();
        p.plugin("bandwidth", "", false);
        let prev = add(&chain("1.0.0", &["a"], false), &p.inv()).unwrap();
        p.log();
        check(&chain("1.0.0", &["a", "bandwidth"], false), &p.inv(), &prev).unwrap();
        assert_eq!(p.log(), ["CHECK a prev=yes"]);
        let limited = serde_json::json!({"cniVersion": "1.0.0", "name": "net", "plugins": [
            {"type": "a"}, {"type": "bandwidth", "egressRate": 1000, "egressBurst": 1000}]});
        let limited = ConfList::parse(limited.to_string().as_bytes(), true, "net.conflist").unwrap();
        check(&limited, &p.inv(), &prev).unwrap();
        assert_eq!(p.log(), ["CHECK a prev=yes", "CHECK bandwidth prev=yes"]);
    }

    #[test]
    fn add_hands_each_result_to_the_next_plugin_returning_the_last() {
        let p = Plugins::new();
        let r = add(&chain("1.0.0", &["a", "b"], false), &p.inv()).unwrap();
        assert_eq!(address(&r), "10.0.0.2/24");
        assert_eq!(p.log(), ["ADD a prev=no", "ADD b prev=yes"]);
    }

    #[test]
    fn a_failed_add_stops_at_the_failing_plugin_saying_what_was_tried() {
        let p = Plugins::new();
        let failed = add(&chain("1.0.0", &["a", "fail", "b"], false), &p.inv()).unwrap_err();
        assert_eq!((failed.tried, address(failed.prev.as_deref().unwrap())), (2, "10.0.0.1/24".to_string()));
        assert_eq!(failed.error.code, 7);
        assert_eq!(failed.error.msg, "network net: plugin 2 of 3 (fail) ADD: boom");
        assert_eq!(p.log(), ["ADD a prev=no", "ADD fail prev=yes"]);
    }

    #[test]
    fn del_runs_in_reverse_with_prev_result_where_the_version_has_it() {
        let p = Plugins::new();
        let prev = add(&chain("1.0.0", &["a", "b"], false), &p.inv()).unwrap();
        p.log();
        del(&chain("1.0.0", &["a", "b"], false), &p.inv(), Some(&prev)).unwrap();
        assert_eq!(p.log(), ["DEL b prev=yes", "DEL a prev=yes"]);
        del(&chain("0.3.1", &["a", "b"], false), &p.inv(), Some(&prev)).unwrap();
        assert_eq!(p.log(), ["DEL b prev=no", "DEL a prev=no"]);
    }

    #[test]
    fn a_failed_del_step_is_reported_once_the_rest_have_run() {
        let p = Plugins::new();
        let e = del(&chain("1.0.0", &["a", "missing", "b"], false), &p.inv(), None).unwrap_err();
        assert!(e.msg.contains("plugin 2 of 3 (missing) DEL"), "{e}");
        assert_eq!(p.log(), ["DEL b prev=no", "DEL a prev=no"]);
    }

    #[test]
    fn a_0_2_0_chain_hands_on_results_in_the_0_2_0_shape() {
        let p = Plugins::new();
        // An old plugin: answers in 0.2.0 (without saying so) and keeps its stdin per command.
        let kept = p.dir.path().join("old.stdin");
        let answer = r#"{"ip4":{"ip":"10.0.0.9/24","gateway":"10.0.0.1","routes":[{"dst":"10.9.0.0/16"}]},"dns":{}}"#;
        let body = format!(
            "cat > {kept}.$CNI_COMMAND\n[ \"$CNI_COMMAND\" = ADD ] && echo '{answer}'\nexit 0",
            kept = kept.display()
        );
        script(p.dir.path(), "old", &body);
        let stdin = |command: &str| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(format!("{}.{command}", kept.display())).unwrap()).unwrap()
        };
        let list = chain("0.2.0", &["old", "old"], false);
        let r = add(&list, &p.inv()).unwrap();
        assert_eq!((address(&r), r.routes[0].dst.to_string()), ("10.0.0.9/24".into(), "10.9.0.0/16".into()));
        // The second plugin got the first one's result as 0.2.0 says it.
        assert_eq!(
            stdin("ADD")["prevResult"],
            serde_json::json!({"cniVersion": "0.2.0", "dns": {},
                "ip4": {"ip": "10.0.0.9/24", "gateway": "10.0.0.1", "routes": [{"dst": "10.9.0.0/16"}]}})
        );
        // No prevResult on DEL before 0.4.0; no CHECK at all.
        del(&list, &p.inv(), Some(&r)).unwrap();
        assert!(stdin("DEL").get("prevResult").is_none());
        check(&list, &p.inv(), &r).unwrap();
        assert!(!std::path::Path::new(&format!("{}.CHECK", kept.display())).exists());
    }

    #[test]
    fn a_list_without_a_version_hands_the_address_on_in_0_1_0() {
        let p = Plugins::new();
        let list = ConfList::parse(br#"{"name":"net","plugins":[{"type":"a"},{"type":"b"}]}"#, true, "x").unwrap();
        // The fake plugins answer in 1.0.0; the list's 0.1.0 prevResult carries the address on.
        assert_eq!(address(&add(&list, &p.inv()).unwrap()), "10.0.0.2/24");
        assert_eq!(p.log(), ["ADD a prev=no", "ADD b prev=yes"]);
    }

    #[test]
    fn a_list_without_a_version_cannot_chain_a_result_without_an_address() {
        let p = Plugins::new();
        // A first result with no address cannot be handed on in 0.1.0: the ADD fails at the second.
        script(p.dir.path(), "empty", r#"cat >/dev/null; echo '{"cniVersion":"1.0.0"}'"#);
        let list = ConfList::parse(br#"{"name":"net","plugins":[{"type":"empty"},{"type":"b"}]}"#, true, "x").unwrap();
        let failed = add(&list, &p.inv()).unwrap_err();
        assert_eq!(failed.error.code, 1);
        assert!(failed.error.msg.starts_with("network net: plugin 2 of 2 (b) ADD: prevResult: "), "{}", failed.error);
        assert_eq!(failed.tried, 2);
    }

    #[test]
    fn check_runs_in_order_unless_the_version_or_disable_check_says_not() {
        let p = Plugins::new();
        let prev = CniResult::default();
        check(&chain("1.0.0", &["a", "b"], false), &p.inv(), &prev).unwrap();
        assert_eq!(p.log(), ["CHECK a prev=yes", "CHECK b prev=yes"]);
        check(&chain("0.3.1", &["a", "b"], false), &p.inv(), &prev).unwrap();
        check(&chain("1.0.0", &["a", "b"], true), &p.inv(), &prev).unwrap();
        assert!(p.log().is_empty());
    }
}
