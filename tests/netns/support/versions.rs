//! The CNI spec versions the plugin tests run their cases over, from one table, as
//! containernetworking/plugins' own tests loop over a list of versions for each case: every version
//! yh-genie supports (the product's `CniVersion::ALL`), and of those the ones Debian's reference
//! plugins speak too, for the cases that run beside them or delegate to them. A case loops over
//! the versions inside one test, on one node, so that the table costs plugin calls, not network
//! namespaces.

use std::sync::OnceLock;
use yh_genie::platform::cni::CniVersion;

/// Every version yh-genie supports, oldest first.
pub fn all() -> impl Iterator<Item = CniVersion> {
    CniVersion::ALL.into_iter()
}

/// The versions of [`all`] the reference plugins speak too (they say which in answer to VERSION).
pub fn with_reference() -> impl Iterator<Item = CniVersion> {
    all().filter(|v| reference_versions().iter().any(|r| r == v.as_str()))
}

fn reference_versions() -> &'static Vec<String> {
    static VERSIONS: OnceLock<Vec<String>> = OnceLock::new();
    VERSIONS.get_or_init(|| {
        let bridge = std::path::Path::new(testkit::REFERENCE_PLUGINS).join("bridge");
        let out = std::process::Command::new(&bridge)
            .env("CNI_COMMAND", "VERSION")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", bridge.display()));
        let reply: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{} VERSION: {e}: {}", bridge.display(), String::from_utf8_lossy(&out.stdout)));
        let versions = reply["supportedVersions"].as_array().expect("supportedVersions");
        versions.iter().filter_map(|v| v.as_str().map(String::from)).collect()
    })
}
