//! OTLP/HTTP export of one span per request (`[otlp]`, off by default).
//!
//! Never on the request path: a finished record's span goes onto a bounded queue with
//! `try_send` (when the queue is full the span is dropped and counted), and one task batches
//! the queue (`otlp.batch` spans, or what came within `otlp.flush_ms`), encodes protobuf
//! (`proto`) and posts it to `<endpoint>/v1/traces` over one kept-alive connection. Retryable
//! failures (no connection, a timeout, 429, 502, 503, 504) are retried with exponential backoff
//! from 100 ms, at most 5 attempts; spans of a batch that still fails are dropped and counted.
//! While an export waits, the queue fills and then drops: traffic never waits for a collector.
//!
//! Hand-encoded instead of the `opentelemetry-otlp` crates, which add 54 crates and about 48 s
//! to a cold build on two cores (see docs/otel.md).

mod proto;
pub mod span;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::OtlpConfig;
pub use span::SpanIn;

/// Attempts per batch before its spans are dropped.
const ATTEMPTS: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// At most one warning per this long while exports fail.
const WARN_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("OTLP endpoint TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// Span counters, kept as atomics and brought into `/metrics` at scrape time.
#[derive(Default)]
pub struct OtlpCounters {
    pub exported: AtomicU64,
    /// Dropped: the queue was full, or their batch failed every attempt.
    pub dropped: AtomicU64,
    /// Export requests that failed for good.
    pub failed_exports: AtomicU64,
}

enum Msg {
    Span(Box<SpanIn>),
    Close,
}

/// The handle the sink keeps: the queue's sending side.
pub struct Otlp {
    tx: mpsc::Sender<Msg>,
    pub counters: Arc<OtlpCounters>,
}

impl Otlp {
    /// Queue a span; when the queue is full it is dropped and counted.
    pub fn send(&self, span: SpanIn) {
        if self.tx.try_send(Msg::Span(Box::new(span))).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Export what is queued and stop (after the last request finished).
    pub async fn close(&self) {
        let _ = self.tx.send(Msg::Close).await;
    }
}

/// Start the exporter task.
pub fn spawn(cfg: &OtlpConfig) -> Result<(Otlp, JoinHandle<()>), OtlpError> {
    let tls = match cfg.endpoint.scheme_str() {
        Some("https") => Some(crate::tls::connector_with(
            None,
            cfg.endpoint.host().unwrap_or_default(),
        )?),
        _ => None,
    };
    let (tx, rx) = mpsc::channel(cfg.queue);
    let counters = Arc::new(OtlpCounters::default());
    let exporter = Exporter {
        cfg: cfg.clone(),
        tls,
        conn: None,
        counters: counters.clone(),
        last_warn: None,
        resource: vec![
            ("service.name", proto::Value::Str(cfg.service_name.clone())),
            (
                "service.version",
                proto::Value::Str(env!("CARGO_PKG_VERSION").into()),
            ),
        ],
    };
    let task = tokio::spawn(exporter.run(rx));
    Ok((Otlp { tx, counters }, task))
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Why one export attempt failed.
enum Failure {
    /// Worth another attempt.
    Retry(String),
    /// The collector refused the batch (a 4xx other than 429): another attempt would too.
    Refused(String),
}

struct Exporter {
    cfg: OtlpConfig,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
    conn: Option<SendRequest<Full<Bytes>>>,
    counters: Arc<OtlpCounters>,
    last_warn: Option<Instant>,
    resource: proto::Attributes,
}

impl Exporter {
    async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        let mut batch: Vec<SpanIn> = Vec::with_capacity(self.cfg.batch);
        let mut due: Option<Instant> = None;
        loop {
            let msg = match due {
                Some(at) => tokio::select! {
                    m = rx.recv() => m,
                    () = tokio::time::sleep_until(at) => {
                        self.export(std::mem::take(&mut batch), ATTEMPTS).await;
                        due = None;
                        continue;
                    }
                },
                None => rx.recv().await,
            };
            match msg {
                Some(Msg::Span(s)) => {
                    due.get_or_insert_with(|| Instant::now() + self.cfg.flush);
                    batch.push(*s);
                    if batch.len() >= self.cfg.batch {
                        self.export(std::mem::take(&mut batch), ATTEMPTS).await;
                        due = None;
                    }
                }
                Some(Msg::Close) | None => {
                    // What is queued goes out in batches, one attempt each: the shutdown waits
                    // for this, so it does not back off.
                    rx.close();
                    while let Ok(Msg::Span(s)) = rx.try_recv() {
                        batch.push(*s);
                    }
                    let mut rest = std::mem::take(&mut batch);
                    while !rest.is_empty() {
                        let tail = rest.split_off(rest.len().min(self.cfg.batch));
                        self.export(rest, 1).await;
                        rest = tail;
                    }
                    return;
                }
            }
        }
    }

    async fn export(&mut self, batch: Vec<SpanIn>, attempts: u32) {
        if batch.is_empty() {
            return;
        }
        let spans: Vec<proto::Span> = batch.iter().map(span::span).collect();
        let body = Bytes::from(proto::export_request(
            &self.resource,
            ("tokentap", env!("CARGO_PKG_VERSION")),
            &spans,
        ));
        let mut backoff = FIRST_BACKOFF;
        let mut why = String::new();
        for attempt in 1..=attempts {
            match self.post(body.clone()).await {
                Ok(()) => {
                    self.counters
                        .exported
                        .fetch_add(spans.len() as u64, Ordering::Relaxed);
                    return;
                }
                Err(Failure::Refused(w)) => {
                    why = w;
                    break;
                }
                Err(Failure::Retry(w)) => {
                    why = w;
                    self.conn = None;
                    if attempt < attempts {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
        }
        self.counters
            .dropped
            .fetch_add(spans.len() as u64, Ordering::Relaxed);
        self.counters.failed_exports.fetch_add(1, Ordering::Relaxed);
        if self.last_warn.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            self.last_warn = Some(Instant::now());
            tracing::warn!(
                endpoint = %self.cfg.endpoint,
                spans = spans.len(),
                error = %why,
                "OTLP export failed: spans dropped (counted in tokentap_records_dropped_total{{sink=\"otlp\"}})"
            );
        }
    }

    /// One export request, within `otlp.timeout_ms`.
    async fn post(&mut self, body: Bytes) -> Result<(), Failure> {
        match tokio::time::timeout(self.cfg.timeout, self.post_now(body)).await {
            Ok(r) => r,
            Err(_) => Err(Failure::Retry(format!(
                "no answer within {} ms",
                self.cfg.timeout.as_millis()
            ))),
        }
    }

    async fn post_now(&mut self, body: Bytes) -> Result<(), Failure> {
        let mut conn = match self.conn.take() {
            Some(c) if !c.is_closed() => c,
            _ => self.connect().await?,
        };
        conn.ready()
            .await
            .map_err(|e| Failure::Retry(format!("connection: {e}")))?;
        let authority = self
            .cfg
            .endpoint
            .authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default();
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(&self.cfg.path)
            .header(header::HOST, authority)
            .header(header::CONTENT_TYPE, "application/x-protobuf")
            .header(header::CONTENT_LENGTH, body.len())
            .body(Full::new(body))
            .map_err(|e| Failure::Refused(format!("request: {e}")))?;
        for (name, value) in &self.cfg.headers {
            req.headers_mut()
                .insert(name.clone(), HeaderValue::clone(value.expose()));
        }
        let resp = conn
            .send_request(req)
            .await
            .map_err(|e| Failure::Retry(format!("request: {e}")))?;
        let status = resp.status();
        // The body (a partial-success report, or an error) is read so the connection is reused.
        let _ = resp.into_body().collect().await;
        self.conn = Some(conn);
        match status {
            s if s.is_success() => Ok(()),
            StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT => Err(Failure::Retry(format!("HTTP {status}"))),
            s => Err(Failure::Refused(format!("HTTP {s}"))),
        }
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let host = self.cfg.endpoint.host().unwrap_or_default();
        let port = self
            .cfg
            .endpoint
            .port_u16()
            .unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let tcp = TcpStream::connect((host.trim_matches(['[', ']']), port))
            .await
            .map_err(|e| Failure::Retry(format!("connect {host}:{port}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match &self.tls {
            Some((connector, name)) => Box::new(
                connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| Failure::Retry(format!("TLS: {e}")))?,
            ),
            None => Box::new(tcp),
        };
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| Failure::Retry(format!("handshake: {e}")))?;
        tokio::spawn(conn);
        Ok(send)
    }
}
