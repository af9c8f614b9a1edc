//! Where finished requests go: the record is built once, then fed to the metrics, the live
//! stats and the JSONL writer's bounded queue.
//!
//! Runs on the data path at the end of each request, so it never blocks: a full queue drops the
//! record and counts it; nothing here can fail a request.

pub mod log;
pub mod metrics;
pub mod stats;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::Config;
use crate::meter::body::End;
use crate::meter::{bucket_of, ms_between, tpot_ms, Ctx, Meter, Outcome, RequestRecord};

/// The route name recorded for requests that matched no route.
pub const UNROUTED: &str = "unrouted";

/// Per-route live state shared by requests.
pub struct RouteCounters {
    pub name: String,
    pub in_flight: AtomicU64,
}

pub struct Sink {
    pub config: Arc<Config>,
    pub routes: Vec<RouteCounters>,
    pub metrics: metrics::Metrics,
    pub stats: stats::Stats,
    log_tx: Option<mpsc::Sender<log::LogMsg>>,
    pub log_counters: Arc<log::LogCounters>,
    pub records_dropped: AtomicU64,
    pub records_total: AtomicU64,
    /// Set when the shutdown grace period is over: streams dropped after this were cut by us.
    pub shutdown_cut: AtomicBool,
}

impl Sink {
    pub fn new(
        config: Arc<Config>,
        log_tx: Option<mpsc::Sender<log::LogMsg>>,
        log_counters: Arc<log::LogCounters>,
    ) -> Result<Self, metrics_exporter_prometheus::BuildError> {
        // One entry per configured route, plus `unrouted` for requests no route matched.
        let names: Vec<String> = config
            .routes
            .iter()
            .map(|r| r.name.clone())
            .chain(std::iter::once(UNROUTED.to_owned()))
            .collect();
        let routes = names
            .iter()
            .map(|n| RouteCounters {
                name: n.clone(),
                in_flight: AtomicU64::new(0),
            })
            .collect();
        let metrics = metrics::Metrics::new(&config)?;
        let stats = stats::Stats::new(names.into_iter());
        Ok(Self {
            config,
            routes,
            metrics,
            stats,
            log_tx,
            log_counters,
            records_dropped: AtomicU64::new(0),
            records_total: AtomicU64::new(0),
            shutdown_cut: AtomicBool::new(false),
        })
    }

    /// The Prometheus exposition, with the writer's counters brought up to date.
    pub fn render_metrics(&self) -> String {
        self.metrics.sync_counters(
            self.records_dropped.load(Ordering::Relaxed),
            self.log_counters.write_errors.load(Ordering::Relaxed),
        );
        self.metrics.render()
    }

    /// Ask the writer to write what is queued and stop (after the last request finished).
    pub async fn close_log(&self) {
        if let Some(tx) = &self.log_tx {
            let _ = tx.send(log::LogMsg::Close).await;
        }
    }

    /// Admit a request on a route: returns the in-flight count including it.
    pub fn admit(&self, route: usize) -> u64 {
        let n = self.routes[route].in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.metrics.set_in_flight(&self.routes[route].name, n);
        n
    }

    /// Wall-clock `ts` and a fresh id for a request arriving now.
    pub fn stamp() -> (String, String) {
        let ts = humantime::format_rfc3339_micros(SystemTime::now()).to_string();
        let id = format!("{:016x}", fastrand::u64(..));
        (ts, id)
    }

    /// Finalize one request. Called exactly once per request (see `meter::body::Finalizer`).
    pub fn finish(&self, ctx: Ctx, mut meter: Meter, end: End, now: Instant) {
        meter.finish_body();
        let (mut outcome, mut error) = match end {
            End::Complete => {
                if ctx.status >= 400 {
                    (
                        Outcome::UpstreamError,
                        Some(format!("upstream status {}", ctx.status)),
                    )
                } else if meter.error_event.is_some() {
                    (Outcome::StreamError, None)
                } else if meter.is_sse() && !meter.done {
                    (
                        Outcome::Incomplete,
                        Some("stream ended without [DONE]".into()),
                    )
                } else {
                    (Outcome::Ok, None)
                }
            }
            End::Outcome(o, e) => (o, Some(e)),
            End::Dropped => {
                if self.shutdown_cut.load(Ordering::Relaxed) {
                    (
                        Outcome::ShutdownCut,
                        Some("cut at shutdown grace deadline".into()),
                    )
                } else {
                    (Outcome::ClientCancelled, Some("client went away".into()))
                }
            }
        };
        if let Some(ev) = meter.error_event.take() {
            // The upstream's own error (type/code only) is the most useful thing to keep.
            error = Some(match error {
                Some(e) if outcome != Outcome::StreamError => format!("{e}; {ev}"),
                _ => ev,
            });
        }
        if outcome == Outcome::Ok && ctx.status >= 400 {
            outcome = Outcome::UpstreamError;
        }

        let tl = &mut meter.timeline;
        let end_at = *tl.end.get_or_insert(now);
        let e2e_ms = ms_between(tl.t0, end_at);
        let ttft_ms = tl.ms(tl.first_token);
        let (input_tokens, output_tokens, tokens_source) = meter.tokens();
        let (itl_p50_ms, itl_p99_ms, itl_max_ms) = meter.itl_summary();
        let tl = &meter.timeline;
        let rec = RequestRecord {
            ts: ctx.ts,
            id: ctx.id,
            route: self.routes[ctx.route].name.clone(),
            experiment: ctx.experiment,
            method: ctx.method,
            endpoint: ctx.endpoint,
            model: ctx.model,
            upstream_model: ctx.upstream_model,
            key_id: ctx.key_id,
            stream: ctx.stream,
            status: ctx.status,
            outcome,
            input_tokens,
            output_tokens,
            tokens_source,
            ttft_ms,
            tpot_ms: tpot_ms(e2e_ms, ttft_ms, output_tokens),
            e2e_ms,
            itl_p50_ms,
            itl_p99_ms,
            itl_max_ms,
            body_read_ms: tl.ms(tl.body_read),
            upstream_headers_ms: tl.ms(tl.headers),
            first_byte_ms: tl.ms(tl.first_byte),
            first_event_ms: tl.ms(tl.first_event),
            last_token_ms: tl.ms(tl.last_token),
            in_flight: ctx.in_flight,
            max_tokens: ctx.max_tokens,
            request_bytes: ctx.request_bytes,
            response_bytes: meter.response_bytes,
            events: meter.events,
            content_events: meter.content_events,
            done: meter.is_sse().then_some(meter.done),
            bucket: bucket_of(&self.config.buckets, input_tokens, output_tokens).map(str::to_owned),
            parse_errors: meter.parse_errors,
            oversize_events: meter.oversize_events,
            engine_queue_ms: meter.timings.queue_ms,
            engine_ttft_ms: meter.timings.ttft_ms,
            engine_decode_ms: meter.timings.generation_ms,
            gateway_overhead_ms: ctx.gateway_overhead_ms,
            error,
        };

        let route = &self.routes[ctx.route];
        let left = route
            .in_flight
            .fetch_sub(1, Ordering::Relaxed)
            .saturating_sub(1);
        self.metrics.set_in_flight(&route.name, left);
        self.metrics.observe(&rec, meter.itl_samples());
        self.stats.observe(ctx.route, &rec, meter.itl_samples());
        self.records_total.fetch_add(1, Ordering::Relaxed);
        if let Some(tx) = &self.log_tx {
            if tx.try_send(log::LogMsg::Record(Box::new(rec))).is_err() {
                self.records_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
