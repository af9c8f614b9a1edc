//! The per-request record: the JSONL schema, one line per request, written by `serve` and read by
//! the offline commands. Additive changes only; the README documents every field.

use serde::{Deserialize, Serialize};

/// How a request ended. A closed set: it becomes a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Upstream answered < 400 and the body ended cleanly (`[DONE]` seen for a stream).
    Ok,
    /// Upstream answered with status ≥ 400 (passed through verbatim).
    UpstreamError,
    /// Status 200, but the stream carried an in-band `{"error": …}` event.
    StreamError,
    /// An SSE stream that ended cleanly without `[DONE]` and without an error event.
    Incomplete,
    /// The upstream connection broke mid-body (the client's stream was cut the same way).
    UpstreamReset,
    /// The upstream could not be reached (502 to the client).
    ConnectError,
    /// A timeout fired: connect/first byte (504 to the client) or idle/total (stream cut).
    Timeout,
    /// The client went away before the end; the upstream request was dropped at once.
    ClientCancelled,
    /// Refused by tokentap itself (413, 400, 404, 503), never sent upstream.
    Rejected,
    /// Still streaming when the shutdown grace period ran out.
    ShutdownCut,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::UpstreamError => "upstream_error",
            Outcome::StreamError => "stream_error",
            Outcome::Incomplete => "incomplete",
            Outcome::UpstreamReset => "upstream_reset",
            Outcome::ConnectError => "connect_error",
            Outcome::Timeout => "timeout",
            Outcome::ClientCancelled => "client_cancelled",
            Outcome::Rejected => "rejected",
            Outcome::ShutdownCut => "shutdown_cut",
        }
    }
}

/// Where `output_tokens` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokensSource {
    /// `usage.completion_tokens` reported by the upstream.
    Usage,
    /// The count of content events: a lower bound.
    Events,
}

/// Experiment membership (filled by experiment modes; `null` otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Experiment {
    pub arm: String,
    pub pair_id: Option<String>,
}

/// One request, as measured. Durations are milliseconds from `t0` (the request head received),
/// on a monotonic clock; `ts` is the wall-clock time of `t0`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// RFC 3339 wall-clock time the request head arrived.
    pub ts: String,
    pub id: String,
    pub route: String,
    pub experiment: Option<Experiment>,
    pub method: String,
    /// Request path without the query string, as the client sent it.
    pub endpoint: String,
    /// Model the client asked for.
    pub model: Option<String>,
    /// Model sent upstream, when the route's model map rewrote it.
    pub upstream_model: Option<String>,
    /// `sha256:<hex>` of the client's key, or its configured alias. Never the key.
    pub key_id: Option<String>,
    pub stream: bool,
    /// Status the client received (0 when none was sent).
    pub status: u16,
    pub outcome: Outcome,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub tokens_source: Option<TokensSource>,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: f64,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    pub itl_max_ms: Option<f64>,
    /// Request body fully read (the proxy's own share before the upstream sees anything).
    pub body_read_ms: Option<f64>,
    pub upstream_headers_ms: Option<f64>,
    pub first_byte_ms: Option<f64>,
    /// First SSE event of any kind (e.g. the role-only chunk), beside the first token.
    pub first_event_ms: Option<f64>,
    pub last_token_ms: Option<f64>,
    /// Requests in flight on this route when this one was admitted, itself included.
    pub in_flight: u64,
    pub max_tokens: Option<u64>,
    pub request_bytes: u64,
    pub response_bytes: u64,
    /// SSE `data:` events seen (including `[DONE]`).
    pub events: u64,
    pub content_events: u64,
    /// Whether `data: [DONE]` was seen (streams only).
    pub done: Option<bool>,
    /// Prompt-shape bucket from observed token counts: `long-short`, `balanced`, `short-long`,
    /// `other`; null when token counts are unknown.
    pub bucket: Option<String>,
    /// Events that were not readable JSON (forwarded regardless).
    pub parse_errors: u64,
    /// Events over `limits.max_sse_event_bytes` (forwarded, not measured).
    pub oversize_events: u64,
    /// vLLM `--enable-per-request-metrics`: engine queue time.
    pub engine_queue_ms: Option<f64>,
    /// vLLM `--enable-per-request-metrics`: scheduled → first token (engine prefill).
    pub engine_ttft_ms: Option<f64>,
    /// vLLM `--enable-per-request-metrics`: first → last token.
    pub engine_decode_ms: Option<f64>,
    /// LiteLLM's own estimate of its overhead (`x-litellm-overhead-duration-ms`).
    pub gateway_overhead_ms: Option<f64>,
    /// The load generator's concurrency level (`tokentap bench` records only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    /// What went wrong, without secrets: an error kind, never an upstream message.
    pub error: Option<String>,
}

/// Writes a record as one JSON object, byte for byte what `serde_json::to_writer` writes for it
/// (tested below), for the request log: the keys are literals and a string with nothing to
/// escape is copied as is, where serde_json escapes every key and string byte by byte.
/// A field added to `RequestRecord` goes here too: the test's records set every field (the
/// struct literal will not compile without it) and compare the bytes with serde_json's.
pub fn write_json(r: &RequestRecord, out: &mut Vec<u8>) {
    let mut w = JsonOut { out, first: true };
    w.open();
    w.key("ts").str(&r.ts);
    w.key("id").str(&r.id);
    w.key("route").str(&r.route);
    match &r.experiment {
        None => w.key("experiment").null(),
        Some(e) => {
            w.key("experiment").open();
            w.key("arm").str(&e.arm);
            w.key("pair_id").opt_str(e.pair_id.as_deref());
            w.close();
        }
    }
    w.key("method").str(&r.method);
    w.key("endpoint").str(&r.endpoint);
    w.key("model").opt_str(r.model.as_deref());
    w.key("upstream_model").opt_str(r.upstream_model.as_deref());
    w.key("key_id").opt_str(r.key_id.as_deref());
    w.key("stream").value(&r.stream);
    w.key("status").value(&r.status);
    w.key("outcome").raw_str(r.outcome.as_str());
    w.key("input_tokens").value(&r.input_tokens);
    w.key("output_tokens").value(&r.output_tokens);
    w.key("tokens_source").value(&r.tokens_source);
    w.key("ttft_ms").value(&r.ttft_ms);
    w.key("tpot_ms").value(&r.tpot_ms);
    w.key("e2e_ms").value(&r.e2e_ms);
    w.key("itl_p50_ms").value(&r.itl_p50_ms);
    w.key("itl_p99_ms").value(&r.itl_p99_ms);
    w.key("itl_max_ms").value(&r.itl_max_ms);
    w.key("body_read_ms").value(&r.body_read_ms);
    w.key("upstream_headers_ms").value(&r.upstream_headers_ms);
    w.key("first_byte_ms").value(&r.first_byte_ms);
    w.key("first_event_ms").value(&r.first_event_ms);
    w.key("last_token_ms").value(&r.last_token_ms);
    w.key("in_flight").value(&r.in_flight);
    w.key("max_tokens").value(&r.max_tokens);
    w.key("request_bytes").value(&r.request_bytes);
    w.key("response_bytes").value(&r.response_bytes);
    w.key("events").value(&r.events);
    w.key("content_events").value(&r.content_events);
    w.key("done").value(&r.done);
    w.key("bucket").opt_str(r.bucket.as_deref());
    w.key("parse_errors").value(&r.parse_errors);
    w.key("oversize_events").value(&r.oversize_events);
    w.key("engine_queue_ms").value(&r.engine_queue_ms);
    w.key("engine_ttft_ms").value(&r.engine_ttft_ms);
    w.key("engine_decode_ms").value(&r.engine_decode_ms);
    w.key("gateway_overhead_ms").value(&r.gateway_overhead_ms);
    if let Some(c) = r.concurrency {
        w.key("concurrency").value(&c);
    }
    w.key("error").opt_str(r.error.as_deref());
    w.close();
}

struct JsonOut<'a> {
    out: &'a mut Vec<u8>,
    /// No key written yet in the innermost open object (no comma before the next).
    first: bool,
}

impl JsonOut<'_> {
    fn open(&mut self) {
        self.out.push(b'{');
        self.first = true;
    }

    fn close(&mut self) {
        self.out.push(b'}');
        self.first = false;
    }

    /// `"name":`, after a comma unless it is the object's first key. Names are plain ASCII.
    fn key(&mut self, name: &str) -> &mut Self {
        if !std::mem::take(&mut self.first) {
            self.out.push(b',');
        }
        self.raw_str(name);
        self.out.push(b':');
        self
    }

    /// A string known to need no escaping.
    fn raw_str(&mut self, s: &str) {
        self.out.push(b'"');
        self.out.extend_from_slice(s.as_bytes());
        self.out.push(b'"');
    }

    fn str(&mut self, s: &str) {
        // serde_json escapes control characters, `"` and `\`; anything else is copied.
        if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            self.raw_str(s);
        } else {
            self.value(s);
        }
    }

    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.null(),
            Some(s) => self.str(s),
        }
    }

    fn null(&mut self) {
        self.out.extend_from_slice(b"null");
    }

    /// Numbers, booleans, enums and options of them go through serde_json itself (its float
    /// formatting, `null` for non-finite and `None`): short values, nothing to gain by hand.
    fn value<T: Serialize + ?Sized>(&mut self, v: &T) {
        // Writing into a Vec cannot fail; a value that cannot be serialised writes `null`.
        if serde_json::to_writer(&mut *self.out, v).is_err() {
            self.null();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(rng: &mut fastrand::Rng) -> String {
        const PIECES: [&str; 12] = [
            "a", "model-7b", " ", "\"", "\\", "\n", "\u{1}", "\u{1f}", "\u{7f}", "é", "日本", "/",
        ];
        (0..rng.usize(0..6))
            .map(|_| PIECES[rng.usize(..PIECES.len())])
            .collect()
    }

    fn float(rng: &mut fastrand::Rng) -> f64 {
        match rng.u8(..8) {
            0 => 0.0,
            1 => f64::NAN,
            2 => f64::INFINITY,
            3 => -rng.f64() * 1e3,
            4 => rng.f64() * 1e-9,
            5 => rng.f64() * 1e18,
            6 => (rng.u32(..) as f64) / 1e6,
            _ => rng.f64() * 100.0,
        }
    }

    fn record(rng: &mut fastrand::Rng) -> RequestRecord {
        let some = |rng: &mut fastrand::Rng| rng.bool();
        let opt_s = |rng: &mut fastrand::Rng, on: bool| on.then(|| text(rng));
        let outcomes = [
            Outcome::Ok,
            Outcome::UpstreamError,
            Outcome::StreamError,
            Outcome::Incomplete,
            Outcome::UpstreamReset,
            Outcome::ConnectError,
            Outcome::Timeout,
            Outcome::ClientCancelled,
            Outcome::Rejected,
            Outcome::ShutdownCut,
        ];
        let u = |rng: &mut fastrand::Rng| match rng.u8(..3) {
            0 => 0,
            1 => u64::MAX,
            _ => rng.u64(..100_000),
        };
        let (a, b, c, d, e, f, g) = (
            some(rng),
            some(rng),
            some(rng),
            some(rng),
            some(rng),
            some(rng),
            some(rng),
        );
        RequestRecord {
            ts: text(rng),
            id: text(rng),
            route: text(rng),
            experiment: a.then(|| Experiment {
                arm: text(rng),
                pair_id: if rng.bool() { Some(text(rng)) } else { None },
            }),
            method: text(rng),
            endpoint: text(rng),
            model: opt_s(rng, b),
            upstream_model: opt_s(rng, c),
            key_id: opt_s(rng, d),
            stream: rng.bool(),
            status: rng.u16(..),
            outcome: outcomes[rng.usize(..outcomes.len())],
            input_tokens: e.then(|| u(rng)),
            output_tokens: f.then(|| u(rng)),
            tokens_source: match rng.u8(..3) {
                0 => None,
                1 => Some(TokensSource::Usage),
                _ => Some(TokensSource::Events),
            },
            ttft_ms: rng.bool().then(|| float(rng)),
            tpot_ms: rng.bool().then(|| float(rng)),
            e2e_ms: float(rng),
            itl_p50_ms: rng.bool().then(|| float(rng)),
            itl_p99_ms: rng.bool().then(|| float(rng)),
            itl_max_ms: rng.bool().then(|| float(rng)),
            body_read_ms: rng.bool().then(|| float(rng)),
            upstream_headers_ms: rng.bool().then(|| float(rng)),
            first_byte_ms: rng.bool().then(|| float(rng)),
            first_event_ms: rng.bool().then(|| float(rng)),
            last_token_ms: rng.bool().then(|| float(rng)),
            in_flight: u(rng),
            max_tokens: g.then(|| u(rng)),
            request_bytes: u(rng),
            response_bytes: u(rng),
            events: u(rng),
            content_events: u(rng),
            done: match rng.u8(..3) {
                0 => None,
                1 => Some(true),
                _ => Some(false),
            },
            bucket: rng.bool().then(|| text(rng)),
            parse_errors: u(rng),
            oversize_events: u(rng),
            engine_queue_ms: rng.bool().then(|| float(rng)),
            engine_ttft_ms: rng.bool().then(|| float(rng)),
            engine_decode_ms: rng.bool().then(|| float(rng)),
            gateway_overhead_ms: rng.bool().then(|| float(rng)),
            concurrency: rng.bool().then(|| u(rng)),
            error: rng.bool().then(|| text(rng)),
        }
    }

    /// The log's writer and serde_json agree byte for byte, and the line reads back.
    #[test]
    fn write_json_is_serde_json_byte_for_byte() {
        let mut rng = fastrand::Rng::with_seed(6);
        let mut ours = Vec::new();
        for i in 0..20_000 {
            let r = record(&mut rng);
            ours.clear();
            write_json(&r, &mut ours);
            let theirs = serde_json::to_vec(&r).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs),
                "record {i}"
            );
            let back: serde_json::Value = serde_json::from_slice(&ours).unwrap();
            assert!(back.is_object());
        }
    }
}
