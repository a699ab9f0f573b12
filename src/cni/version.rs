//! CNI spec versions this crate speaks, matched exactly as the Go reference library does.

use super::error::{CniError, code};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CniVersion {
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

pub const SUPPORTED: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

impl CniVersion {
    pub const LATEST: CniVersion = CniVersion::V1_1_0;
    const ALL: [CniVersion; 5] = [Self::V0_3_0, Self::V0_3_1, Self::V0_4_0, Self::V1_0_0, Self::V1_1_0];

    pub fn as_str(self) -> &'static str {
        SUPPORTED[self as usize]
    }

    /// Exact match against the supported list; anything else is error code 1.
    pub fn parse(v: &str) -> Result<Self, CniError> {
        Self::ALL.into_iter().find(|c| c.as_str() == v).ok_or_else(|| {
            CniError::new(code::INCOMPATIBLE_VERSION, "incompatible CNI versions")
                .with_details(format!("config is {v:?}, plugin supports {SUPPORTED:?}"))
        })
    }

    /// CHECK exists from 0.4.0 on.
    pub fn has_check(self) -> bool {
        self >= Self::V0_4_0
    }
    /// GC and STATUS exist from 1.1.0 on.
    pub fn has_gc_and_status(self) -> bool {
        self >= Self::V1_1_0
    }
    /// Results before 1.0.0 carry `ips[].version`.
    pub fn has_ip_version_field(self) -> bool {
        self < Self::V1_0_0
    }
    /// 1.1.0 added interface mtu/socketPath/pciID and route mtu/advmss/priority/table/scope.
    pub fn has_v110_fields(self) -> bool {
        self >= Self::V1_1_0
    }
    /// DEL receives prevResult from 0.4.0 on.
    pub fn del_gets_prev_result(self) -> bool {
        self >= Self::V0_4_0
    }
}

impl fmt::Display for CniVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The VERSION command's answer.
pub fn version_reply(config_version: &str) -> serde_json::Value {
    let v = if config_version.is_empty() { CniVersion::LATEST.as_str() } else { config_version };
    serde_json::json!({ "cniVersion": v, "supportedVersions": SUPPORTED })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_match_only() {
        for v in SUPPORTED {
            assert_eq!(CniVersion::parse(v).unwrap().as_str(), v);
        }
        for bad in ["", "0.2.0", "1.0", "1.0.0 ", "v1.0.0", "1.2.0"] {
            let e = CniVersion::parse(bad).unwrap_err();
            assert_eq!(e.code, 1, "{bad:?}");
            assert!(e.details.contains(&format!("{bad:?}")));
        }
    }

    #[test]
    fn feature_gates() {
        assert!(!CniVersion::V0_3_1.has_check());
        assert!(CniVersion::V0_4_0.has_check());
        assert!(!CniVersion::V1_0_0.has_gc_and_status());
        assert!(CniVersion::V1_1_0.has_gc_and_status());
        assert!(CniVersion::V0_4_0.has_ip_version_field());
        assert!(!CniVersion::V1_0_0.has_ip_version_field());
    }
}
