//! A certificate refusal behind a request's error, and what it means for an operator.

use super::is_ca_used_as_end_entity;
use super::validity::utc;
use rustls::pki_types::ServerName;
use rustls::{CertificateError, Error as TlsError};
use std::path::Path;

/// The certificate verification failure behind a request's error, if that is what it is.
pub fn problem(e: &(dyn std::error::Error + 'static)) -> Option<CertificateError> {
    // Both the sources and what io::Errors wrap: an io::Error hides its payload from `source()`
    // (`get_ref` shows it), and the TLS connector wraps the handshake's io::Error in another.
    let mut pending = vec![e];
    while let Some(e) = pending.pop() {
        if let Some(TlsError::InvalidCertificate(problem)) = e.downcast_ref::<TlsError>() {
            return Some(problem.clone());
        }
        if let Some(inner) = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            pending.push(inner);
        }
        pending.extend(e.source());
    }
    None
}

/// What is wrong with the API server's certificate and what to change, for an operator.
pub fn explain(problem: &CertificateError, server: &str, kubeconfig: &Path, has_ca_data: bool) -> String {
    let kubeconfig = kubeconfig.display();
    let cert = format!("the serving certificate of API server {server}");
    let trusted = if has_ca_data {
        format!("the certificate authority of kubeconfig {kubeconfig} (its cluster's certificate-authority(-data))")
    } else {
        format!(
            "an authority of this node's system trust store (kubeconfig {kubeconfig} names no certificate-authority)"
        )
    };
    match problem {
        CertificateError::UnknownIssuer => format!(
            "{cert} is not issued by {trusted}: set the cluster's certificate-authority-data (or the file \
             certificate-authority names) to the CA that signed the API server's certificate (on kubeadm clusters \
             /etc/kubernetes/pki/ca.crt)"
        ),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            let when = match problem {
                CertificateError::ExpiredContext { time, not_after } => {
                    format!(" at {} (this node's clock says {})", utc(*not_after), utc(*time))
                }
                _ => String::new(),
            };
            format!(
                "{cert} has expired{when}: renew it (on kubeadm clusters `kubeadm certs renew apiserver`), or set this \
                 node's clock right if it is wrong"
            )
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            let when = match problem {
                CertificateError::NotValidYetContext { time, not_before } => {
                    format!(" until {} (this node's clock says {})", utc(*not_before), utc(*time))
                }
                _ => String::new(),
            };
            format!("{cert} is not valid yet{when}: set this node's clock right")
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            let names = match problem {
                CertificateError::NotValidForNameContext { expected, presented } => {
                    let presented: Vec<&str> = presented.iter().map(|n| presented_name(n)).collect();
                    format!(" {} (it names {})", server_name(expected), presented.join(", "))
                }
                _ => " the address the kubeconfig gives".to_string(),
            };
            format!(
                "{cert} is not valid for{names}: make the kubeconfig's server a name or address the certificate has, \
                 or set the cluster's tls-server-name to one of them"
            )
        }
        e @ CertificateError::Other(_) if is_ca_used_as_end_entity(&TlsError::InvalidCertificate(e.clone())) => {
            format!(
                "{cert} is a CA certificate (basicConstraints CA:TRUE) serving as the API server's own, and is not itself in \
             {trusted}: serve a certificate the CA issued, or put this very certificate in the cluster's \
             certificate-authority-data (as kubectl, it is then accepted)"
            )
        }
        other => format!("{cert} was refused ({other}): check that it is issued by {trusted}"),
    }
}

fn server_name(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(dns) => dns.as_ref().to_string(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

/// A name as rustls reports the certificate's (`DnsName("api.test")`), as an operator writes it.
fn presented_name(name: &str) -> &str {
    name.strip_prefix("DnsName(\"").and_then(|n| n.strip_suffix("\")")).unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::super::tests::at;
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_refusal_explanation_tells_the_operator_what_to_fix() {
        let kc = Path::new("/etc/cni/net.d/yh-genie.d/kubeconfig");
        let server = "https://10.96.0.1:443";
        let text = explain(&CertificateError::UnknownIssuer, server, kc, true);
        assert!(
            text.contains(server)
                && text.contains("certificate-authority-data")
                && text.contains(&kc.display().to_string())
        );
        let expired = CertificateError::ExpiredContext { time: at(2030, 1, 2), not_after: at(2030, 1, 1) };
        let text = explain(&expired, server, kc, true);
        assert!(text.contains("expired at 2030-01-01T00:00:00Z") && text.contains("renew"), "{text}");
        let name = CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("10.96.0.1").unwrap(),
            presented: vec!["DnsName(\"kubernetes\")".into()],
        };
        let text = explain(&name, server, kc, true);
        assert!(
            text.contains("not valid for 10.96.0.1 (it names kubernetes)") && text.contains("tls-server-name"),
            "{text}"
        );
        let ca = TlsError::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
            webpki::Error::CaUsedAsEndEntity,
        ))));
        let TlsError::InvalidCertificate(ca) = ca else { unreachable!() };
        assert!(explain(&ca, server, kc, true).contains("CA:TRUE"));
        assert!(explain(&CertificateError::UnknownIssuer, server, kc, false).contains("system trust store"));
    }

    #[test]
    fn a_certificate_problem_is_found_under_io_errors() {
        let tls = TlsError::InvalidCertificate(CertificateError::UnknownIssuer);
        let handshake = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let io = std::io::Error::other(handshake);
        #[derive(Debug)]
        struct Wrapper(std::io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        assert_eq!(problem(&Wrapper(io)), Some(CertificateError::UnknownIssuer));
        assert_eq!(problem(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused)), None);
    }
}
