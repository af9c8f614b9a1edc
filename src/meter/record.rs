//! The per-request record: the JSONL schema, one line per request, written by `serve` and read by
//! the offline commands. Additive changes only; `docs/records.md` documents every field.
//!
//! Serialised by `serde_json` alone. The other lists of its fields (the report's rows, the
//! ClickHouse table) are held to this one by `tests/suite/schema.rs`.

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::timeline::{ms_between, Clock, Stamp, Timeline};
use crate::openai::{Api, ServerTimings};
use crate::tags::LoadTags;

pub use super::gateway::{GatewayTap, JoinBy, RelayVerdict, TapSide, Unjoined};

fn other_api() -> Api {
    Api::Other
}
use super::{Buckets, Meter};

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
    /// A stream cut short that ended cleanly, without an error event: without its end marker
    /// (`[DONE]`), or, for a generating shape, without a finish reason or with one that says it
    /// was cut (`abort`). See `Meter::cut_short`.
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

/// The TTFT of one request split into where the time went (milliseconds, medians in reports).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TtftSplit {
    /// tokentap's own share: the request head to the request written upstream (body read,
    /// connect, write). Null in a client's records (bench).
    pub proxy_ms: Option<f64>,
    /// Written upstream → the upstream's response headers.
    pub upstream_headers_ms: Option<f64>,
    /// The engine's own queue and prefill (vLLM `--enable-per-request-metrics`).
    pub engine_queue_ms: Option<f64>,
    pub engine_prefill_ms: Option<f64>,
    /// TTFT − proxy − engine queue − engine prefill: network, gateway, tokenisation,
    /// detokenisation (in a client's records, tokentap's share too).
    pub outside_engine_ms: Option<f64>,
}

impl TtftSplit {
    /// The split of `ttft_ms`, when the write upstream or the engine's figures place part of it.
    fn of(
        tl: &Timeline,
        timings: &ServerTimings,
        ttft_ms: Option<f64>,
        upstream_sent_ms: Option<f64>,
    ) -> Option<TtftSplit> {
        let engine = timings.queue_ms.zip(timings.ttft_ms).map(|(q, p)| q + p);
        ttft_ms
            .filter(|_| upstream_sent_ms.is_some() || engine.is_some())
            .map(|ttft| {
                let own = upstream_sent_ms.unwrap_or(0.0);
                TtftSplit {
                    proxy_ms: upstream_sent_ms,
                    upstream_headers_ms: tl.ms(tl.headers).map(|h| (h - own).max(0.0)),
                    engine_queue_ms: timings.queue_ms,
                    engine_prefill_ms: timings.ttft_ms,
                    outside_engine_ms: engine.map(|e| ttft - own - e),
                }
            })
    }
}

/// One request, as measured. Durations are milliseconds from `t0` (the request head received),
/// on a monotonic clock; `ts` is the wall-clock time of `t0`.
///
/// Read leniently: every field but `outcome` and `e2e_ms` may be missing (older logs, other
/// writers) and takes its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// RFC 3339 wall-clock time the request head arrived.
    #[serde(default)]
    pub ts: String,
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub route: String,
    #[serde(default)]
    pub experiment: Option<Experiment>,
    #[serde(default)]
    pub method: String,
    /// Request path without the query string, as the client sent it.
    #[serde(default)]
    pub endpoint: String,
    /// The API shape measured: what the events say they are, else what the path says
    /// (`chat`, `completions`, `responses`, `messages`, `embeddings`, `other`).
    #[serde(default = "other_api")]
    pub api: Api,
    /// The path's shape, when the events said another (chat JSON on `/v1/messages`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_api: Option<Api>,
    /// Model the client asked for.
    #[serde(default)]
    pub model: Option<String>,
    /// Model sent upstream, when the route's model map rewrote it.
    #[serde(default)]
    pub upstream_model: Option<String>,
    /// The model the response says served it (its `model`; Responses' `response.model`,
    /// Messages' `message.model`), when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_model: Option<String>,
    /// `sha256:<hex>` of the client's key, or its configured alias. Never the key.
    #[serde(default)]
    pub key_id: Option<String>,
    #[serde(default)]
    pub stream: bool,
    /// Status the client received (0 when none was sent).
    #[serde(default)]
    pub status: u16,
    pub outcome: Outcome,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub tokens_source: Option<TokensSource>,
    /// Prompt tokens served from the engine's prefix cache (usage: chat
    /// `prompt_tokens_details.cached_tokens`, Responses `input_tokens_details.cached_tokens`,
    /// Messages `cache_read_input_tokens`).
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    /// Output tokens that were reasoning (usage: `completion_tokens_details` /
    /// `output_tokens_details.reasoning_tokens`).
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    /// Time to first output token: the first token that is not reasoning (answer text or a tool
    /// call). Equal to `ttft_ms` for a model that does not reason first.
    #[serde(default)]
    pub ttfo_ms: Option<f64>,
    #[serde(default)]
    pub tpot_ms: Option<f64>,
    pub e2e_ms: f64,
    #[serde(default)]
    pub itl_p50_ms: Option<f64>,
    #[serde(default)]
    pub itl_p99_ms: Option<f64>,
    #[serde(default)]
    pub itl_max_ms: Option<f64>,
    /// Request body fully read (the proxy's own share before the upstream sees anything).
    #[serde(default)]
    pub body_read_ms: Option<f64>,
    #[serde(default)]
    pub upstream_headers_ms: Option<f64>,
    #[serde(default)]
    pub first_byte_ms: Option<f64>,
    /// First SSE event of any kind (e.g. the role-only chunk), beside the first token.
    #[serde(default)]
    pub first_event_ms: Option<f64>,
    #[serde(default)]
    pub last_token_ms: Option<f64>,
    /// Requests in flight on this route when this one was admitted, itself included.
    #[serde(default)]
    pub in_flight: u64,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub request_bytes: u64,
    #[serde(default)]
    pub response_bytes: u64,
    /// SSE `data:` events seen (including `[DONE]`).
    #[serde(default)]
    pub events: u64,
    #[serde(default)]
    pub content_events: u64,
    /// Whether `data: [DONE]` was seen (streams only).
    #[serde(default)]
    pub done: Option<bool>,
    /// Why the generation ended, in the response's own word (bounded): a choice's
    /// `finish_reason` (`stop`, `length`, `tool_calls`, `abort`), a Responses status or
    /// `incomplete_details.reason`, a Messages `stop_reason`. Absent when it said none: a stream
    /// of a generating shape without one is `incomplete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Prompt-shape bucket from observed token counts: `long-short`, `balanced`, `short-long`,
    /// `other`; null when token counts are unknown.
    #[serde(default)]
    pub bucket: Option<String>,
    /// Events that were not readable JSON (forwarded regardless).
    #[serde(default)]
    pub parse_errors: u64,
    /// Events over `limits.max_sse_event_bytes` (forwarded, not measured).
    #[serde(default)]
    pub oversize_events: u64,
    /// vLLM `--enable-per-request-metrics`: engine queue time.
    #[serde(default)]
    pub engine_queue_ms: Option<f64>,
    /// vLLM `--enable-per-request-metrics`: scheduled → first token (engine prefill).
    #[serde(default)]
    pub engine_ttft_ms: Option<f64>,
    /// vLLM `--enable-per-request-metrics`: first → last token.
    #[serde(default)]
    pub engine_decode_ms: Option<f64>,
    /// LiteLLM's own estimate of its overhead (`x-litellm-overhead-duration-ms`).
    #[serde(default)]
    pub gateway_overhead_ms: Option<f64>,
    /// The load generator's concurrency level (`tokentap bench` records, and proxy records of
    /// requests bench sent: its `x-tokentap-concurrency` header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    /// The load generator's offered arrival rate, requests a second (`tokentap bench
    /// --request-rate`: an open-loop cell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_rate: Option<f64>,
    /// When the load generator was due to send it: ms from the start of its cell (open loop,
    /// replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_ms: Option<f64>,
    /// How long it waited, once due, for a free slot under the load generator's
    /// `--max-concurrency`: client queue time, never part of TTFT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_queue_ms: Option<f64>,
    /// How much later than due (queue time aside) the load generator sent it: the client
    /// falling behind its schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_lag_ms: Option<f64>,
    /// The turn of a conversation this request is (`bench --multi-turn`), from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// The load generator's prompt: its index in the bucket's chosen prompt set (`tokentap
    /// bench`; the set is `run.json`'s `prompt_set_sha256`). `compare` pairs two runs by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_index: Option<u64>,
    /// The run of a repeated sweep (`tokentap bench --runs N`, N > 1) this request is, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u32>,
    /// The bench run this request belongs to (`tokentap bench`; every shard of a distributed
    /// run shares it: `--run-id`). Not the repetition index, which is `run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Which shard of a distributed run sent it (`bench --shard I/N`: I, from 1), and N.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// Request head → request written upstream (tokentap's own share of TTFT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_sent_ms: Option<f64>,
    /// Where the TTFT went; null without a first token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_split: Option<TtftSplit>,
    /// On the two routes of a gateway tap: the join and, outer side, the hop's parts (set by the
    /// proxy once the record is made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_tap: Option<GatewayTap>,
    /// The client's request id: the first of `request_id.headers` it sent (`x-request-id`), or
    /// the one tokentap made (`request_id.generate`). At most 128 bytes (cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The upstream's id for the response: its body's or stream's `id` (`chatcmpl-…`,
    /// Responses' `response.id`, Messages' `message.id`), else its response header of those
    /// names (vLLM's `x-request-id`). At most 128 bytes (cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_request_id: Option<String>,
    /// The tap across pods: the `x-tokentap-join` id this route received from a source it
    /// trusts (`join_sources`, `join_keys`; a `behind` route: its gateway), 16 hex digits: the
    /// `id` of the record in front of the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_id: Option<String>,
    /// The route added `x-tokentap-join: <this record's id>` to what it forwarded
    /// (`join_header`). Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub join_sent: bool,
    /// On a record with `join_id` or `join_sent`: the host kernel's boot id
    /// (`/proc/sys/kernel/random/boot_id`). Two records with the same one were stamped on one
    /// clock (one host), so the report may compare their instants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// With OTLP export on: the request's trace (the caller's, continued from its
    /// `traceparent`, or a new one) and tokentap's span in it, as 32 and 16 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// The response's `Content-Encoding` (`gzip`, `deflate`, `br`, `zstd`, or another, cut to
    /// 32 bytes): tokentap measured a decoded copy; the client got the bytes as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    /// Why the body was not measured past a point: an encoding not decoded, a corrupt body, or
    /// one decoding past its bound (docs/streaming.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_error: Option<String>,
    /// Streams with content: how the events arrived from the upstream, read by read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<super::delivery::Delivery>,
    /// Which clock stamped the instants (`kernel`: the sockets' receive stamps; docs/records.md).
    #[serde(default)]
    pub clock: Clock,
    /// The kernel's arrival of the first token's read → tokentap's read of it (ms).
    #[serde(default)]
    pub stamp_lag_ms: Option<f64>,
    /// What went wrong, without secrets: an error kind, never an upstream message.
    #[serde(default)]
    pub error: Option<String>,
}

/// What is known of a request besides the meter's observations: everything else its record
/// says. Filled as the request goes (the body read tells `model`, `stream`, `max_tokens`).
///
/// NB: what few requests have is boxed (`experiment`, `trace`): the proxy holds a request's
/// facts for its whole stream (docs/overhead.md, "Memory per stream").
#[derive(Debug, Clone)]
pub struct Facts {
    pub stamp: Stamp,
    pub experiment: Option<Box<Experiment>>,
    pub method: String,
    pub endpoint: String,
    pub model: Option<String>,
    pub upstream_model: Option<String>,
    pub key_id: Option<String>,
    pub stream: bool,
    pub max_tokens: Option<u64>,
    pub request_bytes: u64,
    pub in_flight: u64,
    pub gateway_overhead_ms: Option<f64>,
    /// The load generator's tags: its bucket (known in advance; else the record's is derived
    /// from tokens), concurrency level, open-loop rate and conversation turn.
    pub load: LoadTags,
    /// The load generator's schedule for this request (`scheduled_ms`, `client_queue_ms`,
    /// `client_lag_ms`).
    pub schedule: Option<Schedule>,
    /// The request's trace context, when its span is exported (OTLP on).
    pub trace: Option<Box<super::Trace>>,
    /// The client's request id (bounded), and the upstream's from its response headers.
    pub request_id: Option<String>,
    pub upstream_request_id: Option<String>,
    /// The kernel stamped `t0` (the read that completed the request head).
    pub t0_kernel: bool,
    /// The tap across pods: the `x-tokentap-join` id received from a trusted source, and
    /// whether the route sent its own (`join_header`).
    pub join_id: Option<u64>,
    pub join_sent: bool,
}

impl Facts {
    pub fn new(stamp: Stamp, method: &str, endpoint: &str) -> Facts {
        Facts {
            stamp,
            experiment: None,
            method: method.to_owned(),
            endpoint: endpoint.chars().take(256).collect(),
            model: None,
            upstream_model: None,
            key_id: None,
            stream: false,
            max_tokens: None,
            request_bytes: 0,
            in_flight: 0,
            gateway_overhead_ms: None,
            load: LoadTags::default(),
            schedule: None,
            trace: None,
            request_id: None,
            upstream_request_id: None,
            t0_kernel: false,
            join_id: None,
            join_sent: false,
        }
    }
}

/// When a load generator sent a request against when it was due (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Due, from the start of its cell.
    pub scheduled_ms: f64,
    /// Waiting for a free slot under the generator's concurrency cap.
    pub queue_ms: f64,
    /// Late beyond that: the generator behind its schedule.
    pub lag_ms: f64,
}

/// How a request ended, decided by its caller (the proxy's `ending::verdict`, bench's client).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The status the client received (0 when none was sent).
    pub status: u16,
    pub outcome: Outcome,
    pub error: Option<String>,
}

/// TPOT per DESIGN.md: (E2E − TTFT) ÷ (output tokens − 1), only with ≥ 2 tokens.
pub fn tpot_ms(e2e_ms: f64, ttft_ms: Option<f64>, output_tokens: Option<u64>) -> Option<f64> {
    match (ttft_ms, output_tokens) {
        (Some(ttft), Some(n)) if n >= 2 => Some((e2e_ms - ttft).max(0.0) / (n - 1) as f64),
        _ => None,
    }
}

impl RequestRecord {
    /// The record of a finished request: its facts, what the meter saw (caught up first) and
    /// its verdict; E2E ends at `[DONE]` when the stream had one, else at `now`.
    pub fn assemble(
        facts: Facts,
        meter: &mut Meter,
        verdict: Verdict,
        now: Instant,
        route: &str,
        buckets: &Buckets,
    ) -> RequestRecord {
        meter.settle();
        let end_at = *meter.timeline.end.get_or_insert(now);
        let tl = meter.timeline;
        let e2e_ms = ms_between(tl.t0, end_at);
        let ttft_ms = tl.ms(tl.first_token);
        let (input_tokens, output_tokens, tokens_source) = meter.tokens();
        let path_api = Api::from_path(&facts.endpoint);
        let api = meter.api.unwrap_or(path_api);
        let usage = meter.usage.unwrap_or_default();
        let (itl_p50_ms, itl_p99_ms, itl_max_ms) = meter.itl_summary();
        let upstream_sent_ms = tl.ms(tl.sent);
        let ttft_split = TtftSplit::of(&tl, &meter.timings, ttft_ms, upstream_sent_ms);
        RequestRecord {
            ts: humantime::format_rfc3339_micros(facts.stamp.at).to_string(),
            id: format!("{:016x}", facts.stamp.id),
            route: route.to_owned(),
            experiment: facts.experiment.map(|e| *e),
            method: facts.method,
            endpoint: facts.endpoint,
            api,
            endpoint_api: (api != path_api).then_some(path_api),
            model: facts.model,
            upstream_model: facts.upstream_model,
            response_model: meter.response_model.take(),
            key_id: facts.key_id,
            stream: facts.stream,
            status: verdict.status,
            outcome: verdict.outcome,
            input_tokens,
            output_tokens,
            tokens_source,
            cached_tokens: usage.cached_tokens,
            reasoning_tokens: usage.reasoning_tokens,
            ttft_ms,
            ttfo_ms: tl.ms(tl.first_output),
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
            in_flight: facts.in_flight,
            max_tokens: facts.max_tokens,
            request_bytes: facts.request_bytes,
            response_bytes: meter.response_bytes,
            events: meter.events,
            content_events: meter.content_events,
            done: meter.is_sse().then_some(meter.done),
            finish_reason: meter.finish_reason.take(),
            bucket: facts
                .load
                .bucket
                .or_else(|| buckets.of(input_tokens, output_tokens).map(str::to_owned)),
            parse_errors: meter.parse_errors,
            oversize_events: meter.oversize_events,
            engine_queue_ms: meter.timings.queue_ms,
            engine_ttft_ms: meter.timings.ttft_ms,
            engine_decode_ms: meter.timings.generation_ms,
            gateway_overhead_ms: facts.gateway_overhead_ms,
            concurrency: facts.load.concurrency,
            request_rate: facts.load.request_rate,
            scheduled_ms: facts.schedule.map(|s| s.scheduled_ms),
            client_queue_ms: facts.schedule.map(|s| s.queue_ms),
            client_lag_ms: facts.schedule.map(|s| s.lag_ms),
            turn: facts.load.turn,
            prompt_index: None,
            run: None,
            run_id: None,
            shard: None,
            shards: None,
            upstream_sent_ms,
            ttft_split,
            gateway_tap: None,
            request_id: facts.request_id,
            join_id: facts.join_id.map(crate::tags::join_token),
            join_sent: facts.join_sent,
            boot_id: (facts.join_sent || facts.join_id.is_some())
                .then(super::gateway::boot_id)
                .flatten()
                .map(str::to_owned),
            upstream_request_id: meter.response_id.take().or(facts.upstream_request_id),
            trace_id: None,
            span_id: None,
            content_encoding: meter.content_encoding.take(),
            decode_error: meter.decode_error.take(),
            delivery: meter.delivery.delivery(output_tokens),
            clock: meter.clock(facts.t0_kernel),
            stamp_lag_ms: meter.stamp_lag.map(super::duration_ms),
            error: verdict.error,
        }
    }
}
