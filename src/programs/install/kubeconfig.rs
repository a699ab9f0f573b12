//! The kubeconfig the selector uses on the host: the installer pod's service-account token and CA,
//! and the API server's in-cluster address. The kubelet rotates projected tokens (and the CA can
//! change), so the installer renders this again on every poll and rewrites it when it differs.

use anyhow::{Context, bail};
use base64::Engine as _;
use std::path::Path;

/// The service account's credentials as mounted in the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccount {
    pub token: String,
    pub ca_pem: Vec<u8>,
}

impl ServiceAccount {
    /// Read `token` and `ca.crt` from `dir`. The kubelet swaps the whole projected volume at once
    /// (`..data` symlink), so two reads see one consistent version.
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let token_path = dir.join("token");
        let token = std::fs::read_to_string(&token_path)
            .with_context(|| format!("reading the service-account token {}", token_path.display()))?;
        let token = token.trim().to_owned();
        if token.is_empty() || token.chars().any(char::is_whitespace) {
            bail!("the service-account token {} is empty or not a single token", token_path.display());
        }
        let ca_path = dir.join("ca.crt");
        let ca_pem =
            std::fs::read(&ca_path).with_context(|| format!("reading the cluster CA {}", ca_path.display()))?;
        if !ca_pem.windows(PEM_CERT.len()).any(|w| w == PEM_CERT) {
            bail!("the cluster CA {} holds no PEM certificate", ca_path.display());
        }
        Ok(ServiceAccount { token, ca_pem })
    }
}

const PEM_CERT: &[u8] = b"-----BEGIN CERTIFICATE-----";

/// The user and context name in the kubeconfig (what `kubectl config view` shows).
const USER: &str = "yh-genie";
const CLUSTER: &str = "in-cluster";

/// A kubeconfig (JSON, which every kubeconfig reader accepts as the YAML subset it is) for `server`
/// with the CA embedded and the token inline. Deterministic: same inputs, same bytes.
pub fn render(server: &str, sa: &ServiceAccount) -> Vec<u8> {
    let ca_data = base64::engine::general_purpose::STANDARD.encode(&sa.ca_pem);
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": CLUSTER, "cluster": { "server": server, "certificate-authority-data": ca_data } }],
        "users": [{ "name": USER, "user": { "token": sa.token } }],
        "contexts": [{ "name": USER, "context": { "cluster": CLUSTER, "user": USER } }],
        "current-context": USER,
    });
    let mut bytes = serde_json::to_vec_pretty(&doc).expect("a JSON value always serializes");
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &[u8] = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn sa_dir(token: &str, ca: &[u8]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("token"), token).unwrap();
        std::fs::write(d.path().join("ca.crt"), ca).unwrap();
        d
    }

    #[test]
    fn a_service_account_is_read_with_its_token_trimmed() {
        let d = sa_dir("abc.def.ghi\n", CA);
        assert_eq!(
            ServiceAccount::read(d.path()).unwrap(),
            ServiceAccount { token: "abc.def.ghi".into(), ca_pem: CA.to_vec() }
        );
    }

    #[test]
    fn refuses_missing_empty_or_garbled_credentials() {
        let err = |token: &str, ca: &[u8]| format!("{:#}", ServiceAccount::read(sa_dir(token, ca).path()).unwrap_err());
        assert!(err("", CA).contains("empty"));
        assert!(err("two tokens", CA).contains("not a single token"));
        assert!(err("t", b"not a cert").contains("no PEM certificate"));
        let d = tempfile::tempdir().unwrap();
        assert!(format!("{:#}", ServiceAccount::read(d.path()).unwrap_err()).contains("token"));
    }

    #[test]
    fn renders_a_kubeconfig_kube_reads_back() {
        let sa = ServiceAccount { token: "tok".into(), ca_pem: CA.to_vec() };
        let bytes = render("https://[fd00::1]:443", &sa);
        assert_eq!(bytes, render("https://[fd00::1]:443", &sa), "deterministic");
        let kc = kube::config::Kubeconfig::from_yaml(std::str::from_utf8(&bytes).unwrap()).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some(USER));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://[fd00::1]:443"));
        let ca = base64::engine::general_purpose::STANDARD.decode(cluster.certificate_authority_data.as_ref().unwrap());
        assert_eq!(ca.unwrap(), CA);
    }
}
