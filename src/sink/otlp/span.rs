//! A finished request's record → its span, after the OpenTelemetry GenAI semantic conventions
//! (`gen_ai.*`), with tokentap's own timings as `tokentap.*` attributes and the first token as an
//! event.
//!
//! The span is tokentap's side of the caller's request: kind SERVER, a child of the caller's span
//! when the request carried a `traceparent`. `server.address`/`server.port` name the upstream
//! (the GenAI server, as the conventions use them).

use std::time::{SystemTime, UNIX_EPOCH};

use http::Uri;

use super::proto::{Attributes, Event, Span, Value, KIND_SERVER, STATUS_ERROR};
use crate::meter::{Outcome, RequestRecord, Trace};
use crate::openai::Api;

/// What the exporter is handed per request.
pub struct SpanIn {
    pub rec: RequestRecord,
    pub trace: Trace,
    /// The route's upstream (scheme and authority).
    pub upstream: Option<Uri>,
    /// Wall-clock time of the request head (the record's `ts`).
    pub start: SystemTime,
}

/// `gen_ai.operation.name` for an API shape.
fn operation(api: Api) -> Option<&'static str> {
    match api {
        Api::Chat | Api::Responses | Api::Messages => Some("chat"),
        Api::Completions => Some("text_completion"),
        Api::Embeddings => Some("embeddings"),
        Api::Models | Api::Other => None,
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

fn after(start: u64, ms: f64) -> u64 {
    start.saturating_add((ms.max(0.0) * 1e6).round() as u64)
}

/// Whether the span's status is an error: the upstream or tokentap failed the request (a client
/// that left, and a 4xx the client caused, are not errors of this span).
fn failed(r: &RequestRecord) -> bool {
    match r.outcome {
        Outcome::Ok | Outcome::ClientCancelled => false,
        Outcome::UpstreamError | Outcome::Rejected => r.status >= 500,
        _ => true,
    }
}

pub fn span(s: &SpanIn) -> Span {
    let r = &s.rec;
    let start = nanos(s.start);
    let op = operation(r.api);
    let name = match (op, r.model.as_deref()) {
        (Some(op), Some(m)) => format!("{op} {m}"),
        (Some(op), None) => op.to_owned(),
        (None, _) => format!("{} {}", r.method, r.endpoint),
    };
    let mut events = Vec::new();
    if let Some(ttft) = r.ttft_ms {
        events.push(Event {
            time_unix_nano: after(start, ttft),
            name: "first_token",
            attributes: vec![("tokentap.ttft_ms", Value::Double(ttft))],
        });
    }
    Span {
        trace_id: s.trace.trace_id,
        span_id: s.trace.span_id,
        trace_state: s.trace.state.clone(),
        parent_span_id: s.trace.parent,
        flags: s.trace.flags,
        name,
        kind: KIND_SERVER,
        start_time_unix_nano: start,
        end_time_unix_nano: after(start, r.e2e_ms),
        attributes: attributes(s, op),
        events,
        status: failed(r).then(|| {
            (
                STATUS_ERROR,
                r.error
                    .clone()
                    .unwrap_or_else(|| r.outcome.as_str().to_owned()),
            )
        }),
    }
}

/// The span's attributes: OpenTelemetry's GenAI, server and HTTP conventions, then the
/// record's own figures under `tokentap.*`. Absent values are left out.
fn attributes(s: &SpanIn, op: Option<&str>) -> Attributes {
    let r = &s.rec;
    let mut a: Attributes = Vec::with_capacity(32);
    let mut put = |k: &'static str, v: Option<Value>| {
        if let Some(v) = v {
            a.push((k, v));
        }
    };
    let int = |v: Option<u64>| v.map(|n| Value::Int(n.min(i64::MAX as u64) as i64));
    let dbl = |v: Option<f64>| v.filter(|x| x.is_finite()).map(Value::Double);
    let text = |v: Option<&str>| v.map(|x| Value::Str(x.to_owned()));
    put("gen_ai.operation.name", text(op));
    put("gen_ai.request.model", text(r.model.as_deref()));
    put("gen_ai.response.model", text(r.response_model.as_deref()));
    put("gen_ai.response.id", text(r.upstream_request_id.as_deref()));
    put("gen_ai.request.max_tokens", int(r.max_tokens));
    put("gen_ai.usage.input_tokens", int(r.input_tokens));
    put("gen_ai.usage.output_tokens", int(r.output_tokens));
    put("gen_ai.usage.cache_read.input_tokens", int(r.cached_tokens));
    if let Some(u) = &s.upstream {
        put("server.address", text(u.host()));
        let port = u
            .port_u16()
            .or(match u.scheme_str() {
                Some("https") => Some(443),
                _ => Some(80),
            })
            .map(u64::from);
        put("server.port", int(port));
    }
    put("http.request.method", Some(Value::Str(r.method.clone())));
    put("url.path", Some(Value::Str(r.endpoint.clone())));
    put(
        "http.response.status_code",
        (r.status > 0).then_some(Value::Int(i64::from(r.status))),
    );
    put(
        "error.type",
        (r.outcome != Outcome::Ok).then(|| Value::Str(r.outcome.as_str().to_owned())),
    );
    put("tokentap.record_id", Some(Value::Str(r.id.clone())));
    put("tokentap.request_id", text(r.request_id.as_deref()));
    put("tokentap.route", Some(Value::Str(r.route.clone())));
    put("tokentap.api", Some(Value::Str(r.api.as_str().to_owned())));
    put(
        "tokentap.outcome",
        Some(Value::Str(r.outcome.as_str().to_owned())),
    );
    put("tokentap.stream", Some(Value::Bool(r.stream)));
    put("tokentap.key_id", text(r.key_id.as_deref()));
    put("tokentap.bucket", text(r.bucket.as_deref()));
    put("tokentap.ttft_ms", dbl(r.ttft_ms));
    put("tokentap.ttfo_ms", dbl(r.ttfo_ms));
    put("tokentap.tpot_ms", dbl(r.tpot_ms));
    put("tokentap.e2e_ms", dbl(Some(r.e2e_ms)));
    put("tokentap.itl_p50_ms", dbl(r.itl_p50_ms));
    put("tokentap.itl_p99_ms", dbl(r.itl_p99_ms));
    put("tokentap.upstream_headers_ms", dbl(r.upstream_headers_ms));
    put("tokentap.upstream_sent_ms", dbl(r.upstream_sent_ms));
    put("tokentap.engine_queue_ms", dbl(r.engine_queue_ms));
    put("tokentap.gateway_overhead_ms", dbl(r.gateway_overhead_ms));
    put("tokentap.reasoning_tokens", int(r.reasoning_tokens));
    put("tokentap.in_flight", int(Some(r.in_flight)));
    put("tokentap.concurrency", int(r.concurrency));
    a
}
