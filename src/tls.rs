//! TLS set-up, in one place: PEM files, the listener's acceptor (ALPN h2, http/1.1) and an
//! upstream route's connector (system roots, the bundled Mozilla roots when the system has
//! none, plus the route's own `ca_file`). rustls with ring; nothing here touches traffic.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::{RouteConfig, TlsFiles};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("{0} is not a valid TLS server name")]
    Name(String),
}

fn file_err(p: &Path, message: impl Into<String>) -> TlsError {
    TlsError::File {
        path: p.display().to_string(),
        message: message.into(),
    }
}

/// Every certificate of a PEM file; an empty file is an error.
pub fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(path, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(path, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_err(path, "no PEM certificate found"));
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The listener's acceptor (ALPN: h2, http/1.1).
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let certs = certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| file_err(&files.key, e.to_string()))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}

/// A route's connector and the name its certificate must carry (ALPN: http/1.1).
pub fn connector(
    route: &RouteConfig,
    host: &str,
) -> Result<(TlsConnector, ServerName<'static>), TlsError> {
    connector_with(route.ca_file.as_deref(), host)
}

/// A client connector trusting the system's roots (else webpki's) and `ca_file`, and the name
/// the server's certificate must carry (ALPN: http/1.1).
pub fn connector_with(
    ca_file: Option<&Path>,
    host: &str,
) -> Result<(TlsConnector, ServerName<'static>), TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(native.certs);
    if added == 0 {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(path) = ca_file {
        for c in certs(path)? {
            roots.add(c).map_err(|e| file_err(path, e.to_string()))?;
        }
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::try_from(host.to_owned()).map_err(|_| TlsError::Name(host.into()))?;
    Ok((TlsConnector::from(Arc::new(cfg)), name))
}
