//! The server's certificate, and the CA the kubeconfig it writes trusts: a valid pair, or one with
//! something wrong that a client must refuse (and say why).

use std::sync::Arc;

/// The certificate the server presents, and what the kubeconfig it writes trusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    /// Issued for 127.0.0.1 by the CA the kubeconfig names.
    Valid,
    /// Issued for 127.0.0.1 by another CA than the kubeconfig's.
    UnknownCa,
    /// Issued by the kubeconfig's CA, expired since 2020.
    Expired,
    /// Issued by the kubeconfig's CA for `kubernetes.invalid` only.
    WrongName,
    /// One self-signed CA:TRUE certificate for 127.0.0.1, serving and in the kubeconfig as its CA:
    /// what rustls refuses as `CaUsedAsEndEntity` and kubectl accepts.
    SelfSignedCa,
}

/// A TLS acceptor presenting the certificate `serving` describes, and the PEM of the CA the
/// kubeconfig is to trust.
pub(super) fn acceptor(serving: Serving) -> (tokio_rustls::TlsAcceptor, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, date_time_ymd};
    let ca = |name: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
    };
    let trusted = ca("yh-genie test CA");
    let server_key = KeyPair::generate().unwrap();
    let for_names =
        |names: &[&str]| CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    let (server_cert, trusted_pem) = match serving {
        Serving::Valid => (for_names(&["127.0.0.1"]).signed_by(&server_key, &trusted).unwrap(), trusted.pem()),
        Serving::UnknownCa => {
            (for_names(&["127.0.0.1"]).signed_by(&server_key, &ca("another CA")).unwrap(), trusted.pem())
        }
        Serving::Expired => {
            let mut params = for_names(&["127.0.0.1"]);
            params.not_before = date_time_ymd(2019, 1, 1);
            params.not_after = date_time_ymd(2020, 1, 1);
            (params.signed_by(&server_key, &trusted).unwrap(), trusted.pem())
        }
        Serving::WrongName => {
            (for_names(&["kubernetes.invalid"]).signed_by(&server_key, &trusted).unwrap(), trusted.pem())
        }
        Serving::SelfSignedCa => {
            let mut params = for_names(&["127.0.0.1"]);
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let cert = params.self_signed(&server_key).unwrap();
            let pem = cert.pem();
            (cert, pem)
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![server_cert.der().clone()], key)
        .unwrap();
    (tokio_rustls::TlsAcceptor::from(Arc::new(config)), trusted_pem)
}
