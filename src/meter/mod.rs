//! Measurement of one request: the timeline, the per-chunk observer, the body wrapper that feeds
//! it, and the record it becomes. A leaf: it knows SSE and the API shapes, nothing of routes,
//! sinks or configs.
//!
//! The observer only reads the bytes it is shown; it never changes, delays or holds them. Times
//! are stamped by the caller at the moment a chunk is handed on (one monotonic clock,
//! `tokio::time::Instant`, so tests can pause time); the inspection of a chunk may run later,
//! once the client has it, and always in arrival order.

pub mod body;
mod bucket;
mod cut;
pub mod decode;
pub mod delivery;
pub mod ending;
mod gateway;
pub mod ids;
pub mod record;
mod timeline;
pub mod trace;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::openai::{self, ServerTimings, Usage};
use crate::sse::{SseItem, SseSplitter};
pub use body::{BodyEnd, MeteredBody, Observer};
pub use bucket::Buckets;
pub use gateway::boot_id;
pub use record::{
    tpot_ms, Experiment, Facts, GatewayTap, JoinBy, Outcome, RelayVerdict, RequestRecord, Schedule,
    TapSide, TokensSource, TtftSplit, Unjoined, Verdict,
};
pub use timeline::{duration_ms, ms_between, Clock, Stamp, Timeline};
pub use trace::Trace;

/// Content events' arrival instants, shared by a gateway tap's two sides.
#[derive(Debug, Default)]
pub struct TokenTimes {
    pub times: Vec<Instant>,
    /// The inner side's record is made: no more times will come.
    pub done: bool,
}

pub type SharedTimes = Arc<std::sync::Mutex<TokenTimes>>;

/// A stream's first events looked at for the model that served it and the response's id.
const MODEL_EVENTS: u8 = 3;

/// Gaps kept per request for ITL percentiles (µs); beyond this only the max is updated.
const MAX_ITL_SAMPLES: usize = 1 << 16;

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

/// Whose clock stamped a read: the process's (`crate::rxstamp::now()` when it was read) or the
/// kernel's (the arrival of its last segment), then with the scheduling delay between the two
/// while the first token is awaited (none is read after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadClock {
    Process,
    Kernel { lag: Option<Duration> },
}

/// The per-request observer: fed every response chunk, it keeps counts and instants.
pub struct Meter {
    pub timeline: Timeline,
    kind: BodyKind,
    pub response_bytes: u64,
    pub events: u64,
    pub content_events: u64,
    pub done: bool,
    /// Why the generation ended, as the response said (`openai::ChunkInfo::finish`): the last
    /// one seen, or the first that says it was cut (`abort`) once one did.
    pub finish_reason: Option<String>,
    /// The shape the request's path names: what a stream is judged as when no event said.
    pub path_api: openai::Api,
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
    /// A chunk already handed on but not yet looked at, with the instant it arrived (and the
    /// kernel's lag, when the kernel stamped it): it is inspected once the client has it (see
    /// `MeteredBody`), or before the record is made.
    deferred: Option<(Bytes, Instant, ReadClock)>,
    /// Reads stamped by the kernel, and by the process's clock (the kernel gave no stamp).
    pub kernel_reads: u64,
    pub process_reads: u64,
    /// The lag of the read being inspected.
    read_lag: Option<Duration>,
    /// Between the kernel's arrival of the first token's read and tokentap's read of it.
    pub stamp_lag: Option<Duration>,
    /// Told the first token's instant as soon as it is seen (a gateway tap's inner side).
    pub first_token_signal: Option<Arc<OnceLock<Instant>>>,
    /// The API shape the events said they are, from the first that said.
    pub api: Option<openai::Api>,
    /// The model the response says served it (from its first events, or its JSON body).
    pub response_model: Option<String>,
    /// The response's own id (`chatcmpl-…`, Responses' `response.id`, Messages' `message.id`),
    /// bounded, from the same first events or JSON body.
    pub response_id: Option<String>,
    model_looks: u8,
    /// A compressed body's decoder: the meter reads its decoded copy.
    decoder: Option<Box<decode::Decoder>>,
    /// One read's decoded bytes (reused).
    decoded: Vec<u8>,
    /// The response's `Content-Encoding`, when it had one.
    pub content_encoding: Option<String>,
    /// Why the body could not be read (past a point): an encoding not decoded, a corrupt or
    /// over-bound compressed body.
    pub decode_error: Option<String>,
    /// How the stream's content events arrived, read by read.
    pub delivery: delivery::Counter,
    /// Each content event's arrival, kept only when asked (a gateway tap's two sides).
    pub token_times: Option<SharedTimes>,
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
            finish_reason: None,
            path_api: openai::Api::Other,
            usage: None,
            timings: ServerTimings::default(),
            error_event: None,
            parse_errors: 0,
            oversize_events: 0,
            shape: openai::Shape::default(),
            itl_us: Vec::new(),
            itl_max_us: 0,
            deferred: None,
            kernel_reads: 0,
            process_reads: 0,
            read_lag: None,
            stamp_lag: None,
            first_token_signal: None,
            api: None,
            response_model: None,
            response_id: None,
            model_looks: 0,
            decoder: None,
            decoded: Vec::new(),
            content_encoding: None,
            decode_error: None,
            delivery: delivery::Counter::default(),
            token_times: None,
        }
    }

    /// Read the body through a decoder when the response's `Content-Encoding` says it is
    /// compressed (the bytes handed on are untouched). A coding tokentap does not decode
    /// leaves the body unread, and says so.
    pub fn expect_encoding(&mut self, value: Option<&[u8]>) {
        let Some(value) = value else { return };
        match decode::Encoding::parse(value) {
            decode::Encoding::Identity => {}
            decode::Encoding::Known(c) => {
                self.content_encoding = Some(c.as_str().to_owned());
                match decode::Decoder::new(c) {
                    Ok(d) => self.decoder = Some(Box::new(d)),
                    Err(e) => self.stop_reading(e.to_string()),
                }
            }
            decode::Encoding::Unknown(name) => {
                self.stop_reading(format!("content-encoding {name:?} is not decoded"));
                self.content_encoding = Some(name);
            }
        }
    }

    /// The body cannot be read from here on: counted as bytes, not inspected.
    fn stop_reading(&mut self, why: String) {
        self.decoder = None;
        self.decode_error = Some(why);
        self.kind = BodyKind::Opaque;
    }

    /// Take note of a chunk handed to the client, that arrived at `now`, to be inspected later:
    /// by the next `defer` or by `catch_up`. Chunks are inspected in the order they arrived.
    /// `clock` says whose clock `now` is.
    pub fn defer(&mut self, chunk: Bytes, now: Instant, clock: ReadClock) {
        self.catch_up();
        if !chunk.is_empty() {
            match clock {
                ReadClock::Kernel { .. } => self.kernel_reads += 1,
                ReadClock::Process => self.process_reads += 1,
            }
            self.deferred = Some((chunk, now, clock));
        }
    }

    /// No content event was inspected yet (one may be deferred).
    pub fn awaits_first_token(&self) -> bool {
        self.timeline.first_token.is_none()
    }

    /// Which clock stamped the request: the kernel's when it stamped `t0` (`t0_kernel`) and
    /// every read of the response.
    pub fn clock(&self, t0_kernel: bool) -> Clock {
        if t0_kernel && self.process_reads == 0 {
            Clock::Kernel
        } else {
            Clock::Process
        }
    }

    /// Everything handed on is inspected: the deferred chunk, and a buffered JSON body. Call it
    /// before reading the meter's verdict-bearing fields (`done`, `error_event`).
    pub fn settle(&mut self) {
        self.catch_up();
        self.finish_body();
    }

    /// Inspect the deferred chunk, if any.
    pub fn catch_up(&mut self) {
        if let Some((chunk, at, clock)) = self.deferred.take() {
            self.read_lag = match clock {
                ReadClock::Kernel { lag } => lag,
                ReadClock::Process => None,
            };
            self.on_data(&chunk, at);
        }
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
        match self.decoder.take() {
            Some(mut d) => {
                let mut out = std::mem::take(&mut self.decoded);
                match d.feed(chunk, &mut out) {
                    Ok(()) => {
                        self.read(&out, now);
                        self.decoder = Some(d);
                    }
                    Err(e) => self.stop_reading(e.to_string()),
                }
                self.decoded = out;
            }
            None => self.read(chunk, now),
        }
    }

    /// Read one read's (decoded) bytes.
    fn read(&mut self, chunk: &[u8], now: Instant) {
        if chunk.is_empty() {
            return;
        }
        let (before, since) = (
            self.content_events,
            self.timeline.last_token.or(self.timeline.headers),
        );
        // Take the splitter out so the event callback can borrow the rest of `self`.
        match std::mem::replace(&mut self.kind, BodyKind::Opaque) {
            BodyKind::Sse(mut sse) => {
                sse.feed(chunk, &mut |item| self.on_event(item, now));
                self.kind = BodyKind::Sse(sse);
                self.delivery
                    .on_read(self.content_events - before, now, since);
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
            self.timeline.end = Some(now);
            return;
        }
        if self.model_looks < MODEL_EVENTS
            && (self.response_model.is_none() || self.response_id.is_none())
        {
            self.model_looks += 1;
            self.note_served(data);
        }
        match openai::inspect_chunk_in(&mut self.shape, data) {
            // An event of another shape than the stream's: not measured, counted.
            Ok(info) if self.api.zip(info.api).is_some_and(|(a, b)| a != b) => {
                self.parse_errors += 1;
            }
            Ok(info) => {
                if info.answer && self.timeline.first_output.is_none() {
                    self.timeline.first_output = Some(now);
                }
                if info.end {
                    // The Responses and Messages APIs' own end markers. vLLM sends no `[DONE]`
                    // after them; LiteLLM adds one to a Responses stream: E2E ends at the last.
                    self.done = true;
                    self.timeline.end = Some(now);
                }
                if self.api.is_none() {
                    self.api = info.api;
                }
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
                        self.stamp_lag = self.read_lag;
                        if let Some(signal) = &self.first_token_signal {
                            let _ = signal.set(now);
                        }
                    }
                    self.timeline.last_token = Some(now);
                    if let Some(Ok(mut t)) = self.token_times.as_ref().map(|t| t.lock()) {
                        if t.times.len() < MAX_ITL_SAMPLES {
                            t.times.push(now);
                        }
                    }
                }
                self.note_usage(info.usage);
                self.note_finish(info.finish);
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

    /// The model and id a stream's event says, kept where not known yet.
    fn note_served(&mut self, data: &[u8]) {
        let served = openai::served(data);
        if self.response_model.is_none() {
            self.response_model = served.model;
        }
        if self.response_id.is_none() {
            self.response_id = served.id.as_deref().and_then(ids::bounded);
        }
    }

    fn note_usage(&mut self, u: Option<Usage>) {
        if let Some(u) = u {
            self.usage = Some(self.usage.map_or(u, |prev| prev.merge(u)));
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
            if self.response_model.is_none() || self.response_id.is_none() {
                let served = openai::served(buf);
                self.response_model = self.response_model.take().or(served.model);
                self.response_id = self
                    .response_id
                    .take()
                    .or_else(|| served.id.as_deref().and_then(ids::bounded));
            }
            match openai::inspect_chunk(buf) {
                Ok(info) => {
                    self.note_usage(info.usage);
                    self.note_finish(info.finish);
                    if self.api.is_none() {
                        self.api = info.api;
                    }
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
                ..
            }) => (prompt_tokens, Some(c), Some(TokensSource::Usage)),
            Some(Usage {
                prompt_tokens,
                completion_tokens: None,
                ..
            }) if self.is_sse() => (
                prompt_tokens,
                Some(self.content_events),
                Some(TokensSource::Events),
            ),
            Some(Usage {
                prompt_tokens,
                completion_tokens: None,
                ..
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
        let pick = |q: f64| v[crate::stats::rank(v.len(), q)] as f64 / 1000.0;
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

    /// What a stream that ended cleanly says of its request, given the status sent: an upstream
    /// error status, an in-band error event, a stream cut short of its end marker or of a finish
    /// reason ([`Meter::cut_short`]), or ok.
    pub fn clean_end(&self, status: u16) -> (Outcome, Option<String>) {
        if status >= 400 {
            (
                Outcome::UpstreamError,
                Some(format!("upstream status {status}")),
            )
        } else if self.error_event.is_some() {
            (Outcome::StreamError, None)
        } else if self.is_sse() && !self.done {
            (
                Outcome::Incomplete,
                Some("stream ended without [DONE]".into()),
            )
        } else if let Some(why) = self.cut_short() {
            (Outcome::Incomplete, Some(why))
        } else {
            (Outcome::Ok, None)
        }
    }

    /// `error` with the upstream's own in-band error (type and code only) added: the most
    /// useful thing to keep. For a stream error it is the whole text.
    pub fn merge_error_event(&mut self, outcome: Outcome, error: Option<String>) -> Option<String> {
        match self.error_event.take() {
            None => error,
            Some(ev) => Some(match error {
                Some(e) if outcome != Outcome::StreamError => format!("{e}; {ev}"),
                _ => ev,
            }),
        }
    }
}
