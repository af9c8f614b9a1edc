//! Where finished records go: the metrics, the JSONL writer's bounded queue, and (with
//! `[otlp]`, `[clickhouse]`) the span exporter's and the row inserter's bounded queues. (Each route's live `/stats` histograms are
//! `stats::LiveStats`, owned by the route.)
//!
//! Runs on the data path at the end of each request, so it never blocks: a full queue drops the
//! record and counts it; nothing here can fail a request. It never builds a record: it is handed
//! finished ones.

pub use crate::export;
pub use crate::export::clickhouse;
pub mod log;
pub mod metrics;
pub mod otlp;
pub mod stats;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::meter::{RequestRecord, Trace};

pub struct Sink {
    pub metrics: metrics::Metrics,
    log_tx: Option<mpsc::Sender<log::LogMsg>>,
    pub log_counters: Arc<log::LogCounters>,
    /// Records dropped because the log queue was full.
    pub records_dropped: AtomicU64,
    /// Records made (written, queued or dropped).
    pub records_total: AtomicU64,
    /// The span exporter, with `[otlp]`.
    pub otlp: Option<otlp::Otlp>,
    /// The row inserter, with `[clickhouse]`.
    pub clickhouse: Option<clickhouse::ClickHouse>,
}

impl Sink {
    pub fn new(
        metrics: metrics::Metrics,
        log_tx: Option<mpsc::Sender<log::LogMsg>>,
        log_counters: Arc<log::LogCounters>,
    ) -> Self {
        Self {
            metrics,
            log_tx,
            log_counters,
            records_dropped: AtomicU64::new(0),
            records_total: AtomicU64::new(0),
            otlp: None,
            clickhouse: None,
        }
    }

    /// With the ClickHouse inserter's queue.
    pub fn with_clickhouse(mut self, ch: clickhouse::ClickHouse) -> Self {
        self.clickhouse = Some(ch);
        self
    }

    /// With the span exporter's queue.
    pub fn with_otlp(mut self, otlp: otlp::Otlp) -> Self {
        self.otlp = Some(otlp);
        self
    }

    /// Queue a finished request's span (when export is on and its trace is sampled).
    pub fn span(
        &self,
        rec: &RequestRecord,
        trace: Trace,
        upstream: Option<http::Uri>,
        start: std::time::SystemTime,
    ) {
        if let Some(o) = &self.otlp {
            if trace.sampled() {
                o.send(Box::new(otlp::SpanIn {
                    rec: rec.clone(),
                    trace,
                    upstream,
                    start,
                }));
            }
        }
    }

    /// Take one finished record: into the metrics, then onto the log's queue (or counted as
    /// dropped when the queue is full).
    pub fn write(&self, rec: RequestRecord, itl_us: &[u32]) {
        self.metrics.observe(&rec, itl_us);
        self.records_total.fetch_add(1, Ordering::Relaxed);
        if let Some(ch) = &self.clickhouse {
            ch.send(Box::new(rec.clone()));
        }
        if let Some(tx) = &self.log_tx {
            if tx.try_send(log::LogMsg::Record(Box::new(rec))).is_err() {
                self.records_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Each token's relay through a tapped gateway (ms), on the outer `route`.
    pub fn relay(&self, route: &str, ms: &[f64]) {
        self.metrics.observe_relay(route, ms);
    }

    /// Ask the writer to write what is queued and stop (after the last request finished).
    pub async fn close_log(&self) {
        if let Some(tx) = &self.log_tx {
            let _ = tx.send(log::LogMsg::Close).await;
        }
        if let Some(o) = &self.otlp {
            o.close().await;
        }
        if let Some(c) = &self.clickhouse {
            c.close().await;
        }
    }
}
