//! A namespace of a test's own, with the selector's policy opened as the test needs it, both undone
//! when the test ends, pass or fail: the suite's tests share one cluster, so a failed test must not
//! leave pods (with their leases and records) or a policy for the tests after it.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use testkit::cluster::Cluster;

/// The selector's policy, from the `yh-genie-config` ConfigMap.
pub fn selector_settings(cluster: &Cluster) -> String {
    let config = cluster.get_json(&["-n", "kube-system", "get", "configmap", "yh-genie-config"]);
    config["data"]["selector.json"].as_str().unwrap_or("{}").to_string()
}

/// `settings` as the selector's policy, and waited for on every node's conflist: every key it sets,
/// and every key the policy it replaces set that it leaves out gone, so that a policy restored is
/// not taken as in place while the nodes still hold the one it replaced (whose late arrival would
/// then close what the next test opened).
pub fn set_selector_settings(cluster: &Cluster, settings: &str) {
    let replaced: Value = serde_json::from_str(&selector_settings(cluster)).unwrap();
    let wanted: Value = serde_json::from_str(settings).unwrap();
    let patch = json!({"data": {"selector.json": settings}}).to_string();
    cluster.kubectl_ok(&["-n", "kube-system", "patch", "configmap", "yh-genie-config", "--type=merge", "-p", &patch]);
    let keys: BTreeSet<&String> =
        [&replaced, &wanted].iter().filter_map(|s| s.as_object()).flat_map(|s| s.keys()).collect();
    for worker in &cluster.workers {
        let conflist = worker.node_path("/etc/cni/net.d/00-yh-genie.conflist");
        cluster.wait_for(&format!("{}'s 00-yh-genie.conflist with {settings}", worker.name), || {
            let conflist: Value = serde_json::from_str(&std::fs::read_to_string(&conflist).ok()?).ok()?;
            let plugin = &conflist["plugins"][0];
            keys.iter().all(|&key| plugin[key] == wanted[key]).then_some(())
        });
    }
}

/// Namespace `name`, made with the policy as `open` changes it. Dropped: the namespace deleted
/// (its pods' DELs done) and the policy as it was.
pub struct TestNamespace<'a> {
    cluster: &'a Cluster,
    name: &'static str,
    before: String,
}

impl<'a> TestNamespace<'a> {
    pub fn new(cluster: &'a Cluster, name: &'static str, open: impl FnOnce(&mut Value)) -> TestNamespace<'a> {
        let before = selector_settings(cluster);
        // Made first, so that a failure below still undoes what was changed.
        let namespace = TestNamespace { cluster, name, before };
        let mut settings: Value = serde_json::from_str(&namespace.before).unwrap();
        open(&mut settings);
        set_selector_settings(cluster, &settings.to_string());
        cluster.kubectl_ok(&["create", "namespace", name]);
        namespace
    }

    /// The policy as it was before the test opened it.
    pub fn settings_before(&self) -> Value {
        serde_json::from_str(&self.before).unwrap()
    }

    /// Delete the namespace and wait (up to 3 minutes) for its pods to be gone, for a test that
    /// checks what their deletion undid, or cleans up what only their deletion lets it clean up.
    /// It never fails, as it also runs while a failed test unwinds: what the deletion should have
    /// undone is the caller's to check.
    pub fn delete(&self) {
        let _ = self.cluster.kubectl(&[
            "delete",
            "namespace",
            self.name,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=180s",
        ]);
    }
}

impl Drop for TestNamespace<'_> {
    fn drop(&mut self) {
        self.delete();
        if !std::thread::panicking() {
            set_selector_settings(self.cluster, &self.before);
            return;
        }
        // A failed test is unwinding: a second panic escaping this drop would abort the whole
        // suite, so a policy that could not be restored is said, and the test's failure reported.
        let restore = || set_selector_settings(self.cluster, &self.before);
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(restore)).is_err() {
            eprintln!("{}: the selector's policy was not restored to {}", self.name, self.before);
        }
    }
}
