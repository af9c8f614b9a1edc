//! Measurement of one request: the timeline, the per-chunk observer, and the record it becomes.
//!
//! The observer only reads the bytes it is shown; it never changes, delays or holds them. Times
//! are stamped by the caller at the moment a chunk is handed on (one monotonic clock,
//! `tokio::time::Instant`, so tests can pause time); the inspection of a chunk may run later,
//! once the client has it, and always in arrival order.

pub mod body;
pub mod record;

use bytes::Bytes;
use tokio::time::Instant;

use crate::config::Buckets;
use crate::keys::Secret;
use crate::openai::{self, ServerTimings, Usage};
use crate::sse::{SseItem, SseSplitter};
pub use record::{Experiment, Outcome, RequestRecord, TokensSource};

/// Gaps kept per request for ITL percentiles (µs); beyond this only the max is updated.
const MAX_ITL_SAMPLES: usize = 1 << 16;

/// Instants of one request's life, all on the same monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    pub t0: Instant,
    pub body_read: Option<Instant>,
    pub headers: Option<Instant>,
    pub first_byte: Option<Instant>,
    pub first_event: Option<Instant>,
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    pub end: Option<Instant>,
}

impl Timeline {
    pub fn new(t0: Instant) -> Self {
        Self {
            t0,
            body_read: None,
            headers: None,
            first_byte: None,
            first_event: None,
            first_token: None,
            last_token: None,
            end: None,
        }
    }

    /// Milliseconds from `t0` to `t`.
    pub fn ms(&self, t: Option<Instant>) -> Option<f64> {
        t.map(|t| ms_between(self.t0, t))
    }
}

pub fn ms_between(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64() * 1000.0
}

/// How the response body is read for measurement.
enum BodyKind {
    /// `text/event-stream`: split into events, each inspected.
    Sse(SseSplitter),
    /// A JSON body (non-streaming or error): kept up to a bound, inspected at the end.
    Json {
        buf: Vec<u8>,
        max: usize,
        overflow: bool,
    },
    /// Anything else: counted, not read.
    Opaque,
}

/// The per-request observer: fed every response chunk, it keeps counts and instants.
pub struct Meter {
    pub timeline: Timeline,
    kind: BodyKind,
    pub response_bytes: u64,
    pub events: u64,
    pub content_events: u64,
    pub done: bool,
    pub usage: Option<Usage>,
    pub timings: ServerTimings,
    pub error_event: Option<String>,
    pub parse_errors: u64,
    pub oversize_events: u64,
    /// Gaps between consecutive content events, in microseconds.
    itl_us: Vec<u32>,
    itl_max_us: u64,
    /// The stream's last plain token event, to classify the next ones cheaply.
    shape: openai::Shape,
    /// A chunk already handed on but not yet looked at, with the instant it arrived: it is
    /// inspected once the client has it (see `MeteredBody`), or before the record is made.
    deferred: Option<(Bytes, Instant)>,
}

impl Meter {
    pub fn new(t0: Instant) -> Self {
        Self {
            timeline: Timeline::new(t0),
            kind: BodyKind::Opaque,
            response_bytes: 0,
            events: 0,
            content_events: 0,
            done: false,
            usage: None,
            timings: ServerTimings::default(),
            error_event: None,
            parse_errors: 0,
            oversize_events: 0,
            shape: openai::Shape::default(),
            itl_us: Vec::new(),
            itl_max_us: 0,
            deferred: None,
        }
    }

    /// Take note of a chunk handed to the client at `now`, to be inspected later: by the next
    /// `defer` or by `catch_up`. Chunks are inspected in the order they arrived.
    pub fn defer(&mut self, chunk: Bytes, now: Instant) {
        self.catch_up();
        if !chunk.is_empty() {
            self.deferred = Some((chunk, now));
        }
    }

    /// Inspect the deferred chunk, if any.
    pub fn catch_up(&mut self) {
        if let Some((chunk, at)) = self.deferred.take() {
            self.on_data(&chunk, at);
        }
    }

    pub fn has_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// Decide how to read the body from the response's content type.
    pub fn expect_body(
        &mut self,
        content_type: Option<&[u8]>,
        max_sse_event: usize,
        max_json: usize,
    ) {
        let ct = content_type.unwrap_or_default();
        let starts = |p: &[u8]| ct.len() >= p.len() && ct[..p.len()].eq_ignore_ascii_case(p);
        self.kind = if starts(b"text/event-stream") {
            BodyKind::Sse(SseSplitter::new(max_sse_event))
        } else if starts(b"application/json") || ct.is_empty() {
            BodyKind::Json {
                buf: Vec::new(),
                max: max_json,
                overflow: false,
            }
        } else {
            BodyKind::Opaque
        };
    }

    pub fn is_sse(&self) -> bool {
        matches!(self.kind, BodyKind::Sse(_))
    }

    /// Observe one chunk handed to the client at `now`.
    pub fn on_data(&mut self, chunk: &[u8], now: Instant) {
        if chunk.is_empty() {
            return;
        }
        self.response_bytes += chunk.len() as u64;
        if self.timeline.first_byte.is_none() {
            self.timeline.first_byte = Some(now);
        }
        // Take the splitter out so the event callback can borrow the rest of `self`.
        match std::mem::replace(&mut self.kind, BodyKind::Opaque) {
            BodyKind::Sse(mut sse) => {
                sse.feed(chunk, &mut |item| self.on_event(item, now));
                self.kind = BodyKind::Sse(sse);
            }
            BodyKind::Json {
                mut buf,
                max,
                mut overflow,
            } => {
                if !overflow {
                    if buf.len() + chunk.len() > max {
                        overflow = true;
                        buf = Vec::new();
                    } else {
                        buf.extend_from_slice(chunk);
                    }
                }
                self.kind = BodyKind::Json { buf, max, overflow };
            }
            BodyKind::Opaque => {}
        }
    }

    fn on_event(&mut self, item: SseItem<'_>, now: Instant) {
        let data = match item {
            SseItem::Oversize => {
                self.oversize_events += 1;
                return;
            }
            SseItem::Data(d) => d,
        };
        self.events += 1;
        if self.timeline.first_event.is_none() {
            self.timeline.first_event = Some(now);
        }
        if data.trim_ascii() == b"[DONE]" {
            // E2E ends at `[DONE]` when the stream has one (what follows is only framing).
            self.done = true;
            self.timeline.end.get_or_insert(now);
            return;
        }
        match openai::inspect_chunk_in(&mut self.shape, data) {
            Ok(info) => {
                if info.content {
                    self.content_events += 1;
                    if let Some(prev) = self.timeline.last_token {
                        // Events of one read share an instant: no clock arithmetic for them.
                        let gap = if now == prev {
                            0
                        } else {
                            now.saturating_duration_since(prev).as_micros() as u64
                        };
                        self.itl_max_us = self.itl_max_us.max(gap);
                        if self.itl_us.len() < MAX_ITL_SAMPLES {
                            self.itl_us.push(gap.min(u32::MAX as u64) as u32);
                        }
                    } else {
                        self.timeline.first_token = Some(now);
                    }
                    self.timeline.last_token = Some(now);
                }
                if let Some(u) = info.usage {
                    self.usage = Some(u);
                }
                if !info.timings.is_empty() {
                    self.timings = info.timings;
                }
                if info.error.is_some() {
                    self.error_event = info.error;
                }
            }
            Err(_) => self.parse_errors += 1,
        }
    }

    /// Inspect a buffered JSON body (non-streaming response or error body) at its end.
    pub fn finish_body(&mut self) {
        if let BodyKind::Json {
            buf,
            overflow: false,
            ..
        } = &self.kind
        {
            if buf.is_empty() {
                return;
            }
            match openai::inspect_chunk(buf) {
                Ok(info) => {
                    self.usage = info.usage.or(self.usage);
                    if !info.timings.is_empty() {
                        self.timings = info.timings;
                    }
                    self.error_event = info.error;
                }
                Err(_) => self.parse_errors += 1,
            }
            self.kind = BodyKind::Opaque;
        }
    }

    /// Token counts and their source, per DESIGN.md. A usage whose completion count is 0 while
    /// content was seen is one of LiteLLM's placeholder zeros and is not believed.
    pub fn tokens(&self) -> (Option<u64>, Option<u64>, Option<TokensSource>) {
        let believable = self
            .usage
            .filter(|u| !(u.completion_tokens == Some(0) && self.content_events > 0));
        match believable {
            Some(Usage {
                prompt_tokens,
                completion_tokens: Some(c),
            }) => (prompt_tokens, Some(c), Some(TokensSource::Usage)),
            Some(Usage {
                prompt_tokens,
                completion_tokens: None,
            }) if self.is_sse() => (
                prompt_tokens,
                Some(self.content_events),
                Some(TokensSource::Events),
            ),
            Some(Usage {
                prompt_tokens,
                completion_tokens: None,
            }) => (prompt_tokens, None, None),
            None if self.is_sse() => (None, Some(self.content_events), Some(TokensSource::Events)),
            None => (None, None, None),
        }
    }

    /// ITL p50, p99 and max in milliseconds (nearest-rank on exact samples).
    pub fn itl_summary(&self) -> (Option<f64>, Option<f64>, Option<f64>) {
        if self.itl_us.is_empty() {
            return (None, None, None);
        }
        let mut v = self.itl_us.clone();
        v.sort_unstable();
        let pick = |q: f64| {
            let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
            v[rank - 1] as f64 / 1000.0
        };
        (
            Some(pick(0.50)),
            Some(pick(0.99)),
            Some(self.itl_max_us as f64 / 1000.0),
        )
    }

    /// The raw inter-token gaps in microseconds (for histograms).
    pub fn itl_samples(&self) -> &[u32] {
        &self.itl_us
    }
}

/// What is known of a request before its response: everything the record needs besides the
/// meter's observations.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub stamp: Stamp,
    pub route: usize,
    pub experiment: Option<Experiment>,
    pub method: String,
    pub endpoint: String,
    pub model: Option<String>,
    pub upstream_model: Option<String>,
    pub key_id: Option<String>,
    /// The client's key when `key_id` is not known yet: fingerprinted when the record is made
    /// (off the request's path), then dropped. Never written anywhere.
    pub key: Option<Secret<Vec<u8>>>,
    pub stream: bool,
    pub max_tokens: Option<u64>,
    pub request_bytes: u64,
    pub in_flight: u64,
    /// Status sent to the client (0 until known).
    pub status: u16,
    pub gateway_overhead_ms: Option<f64>,
    /// A bucket known in advance (bench knows its prompt's bucket); else derived from tokens.
    pub bucket: Option<String>,
    /// The load generator's concurrency level for this request (bench only).
    pub concurrency: Option<u64>,
}

/// When a request arrived (wall clock) and its id: formatted only when the record is made.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub at: std::time::SystemTime,
    pub id: u64,
}

impl Stamp {
    pub fn now() -> Self {
        Self {
            at: std::time::SystemTime::now(),
            id: fastrand::u64(..),
        }
    }
}

/// Classify by observed token counts (see `[buckets]`).
pub fn bucket_of(b: &Buckets, input: Option<u64>, output: Option<u64>) -> Option<&'static str> {
    let (i, o) = (input?, output?);
    Some(if i >= b.long_input_min && o <= b.short_output_max {
        "long-short"
    } else if i <= b.short_input_max && o >= b.long_output_min {
        "short-long"
    } else if i > b.short_input_max
        && i < b.long_input_min
        && o > b.short_output_max
        && o < b.long_output_min
    {
        "balanced"
    } else {
        "other"
    })
}

/// TPOT per DESIGN.md: (E2E − TTFT) ÷ (output tokens − 1), only with ≥ 2 tokens.
pub fn tpot_ms(e2e_ms: f64, ttft_ms: Option<f64>, output_tokens: Option<u64>) -> Option<f64> {
    match (ttft_ms, output_tokens) {
        (Some(ttft), Some(n)) if n >= 2 => Some((e2e_ms - ttft).max(0.0) / (n - 1) as f64),
        _ => None,
    }
}

/// Turn a finished request into its record: the outcome from how it ended, the five numbers per
/// DESIGN.md. Shared by the proxy (`sink`) and the load generator (`bench`).
pub fn build_record(
    ctx: Ctx,
    meter: &mut Meter,
    end: body::End,
    now: Instant,
    route: &str,
    buckets: &Buckets,
) -> RequestRecord {
    meter.catch_up();
    meter.finish_body();
    // A client that hangs up after `[DONE]` (the openai client does, without reading the
    // chunked terminator) received the whole stream: that is a complete request.
    let end = match end {
        body::End::Dropped if meter.done => body::End::Complete,
        e => e,
    };
    let (outcome, mut error) = match end {
        body::End::Complete => {
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
        body::End::Outcome(o, e) => (o, Some(e)),
        body::End::Dropped => (Outcome::ClientCancelled, Some("client went away".into())),
    };
    if let Some(ev) = meter.error_event.take() {
        // The upstream's own error (type/code only) is the most useful thing to keep.
        error = Some(match error {
            Some(e) if outcome != Outcome::StreamError => format!("{e}; {ev}"),
            _ => ev,
        });
    }
    let tl = &mut meter.timeline;
    let end_at = *tl.end.get_or_insert(now);
    let e2e_ms = ms_between(tl.t0, end_at);
    let ttft_ms = tl.ms(tl.first_token);
    let (input_tokens, output_tokens, tokens_source) = meter.tokens();
    let (itl_p50_ms, itl_p99_ms, itl_max_ms) = meter.itl_summary();
    let tl = &meter.timeline;
    RequestRecord {
        ts: humantime::format_rfc3339_micros(ctx.stamp.at).to_string(),
        id: format!("{:016x}", ctx.stamp.id),
        route: route.to_owned(),
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
        bucket: ctx
            .bucket
            .or_else(|| bucket_of(buckets, input_tokens, output_tokens).map(str::to_owned)),
        parse_errors: meter.parse_errors,
        oversize_events: meter.oversize_events,
        engine_queue_ms: meter.timings.queue_ms,
        engine_ttft_ms: meter.timings.ttft_ms,
        engine_decode_ms: meter.timings.generation_ms,
        gateway_overhead_ms: ctx.gateway_overhead_ms,
        concurrency: ctx.concurrency,
        error,
    }
}
