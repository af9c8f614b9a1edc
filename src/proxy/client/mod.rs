//! The upstream client of one route: HTTP/1.1 over a pool of keep-alive connections,
//! `TCP_NODELAY`, a connect timeout, and TLS verified against the system roots (see `tls`).
//!
//! The response body is read by the task that writes it to the client — no connection task and
//! no channel in between — and each poll hands on everything the socket has, de-chunked, as one
//! frame (see `h1`). A connection goes back to the pool only after its response was read to the
//! end; a body dropped early (the client left) closes its connection at once.
//!
//! - `io`: one connection and its read buffer; `pool`: the idle connections; `body`: the
//!   response body.

mod body;
mod io;
mod pool;

use std::io as stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, Response, Version};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

pub use body::UpstreamBody;
use io::{Conn, Io};
use pool::Pool;

use super::h1::{self, Decoder, Framing, H1Error};
use crate::config::RouteConfig;
use crate::tls::TlsError;

pub type UpstreamClient = Arc<Upstream>;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("route {route}: {source}")]
    Tls {
        route: String,
        #[source]
        source: TlsError,
    },
    #[error("route {0}: the upstream URL has no host")]
    NoHost(String),
}

/// Why an upstream exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("{0}")]
    Connect(#[source] stdio::Error),
    #[error("connect timed out")]
    ConnectTimeout,
    #[error("TLS handshake: {0}")]
    Tls(#[source] stdio::Error),
    #[error("sending the request: {0}")]
    Write(#[source] stdio::Error),
    #[error("reading the response: {0}")]
    Read(#[source] stdio::Error),
    #[error("the upstream closed the connection before responding")]
    ClosedBeforeResponse,
    #[error("the upstream closed the connection before the end of the body")]
    ClosedMidBody,
    #[error("the upstream switched protocols, which tokentap does not proxy")]
    Upgrade,
    #[error(transparent)]
    Protocol(#[from] H1Error),
}

impl UpstreamError {
    /// No connection was made (the request never reached the upstream).
    pub fn is_connect(&self) -> bool {
        matches!(
            self,
            UpstreamError::Connect(_) | UpstreamError::ConnectTimeout | UpstreamError::Tls(_)
        )
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, UpstreamError::ConnectTimeout)
    }
}

/// The client of one route.
pub struct Upstream {
    host: String,
    port: u16,
    /// `Host` header value: host, and the port when it is not the scheme's default.
    host_header: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    connect_timeout: Duration,
    pool: Pool,
    /// Connections opened to this upstream since start (`/metrics`).
    opened: AtomicU64,
}

impl Upstream {
    /// Close pooled connections that expired or that the upstream closed (so they do not sit in
    /// CLOSE_WAIT until the next checkout). Returns how many are left.
    pub fn prune(&self) -> usize {
        self.pool.prune()
    }

    /// Connections opened to this upstream since start.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    async fn connect(&self) -> Result<Io, UpstreamError> {
        let tcp = tokio::time::timeout(
            self.connect_timeout,
            TcpStream::connect((self.host.as_str(), self.port)),
        )
        .await
        .map_err(|_| UpstreamError::ConnectTimeout)?
        .map_err(UpstreamError::Connect)?;
        self.opened.fetch_add(1, Ordering::Relaxed);
        let _ = tcp.set_nodelay(true);
        let conn = match &self.tls {
            None => {
                let stamper = crate::rxstamp::Stamper::new(&tcp);
                Conn::Plain(tcp, stamper)
            }
            Some((connector, name)) => {
                let (tcp, latest) = crate::rxstamp::Stamped::new(tcp);
                let tls = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(UpstreamError::Tls)?;
                Conn::Tls(Box::new(tls), latest)
            }
        };
        Ok(Io::new(conn))
    }

    /// Send one request and read the response head. When a pooled connection fails before a
    /// single response byte (the upstream closed it as the request went out), the request is
    /// sent once more, on a new connection — as browsers and nginx do for kept-alive
    /// connections; a new connection that fails is an error at once. With the response comes
    /// the instant the request was written whole (the last attempt's).
    ///
    /// The request is put in its wire form here, before the future is first polled: the future
    /// holds neither `headers` nor `body`, so the caller can let go of them (a client's request
    /// head and body share hyper's read buffer) while the upstream works.
    pub fn send(
        self: &Arc<Self>,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> impl std::future::Future<Output = Result<(Response<UpstreamBody>, Instant), UpstreamError>>
           + Send
           + 'static {
        let mut wire = h1::request_head(
            method,
            path_and_query,
            &self.host_header,
            headers,
            body.len(),
        );
        wire.extend_from_slice(body);
        self.clone().send_wire(method.clone(), wire)
    }

    async fn send_wire(
        self: Arc<Self>,
        method: Method,
        wire: Vec<u8>,
    ) -> Result<(Response<UpstreamBody>, Instant), UpstreamError> {
        // At most one retry, and on a new connection: a request is never sent three times.
        let mut fresh = false;
        loop {
            let pooled = if fresh { None } else { self.pool.checkout() };
            let (mut io, reused) = match pooled {
                Some(io) => (io, true),
                None => (Box::pin(self.connect()).await?, false),
            };
            match exchange(&mut io, &wire).await {
                Ok((head, sent)) => return Ok((self.response(io, &method, head)?, sent)),
                Err(e) if reused && io.got == 0 && retryable(&e) => fresh = true,
                Err(e) => return Err(e),
            }
        }
    }

    fn response(
        self: &Arc<Self>,
        io: Io,
        method: &Method,
        head: h1::Head,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        let (framing, reuse) = h1::framing(method, &head)?;
        let mut headers = head.headers;
        if framing == Framing::Chunked {
            // A Content-Length beside chunked coding is not the body's length (RFC 9112 §6.3).
            headers.remove(http::header::CONTENT_LENGTH);
        }
        let mut body = UpstreamBody {
            arrival: io.arrival,
            io: Some(io),
            dec: Decoder::new(framing),
            pool: reuse.then(|| self.clone()),
            err: None,
            err_waits: false,
            drain: false,
        };
        if framing == Framing::Empty {
            body.release();
        }
        let mut resp = Response::new(body);
        *resp.status_mut() = head.status;
        *resp.version_mut() = Version::HTTP_11;
        *resp.headers_mut() = headers;
        Ok(resp)
    }
}

/// Errors after which a request on a reused connection is sent again on a new one.
fn retryable(e: &UpstreamError) -> bool {
    match e {
        UpstreamError::Write(_) | UpstreamError::ClosedBeforeResponse => true,
        UpstreamError::Read(io) => matches!(
            io.kind(),
            stdio::ErrorKind::ConnectionReset
                | stdio::ErrorKind::ConnectionAborted
                | stdio::ErrorKind::BrokenPipe
        ),
        _ => false,
    }
}

/// Write the request, read the final response head (interim 1xx responses are skipped).
async fn exchange(io: &mut Io, wire: &[u8]) -> Result<(h1::Head, Instant), UpstreamError> {
    io.conn
        .write_all(wire)
        .await
        .map_err(UpstreamError::Write)?;
    let sent = crate::rxstamp::now();
    loop {
        if let Some(head) = h1::parse_head(io.filled())? {
            io.consume(head.len);
            if head.status == http::StatusCode::SWITCHING_PROTOCOLS {
                return Err(UpstreamError::Upgrade);
            }
            if head.status.is_informational() {
                continue;
            }
            return Ok((head, sent));
        }
        match io.fill().await {
            Ok(0) if io.got == 0 => return Err(UpstreamError::ClosedBeforeResponse),
            Ok(0) => return Err(UpstreamError::Read(stdio::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {}
            Err(e) => return Err(UpstreamError::Read(e)),
        }
    }
}

/// Build the client for one route. Only called for routes in the config.
pub fn build(
    route: &RouteConfig,
    connect_timeout: Duration,
) -> Result<UpstreamClient, ClientError> {
    let https = route.upstream.scheme_str() == Some("https");
    let raw_host = route
        .upstream
        .host()
        .ok_or_else(|| ClientError::NoHost(route.name.clone()))?;
    let host = raw_host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let default_port = if https { 443 } else { 80 };
    let port = route.upstream.port_u16().unwrap_or(default_port);
    let host_header = if port == default_port {
        raw_host.to_owned()
    } else {
        format!("{raw_host}:{port}")
    };
    let tls = if https {
        Some(
            crate::tls::connector(route, &host).map_err(|source| ClientError::Tls {
                route: route.name.clone(),
                source,
            })?,
        )
    } else {
        None
    };
    Ok(Arc::new(Upstream {
        host,
        port,
        host_header,
        tls,
        connect_timeout,
        pool: Pool::default(),
        opened: AtomicU64::new(0),
    }))
}
