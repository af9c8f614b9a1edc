//! One HTTP/1.1 connection out, for posting to a collector or a database: https verified
//! against the system roots, nodelay, a POST with credentials that are never echoed. The sinks'
//! exporter (`crate::export`) and `report --clickhouse` both use it; it keeps no state and never
//! retries (its callers decide).

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, Request, Uri};
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::keys::Secret;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A POST of `body` to `path` on `endpoint`, with `headers` (credentials: values never echoed).
pub fn post(
    endpoint: &Uri,
    path: &str,
    content_type: Option<&'static str>,
    body: Bytes,
    headers: &[(HeaderName, Secret<HeaderValue>)],
) -> Result<Request<Full<Bytes>>, http::Error> {
    let authority = endpoint
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, authority);
    if let Some(t) = content_type {
        req = req.header(header::CONTENT_TYPE, t);
    }
    let mut req = req
        .header(header::CONTENT_LENGTH, body.len())
        .body(Full::new(body))?;
    for (name, value) in headers {
        req.headers_mut()
            .insert(name.clone(), HeaderValue::clone(value.expose()));
    }
    Ok(req)
}

/// A TLS connector and the name it verifies.
pub type Tls = (
    tokio_rustls::TlsConnector,
    rustls::pki_types::ServerName<'static>,
);

/// The connector for an `https` endpoint (verified against the system roots); none for `http`.
pub fn tls_for(endpoint: &Uri) -> Result<Option<Tls>, crate::tls::TlsError> {
    match endpoint.scheme_str() {
        Some("https") => {
            crate::tls::connector_with(None, endpoint.host().unwrap_or_default()).map(Some)
        }
        _ => Ok(None),
    }
}

/// One HTTP/1.1 connection to `endpoint` (over TLS with `tls`); its driver runs on its own task.
pub async fn connect(
    endpoint: &Uri,
    tls: Option<&Tls>,
) -> Result<SendRequest<Full<Bytes>>, String> {
    let host = endpoint.host().unwrap_or_default();
    let port = endpoint
        .port_u16()
        .unwrap_or(if tls.is_some() { 443 } else { 80 });
    let tcp = TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| format!("connect {host}:{port}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn Io> = match tls {
        Some((connector, name)) => Box::new(
            connector
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| format!("TLS: {e}"))?,
        ),
        None => Box::new(tcp),
    };
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(send)
}
