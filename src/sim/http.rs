//! The simulated engine's OpenAI-compatible HTTP face, in vLLM's chunk format: role-only first
//! chunk (chat), one content chunk per token, `finish_reason` on the last content chunk, a
//! `"choices":[]` usage chunk when asked (with vLLM's `--enable-per-request-metrics` object,
//! `metrics`, as if that flag were on), then `data: [DONE]`. Headers go out at once, as vLLM
//! sends them; tokens follow as the engine produces them (with `--pace`, at their instants:
//! `paced`). Stopped, it ends every answer in flight as vLLM does (`Wire::abort`:
//! `"finish_reason":"abort"`, then `[DONE]`).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::engine::{EngineStats, Job, Out, Profile};
use super::times::EngineTimes;
use super::wire::{Counts, Wire};
use crate::openai::Api;
use crate::tokens::estimate_tokens;

mod paced;
pub use paced::LATENESS_HEADER;

/// Words the sim "generates": deterministic per request seed.
const WORDS: &[&str] = &[
    " the", " model", " token", " stream", " latency", " first", " engine", " batch", " cache",
    " prefill", " decode", " answer", " reads", " quickly", " and", " then", " waits", " for",
    " more", " text",
];

pub struct SimState {
    pub profile: Profile,
    /// Block hashes of prompts seen (the profile's `prefix_cache`).
    pub cache: super::cache::PrefixCache,
    pub model: String,
    pub jobs: mpsc::Sender<Job>,
    pub stats: Arc<EngineStats>,
    pub seed: u64,
    pub counter: AtomicU64,
    /// Set when the sim is stopped: every answer in flight ends as vLLM's do (aborted).
    pub stop: watch::Receiver<bool>,
    /// `sim --pace`: every answer at this fixed pace; the cost model is not asked.
    pub paced: Option<Arc<super::pace::Paced>>,
}

/// Response bodies: a whole JSON, a stream fed by the request's task, or a paced stream that
/// writes each token at its instant.
pub enum SimBody {
    Full(Full<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
    Paced(Box<paced::PacedBody>),
}

#[warn(clippy::missing_trait_methods)]
impl Body for SimBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut *self {
            SimBody::Full(f) => Pin::new(f).poll_frame(cx),
            SimBody::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
            SimBody::Paced(p) => p.poll_frame(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            SimBody::Full(f) => f.is_end_stream(),
            SimBody::Stream(rx) => rx.is_closed() && rx.is_empty(),
            SimBody::Paced(p) => p.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            SimBody::Full(f) => f.size_hint(),
            SimBody::Stream(_) | SimBody::Paced(_) => http_body::SizeHint::default(),
        }
    }
}

fn json_response(status: StatusCode, v: &Value) -> Response<SimBody> {
    let mut r = Response::new(SimBody::Full(Full::new(Bytes::from(v.to_string()))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// vLLM's error shape (integer `code`).
fn error(status: StatusCode, kind: &str, msg: &str) -> Response<SimBody> {
    json_response(
        status,
        &serde_json::json!({"error": {"message": msg, "type": kind, "param": null, "code": status.as_u16()}}),
    )
}

/// A request the sim turns away, as vLLM would: its status, error type and message.
struct Refusal {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            status,
            kind,
            message: message.into(),
        }
    }

    fn response(self) -> Response<SimBody> {
        error(self.status, self.kind, &self.message)
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GenRequest {
    model: Option<String>,
    messages: Option<Vec<Value>>,
    prompt: Option<Value>,
    /// The Responses API's prompt: a string or a list of messages.
    input: Option<Value>,
    /// Anthropic's system prompt: a string or a list of blocks.
    system: Option<Value>,
    max_tokens: Option<u64>,
    max_output_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    min_tokens: Option<u64>,
    ignore_eos: Option<bool>,
    stream: Option<bool>,
    stream_options: Option<Value>,
    seed: Option<u64>,
    n: Option<u64>,
}

/// Every string of the prompt, concatenated: what the prefix cache keys on.
fn prompt_text(req: &GenRequest) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => out.push_str(s),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    for v in [&req.system, &req.prompt, &req.input].into_iter().flatten() {
        walk(v, &mut out);
    }
    for m in req.messages.iter().flatten() {
        walk(m, &mut out);
    }
    out
}

fn prompt_tokens(req: &GenRequest) -> u64 {
    let input_msgs = match &req.input {
        Some(Value::String(s)) => return estimate_tokens(s) + 3,
        Some(Value::Array(a)) => Some(a),
        _ => None,
    };
    let system = match &req.system {
        Some(Value::String(s)) => estimate_tokens(s) + 4,
        Some(v @ Value::Array(_)) => estimate_tokens(&v.to_string()) + 4,
        _ => 0,
    };
    if let Some(msgs) = req.messages.as_ref().or(input_msgs) {
        let mut n = 3 + system;
        for m in msgs {
            n += 4;
            match m.get("content") {
                Some(Value::String(s)) => n += estimate_tokens(s),
                Some(Value::Array(parts)) => {
                    for p in parts {
                        if let Some(Value::String(s)) = p.get("text") {
                            n += estimate_tokens(s);
                        }
                    }
                }
                _ => {}
            }
        }
        n
    } else {
        match &req.prompt {
            Some(Value::String(s)) => estimate_tokens(s) + 1,
            Some(Value::Array(a)) => a.len() as u64 + 1,
            _ => 1,
        }
    }
}

pub async fn handle(state: Arc<SimState>, req: Request<Incoming>) -> Response<SimBody> {
    let path = req.uri().path().to_owned();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/v1/models") => json_response(
            StatusCode::OK,
            &serde_json::json!({"object": "list", "data": [{"id": state.model, "object": "model", "owned_by": "tokentap-sim", "max_model_len": state.profile.max_model_len}]}),
        ),
        (&Method::GET, "/health") => json_response(StatusCode::OK, &serde_json::json!({})),
        (&Method::GET, "/metrics") => {
            let mut text = super::metrics::page(&state.profile, &state.model, &state.stats);
            if let Some(p) = &state.paced {
                p.late.metrics(&p.pace, &mut text);
            }
            let mut r = Response::new(SimBody::Full(Full::new(Bytes::from(text))));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        (&Method::POST, "/v1/chat/completions") => generate(state, req, Api::Chat).await,
        (&Method::POST, "/v1/completions") => generate(state, req, Api::Completions).await,
        (&Method::POST, "/v1/responses") => generate(state, req, Api::Responses).await,
        (&Method::POST, "/v1/messages") => generate(state, req, Api::Messages).await,
        _ => error(StatusCode::NOT_FOUND, "NotFoundError", "not found"),
    }
}

async fn generate(state: Arc<SimState>, req: Request<Incoming>, api: Api) -> Response<SimBody> {
    // A paced answer's schedule starts when its head came in.
    let arrived = std::time::Instant::now();
    let r = match read_request(&state, req, api).await {
        Ok(r) => r,
        Err(no) => return no.response(),
    };
    if let Some(p) = state.paced.clone() {
        return paced::answer(state, p, r, api, arrived).await;
    }
    let Plan {
        counts,
        stop_reason,
        mut rng,
    } = match plan(&state, &r, api) {
        Ok(p) => p,
        Err(no) => return no.response(),
    };

    let (otx, tokens) = mpsc::channel(counts.output as usize + 1);
    let times = EngineTimes::new(Instant::now());
    if state
        .jobs
        .send(Job {
            prompt_tokens: counts.prompt,
            cached_tokens: counts.cached,
            output_tokens: counts.output,
            tx: otx,
        })
        .await
        .is_err()
    {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            "engine stopped",
        );
    }
    let prefix = match api {
        Api::Chat => "chatcmpl",
        Api::Completions => "cmpl",
        Api::Responses => "resp",
        _ => "msg",
    };
    let id = format!("{prefix}-{:016x}", rng.u64(..));
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let reply = Reply {
        wire: Wire::new(api, id, created, state.model.clone()),
        tokens,
        times,
        rng,
        counts,
        stop_reason,
        stop: state.stop.clone(),
    };
    if !r.stream.unwrap_or(false) {
        return reply.whole().await;
    }
    let include_usage = r
        .stream_options
        .as_ref()
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    reply.stream(include_usage)
}

/// The request body, parsed and checked against what the sim serves; the error response if not.
async fn read_request(
    state: &SimState,
    req: Request<Incoming>,
    api: Api,
) -> Result<GenRequest, Refusal> {
    let Ok(body) = Limited::new(req.into_body(), 64 * 1024 * 1024)
        .collect()
        .await
    else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            "body could not be read",
        ));
    };
    let r: GenRequest = match serde_json::from_slice(&body.to_bytes()) {
        Ok(r) => r,
        Err(e) => {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "BadRequestError",
                format!("invalid JSON: {e}"),
            ))
        }
    };
    if r.model.as_deref() != Some(state.model.as_str()) {
        return Err(Refusal::new(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            format!(
                "The model `{}` does not exist.",
                r.model.unwrap_or_default()
            ),
        ));
    }
    if r.n.unwrap_or(1) != 1 {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            "the simulator supports n=1 only",
        ));
    }
    let missing = match api {
        Api::Chat | Api::Messages => r.messages.is_none(),
        Api::Completions => r.prompt.is_none(),
        Api::Responses => r.input.is_none(),
        _ => true,
    };
    if missing {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            "missing messages/prompt/input",
        ));
    }
    Ok(r)
}

/// What one request will generate, decided before the engine sees it.
struct Plan {
    counts: Counts,
    /// `finish_reason` of the last token: `length` when it hit the limit, else `stop`.
    stop_reason: &'static str,
    /// The request's own generator: output length, then id, then words, in that order.
    rng: fastrand::Rng,
}

/// Token counts (prompt, prefix-cache hits, output, reasoning) for a checked request; a
/// context-length error if it cannot fit. Counts the prefix-cache query in the engine's stats.
fn plan(state: &SimState, r: &GenRequest, api: Api) -> Result<Plan, Refusal> {
    let text = prompt_text(r);
    let prompt = prompt_tokens(r);
    let max = r
        .max_completion_tokens
        .or(r.max_tokens)
        .or(r.max_output_tokens)
        .unwrap_or(256)
        .max(1);
    if prompt + max > state.profile.max_model_len {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            format!("This model's maximum context length is {} tokens. However, you requested {} tokens ({prompt} in the messages, {max} in the completion).", state.profile.max_model_len, prompt + max),
        ));
    }
    let cached = if state.profile.prefix_cache {
        state.cache.lookup_and_insert(&text, prompt)
    } else {
        0
    };
    state
        .stats
        .prefix_queries
        .fetch_add(prompt, Ordering::Relaxed);
    state.stats.prefix_hits.fetch_add(cached, Ordering::Relaxed);
    let n = state.counter.fetch_add(1, Ordering::Relaxed);
    let mut rng = fastrand::Rng::with_seed(
        state.seed ^ r.seed.unwrap_or(n).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    // Without ignore_eos the "model" stops somewhere in the second half (never before min_tokens).
    let out = if r.ignore_eos.unwrap_or(false) {
        max
    } else {
        rng.u64(max.div_ceil(2)..=max)
            .max(r.min_tokens.unwrap_or(0).min(max))
    } as u32;
    let stop_reason = if u64::from(out) == max {
        "length"
    } else {
        "stop"
    };
    // A reasoning model thinks first, and always answers with at least one token. The
    // completions API has no place for reasoning: its text is all output.
    let reasoning = match api {
        Api::Completions => 0,
        _ => state.profile.reasoning_tokens.min(out.saturating_sub(1)),
    };
    Ok(Plan {
        counts: Counts {
            prompt,
            cached,
            output: out,
            reasoning,
        },
        stop_reason,
        rng,
    })
}

/// One admitted request's answer: the engine's tokens in, the API's wire format out.
struct Reply {
    wire: Wire,
    /// The engine's tokens for this request; dropping it aborts the sequence in the engine.
    tokens: mpsc::Receiver<Out>,
    times: EngineTimes,
    rng: fastrand::Rng,
    counts: Counts,
    stop_reason: &'static str,
    /// The sim's stop: once set, the answer ends aborted.
    stop: watch::Receiver<bool>,
}

impl Reply {
    /// The engine's next token, or `None` once the sim is stopped (or its engine is gone).
    async fn next(&mut self) -> Option<(u32, bool, Option<Instant>)> {
        let out = tokio::select! {
            biased;
            // A dropped sender (the sim itself dropped) is a stop too.
            _ = self.stop.wait_for(|s| *s) => None,
            out = self.tokens.recv() => out,
        };
        out.map(
            |Out::Token {
                 index,
                 last,
                 scheduled,
             }| (index, last, scheduled),
        )
    }

    /// The counts of an answer stopped after `made` tokens.
    fn cut_at(&self, made: u32) -> Counts {
        Counts {
            output: made,
            reasoning: self.counts.reasoning.min(made),
            ..self.counts
        }
    }

    /// A non-streaming request: every token, then one JSON body (stopped: what it has, with
    /// finish reason `abort`, as vLLM answers one it aborts).
    async fn whole(mut self) -> Response<SimBody> {
        let reasoning = self.counts.reasoning;
        let mut made = 0;
        let finished = loop {
            let Some((index, last, scheduled)) = self.next().await else {
                break false;
            };
            self.times.token(scheduled, Instant::now());
            made = index + 1;
            let _ = self.wire.token(
                index,
                WORDS[self.rng.usize(..WORDS.len())],
                index < reasoning,
                Value::Null,
            );
            if last {
                break true;
            }
        };
        let (counts, stop) = if finished {
            (self.counts, self.stop_reason)
        } else {
            (self.cut_at(made), super::wire::ABORT)
        };
        json_response(
            StatusCode::OK,
            &self
                .wire
                .body(&counts, stop, self.times.metrics(counts.output)),
        )
    }

    /// A streaming request: headers at once, then a task writes each token as the engine makes it.
    fn stream(mut self, include_usage: bool) -> Response<SimBody> {
        let (btx, brx) = mpsc::channel::<Bytes>(64);
        tokio::spawn(async move {
            let (counts, stop_reason) = (self.counts, self.stop_reason);
            for b in self.wire.start(&counts) {
                if btx.send(b).await.is_err() {
                    return;
                }
            }
            let mut made = 0;
            let finished = loop {
                let Some((index, last, scheduled)) = self.next().await else {
                    break false;
                };
                self.times.token(scheduled, Instant::now());
                made = index + 1;
                let finish = if last {
                    Value::from(stop_reason)
                } else {
                    Value::Null
                };
                let word = WORDS[self.rng.usize(..WORDS.len())];
                for b in self
                    .wire
                    .token(index, word, index < counts.reasoning, finish)
                {
                    if btx.send(b).await.is_err() {
                        return; // client gone: dropping `tokens` aborts the sequence in the engine
                    }
                }
                if last {
                    break true;
                }
            };
            let tail = if finished {
                let metrics = self.times.metrics(counts.output);
                self.wire.end(&counts, stop_reason, include_usage, metrics)
            } else {
                let cut = self.cut_at(made);
                let metrics = self.times.metrics(cut.output);
                self.wire.abort(&cut, include_usage, metrics)
            };
            for b in tail {
                let _ = btx.send(b).await;
            }
        });
        let mut resp = Response::new(SimBody::Stream(brx));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        resp
    }
}
