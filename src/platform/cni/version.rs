//! CNI spec versions this crate speaks, matched exactly as the Go reference library does. A
//! configuration without `cniVersion` (or with an empty one, which is what libcni injects into the
//! plugins of a list that has none) is 0.1.0, as the spec and libcni's skel read it.

use super::error::{CniError, code};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CniVersion {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

pub const SUPPORTED: [&str; 7] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

impl CniVersion {
    pub const LATEST: CniVersion = CniVersion::V1_1_0;
    pub const ALL: [CniVersion; 7] =
        [Self::V0_1_0, Self::V0_2_0, Self::V0_3_0, Self::V0_3_1, Self::V0_4_0, Self::V1_0_0, Self::V1_1_0];

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

    /// The version of a configuration whose `cniVersion` is `declared`: none or empty is 0.1.0.
    pub fn of_config(declared: Option<&str>) -> Result<Self, CniError> {
        match declared {
            None | Some("") => Ok(Self::V0_1_0),
            Some(v) => Self::parse(v),
        }
    }

    /// 0.1.0 and 0.2.0 results have one `ip4` and one `ip6` object instead of `ips`, `routes`
    /// and `interfaces`.
    pub fn has_ip4_ip6_result(self) -> bool {
        self <= Self::V0_2_0
    }
    /// CHECK exists from 0.4.0 on.
    pub fn has_check(self) -> bool {
        self >= Self::V0_4_0
    }
    /// GC and STATUS exist from 1.1.0 on.
    pub fn has_gc_and_status(self) -> bool {
        self >= Self::V1_1_0
    }
    /// Results of 0.3.0 to 0.4.0 carry `ips[].version`.
    pub fn has_ip_version_field(self) -> bool {
        self >= Self::V0_3_0 && self < Self::V1_0_0
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
        for bad in ["", "0.2", "1.0", "1.0.0 ", "v1.0.0", "1.2.0", "0.5.0"] {
            let e = CniVersion::parse(bad).unwrap_err();
            assert_eq!(e.code, 1, "{bad:?}");
            assert!(e.details.contains(&format!("{bad:?}")));
        }
    }

    #[test]
    fn a_configuration_without_a_version_is_0_1_0() {
        assert_eq!(CniVersion::of_config(None).unwrap(), CniVersion::V0_1_0);
        assert_eq!(CniVersion::of_config(Some("")).unwrap(), CniVersion::V0_1_0);
        assert_eq!(CniVersion::of_config(Some("0.2.0")).unwrap(), CniVersion::V0_2_0);
        assert_eq!(CniVersion::of_config(Some("0.1")).unwrap_err().code, 1);
    }

    #[test]
    fn feature_gates() {
        assert!(CniVersion::V0_2_0.has_ip4_ip6_result());
        assert!(!CniVersion::V0_3_0.has_ip4_ip6_result());
        assert!(!CniVersion::V0_2_0.has_check());
        assert!(!CniVersion::V0_3_1.has_check());
        assert!(CniVersion::V0_4_0.has_check());
        assert!(!CniVersion::V0_2_0.del_gets_prev_result());
        assert!(!CniVersion::V1_0_0.has_gc_and_status());
        assert!(CniVersion::V1_1_0.has_gc_and_status());
        assert!(CniVersion::V0_4_0.has_ip_version_field());
        assert!(!CniVersion::V1_0_0.has_ip_version_field());
    }
}
