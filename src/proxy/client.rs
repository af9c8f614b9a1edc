//! The pooled upstream client of one route: keep-alive HTTP/1.1, `TCP_NODELAY`, a connect
//! timeout, and TLS verified against the system roots (the bundled Mozilla roots when the
//! system has none) plus the route's own `ca_file`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::config::RouteConfig;

pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("route {route}: ca_file {path}: {message}")]
    CaFile {
        route: String,
        path: String,
        message: String,
    },
    #[error("route {route}: TLS setup: {0}", route = .1)]
    Tls(#[source] rustls::Error, String),
}

fn root_store(route: &RouteConfig) -> Result<rustls::RootCertStore, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(native.certs);
    if added == 0 {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Some(path) = &route.ca_file {
        let ca_err = |message: String| ClientError::CaFile {
            route: route.name.clone(),
            path: path.display().to_string(),
            message,
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| ca_err(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| ca_err(e.to_string()))?;
        if certs.is_empty() {
            return Err(ca_err("no PEM certificate in the file".into()));
        }
        for c in certs {
            roots.add(c).map_err(|e| ca_err(e.to_string()))?;
        }
    }
    Ok(roots)
}

/// Build the client for one route. Only called for routes in the config.
pub fn build(
    route: &RouteConfig,
    connect_timeout: Duration,
) -> Result<UpstreamClient, ClientError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_keepalive(Some(Duration::from_secs(60)));

    let https = route.upstream.scheme_str() == Some("https");
    let tls = if https {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Tls(e, route.name.clone()))?
            .with_root_certificates(root_store(route)?)
            .with_no_client_auth()
    } else {
        // Plain http: the TLS config is never used; build it without touching the system store.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Tls(e, route.name.clone()))?
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth()
    };
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(1024)
        .build(connector))
}
