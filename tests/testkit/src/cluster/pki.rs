//! The cluster's certificates and kubeconfigs: one CA, the API server's serving certificate, a
//! client certificate per component with the user and groups the API server's RBAC and Node
//! authorizers expect of it, and the service-account signing key.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use std::path::{Path, PathBuf};

pub struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    /// A new CA, its certificate at `<dir>/ca.crt`, and the service-account key pair.
    pub fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "yh-genie test cluster CA");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
        let sa = KeyPair::generate().unwrap();
        std::fs::write(dir.join("sa.key"), sa.serialize_pem()).unwrap();
        std::fs::write(dir.join("sa.pub"), sa.public_key_pem()).unwrap();
        Pki { dir: dir.to_path_buf(), ca }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// `<name>.crt` and `<name>.key`: a certificate for `names` (DNS names or IPs), with the
    /// common name `user` and organizations `groups`, for a server, a client, or both.
    pub fn issue(&self, name: &str, user: &str, groups: &[&str], names: &[&str], server: bool) {
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params.distinguished_name.push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if server {
            params.extended_key_usages.push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        std::fs::write(self.path(&format!("{name}.crt")), cert.pem()).unwrap();
        std::fs::write(self.path(&format!("{name}.key")), key.serialize_pem()).unwrap();
    }

    /// A client certificate for `user` in `groups` and a kubeconfig `<name>.kubeconfig` that uses
    /// it against `server`; returns the kubeconfig's path.
    pub fn kubeconfig(&self, name: &str, user: &str, groups: &[&str], server: &str) -> PathBuf {
        self.issue(name, user, groups, &[], false);
        let path = self.path(&format!("{name}.kubeconfig"));
        let config = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {name}
  user:
    client-certificate: {crt}
    client-key: {key}
contexts:
- name: test
  context: {{cluster: test, user: {name}}}
current-context: test
",
            ca = self.path("ca.crt").display(),
            crt = self.path(&format!("{name}.crt")).display(),
            key = self.path(&format!("{name}.key")).display(),
        );
        std::fs::write(&path, config).unwrap();
        path
    }
}
