//! The simulated engine's OpenAI-compatible HTTP face, in vLLM's chunk format: role-only first
//! chunk (chat), one content chunk per token, `finish_reason` on the last content chunk, a
//! `"choices":[]` usage chunk when asked (with vLLM's `--enable-per-request-metrics` object,
//! `metrics`, as if that flag were on), then `data: [DONE]`. Headers go out at once, as vLLM
//! sends them; tokens follow as the engine produces them.

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
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::engine::{EngineStats, Job, Out, Profile};

/// Words the sim "generates": deterministic per request seed.
const WORDS: &[&str] = &[
    " the", " model", " token", " stream", " latency", " first", " engine", " batch", " cache",
    " prefill", " decode", " answer", " reads", " quickly", " and", " then", " waits", " for",
    " more", " text",
];

pub struct SimState {
    pub profile: Profile,
    pub model: String,
    pub jobs: mpsc::Sender<Job>,
    pub stats: Arc<EngineStats>,
    pub seed: u64,
    pub counter: AtomicU64,
}

/// Response bodies: a whole JSON, or a stream fed by the request's task.
pub enum SimBody {
    Full(Full<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
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
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            SimBody::Full(f) => f.is_end_stream(),
            SimBody::Stream(rx) => rx.is_closed() && rx.is_empty(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            SimBody::Full(f) => f.size_hint(),
            SimBody::Stream(_) => http_body::SizeHint::default(),
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

#[derive(Deserialize, Default)]
#[serde(default)]
struct GenRequest {
    model: Option<String>,
    messages: Option<Vec<Value>>,
    prompt: Option<Value>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    min_tokens: Option<u64>,
    ignore_eos: Option<bool>,
    stream: Option<bool>,
    stream_options: Option<Value>,
    seed: Option<u64>,
    n: Option<u64>,
}

/// The sim's tokenizer: about four bytes per token, plus a per-message template overhead.
/// `bench` uses the same estimate to sort prompts into buckets.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4).max(1)
}

fn prompt_tokens(req: &GenRequest) -> u64 {
    if let Some(msgs) = &req.messages {
        let mut n = 3;
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
            let s = &state.stats;
            let text = format!(
                "# simulated engine ({})\ntokentap_sim_requests_running {}\ntokentap_sim_requests_waiting {}\ntokentap_sim_kv_cache_usage_perc {:.4}\ntokentap_sim_requests_finished_total {}\n",
                state.profile.name,
                s.running.load(Ordering::Relaxed),
                s.waiting.load(Ordering::Relaxed),
                s.kv_used.load(Ordering::Relaxed) as f64 / state.profile.kv_tokens.max(1) as f64,
                s.finished.load(Ordering::Relaxed),
            );
            let mut r = Response::new(SimBody::Full(Full::new(Bytes::from(text))));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        (&Method::POST, "/v1/chat/completions") => generate(state, req, true).await,
        (&Method::POST, "/v1/completions") => generate(state, req, false).await,
        _ => error(StatusCode::NOT_FOUND, "NotFoundError", "not found"),
    }
}

async fn generate(state: Arc<SimState>, req: Request<Incoming>, chat: bool) -> Response<SimBody> {
    let Ok(body) = Limited::new(req.into_body(), 64 * 1024 * 1024)
        .collect()
        .await
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            "body could not be read",
        );
    };
    let r: GenRequest = match serde_json::from_slice(&body.to_bytes()) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "BadRequestError",
                &format!("invalid JSON: {e}"),
            )
        }
    };
    if r.model.as_deref() != Some(state.model.as_str()) {
        return error(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            &format!(
                "The model `{}` does not exist.",
                r.model.unwrap_or_default()
            ),
        );
    }
    if r.n.unwrap_or(1) != 1 {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            "the simulator supports n=1 only",
        );
    }
    if chat && r.messages.is_none() || !chat && r.prompt.is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            "missing messages/prompt",
        );
    }
    let prompt = prompt_tokens(&r);
    let max = r
        .max_completion_tokens
        .or(r.max_tokens)
        .unwrap_or(256)
        .max(1);
    if prompt + max > state.profile.max_model_len {
        return error(
            StatusCode::BAD_REQUEST,
            "BadRequestError",
            &format!("This model's maximum context length is {} tokens. However, you requested {} tokens ({prompt} in the messages, {max} in the completion).", state.profile.max_model_len, prompt + max),
        );
    }
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

    let (otx, mut orx) = mpsc::channel(out as usize + 1);
    let mut times = EngineTimes::new(Instant::now());
    if state
        .jobs
        .send(Job {
            prompt_tokens: prompt,
            output_tokens: out,
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
    let id = format!(
        "{}-{:016x}",
        if chat { "chatcmpl" } else { "cmpl" },
        rng.u64(..)
    );
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let model = state.model.clone();
    let object = if chat {
        "chat.completion.chunk"
    } else {
        "text_completion"
    };
    let usage = serde_json::json!({"prompt_tokens": prompt, "total_tokens": prompt + u64::from(out), "completion_tokens": out});

    if !r.stream.unwrap_or(false) {
        let mut text = String::new();
        while let Some(Out::Token {
            last, scheduled, ..
        }) = orx.recv().await
        {
            times.token(scheduled, Instant::now());
            text.push_str(WORDS[rng.usize(..WORDS.len())]);
            if last {
                break;
            }
        }
        let choice = if chat {
            serde_json::json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": stop_reason})
        } else {
            serde_json::json!({"index": 0, "text": text, "finish_reason": stop_reason})
        };
        let obj = if chat {
            "chat.completion"
        } else {
            "text_completion"
        };
        return json_response(
            StatusCode::OK,
            &serde_json::json!({"id": id, "object": obj, "created": created, "model": model, "choices": [choice], "usage": usage, "metrics": times.metrics(out)}),
        );
    }

    let include_usage = r
        .stream_options
        .as_ref()
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (btx, brx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let event = |v: Value| Bytes::from(format!("data: {v}\n\n"));
        while let Some(Out::Token {
            index,
            last,
            scheduled,
        }) = orx.recv().await
        {
            times.token(scheduled, Instant::now());
            if chat && index == 0 {
                let role = serde_json::json!({"id": id, "object": object, "created": created, "model": model,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]});
                if btx.send(event(role)).await.is_err() {
                    return;
                }
            }
            let word = WORDS[rng.usize(..WORDS.len())];
            let finish = if last {
                Value::from(stop_reason)
            } else {
                Value::Null
            };
            let choice = if chat {
                serde_json::json!({"index": 0, "delta": {"content": word}, "logprobs": null, "finish_reason": finish})
            } else {
                serde_json::json!({"index": 0, "text": word, "logprobs": null, "finish_reason": finish})
            };
            let chunk = serde_json::json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
            if btx.send(event(chunk)).await.is_err() {
                return; // client gone: dropping `orx` aborts the sequence in the engine
            }
            if last {
                break;
            }
        }
        if include_usage {
            let u = serde_json::json!({"id": id, "object": object, "created": created, "model": model, "choices": [], "usage": usage, "metrics": times.metrics(out)});
            let _ = btx.send(event(u)).await;
        }
        let _ = btx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    let mut resp = Response::new(SimBody::Stream(brx));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    resp
}

/// The engine-side instants of one request, reported as vLLM does with
/// `--enable-per-request-metrics` (`PerRequestMetrics`, milliseconds, unknown fields left out).
struct EngineTimes {
    queued: Instant,
    scheduled: Option<Instant>,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl EngineTimes {
    fn new(queued: Instant) -> Self {
        EngineTimes {
            queued,
            scheduled: None,
            first: None,
            last: None,
        }
    }

    fn token(&mut self, scheduled: Option<Instant>, now: Instant) {
        if scheduled.is_some() {
            self.scheduled = scheduled;
        }
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    fn metrics(&self, tokens: u32) -> Value {
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1000.0;
        let mut m = serde_json::Map::new();
        if let (Some(s), Some(f)) = (self.scheduled, self.first) {
            m.insert("time_to_first_token_ms".into(), ms(s, f).into());
        }
        if let (Some(f), Some(l)) = (self.first, self.last) {
            m.insert("generation_time_ms".into(), ms(f, l).into());
            if tokens > 1 {
                m.insert(
                    "mean_itl_ms".into(),
                    (ms(f, l) / f64::from(tokens - 1)).into(),
                );
            }
        }
        if let Some(s) = self.scheduled {
            m.insert("queue_time_ms".into(), ms(self.queued, s).into());
            if let Some(l) = self.last.filter(|l| *l > s) {
                m.insert(
                    "tokens_per_second".into(),
                    (f64::from(tokens) / l.duration_since(s).as_secs_f64()).into(),
                );
            }
        }
        Value::Object(m)
    }
}
