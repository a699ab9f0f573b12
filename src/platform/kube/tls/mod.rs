//! The API client's HTTPS stack, and what a certificate the API server presents is checked against.
//!
//! kube builds its client with rustls' WebPKI verifier, which refuses a serving certificate marked
//! CA:TRUE (`CaUsedAsEndEntity`), the certificate of many hand-made and test clusters: one
//! self-signed certificate, serving the API and put in the kubeconfig as its own CA. client-go and
//! kubectl accept it (Go's x509 takes a leaf found in the root pool as a chain of its own), so a
//! cluster that works with kubectl would lose every pod's network to it here. [`KubeconfigTrust`]
//! accepts exactly that case: the presented certificate is byte for byte one the kubeconfig's CA
//! data holds, is valid now, and is valid for the server's name. Everything else is rustls'
//! verdict. To put the verifier in, the client is assembled from kube's public parts (its rustls
//! configuration, base URI, auth and header layers: kube's documented custom-client path) instead
//! of `Client::try_from`.
//!
//! The node agent's client speaks HTTP/2 when the API server offers it (ALPN `h2`, else
//! HTTP/1.1): every watch and request of the agent is then a stream of one TCP connection, as
//! client-go's are, where HTTP/1.1 needs a connection per open watch. The plugin's one-shot client
//! stays on HTTP/1.1: its two or three sequential GETs share one keep-alive connection anyway.
//!
//! - [`refusal`]: a certificate refusal found in a request's error, and said in words with what to
//!   change. Such a refusal is final: asking again cannot help.
//! - [`validity`]: a certificate's validity period, read from its DER.

mod refusal;
mod validity;

pub use refusal::{explain, problem};

use ::kube::client::ConfigExt;
use ::kube::{Client, Config};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error as TlsError, SignatureScheme};
use std::sync::Arc;
use std::time::Duration;

const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_PROBES: u32 = 3;
/// HTTP/2 PINGs on a connection that carries only quiet watches, and how long a PING may go
/// unanswered before the connection (and every watch on it) is taken for dead: client-go's
/// `ReadIdleTimeout` and `PingTimeout` are of the same order (30 s, 15 s).
const H2_PING_INTERVAL: Duration = Duration::from_secs(30);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(15);

/// Which HTTP versions a client offers the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocols {
    /// HTTP/1.1 only: one connection per request in flight.
    Http1,
    /// HTTP/2 when the server agrees to it in the TLS handshake (ALPN), HTTP/1.1 when it does not:
    /// one connection carries every request and watch.
    Http2Preferred,
}

/// A kube client for `config`, verifying the server as [`KubeconfigTrust`] does when the
/// kubeconfig has CA data (else with kube's own verifier: the system's roots), speaking
/// `protocols`. Connecting is bounded by `connect_timeout`; the caller bounds each request as a
/// whole.
pub fn client(config: Config, connect_timeout: Duration, protocols: Protocols) -> Result<Client, ::kube::Error> {
    if let Some(proxy) = &config.proxy_url {
        // kube is built without proxy support here, and its own builder refuses one the same way.
        return Err(::kube::Error::ProxyProtocolUnsupported { proxy_url: Box::new(proxy.clone()) });
    }
    let mut tls = config.rustls_client_config()?;
    if let Some(anchors) = config.root_cert.as_deref().filter(|_| !config.accept_invalid_certs) {
        let verifier = KubeconfigTrust::new(anchors, tls.crypto_provider().clone())
            .map_err(|e| ::kube::Error::RustlsTls(::kube::client::RustlsTlsError::AddRootCertificate(Box::new(e))))?;
        tls.dangerous().set_certificate_verifier(Arc::new(verifier));
    }
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    // A connection whose peer vanished without a word (a node cut off, an API server's host gone)
    // is found dead within about a minute, not after the kernel's two hours: the agent's watches
    // hold their connections for minutes.
    http.set_keepalive(Some(KEEPALIVE_IDLE));
    http.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    http.set_keepalive_retries(Some(KEEPALIVE_PROBES));
    let mut https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = ServerName::try_from(name.clone())
            .map_err(|e| ::kube::Error::RustlsTls(::kube::client::RustlsTlsError::InvalidServerName(e)))?;
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let mut builder = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new());
    let https = match protocols {
        Protocols::Http1 => https.enable_http1().wrap_connector(http),
        Protocols::Http2Preferred => {
            // Without PINGs, a connection whose peer vanished is noticed only by TCP keepalive, and
            // a watch that stays quiet would wait on it: with them, within `H2_PING_INTERVAL` +
            // `H2_PING_TIMEOUT`.
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .http2_keep_alive_interval(H2_PING_INTERVAL)
                .http2_keep_alive_timeout(H2_PING_TIMEOUT)
                .http2_keep_alive_while_idle(true);
            https.enable_all_versions().wrap_connector(http)
        }
    };
    let http_client = builder.build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(http_client);
    Ok(Client::new(service, config.default_namespace))
}

/// rustls' WebPKI verification against the kubeconfig's CA certificates, plus client-go's
/// acceptance of a serving certificate that is itself one of them.
#[derive(Debug)]
pub struct KubeconfigTrust {
    webpki: Arc<WebPkiServerVerifier>,
    anchors: Vec<CertificateDer<'static>>,
}

impl KubeconfigTrust {
    pub fn new(
        anchors: &[Vec<u8>],
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Self, rustls::client::VerifierBuilderError> {
        let anchors: Vec<CertificateDer<'static>> =
            anchors.iter().map(|der| CertificateDer::from(der.clone())).collect();
        let mut roots = rustls::RootCertStore::empty();
        // kube's own store, built first from the same certificates, has already refused any that
        // cannot be an anchor; with none at all, the builder below fails.
        let _ = roots.add_parsable_certificates(anchors.iter().cloned());
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
        Ok(KubeconfigTrust { webpki, anchors })
    }

    /// client-go's rule for a leaf that is in the root pool: its own chain. Still checked: that it
    /// is valid now and for the name the client connected to.
    fn accept_own_anchor(
        &self,
        end_entity: &CertificateDer<'_>,
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let (not_before, not_after) = validity::validity(end_entity).ok_or(CertificateError::BadEncoding)?;
        let time = now.as_secs();
        if time < not_before {
            return Err(CertificateError::NotValidYetContext {
                time: now,
                not_before: UnixTime::since_unix_epoch(Duration::from_secs(not_before)),
            }
            .into());
        }
        if time > not_after {
            return Err(CertificateError::ExpiredContext {
                time: now,
                not_after: UnixTime::since_unix_epoch(Duration::from_secs(not_after)),
            }
            .into());
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        Ok(ServerCertVerified::assertion())
    }
}

impl ServerCertVerifier for KubeconfigTrust {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(e)
                if is_ca_used_as_end_entity(&e) && self.anchors.iter().any(|a| a.as_ref() == end_entity.as_ref()) =>
            {
                self.accept_own_anchor(end_entity, server_name, now)
            }
            verdict => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Whether rustls refused a certificate for being a CA's (basicConstraints CA:TRUE) serving as
/// the server's own.
fn is_ca_used_as_end_entity(e: &TlsError) -> bool {
    matches!(e, TlsError::InvalidCertificate(CertificateError::Other(other))
        if matches!(other.0.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, date_time_ymd};

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// A self-signed certificate for `names`, CA:TRUE or not, valid from `from` to `to` (y, m, d),
    /// with a subject of its own (so none is taken for another's issuer).
    pub(crate) fn self_signed(
        names: &[&str],
        ca: bool,
        from: (i32, u8, u8),
        to: (i32, u8, u8),
    ) -> CertificateDer<'static> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        params.distinguished_name.push(rcgen::DnType::CommonName, format!("test certificate {n}"));
        if ca {
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        }
        params.not_before = date_time_ymd(from.0, from.1, from.2);
        params.not_after = date_time_ymd(to.0, to.1, to.2);
        params.self_signed(&KeyPair::generate().unwrap()).unwrap().der().clone()
    }

    pub(crate) fn at(y: u64, m: u64, d: u64) -> UnixTime {
        UnixTime::since_unix_epoch(Duration::from_secs(validity::days_from_civil(y, m, d) * 86_400))
    }

    fn verify(trust: &KubeconfigTrust, cert: &CertificateDer<'_>, name: &str, now: UnixTime) -> Result<(), TlsError> {
        let name = ServerName::try_from(name.to_string()).unwrap();
        trust.verify_server_cert(cert, &[], &name, &[], now).map(drop)
    }

    /// A CA:TRUE serving certificate for 127.0.0.1 and api.test, valid 2020 to 2040, and the trust of
    /// a kubeconfig that holds it as its certificate-authority-data.
    fn ca_true_serving_certificate() -> (CertificateDer<'static>, KubeconfigTrust) {
        let cert = self_signed(&["127.0.0.1", "api.test"], true, (2020, 1, 1), (2040, 1, 1));
        let trust = KubeconfigTrust::new(&[cert.to_vec()], provider()).unwrap();
        (cert, trust)
    }

    #[test]
    fn rustls_alone_refuses_a_ca_true_serving_certificate() {
        let (cert, trust) = ca_true_serving_certificate();
        // rustls alone refuses it, as kube's client did.
        let refused = trust.webpki.verify_server_cert(
            &cert,
            &[],
            &ServerName::try_from("api.test").unwrap(),
            &[],
            at(2030, 1, 1),
        );
        assert!(is_ca_used_as_end_entity(&refused.unwrap_err()));
    }

    #[test]
    fn a_ca_true_serving_certificate_is_accepted_as_its_own_anchor_for_its_names() {
        let (cert, trust) = ca_true_serving_certificate();
        verify(&trust, &cert, "api.test", at(2030, 1, 1)).unwrap();
        verify(&trust, &cert, "127.0.0.1", at(2030, 1, 1)).unwrap();
    }

    #[test]
    fn a_ca_true_serving_certificate_is_refused_for_another_name() {
        let (cert, trust) = ca_true_serving_certificate();
        let e = verify(&trust, &cert, "other.test", at(2030, 1, 1)).unwrap_err();
        assert!(matches!(e, TlsError::InvalidCertificate(CertificateError::NotValidForNameContext { .. })), "{e:?}");
    }

    #[test]
    fn a_ca_true_serving_certificate_is_refused_outside_its_validity() {
        let (cert, trust) = ca_true_serving_certificate();
        let e = verify(&trust, &cert, "api.test", at(2041, 1, 1)).unwrap_err();
        assert!(matches!(e, TlsError::InvalidCertificate(CertificateError::ExpiredContext { .. })), "{e:?}");
        let e = verify(&trust, &cert, "api.test", at(2019, 1, 1)).unwrap_err();
        assert!(matches!(e, TlsError::InvalidCertificate(CertificateError::NotValidYetContext { .. })), "{e:?}");
    }

    #[test]
    fn another_ca_true_certificate_is_refused_as_rustls_refuses_it() {
        let (_, trust) = ca_true_serving_certificate();
        // Another CA:TRUE certificate, not the kubeconfig's.
        let stranger = self_signed(&["api.test"], true, (2020, 1, 1), (2040, 1, 1));
        assert!(is_ca_used_as_end_entity(&verify(&trust, &stranger, "api.test", at(2030, 1, 1)).unwrap_err()));
    }

    #[test]
    fn an_ordinary_certificate_is_rustls_verdict() {
        let cert = self_signed(&["api.test"], false, (2020, 1, 1), (2040, 1, 1));
        let other = self_signed(&["api.test"], true, (2020, 1, 1), (2040, 1, 1));
        let trust = KubeconfigTrust::new(&[other.to_vec()], provider()).unwrap();
        let e = verify(&trust, &cert, "api.test", at(2030, 1, 1)).unwrap_err();
        assert!(matches!(e, TlsError::InvalidCertificate(CertificateError::UnknownIssuer)), "{e:?}");
    }
}
