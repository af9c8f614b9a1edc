//! The upstream client of one route: HTTP/1.1 over a pool of keep-alive connections,
//! `TCP_NODELAY`, a connect timeout, and TLS verified against the system roots (the bundled
//! Mozilla roots when the system has none) plus the route's own `ca_file`.
//!
//! The response body is read by the task that writes it to the client — no connection task and
//! no channel in between — and each poll hands on everything the socket has, de-chunked, as one
//! frame (see `h1`). A connection goes back to the pool only after its response was read to the
//! end; a body dropped early (the client left) closes its connection at once.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, Response, Version};
use http_body::{Body, Frame, SizeHint};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::h1::{self, Decoder, Framing, H1Error};
use crate::config::RouteConfig;

pub type UpstreamClient = Arc<Upstream>;

/// Read buffer of one upstream connection to start with: enough for a slow stream's events.
const READ_BUF: usize = 4 * 1024;
/// A read that fills the buffer doubles it, up to this (bulk transfers).
const READ_BUF_BULK: usize = 64 * 1024;
/// Largest frame one poll hands on.
const MAX_FRAME: usize = 256 * 1024;
/// Pooled connections idle longer than this are closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Most idle connections kept per route.
const MAX_IDLE: usize = 1024;
/// A connection whose client left after the stream's end (`[DONE]`) is read to its end in the
/// background for at most this long and this many bytes, then pooled.
const DRAIN_WAIT: Duration = Duration::from_secs(2);
const DRAIN_MAX: usize = 64 * 1024;

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
    #[error("route {0}: the upstream URL has no host")]
    NoHost(String),
}

/// Why an upstream exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("{0}")]
    Connect(#[source] io::Error),
    #[error("connect timed out")]
    ConnectTimeout,
    #[error("TLS handshake: {0}")]
    Tls(#[source] io::Error),
    #[error("sending the request: {0}")]
    Write(#[source] io::Error),
    #[error("reading the response: {0}")]
    Read(#[source] io::Error),
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

/// A connection, plain or TLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => s.get_ref().0,
        }
    }

    /// Did the peer close (or send something unasked) while the connection sat in the pool?
    fn is_stale(&self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut byte = [0u8; 1];
        let mut rb = ReadBuf::new(&mut byte);
        !matches!(self.tcp().poll_peek(&mut cx, &mut rb), Poll::Pending)
    }

    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }

    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(bytes).await,
            Conn::Tls(s) => {
                s.write_all(bytes).await?;
                s.flush().await
            }
        }
    }
}

/// A connection and its read buffer (`buf[start..end]` holds unread bytes).
pub struct Io {
    conn: Conn,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes ever read on this exchange (0 = the upstream said nothing yet).
    got: usize,
}

impl Io {
    fn new(conn: Conn) -> Self {
        Io {
            conn,
            buf: vec![0; READ_BUF],
            start: 0,
            end: 0,
            got: 0,
        }
    }

    fn filled(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Read once into the free end of the buffer (compacting or growing it first if full).
    /// `Ready(Ok(0))` is end of stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < h1::MAX_HEAD {
                self.buf.resize(self.buf.len() * 2, 0);
            } else {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "line longer than the read buffer",
                )));
            }
        }
        let room = self.buf.len() - self.end;
        let mut rb = ReadBuf::new(&mut self.buf[self.end..]);
        match self.conn.poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                self.end += n;
                self.got += n;
                if n == room && self.buf.len() < READ_BUF_BULK {
                    self.buf.resize(self.buf.len() * 2, 0);
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    async fn fill(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx)).await
    }
}

struct Idle {
    io: Io,
    since: Instant,
}

/// The client of one route.
pub struct Upstream {
    host: String,
    port: u16,
    /// `Host` header value: host, and the port when it is not the scheme's default.
    host_header: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    connect_timeout: Duration,
    idle: Mutex<VecDeque<Idle>>,
    /// Connections opened to this upstream since start (`/metrics`).
    opened: Arc<AtomicU64>,
}

impl Upstream {
    /// A pooled connection that is still open, newest first.
    fn checkout(&self) -> Option<Io> {
        let mut idle = self.idle.lock().ok()?;
        while let Some(c) = idle.pop_back() {
            if c.since.elapsed() < IDLE_TIMEOUT && !c.io.conn.is_stale() {
                return Some(c.io);
            }
        }
        None
    }

    /// Back to the pool after a response read to its end; the oldest expire first.
    fn put(&self, mut io: Io) {
        if !io.filled().is_empty() {
            return; // bytes after the response: the connection is not in a known state
        }
        io.got = 0;
        let Ok(mut idle) = self.idle.lock() else {
            return;
        };
        while idle
            .front()
            .is_some_and(|c| c.since.elapsed() >= IDLE_TIMEOUT)
        {
            idle.pop_front();
        }
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle {
                io,
                since: Instant::now(),
            });
        }
    }

    /// Close pooled connections that expired or that the upstream closed (so they do not sit in
    /// CLOSE_WAIT until the next checkout). Returns how many are left.
    pub fn prune(&self) -> usize {
        let Ok(mut idle) = self.idle.lock() else {
            return 0;
        };
        idle.retain(|c| c.since.elapsed() < IDLE_TIMEOUT && !c.io.conn.is_stale());
        idle.len()
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
            None => Conn::Plain(tcp),
            Some((connector, name)) => Conn::Tls(Box::new(
                connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(UpstreamError::Tls)?,
            )),
        };
        Ok(Io::new(conn))
    }

    /// Send one request and read the response head. When a pooled connection fails before a
    /// single response byte (the upstream closed it as the request went out), the request is
    /// sent once more, on a new connection — as browsers and nginx do for kept-alive
    /// connections; a new connection that fails is an error at once.
    pub async fn send(
        self: &Arc<Self>,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        let mut wire = h1::request_head(
            method,
            path_and_query,
            &self.host_header,
            headers,
            body.len(),
        );
        wire.extend_from_slice(body);
        // At most one retry, and on a new connection: a request is never sent three times.
        let mut fresh = false;
        loop {
            let pooled = if fresh { None } else { self.checkout() };
            let (mut io, reused) = match pooled {
                Some(io) => (io, true),
                None => (Box::pin(self.connect()).await?, false),
            };
            match exchange(&mut io, &wire).await {
                Ok(head) => return self.response(io, method, head),
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
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
        ),
        _ => false,
    }
}

/// Write the request, read the final response head (interim 1xx responses are skipped).
async fn exchange(io: &mut Io, wire: &[u8]) -> Result<h1::Head, UpstreamError> {
    io.conn
        .write_all(wire)
        .await
        .map_err(UpstreamError::Write)?;
    loop {
        if let Some(head) = h1::parse_head(io.filled())? {
            io.consume(head.len);
            if head.status == http::StatusCode::SWITCHING_PROTOCOLS {
                return Err(UpstreamError::Upgrade);
            }
            if head.status.is_informational() {
                continue;
            }
            return Ok(head);
        }
        match io.fill().await {
            Ok(0) if io.got == 0 => return Err(UpstreamError::ClosedBeforeResponse),
            Ok(0) => return Err(UpstreamError::Read(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {}
            Err(e) => return Err(UpstreamError::Read(e)),
        }
    }
}

/// A response body read straight from the upstream connection.
pub struct UpstreamBody {
    io: Option<Io>,
    dec: Decoder,
    /// Where the connection goes when the body was read to its end (`None`: not reusable).
    pool: Option<Arc<Upstream>>,
    /// An error met after data that was handed on first.
    err: Option<UpstreamError>,
    /// The error waits one turn after that data, so the client connection writes the data out
    /// before the error cuts it.
    err_waits: bool,
    /// The stream is complete for its consumer (`[DONE]` seen): if the body is dropped now, the
    /// rest of the response is drained in the background and the connection kept.
    drain: bool,
}

impl crate::meter::body::StreamHint for UpstreamBody {
    fn complete(self: Pin<&mut Self>) {
        self.get_mut().drain = true;
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if !self.drain || self.err.is_some() {
            return; // the connection closes with `io` (a client that left mid-stream)
        }
        let (Some(io), Some(pool)) = (self.io.take(), self.pool.take()) else {
            return;
        };
        let dec = std::mem::replace(&mut self.dec, Decoder::new(Framing::Empty));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(drain(io, dec, pool));
        }
    }
}

/// Read what is left of a response and pool the connection, within `DRAIN_WAIT`/`DRAIN_MAX`.
async fn drain(mut io: Io, mut dec: Decoder, pool: Arc<Upstream>) {
    let rest = async {
        let mut discard = BytesMut::new();
        let mut total = 0;
        loop {
            if !io.filled().is_empty() {
                let n = dec.decode(io.filled(), &mut discard).ok()?;
                io.consume(n);
                total += discard.len();
                discard.clear();
                if dec.is_done() {
                    return Some(io);
                }
                if total > DRAIN_MAX {
                    return None;
                }
            }
            match io.fill().await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    };
    if let Ok(Some(io)) = tokio::time::timeout(DRAIN_WAIT, rest).await {
        pool.put(io);
    }
}

impl UpstreamBody {
    /// The body is over: the connection goes back to the pool (or is closed).
    fn release(&mut self) {
        let io = self.io.take();
        if let (Some(io), Some(pool)) = (io, self.pool.take()) {
            pool.put(io);
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = UpstreamError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UpstreamError>>> {
        let this = self.get_mut();
        if this.err_waits {
            this.err_waits = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let mut out = BytesMut::new();
        // Everything buffered and everything the socket has now, up to MAX_FRAME: one frame.
        let reading = !this.dec.is_done() && this.err.is_none();
        while let (true, Some(io)) = (reading, this.io.as_mut()) {
            if !io.filled().is_empty() {
                if out.capacity() == 0 {
                    out.reserve(io.filled().len());
                }
                match this.dec.decode(io.filled(), &mut out) {
                    Ok(n) => io.consume(n),
                    Err(e) => {
                        this.err = Some(e.into());
                        break;
                    }
                }
                if this.dec.is_done() {
                    break;
                }
            }
            if out.len() >= MAX_FRAME {
                break;
            }
            match io.poll_fill(cx) {
                Poll::Ready(Ok(0)) => {
                    if !this.dec.on_eof() {
                        this.err = Some(UpstreamError::ClosedMidBody);
                    }
                    break;
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => {
                    this.err = Some(UpstreamError::Read(e));
                    break;
                }
                Poll::Pending => break,
            }
        }
        if this.dec.is_done() && this.err.is_none() {
            // Before the last frame leaves: its consumer may never poll again.
            this.release();
        }
        if !out.is_empty() {
            this.err_waits = this.err.is_some();
            return Poll::Ready(Some(Ok(Frame::data(out.freeze()))));
        }
        if let Some(e) = this.err.take() {
            this.io = None;
            return Poll::Ready(Some(Err(e)));
        }
        if this.dec.is_done() || this.io.is_none() {
            return Poll::Ready(this.dec.take_trailers().map(|t| Ok(Frame::trailers(t))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.dec.is_done() && self.err.is_none() && self.io.is_none() && !self.dec.has_trailers()
    }

    fn size_hint(&self) -> SizeHint {
        match self.dec.remaining() {
            Some(n) if self.err.is_none() => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}

/// Build the client for one route. Only called for routes in the config. `opened` counts the
/// connections it opens.
pub fn build(
    route: &RouteConfig,
    connect_timeout: Duration,
    opened: Arc<AtomicU64>,
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
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Tls(e, route.name.clone()))?
            .with_root_certificates(root_store(route)?)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let name = ServerName::try_from(host.clone())
            .map_err(|_| ClientError::NoHost(route.name.clone()))?;
        Some((TlsConnector::from(Arc::new(cfg)), name))
    } else {
        None
    };
    Ok(Arc::new(Upstream {
        host,
        port,
        host_header,
        tls,
        connect_timeout,
        idle: Mutex::new(VecDeque::new()),
        opened,
    }))
}
