//! TLS for bare metal: the server's certificate, and optionally client certificates signed by
//! a CA of the operator's. A client's certificate names its host: a request whose id maps to
//! another node than the one its certificate is valid for is refused.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::TlsAcceptor;

use crate::error::{Error, Result};

/// The server's TLS: its acceptor, and whether clients must show a certificate.
#[derive(Clone)]
pub struct Tls {
    pub(crate) acceptor: TlsAcceptor,
}

fn tls_error(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::Tls {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| tls_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(path, e))?;
    if certificates.is_empty() {
        return Err(tls_error(path, "holds no PEM certificate"));
    }
    Ok(certificates)
}

impl Tls {
    /// The server's certificate chain and key (PEM files), and, with `client_ca`, the CA whose
    /// signature every client's certificate must carry.
    pub fn load(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Tls> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certificates(cert)?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| tls_error(key, e))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error(cert, e))?;
        let builder = match client_ca {
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for certificate in certificates(ca)? {
                    roots.add(certificate).map_err(|e| tls_error(ca, e))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| tls_error(ca, e))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| tls_error(cert, e))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// Whether a client certificate (already verified against the CA) is valid for `node` as a
/// DNS name: its host's certificate names it.
pub(crate) fn names(certificate: &CertificateDer<'_>, node: &str) -> bool {
    let Ok(name) = ServerName::try_from(node) else {
        return false;
    };
    webpki::EndEntityCert::try_from(certificate)
        .is_ok_and(|cert| cert.verify_is_valid_for_subject_name(&name).is_ok())
}
