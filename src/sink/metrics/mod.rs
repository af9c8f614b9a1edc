//! Prometheus metrics: every name, description, unit and bucket list is declared here, once.
//!
//! Each server instance owns its own recorder (no process-global state), so several proxies in
//! one process — the demo, the tests — never mix their numbers. Labels come from closed sets or
//! capped sets: at most `limits.max_key_labels` keys and `limits.max_model_labels` models get
//! their own label value, the rest are `other`. No label is ever a raw request string.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{Key, KeyName, Label, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::meter::{GatewayTap, Outcome, RequestRecord, TapSide};

mod listen;
mod stream;
pub use listen::{LISTEN_BACKLOG, LISTEN_DROPS, LISTEN_OVERFLOWS, LISTEN_QUEUE};
pub use stream::{CLOCK_FALLBACKS, DECODE_STOPPED, GATEWAY_RELAY, STAMP_LAG, STREAM_DELIVERY};

pub const REQUESTS: &str = "tokentap_requests_total";
pub const TTFT: &str = "tokentap_time_to_first_token_seconds";
pub const TTFO: &str = "tokentap_time_to_first_output_token_seconds";
pub const TPOT: &str = "tokentap_time_per_output_token_seconds";
pub const ITL: &str = "tokentap_inter_token_latency_seconds";
pub const E2E: &str = "tokentap_e2e_request_latency_seconds";
pub const UPSTREAM_HEADERS: &str = "tokentap_upstream_headers_seconds";
pub const INPUT_TOKENS: &str = "tokentap_input_tokens_total";
pub const OUTPUT_TOKENS: &str = "tokentap_output_tokens_total";
pub const IN_FLIGHT: &str = "tokentap_in_flight_requests";
pub const MAX_CONCURRENT: &str = "tokentap_max_concurrent_requests";
pub const UPSTREAM_OPENED: &str = "tokentap_upstream_connections_opened_total";
pub const RECORDS_DROPPED: &str = "tokentap_records_dropped_total";
pub const LOG_WRITE_ERRORS: &str = "tokentap_log_write_errors_total";
pub const PARSE_ERRORS: &str = "tokentap_sse_parse_errors_total";
pub const OVERSIZE_EVENTS: &str = "tokentap_sse_oversize_events_total";
pub const SHADOW_SKIPPED: &str = "tokentap_shadow_skipped_total";
pub const GATEWAY_HOP: &str = "tokentap_gateway_hop_seconds";
pub const GATEWAY_TAP: &str = "tokentap_gateway_tap_requests_total";
pub const OTLP_EXPORTED: &str = "tokentap_otlp_spans_exported_total";
pub const OTLP_FAILED: &str = "tokentap_otlp_export_failures_total";
pub const CLICKHOUSE_EXPORTED: &str = "tokentap_clickhouse_rows_inserted_total";
pub const CLICKHOUSE_FAILED: &str = "tokentap_clickhouse_insert_failures_total";
pub const RELOADS: &str = "tokentap_config_reloads_total";
pub const RELOAD_OK: &str = "tokentap_config_last_reload_successful";
pub const SLO_REQUESTS: &str = "tokentap_slo_requests_total";

/// Latency buckets (seconds) for TTFT, E2E and header time: every SLO threshold of the write-up
/// (0.1, 0.2, 0.5, 1 s) is an edge, and steps of 10–20 ms below 0.2 s tell 80 ms from 120 ms.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.11, 0.12, 0.14, 0.16, 0.18,
    0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 7.5,
    10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// Per-token buckets (seconds) for TPOT and ITL. Edges at the tok/s thresholds: 1/90 s and
/// 1/60 s (interactive coding), 1/6 s (reading speed).
pub const TOKEN_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.011_111, 0.0125, 0.015, 0.016_667, 0.02,
    0.025, 0.03, 0.035, 0.04, 0.05, 0.06, 0.075, 0.1, 0.125, 0.15, 0.166_667, 0.2, 0.3, 0.5, 1.0,
    2.5, 5.0,
];

/// Gateway-hop buckets (seconds): a Rust gateway's sub-millisecond hop to a loaded Python
/// gateway's seconds, with the write-up's 0.1 s and 0.2 s thresholds as edges.
pub const HOP_BUCKETS: &[f64] = &[
    0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075,
    0.1, 0.125, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0,
];

/// `buckets` with each of `edges` added, unless one lies within a microsecond of an edge it
/// has (1/6 s is the bucket 0.166667 already: a series' `le` never changes).
fn with_edges(buckets: &[f64], edges: &[f64]) -> Vec<f64> {
    let mut out = buckets.to_vec();
    for e in edges {
        if !out.iter().any(|b| (b - e).abs() < 1e-6) {
            out.push(*e);
        }
    }
    out.sort_by(f64::total_cmp);
    out
}

/// A capped set of label values: the first `cap` distinct values pass, the rest are `other`.
struct Capped {
    cap: usize,
    seen: Mutex<HashSet<String>>,
}

impl Capped {
    fn new(cap: usize) -> Self {
        Self {
            cap,
            seen: Mutex::new(HashSet::new()),
        }
    }

    fn label(&self, v: Option<&str>) -> String {
        let Some(v) = v else { return "none".into() };
        let Ok(mut seen) = self.seen.lock() else {
            return "other".into();
        };
        if seen.contains(v) {
            return v.to_owned();
        }
        if seen.len() < self.cap {
            seen.insert(v.to_owned());
            return v.to_owned();
        }
        "other".into()
    }
}

/// A histogram with fixed buckets held in atomics: constant memory however many values it takes.
/// Used for the per-token ITL (the recorder's histograms keep every value until the next upkeep:
/// fine at one value per request, not at one per token).
struct FixedHist {
    /// Per bucket of `TOKEN_BUCKETS`, then `+Inf` (not cumulative).
    counts: Vec<AtomicU64>,
    sum_us: AtomicU64,
}

impl FixedHist {
    fn new() -> Self {
        FixedHist {
            counts: (0..=TOKEN_BUCKETS.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            sum_us: AtomicU64::new(0),
        }
    }

    fn record_us(&self, us: &[u32]) {
        let mut sum = 0u64;
        for &v in us {
            let s = f64::from(v) / 1e6;
            let i = TOKEN_BUCKETS.partition_point(|b| *b < s);
            if let Some(c) = self.counts.get(i) {
                c.fetch_add(1, Ordering::Relaxed);
            }
            sum += u64::from(v);
        }
        self.sum_us.fetch_add(sum, Ordering::Relaxed);
    }
}

/// The handles of one (route, model, key) label set, looked up once and kept: a request then
/// costs one map lookup instead of one registry lookup (and label vector) per metric.
struct Handles {
    ttft: metrics::Histogram,
    ttfo: metrics::Histogram,
    tpot: metrics::Histogram,
    e2e: metrics::Histogram,
    headers: metrics::Histogram,
    input: metrics::Counter,
    output: metrics::Counter,
    itl: Arc<FixedHist>,
    /// The set's `route`, `model`, `key`, `api` labels (for the requests counters registered
    /// later).
    labels: [Label; 4],
    /// `tokentap_requests_total` by (outcome, status class).
    requests: Mutex<Vec<(&'static str, &'static str, metrics::Counter)>>,
    /// `tokentap_slo_requests_total` by route and key, per SLO of [`crate::slo::Slos::judge`]:
    /// (met, missed).
    slo: Vec<(metrics::Counter, metrics::Counter)>,
    /// The route's stream metrics (the same series for every set of the route).
    stream: stream::StreamHandles,
}

pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// ITL histograms by rendered `route="…",model="…"` labels.
    itl: Mutex<HashMap<String, Arc<FixedHist>>>,
    /// By `route \0 model \0 key` (label values after capping): bounded by the caps.
    handles: Mutex<HashMap<String, Arc<Handles>>>,
    keys: Capped,
    models: Capped,
    /// `[slo]`: what each request is counted against.
    slos: crate::slo::Slos,
}

/// Every metric's type, unit and help text, in the order they were first described (ITL's is
/// written by `render`, the stream metrics' by `stream::describe`, the listeners' by
/// `listen::describe`).
const DESCRIPTIONS: &[(&str, Kind, Option<Unit>, &str)] = &[
    (REQUESTS, Kind::Counter, None, "Requests finished, by outcome and status class."),
    (TTFT, Kind::Histogram, Some(Unit::Seconds), "Time to first content token, from the request head (streams only)."),
    (TTFO, Kind::Histogram, Some(Unit::Seconds), "Time to the first output token that is not reasoning (answer text or a tool call), from the request head."),
    (TPOT, Kind::Histogram, Some(Unit::Seconds), "Time per output token after the first: (E2E - TTFT) / (tokens - 1)."),
    (E2E, Kind::Histogram, Some(Unit::Seconds), "Request head to end of response."),
    (UPSTREAM_HEADERS, Kind::Histogram, Some(Unit::Seconds), "Request head to upstream response headers."),
    (INPUT_TOKENS, Kind::Counter, None, "Prompt tokens reported by the upstream (usage)."),
    (OUTPUT_TOKENS, Kind::Counter, None, "Output tokens (usage, else content events)."),
    (IN_FLIGHT, Kind::Gauge, None, "Requests in flight per route."),
    (MAX_CONCURRENT, Kind::Gauge, None, "limits.max_concurrent: requests in flight across all routes above which tokentap answers 503."),
    (UPSTREAM_OPENED, Kind::Counter, None, "Connections opened to the route's upstream (kept-alive ones are reused)."),
    (RECORDS_DROPPED, Kind::Counter, None, "Records dropped, by sink: log (its queue was full), otlp (spans: the export queue was full, or their batch failed every attempt), clickhouse (rows: the insert queue was full, or their batch failed every attempt)."),
    (LOG_WRITE_ERRORS, Kind::Counter, None, "Failed writes of the request log."),
    (PARSE_ERRORS, Kind::Counter, None, "SSE events that were not readable JSON (forwarded regardless)."),
    (OVERSIZE_EVENTS, Kind::Counter, None, "SSE events over the size bound (forwarded, not measured)."),
    (SHADOW_SKIPPED, Kind::Counter, None, "Experiment copies skipped at experiment.max_shadow_in_flight (never queued)."),
    (GATEWAY_HOP, Kind::Histogram, Some(Unit::Seconds), "The gateway's share of TTFT on tapped requests, by part: admission (inner t0 - outer t0), relay (outer first token - inner first token), total (outer TTFT - inner TTFT)."),
    (GATEWAY_TAP, Kind::Counter, None, "Requests on a gateway tap's routes, by side and result: joined, or why they were not."),
    (OTLP_EXPORTED, Kind::Counter, None, "Spans the OTLP collector accepted."),
    (OTLP_FAILED, Kind::Counter, None, "OTLP export requests that failed for good (their spans are counted as dropped)."),
    (CLICKHOUSE_EXPORTED, Kind::Counter, None, "Rows ClickHouse accepted."),
    (CLICKHOUSE_FAILED, Kind::Counter, None, "ClickHouse INSERTs that failed for good (their rows are counted as dropped)."),
    (RELOADS, Kind::Counter, None, "Config reloads (SIGHUP, POST /reload), by result: ok, restart_needed (applied; some settings wait for a restart), error (refused; the old config serves), unauthorized."),
    (RELOAD_OK, Kind::Gauge, None, "1 when the last reload was applied (or none was asked), 0 when it was refused."),
    (SLO_REQUESTS, Kind::Counter, None, "Requests judged against each configured SLO ([slo]), by result: met or missed. A stream the service failed or throttled is a miss; requests the client cancelled and its own 4xx are in none. Summed over replicas, an exact attainment."),
];

/// A metric's type, for its `# TYPE` line.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Describe every metric to the recorder: type, unit, help text.
fn describe(r: &PrometheusRecorder) {
    for &(name, kind, unit, text) in DESCRIPTIONS {
        let (n, t) = (KeyName::from_const_str(name), SharedString::const_str(text));
        match kind {
            Kind::Counter => r.describe_counter(n, unit, t),
            Kind::Gauge => r.describe_gauge(n, unit, t),
            Kind::Histogram => r.describe_histogram(n, unit, t),
        }
    }
    stream::describe(r);
    listen::describe(r);
}

static META: Metadata<'static> = Metadata::new(module_path!(), metrics::Level::INFO, None);

fn status_class(status: u16) -> &'static str {
    match status {
        0 => "none",
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

impl Metrics {
    /// `max_keys` and `max_models` cap the distinct label values (`limits.max_key_labels`,
    /// `limits.max_model_labels`); `slos` (`[slo]`) are counted per request, and each of their
    /// thresholds is a TTFT or TPOT bucket edge.
    pub fn new(
        max_keys: usize,
        max_models: usize,
        slos: &crate::slo::Slos,
    ) -> Result<Self, metrics_exporter_prometheus::BuildError> {
        let mut builder = PrometheusBuilder::new();
        let ttft = with_edges(LATENCY_BUCKETS, &slos.ttft_edges_s());
        let tpot = with_edges(TOKEN_BUCKETS, &slos.tpot_edges_s());
        for (names, buckets) in [
            (&[TTFT][..], &ttft[..]),
            (&[TTFO, E2E, UPSTREAM_HEADERS][..], LATENCY_BUCKETS),
            (&[TPOT][..], &tpot[..]),
            (&[GATEWAY_HOP, GATEWAY_RELAY][..], HOP_BUCKETS),
            (&[stream::STAMP_LAG][..], stream::LAG_BUCKETS),
        ] {
            for name in names {
                builder = builder.set_buckets_for_metric(Matcher::Full((*name).into()), buckets)?;
            }
        }
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        describe(&recorder);
        // From the start, so that a dashboard or an alert finds them before the first reload.
        for result in ["ok", "restart_needed", "error", "unauthorized"] {
            let k = Self::key(RELOADS, vec![Label::new("result", result)]);
            recorder.register_counter(&k, &META).absolute(0);
        }
        recorder
            .register_gauge(&Self::key(RELOAD_OK, vec![]), &META)
            .set(1.0);
        Ok(Self {
            recorder,
            handle,
            itl: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            keys: Capped::new(max_keys),
            models: Capped::new(max_models),
            slos: slos.clone(),
        })
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.handle.run_upkeep();
        let mut out = self.handle.render();
        let itl: Vec<(String, Arc<FixedHist>)> = match self.itl.lock() {
            Ok(m) => {
                let mut v: Vec<_> = m.iter().map(|(k, h)| (k.clone(), h.clone())).collect();
                v.sort_by(|a, b| a.0.cmp(&b.0));
                v
            }
            Err(_) => Vec::new(),
        };
        if !itl.is_empty() {
            let _ = writeln!(
                out,
                "# HELP {ITL} Gap between consecutive content events.\n# TYPE {ITL} histogram"
            );
            for (labels, h) in itl {
                let mut cum = 0u64;
                for (i, c) in h.counts.iter().enumerate() {
                    cum += c.load(Ordering::Relaxed);
                    let le = TOKEN_BUCKETS
                        .get(i)
                        .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
                    let _ = writeln!(out, "{ITL}_bucket{{{labels},le=\"{le}\"}} {cum}");
                }
                let sum = h.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
                let _ = writeln!(out, "{ITL}_sum{{{labels}}} {sum}");
                let _ = writeln!(out, "{ITL}_count{{{labels}}} {cum}");
            }
        }
        out
    }

    pub fn run_upkeep(&self) {
        self.handle.run_upkeep();
    }

    fn key(name: &'static str, labels: Vec<Label>) -> Key {
        Key::from_parts(name, labels)
    }

    pub fn set_in_flight(&self, route: &str, n: u64) {
        let k = Self::key(IN_FLIGHT, vec![Label::new("route", route.to_owned())]);
        self.recorder.register_gauge(&k, &META).set(n as f64);
    }

    pub fn set_max_concurrent(&self, n: usize) {
        self.recorder
            .register_gauge(&Self::key(MAX_CONCURRENT, vec![]), &META)
            .set(n as f64);
    }

    pub fn set_upstream_opened(&self, route: &str, n: u64) {
        let k = Self::key(UPSTREAM_OPENED, vec![Label::new("route", route.to_owned())]);
        self.recorder.register_counter(&k, &META).absolute(n);
    }

    /// Count a reload by its result; unauthorized attempts leave the last reload's state alone.
    pub fn reloaded(&self, result: &'static str) {
        let k = Self::key(RELOADS, vec![Label::new("result", result)]);
        self.recorder.register_counter(&k, &META).increment(1);
        if result != "unauthorized" {
            let ok = if result == "error" { 0.0 } else { 1.0 };
            self.recorder
                .register_gauge(&Self::key(RELOAD_OK, vec![]), &META)
                .set(ok);
        }
    }

    /// Bring the log counters (kept as atomics by the sink and the writer) into the exposition.
    pub fn sync_counters(
        &self,
        dropped: u64,
        write_errors: u64,
        shadow_skipped: u64,
        otlp: Option<&super::export::Counters>,
        clickhouse: Option<&super::export::Counters>,
    ) {
        let r = &self.recorder;
        r.register_counter(&Self::key(SHADOW_SKIPPED, vec![]), &META)
            .absolute(shadow_skipped);
        let sink = |s: &'static str| vec![Label::new("sink", s)];
        r.register_counter(&Self::key(RECORDS_DROPPED, sink("log")), &META)
            .absolute(dropped);
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        for (name, c, exported, failed) in [
            ("otlp", otlp, OTLP_EXPORTED, OTLP_FAILED),
            (
                "clickhouse",
                clickhouse,
                CLICKHOUSE_EXPORTED,
                CLICKHOUSE_FAILED,
            ),
        ] {
            if let Some(c) = c {
                r.register_counter(&Self::key(RECORDS_DROPPED, sink(name)), &META)
                    .absolute(n(&c.dropped));
                r.register_counter(&Self::key(exported, vec![]), &META)
                    .absolute(n(&c.exported));
                r.register_counter(&Self::key(failed, vec![]), &META)
                    .absolute(n(&c.failed_exports));
            }
        }
        r.register_counter(&Self::key(LOG_WRITE_ERRORS, vec![]), &META)
            .absolute(write_errors);
    }

    /// The handles of a label set, registered on first use.
    fn handles(
        &self,
        route: &str,
        model: String,
        key: String,
        api: &'static str,
    ) -> Option<Arc<Handles>> {
        // Put together by hand: `format!` costs several times as much, at every request's end.
        let mut id = String::with_capacity(route.len() + model.len() + key.len() + api.len() + 3);
        for (i, part) in [route, &model, &key, api].into_iter().enumerate() {
            if i > 0 {
                id.push('\0');
            }
            id.push_str(part);
        }
        if let Some(h) = self.handles.lock().ok()?.get(&id) {
            return Some(h.clone());
        }
        let r = &self.recorder;
        let (route, model, key, api) = (
            Label::new("route", route.to_owned()),
            Label::new("model", model),
            Label::new("key", key),
            Label::new("api", api),
        );
        let rmk = || vec![route.clone(), model.clone(), key.clone(), api.clone()];
        let itl_labels = format!(
            "route=\"{}\",model=\"{}\"",
            crate::prom::escape_label(route.value()),
            crate::prom::escape_label(model.value())
        );
        let itl = self
            .itl
            .lock()
            .ok()?
            .entry(itl_labels)
            .or_insert_with(|| Arc::new(FixedHist::new()))
            .clone();
        let slo = crate::slo::Slos::NAMES
            .iter()
            .map(|name| {
                let counter = |result: &'static str| {
                    let l = vec![
                        route.clone(),
                        key.clone(),
                        Label::new("slo", *name),
                        Label::new("result", result),
                    ];
                    r.register_counter(&Self::key(SLO_REQUESTS, l), &META)
                };
                (counter("met"), counter("missed"))
            })
            .collect();
        let h = Arc::new(Handles {
            ttft: r.register_histogram(&Self::key(TTFT, rmk()), &META),
            ttfo: r.register_histogram(&Self::key(TTFO, rmk()), &META),
            tpot: r.register_histogram(&Self::key(TPOT, rmk()), &META),
            e2e: r.register_histogram(&Self::key(E2E, rmk()), &META),
            headers: r.register_histogram(
                &Self::key(UPSTREAM_HEADERS, vec![route.clone(), model.clone()]),
                &META,
            ),
            input: r.register_counter(&Self::key(INPUT_TOKENS, rmk()), &META),
            output: r.register_counter(&Self::key(OUTPUT_TOKENS, rmk()), &META),
            itl,
            labels: [route, model, key, api],
            requests: Mutex::new(Vec::new()),
            slo,
            stream: Default::default(),
        });
        self.handles.lock().ok()?.insert(id, h.clone());
        Some(h)
    }

    /// A request on a gateway tap's routes: its join result, and the hop's parts when joined.
    fn observe_tap(&self, rec: &RequestRecord, g: &GatewayTap, model: &str) {
        let side = match g.side {
            TapSide::Outer => "outer",
            TapSide::Inner => "inner",
        };
        let result = g.unjoined.map_or("joined", |u| u.as_str());
        let l = vec![
            Label::new("route", rec.route.clone()),
            Label::new("side", side),
            Label::new("result", result),
        ];
        self.recorder
            .register_counter(&Self::key(GATEWAY_TAP, l), &META)
            .increment(1);
        for (part, v) in [
            ("admission", g.admission_ms),
            ("relay", g.relay_ms),
            ("total", g.ttft_ms),
        ] {
            if let Some(ms) = v {
                let l = vec![
                    Label::new("route", rec.route.clone()),
                    Label::new("model", model.to_owned()),
                    Label::new("part", part),
                ];
                self.recorder
                    .register_histogram(&Self::key(GATEWAY_HOP, l), &META)
                    .record(ms.max(0.0) / 1000.0);
            }
        }
    }

    /// Feed one finished request.
    pub fn observe(&self, rec: &RequestRecord, itl_us: &[u32]) {
        let model = self.models.label(rec.model.as_deref());
        let key = self.keys.label(rec.key_id.as_deref());
        let Some(h) = self.handles(&rec.route, model, key, rec.api.as_str()) else {
            return;
        };
        let (outcome, class) = (rec.outcome.as_str(), status_class(rec.status));
        if let Ok(mut reqs) = h.requests.lock() {
            match reqs.iter().find(|(o, c, _)| *o == outcome && *c == class) {
                Some((_, _, c)) => c.increment(1),
                None => {
                    let mut l = h.labels.to_vec();
                    l.push(Label::new("outcome", outcome));
                    l.push(Label::new("status_class", class));
                    let c = self
                        .recorder
                        .register_counter(&Self::key(REQUESTS, l), &META);
                    c.increment(1);
                    reqs.push((outcome, class, c));
                }
            }
        }
        let judged = self.slos.judge(&crate::slo::Request {
            generates: rec.api.generates(),
            status: rec.status,
            ok: rec.outcome == Outcome::Ok,
            cancelled: rec.outcome == Outcome::ClientCancelled,
            stream: rec.stream,
            ttft_ms: rec.ttft_ms,
            tpot_ms: rec.tpot_ms,
        });
        for ((_, standing), (met, missed)) in judged.iter().zip(&h.slo) {
            match standing {
                Some(true) => met.increment(1),
                Some(false) => missed.increment(1),
                None => {}
            }
        }
        if let Some(v) = rec.ttft_ms {
            h.ttft.record(v / 1000.0);
        }
        if let Some(v) = rec.ttfo_ms {
            h.ttfo.record(v / 1000.0);
        }
        if let Some(v) = rec.tpot_ms {
            h.tpot.record(v / 1000.0);
        }
        h.e2e.record(rec.e2e_ms / 1000.0);
        if let Some(v) = rec.upstream_headers_ms {
            h.headers.record(v / 1000.0);
        }
        if !itl_us.is_empty() {
            h.itl.record_us(itl_us);
        }
        if let Some(n) = rec.input_tokens {
            h.input.increment(n);
        }
        if let Some(n) = rec.output_tokens {
            h.output.increment(n);
        }
        if let Some(g) = &rec.gateway_tap {
            self.observe_tap(rec, g, h.labels[1].value());
        }
        self.observe_stream(rec, &h.stream);
        // Rare: the route label is only built when one of them is counted.
        let route = || vec![Label::new("route", rec.route.clone())];
        if rec.parse_errors > 0 {
            self.recorder
                .register_counter(&Self::key(PARSE_ERRORS, route()), &META)
                .increment(rec.parse_errors);
        }
        if rec.oversize_events > 0 {
            self.recorder
                .register_counter(&Self::key(OVERSIZE_EVENTS, route()), &META)
                .increment(rec.oversize_events);
        }
    }
}
