//! One HTTP batch exporter for everything that posts records somewhere (the proxy's `[otlp]`
//! spans and `[clickhouse]` rows, and `bench --clickhouse`'s rows; bench reaches this module,
//! never `sink`): a bounded queue filled with `try_send` (full: the item is dropped and
//! counted), one task that batches it (`batch` items, or what came within `flush`), encodes the
//! batch and posts it over one kept-alive HTTP/1.1 connection (`crate::post`: https verified
//! against the system roots). Retryable failures (no connection, a timeout, 429, 502, 503, 504,
//! and what the target adds) are retried with exponential backoff from 100 ms, at most 5
//! attempts; items of a batch that still fails are dropped and counted, and a warning is logged at most
//! once a minute. While an export waits the queue fills and then drops: traffic never waits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::keys::Secret;
use crate::post::{connect, post, tls_for, Tls};

pub mod clickhouse;

/// Attempts per batch before its items are dropped.
const ATTEMPTS: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// At most one warning per this long while exports fail.
const WARN_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{0} endpoint TLS: {1}")]
    Tls(&'static str, crate::tls::TlsError),
}

/// Where batches go and how.
#[derive(Debug, Clone)]
pub struct Target {
    /// For logs: `OTLP`, `ClickHouse`.
    pub name: &'static str,
    /// The label value of `tokentap_records_dropped_total{sink}` named in warnings.
    pub sink: &'static str,
    /// Scheme and authority.
    pub endpoint: Uri,
    /// Path and query of every post.
    pub path: String,
    pub content_type: &'static str,
    /// Sent with every post (credentials: values never echoed).
    pub headers: Vec<(HeaderName, Secret<HeaderValue>)>,
    pub queue: usize,
    pub batch: usize,
    pub flush: Duration,
    /// One attempt's deadline.
    pub timeout: Duration,
    /// Statuses worth another attempt besides 429, 502, 503 and 504 (ClickHouse answers 500
    /// while a table is read-only or a replica is away).
    pub also_retry: &'static [StatusCode],
}

/// Turns a batch into one request body.
pub trait Encode<T>: Send + Sync + 'static {
    fn encode(&mut self, batch: &[T]) -> Bytes;
}

/// Counters, kept as atomics and brought into `/metrics` at scrape time.
#[derive(Default)]
pub struct Counters {
    pub exported: AtomicU64,
    /// Dropped: the queue was full, or their batch failed every attempt.
    pub dropped: AtomicU64,
    /// Export requests that failed for good.
    pub failed_exports: AtomicU64,
}

enum Msg<T> {
    Item(T),
    Close,
}

/// The handle the sink keeps: the queue's sending side.
pub struct Queue<T> {
    tx: mpsc::Sender<Msg<T>>,
    pub counters: Arc<Counters>,
}

impl<T: Send + 'static> Queue<T> {
    /// Queue an item; when the queue is full it is dropped and counted.
    pub fn send(&self, item: T) {
        if self.tx.try_send(Msg::Item(item)).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Export what is queued and stop (after the last request finished).
    pub async fn close(&self) {
        let _ = self.tx.send(Msg::Close).await;
    }
}

/// Start the exporter task.
pub fn spawn<T: Send + 'static, E: Encode<T>>(
    target: Target,
    encoder: E,
) -> Result<(Queue<T>, JoinHandle<()>), ExportError> {
    let tls = tls_for(&target.endpoint).map_err(|e| ExportError::Tls(target.name, e))?;
    let (tx, rx) = mpsc::channel(target.queue);
    let counters = Arc::new(Counters::default());
    let exporter = Exporter {
        cfg: target,
        tls,
        conn: None,
        counters: counters.clone(),
        last_warn: None,
        encoder,
        _items: std::marker::PhantomData,
    };
    let task = tokio::spawn(exporter.run(rx));
    Ok((Queue { tx, counters }, task))
}

/// Why one export attempt failed.
enum Failure {
    /// Worth another attempt.
    Retry(String),
    /// The collector refused the batch (a 4xx other than 429): another attempt would too.
    Refused(String),
}

struct Exporter<T, E> {
    cfg: Target,
    tls: Option<Tls>,
    conn: Option<SendRequest<Full<Bytes>>>,
    counters: Arc<Counters>,
    last_warn: Option<Instant>,
    encoder: E,
    _items: std::marker::PhantomData<fn(T)>,
}

impl<T: Send + 'static, E: Encode<T>> Exporter<T, E> {
    async fn run(mut self, mut rx: mpsc::Receiver<Msg<T>>) {
        let mut batch: Vec<T> = Vec::with_capacity(self.cfg.batch);
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
                Some(Msg::Item(s)) => {
                    due.get_or_insert_with(|| crate::rxstamp::now() + self.cfg.flush);
                    batch.push(s);
                    if batch.len() >= self.cfg.batch {
                        self.export(std::mem::take(&mut batch), ATTEMPTS).await;
                        due = None;
                    }
                }
                Some(Msg::Close) | None => {
                    // What is queued goes out in batches, one attempt each: the shutdown waits
                    // for this, so it does not back off.
                    rx.close();
                    while let Ok(Msg::Item(s)) = rx.try_recv() {
                        batch.push(s);
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

    async fn export(&mut self, batch: Vec<T>, attempts: u32) {
        if batch.is_empty() {
            return;
        }
        let body = self.encoder.encode(&batch);
        let mut backoff = FIRST_BACKOFF;
        let mut why = String::new();
        for attempt in 1..=attempts {
            match self.post(body.clone()).await {
                Ok(()) => {
                    self.counters
                        .exported
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
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
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.counters.failed_exports.fetch_add(1, Ordering::Relaxed);
        if self.last_warn.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            self.last_warn = Some(crate::rxstamp::now());
            tracing::warn!(
                endpoint = %self.cfg.endpoint,
                items = batch.len(),
                error = %why,
                "{} export failed: items dropped (counted in tokentap_records_dropped_total{{sink=\"{}\"}}); at most one such warning a minute",
                self.cfg.name,
                self.cfg.sink,
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
        let req = post(
            &self.cfg.endpoint,
            &self.cfg.path,
            Some(self.cfg.content_type),
            body,
            &self.cfg.headers,
        )
        .map_err(|e| Failure::Refused(format!("request: {e}")))?;
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
            s if self.cfg.also_retry.contains(&s) => Err(Failure::Retry(format!("HTTP {s}"))),
            s => Err(Failure::Refused(format!("HTTP {s}"))),
        }
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, Failure> {
        connect(&self.cfg.endpoint, self.tls.as_ref())
            .await
            .map_err(Failure::Retry)
    }
}
