//! The CNI error object: `{cniVersion, code, msg, details}` printed on stdout with a non-zero exit.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Error codes. 1-99 are the spec's; 100 and up are this project's (documented in docs/cni.md).
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const UNKNOWN_CONTAINER: u32 = 3;
    pub const INVALID_ENV: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODE_FAILURE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    pub const LIMITED_CONNECTIVITY: u32 = 51;
    /// A kernel (netlink, sysctl) operation failed.
    pub const KERNEL: u32 = 100;
    /// A delegate plugin failed without a CNI error of its own: crashed, timed out, garbled output.
    pub const DELEGATE_FAILED: u32 = 101;
    /// The container's network namespace cannot be opened.
    pub const NETNS: u32 = 102;
    /// The Kubernetes API answered, but refused (not found, unauthorized, forbidden, invalid object), or
    /// its certificate is not trusted.
    pub const KUBE_API: u32 = 103;
    /// The IPAM plugin's answer is unusable (e.g. no address).
    pub const IPAM: u32 = 104;
    /// Firewall (NAT) rules could not be applied.
    pub const FIREWALL: u32 = 105;
    /// A plugin's interface or name is already taken.
    pub const ALREADY_EXISTS: u32 = 106;
}

/// The most bytes of `msg` (and of `details`) an error carries: enough for any message a person
/// reads, far less than a pod author's 1 MiB ConfigMap value that an error might quote, which
/// would otherwise come back whole in the runtime's log and the pod's events.
pub const MAX_TEXT: usize = 4096;

/// What a cut text ends with.
const CUT: &str = " [... cut: too long to show whole]";

/// `text` cut to at most `MAX_TEXT` bytes (at a character boundary), ending with `CUT`. Cutting a
/// cut text again (after `context` prefixed it) keeps one note.
fn bounded(mut text: String) -> String {
    if text.len() <= MAX_TEXT {
        return text;
    }
    if text.ends_with(CUT) {
        text.truncate(text.len() - CUT.len());
    }
    let mut end = MAX_TEXT - CUT.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(CUT);
    text
}

/// A CNI error. `Display` shows `msg: details` so it reads well in logs and wrapped messages.
/// Every way of making or changing one bounds its texts (`MAX_TEXT`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        CniError { code, msg: bounded(msg.into()), details: String::new() }
    }
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = bounded(details.into());
        self
    }
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_CONFIG, msg)
    }
    pub fn decode(msg: impl Into<String>) -> Self {
        Self::new(code::DECODE_FAILURE, msg)
    }
    pub fn io(msg: impl Into<String>) -> Self {
        Self::new(code::IO_FAILURE, msg)
    }
    pub fn invalid_env(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_ENV, msg)
    }
    pub fn kernel(msg: impl Into<String>) -> Self {
        Self::new(code::KERNEL, msg)
    }
    pub fn try_again(msg: impl Into<String>) -> Self {
        Self::new(code::TRY_AGAIN_LATER, msg)
    }

    /// Prefix the message with where the error happened, keeping code and details.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.msg = bounded(format!("{what}: {}", self.msg));
        self
    }

    /// The JSON object the spec wants on stdout, in the version of the config that failed.
    pub fn to_json(&self, cni_version: &str) -> serde_json::Value {
        // The fields are public: bounded here too, where the error leaves the process.
        let mut v = serde_json::json!({ "code": self.code, "msg": bounded(self.msg.clone()) });
        if !cni_version.is_empty() {
            v["cniVersion"] = cni_version.into();
        }
        if !self.details.is_empty() {
            v["details"] = bounded(self.details.clone()).into();
        }
        v
    }

    /// Parse a plugin's error output, if it is a CNI error object.
    pub fn from_plugin_output(stdout: &[u8]) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(stdout).ok()?;
        let code = u32::try_from(v.get("code")?.as_u64()?).ok()?;
        let msg = v.get("msg").and_then(|m| m.as_str()).unwrap_or_default().to_string();
        let details = v.get("details").and_then(|m| m.as_str()).unwrap_or_default().to_string();
        Some(CniError { code, msg: bounded(msg), details: bounded(details) })
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.details.is_empty() { write!(f, "{}", self.msg) } else { write!(f, "{}: {}", self.msg, self.details) }
    }
}

impl std::error::Error for CniError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_holds_the_spec_fields_that_are_not_empty() {
        let e = CniError::invalid_config("bad mtu");
        assert_eq!(e.to_json("1.0.0"), serde_json::json!({"cniVersion":"1.0.0","code":7,"msg":"bad mtu"}));
        let e = CniError::io("cannot read").with_details("/run/x: ENOENT");
        assert_eq!(e.to_json("")["details"], "/run/x: ENOENT");
        assert!(e.to_json("").get("cniVersion").is_none());
    }

    #[test]
    fn a_delegates_error_json_is_read_back() {
        let e = CniError::from_plugin_output(br#"{"code":11,"msg":"later","details":"d"}"#).unwrap();
        assert_eq!((e.code, e.msg.as_str(), e.details.as_str()), (11, "later", "d"));
    }

    #[test]
    fn delegate_output_that_is_not_error_json_is_not_taken_for_an_error() {
        assert!(CniError::from_plugin_output(b"panic: oops").is_none());
        assert!(CniError::from_plugin_output(br#"{"msg":"no code"}"#).is_none());
    }

    #[test]
    fn messages_are_bounded_whatever_they_quote() {
        let value = "x".repeat(1 << 20);
        let e = CniError::invalid_config(format!("ConfigMap value {value:?} names no network")).context("pod a/b");
        assert!(e.msg.starts_with("pod a/b: ConfigMap value"), "the context stays: {}", &e.msg[..40]);
        assert!(e.msg.len() <= MAX_TEXT && e.msg.ends_with(CUT), "{}", &e.msg[4000..]);
        assert_eq!(e.msg.matches("cut:").count(), 1, "one note, after context too");
        let e = CniError::io("x").with_details("é".repeat(MAX_TEXT));
        assert!(e.details.len() <= MAX_TEXT && e.details.ends_with(CUT));
        let json = CniError { code: 7, msg: value.clone(), details: value.clone() }.to_json("1.0.0").to_string();
        assert!(json.len() < 2 * MAX_TEXT + 100, "{}", json.len());
        let from_plugin = format!(r#"{{"code":7,"msg":"{value}"}}"#);
        assert!(CniError::from_plugin_output(from_plugin.as_bytes()).unwrap().msg.len() <= MAX_TEXT);
        assert_eq!(format!("{}", CniError::decode("x").with_details(value)).len(), 3 + MAX_TEXT);
        assert_eq!(CniError::decode("short").msg, "short");
    }

    #[test]
    fn context_prefixes_the_message_keeping_the_code() {
        let e = CniError::decode("eof").context("parsing prevResult");
        assert_eq!((e.code, e.msg.as_str()), (6, "parsing prevResult: eof"));
    }
}
