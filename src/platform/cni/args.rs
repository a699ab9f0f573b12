//! `CNI_ARGS`: `K=V;K=V`. Unknown keys are kept and ignored by whoever does not need them.

use super::error::CniError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Parse the runtime's `CNI_ARGS`. Empty segments (`a=b;;c=d`, a trailing `;`) are skipped;
    /// a segment without `=` is refused with code 4, as the Go library does.
    pub fn parse(raw: &str) -> Result<Self, CniError> {
        let mut pairs = Vec::new();
        for segment in raw.split(';').filter(|s| !s.is_empty()) {
            let (k, v) = segment.split_once('=').ok_or_else(|| {
                CniError::invalid_env(format!("CNI_ARGS: invalid pair {segment:?}, expected KEY=VALUE"))
            })?;
            pairs.push((k.to_string(), v.to_string()));
        }
        Ok(CniArgs { pairs })
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        // The last occurrence wins, like a map built from the list.
        self.pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
    }

    /// Every key, in order (repeated ones as often as they occur).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(k, _)| k.as_str())
    }

    pub fn pod_uid(&self) -> Option<&str> {
        self.get("K8S_POD_UID")
    }

    /// `namespace/name` when both are present: the caller is a Kubernetes pod.
    pub fn pod(&self) -> Option<(&str, &str)> {
        Some((self.get("K8S_POD_NAMESPACE")?, self.get("K8S_POD_NAME")?))
    }

    /// Set `key` to `value`: in place where the key is (every occurrence but the last dropped), at
    /// the end otherwise.
    pub fn set(&mut self, key: &str, value: &str) {
        let last = self.pairs.iter().rposition(|(k, _)| k == key);
        match last {
            Some(i) => {
                self.pairs[i].1 = value.to_string();
                let mut seen = 0;
                let total = self.pairs.iter().filter(|(k, _)| k == key).count();
                self.pairs.retain(|(k, _)| {
                    if k != key {
                        return true;
                    }
                    seen += 1;
                    seen == total
                });
            }
            None => self.pairs.push((key.to_string(), value.to_string())),
        }
    }

    /// The string to hand on to a delegate (order and unknown keys kept).
    pub fn to_env_string(&self) -> String {
        self.pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_args() {
        let a = CniArgs::parse(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1",
        )
        .unwrap();
        assert_eq!(a.pod(), Some(("default", "web-0")));
        assert_eq!(a.pod_uid(), Some("u-1"));
        assert_eq!(a.get("IgnoreUnknown"), Some("1"));
        assert_eq!(a.get("Missing"), None);
    }

    #[test]
    fn empty_segments_are_skipped() {
        let a = CniArgs::parse(";A=1;;B=x=y;").unwrap();
        assert_eq!(a.get("A"), Some("1"));
        assert_eq!(a.to_env_string(), "A=1;B=x=y");
        assert_eq!(CniArgs::parse("").unwrap(), CniArgs::default());
    }

    #[test]
    fn a_value_keeps_every_equals_sign_after_the_key() {
        let a = CniArgs::parse(";A=1;;B=x=y;").unwrap();
        assert_eq!(a.get("B"), Some("x=y"));
    }

    #[test]
    fn a_pod_needs_its_namespace_key_as_well_as_its_name() {
        assert_eq!(CniArgs::parse("K8S_POD_NAME=a").unwrap().pod(), None);
    }

    #[test]
    fn an_empty_pod_key_counts_as_missing() {
        assert_eq!(CniArgs::parse("K8S_POD_NAMESPACE=;K8S_POD_NAME=a").unwrap().pod(), None);
    }

    #[test]
    fn set_replaces_or_appends() {
        let mut a = CniArgs::parse("A=1;MAC=x;B=2;MAC=y").unwrap();
        a.set("MAC", "z");
        a.set("C", "3");
        assert_eq!(a.to_env_string(), "A=1;B=2;MAC=z;C=3");
    }

    #[test]
    fn invalid_pair_is_code_4() {
        let e = CniArgs::parse("A=1;garbage").unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("garbage"));
    }
}
