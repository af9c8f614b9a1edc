//! What one SSE `data:` payload (or one non-streaming JSON body) says, in every API shape:
//! whether it carries generated output and whether that output is reasoning or the answer, its
//! usage (with cached and reasoning tokens), an in-band error (type and code, never the message),
//! the shape's end marker, why the generation ended (its finish reason), and vLLM's per-request
//! timings.
//!
//! OpenAI chat and completions chunks carry `choices`; the Responses API's events and Anthropic
//! Messages' carry a top-level `type` (`response.output_text.delta`, `content_block_delta`, …).
//! An event is read by what it is, not by the request's path.

use serde::Deserialize;
use serde_json::value::RawValue;

use std::borrow::Cow;

use super::api::Api;
use super::finish::{finish_is_cut, finish_of, finish_word, lenient_finish, responses_finish};
use super::raw_as;

/// Token usage as an engine reports it, in any shape, in OpenAI's terms.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Every prompt token, cached ones included (Anthropic's `input_tokens` excludes the cache:
    /// its cache reads and writes are added back).
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: Option<u64>,
    /// Output tokens that were reasoning.
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// Field by field, what `later` says wins (Anthropic sends input tokens at the start and
    /// output tokens at the end).
    pub fn merge(self, later: Usage) -> Usage {
        Usage {
            prompt_tokens: later.prompt_tokens.or(self.prompt_tokens),
            completion_tokens: later.completion_tokens.or(self.completion_tokens),
            cached_tokens: later.cached_tokens.or(self.cached_tokens),
            reasoning_tokens: later.reasoning_tokens.or(self.reasoning_tokens),
        }
    }
}

/// Per-request server timings vLLM attaches to the final usage chunk (`metrics`) when it runs with
/// `--enable-per-request-metrics`. Milliseconds, as vLLM reports them.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ServerTimings {
    /// Waiting in the engine's queue (queued → scheduled).
    pub queue_ms: Option<f64>,
    /// Scheduled → first token: the engine's prefill.
    pub ttft_ms: Option<f64>,
    /// First → last token: the decode.
    pub generation_ms: Option<f64>,
}

impl ServerTimings {
    pub fn is_empty(&self) -> bool {
        *self == ServerTimings::default()
    }
}

/// What one SSE `data:` payload (or one non-streaming JSON body) says.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ChunkInfo {
    /// Carries generated output (content, reasoning, tool call or completion text).
    pub content: bool,
    /// Carries output that is not reasoning: answer text or a tool call.
    pub answer: bool,
    /// The shape's end marker: Responses `response.completed`/`incomplete`/`failed`, Messages
    /// `message_stop` (chat and completions end with `[DONE]`, seen by the meter).
    pub end: bool,
    /// The shape the payload itself says it is, when it does.
    pub api: Option<Api>,
    pub usage: Option<Usage>,
    /// An in-band error object: its `type` and `code`, never its message (it can echo a key).
    pub error: Option<String>,
    /// Why the generation ended, when the payload says ([`finish_word`]): a chat or completions
    /// choice's `finish_reason`; a Responses end event's `incomplete_details.reason`, else its
    /// `status`; a Messages `message_delta`'s `delta.stop_reason` (a whole body's `stop_reason`).
    pub finish: Option<String>,
    pub timings: ServerTimings,
}

#[derive(Deserialize)]
pub(super) struct RawChunk<'a> {
    pub(super) choices: Option<ChoicesOutput>,
    #[serde(default, deserialize_with = "lenient_usage")]
    pub(super) usage: Option<RawUsage>,
    #[serde(borrow)]
    pub(super) error: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) metrics: Option<&'a RawValue>,
    #[serde(borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    object: Option<Cow<'a, str>>,
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    #[serde(borrow)]
    response: Option<&'a RawValue>,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
    /// A whole Responses body's `status` and `incomplete_details`; a whole Messages body's
    /// `stop_reason`. Raw: an odd value loses the field, never the event.
    #[serde(borrow)]
    status: Option<&'a RawValue>,
    #[serde(borrow)]
    incomplete_details: Option<&'a RawValue>,
    #[serde(borrow)]
    stop_reason: Option<&'a RawValue>,
}

// NB: the per-event path. The views below decide "does this carry output?" while parsing,
// without allocating, and read strings as raw bytes (no UTF-8 validation: an event's bytes are
// forwarded, never interpreted as text).

#[derive(Deserialize)]
struct RawChoice {
    delta: Option<RawDelta>,
    text: Option<NonEmpty>,
    message: Option<RawDelta>,
    #[serde(default, deserialize_with = "lenient_finish")]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct RawDelta {
    content: Option<NonEmpty>,
    reasoning_content: Option<NonEmpty>,
    reasoning: Option<NonEmpty>,
    tool_calls: Option<NonEmptyAny>,
    function_call: Option<NonEmptyAny>,
}

impl RawDelta {
    /// Answer text or a tool call (not reasoning).
    fn has_answer(&self) -> bool {
        self.content.as_ref().is_some_and(|n| n.0)
            || [&self.tool_calls, &self.function_call]
                .iter()
                .any(|v| v.as_ref().is_some_and(|n| n.0))
    }

    fn has_output(&self) -> bool {
        [&self.content, &self.reasoning_content, &self.reasoning]
            .iter()
            .any(|v| v.as_ref().is_some_and(|n| n.0))
            || [&self.tool_calls, &self.function_call]
                .iter()
                .any(|v| v.as_ref().is_some_and(|n| n.0))
    }
}

/// Whether any choice of the event carries output, whether any carries answer output, which
/// OpenAI shape the choices have (a `delta`/`message`: chat; only `text`: completions), and a
/// choice's finish reason (a cut one first, else the last).
pub(super) struct ChoicesOutput(
    pub(super) bool,
    pub(super) bool,
    pub(super) Option<Api>,
    pub(super) Option<String>,
);

impl<'de> Deserialize<'de> for ChoicesOutput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ChoicesOutput;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ChoicesOutput, A::Error> {
                let (mut any, mut answer, mut api) = (false, false, None);
                let mut finish: Option<String> = None;
                while let Some(c) = seq.next_element::<RawChoice>()? {
                    if c.delta.is_some() || c.message.is_some() {
                        api = Some(Api::Chat);
                    } else if c.text.is_some() && api.is_none() {
                        api = Some(Api::Completions);
                    }
                    let text = c.text.as_ref().is_some_and(|t| t.0);
                    any |= c.delta.as_ref().is_some_and(RawDelta::has_output)
                        || text
                        || c.message.as_ref().is_some_and(RawDelta::has_output);
                    answer |= c.delta.as_ref().is_some_and(RawDelta::has_answer)
                        || text
                        || c.message.as_ref().is_some_and(RawDelta::has_answer);
                    if c.finish_reason.is_some() && !finish.as_deref().is_some_and(finish_is_cut) {
                        finish = c.finish_reason;
                    }
                }
                Ok(ChoicesOutput(any, answer, api, finish))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A JSON string (or array) that is not empty, read as raw bytes.
struct NonEmpty(bool);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NonEmpty;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<NonEmpty, E> {
                Ok(NonEmpty(!v.is_empty()))
            }
            fn visit_str<E>(self, v: &str) -> Result<NonEmpty, E> {
                Ok(NonEmpty(!v.is_empty()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<NonEmpty, A::Error> {
                let mut n = 0usize;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(NonEmpty(n > 0))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// Any JSON value that is not null, `""`, `[]` or `{}`.
struct NonEmptyAny(bool);

impl<'de> Deserialize<'de> for NonEmptyAny {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = <&RawValue>::deserialize(d)?;
        Ok(NonEmptyAny(!matches!(
            v.get().trim(),
            "null" | "\"\"" | "[]" | "{}"
        )))
    }
}

/// Usage in any shape: OpenAI's (`prompt_tokens`, `*_details`), the Responses API's
/// (`input_tokens`, `input_tokens_details`, …) and Anthropic's (`input_tokens`,
/// `cache_read_input_tokens`, `cache_creation_input_tokens`). Every field lenient.
#[derive(Deserialize, Default)]
pub(super) struct RawUsage {
    #[serde(default, deserialize_with = "lenient_u64")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    completion_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    output_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    cache_read_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_details")]
    prompt_tokens_details: Details,
    #[serde(default, deserialize_with = "lenient_details")]
    input_tokens_details: Details,
    #[serde(default, deserialize_with = "lenient_details")]
    completion_tokens_details: Details,
    #[serde(default, deserialize_with = "lenient_details")]
    output_tokens_details: Details,
}

#[derive(Deserialize, Default)]
struct Details {
    #[serde(default, deserialize_with = "lenient_u64")]
    cached_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    reasoning_tokens: Option<u64>,
}

fn lenient_details<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Details, D::Error> {
    let v = <Option<&RawValue>>::deserialize(d)?;
    Ok(v.and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or_default())
}

fn lenient_usage<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<RawUsage>, D::Error> {
    let v = <Option<&RawValue>>::deserialize(d)?;
    Ok(v.and_then(|r| serde_json::from_str(r.get()).ok()))
}

impl RawUsage {
    fn usage(&self) -> Usage {
        let anthropic_cache = self
            .cache_read_input_tokens
            .unwrap_or(0)
            .saturating_add(self.cache_creation_input_tokens.unwrap_or(0));
        Usage {
            prompt_tokens: self
                .prompt_tokens
                .or_else(|| self.input_tokens.map(|i| i.saturating_add(anthropic_cache))),
            completion_tokens: self.completion_tokens.or(self.output_tokens),
            cached_tokens: self
                .prompt_tokens_details
                .cached_tokens
                .or(self.input_tokens_details.cached_tokens)
                .or(self.cache_read_input_tokens),
            reasoning_tokens: self
                .completion_tokens_details
                .reasoning_tokens
                .or(self.output_tokens_details.reasoning_tokens),
        }
    }
}

/// An Anthropic `content_block_delta`'s `delta`.
#[derive(Deserialize)]
struct BlockDelta<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    text: Option<NonEmpty>,
    thinking: Option<NonEmpty>,
    partial_json: Option<NonEmpty>,
}

/// What a Responses `response` object or an Anthropic `message` object says.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, deserialize_with = "lenient_usage")]
    usage: Option<RawUsage>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    status: Option<&'a RawValue>,
    #[serde(borrow)]
    incomplete_details: Option<&'a RawValue>,
}

fn envelope(v: Option<&RawValue>) -> Option<Envelope<'_>> {
    v.and_then(|r| serde_json::from_str(r.get()).ok())
}

/// An event with a top-level `type`: the Responses API's and Anthropic Messages'.
fn typed(kind: &str, raw: &RawChunk<'_>) -> Option<ChunkInfo> {
    let mut info = ChunkInfo::default();
    if let Some(rest) = kind.strip_prefix("response.") {
        info.api = Some(Api::Responses);
        if rest.ends_with(".delta") {
            // Every `*.delta` carries generated output; reasoning ones are not the answer.
            let text = raw
                .delta
                .is_some_and(|d| !matches!(d.get().trim(), "\"\"" | "null"));
            info.content = text;
            info.answer = text && !rest.starts_with("reasoning");
        } else if matches!(rest, "completed" | "incomplete" | "failed") {
            info.end = true;
            let env = envelope(raw.response);
            info.finish = env
                .as_ref()
                .and_then(|e| responses_finish(e.status, e.incomplete_details))
                .or_else(|| finish_word(rest));
            if let Some(env) = env {
                info.usage = env.usage.as_ref().map(RawUsage::usage);
                if rest == "failed" {
                    info.error = Some(
                        env.error
                            .map(|e| describe_error(e.get()))
                            .unwrap_or_else(|| "type=response.failed,code=-".into()),
                    );
                }
            } else if rest == "failed" {
                info.error = Some("type=response.failed,code=-".into());
            }
        }
        return Some(info);
    }
    info.api = Some(Api::Messages);
    match kind {
        "message_start" => {
            info.usage = envelope(raw.message)
                .and_then(|e| e.usage)
                .as_ref()
                .map(RawUsage::usage);
        }
        "content_block_delta" => {
            let d: Option<BlockDelta<'_>> =
                raw.delta.and_then(|d| serde_json::from_str(d.get()).ok());
            if let Some(d) = d {
                let has = |n: &Option<NonEmpty>| n.as_ref().is_some_and(|n| n.0);
                let (answer, reasoning) = match d.kind.as_deref() {
                    Some("text_delta") => (has(&d.text), false),
                    Some("input_json_delta") => (has(&d.partial_json), false),
                    Some("thinking_delta") => (false, has(&d.thinking)),
                    _ => (false, false),
                };
                info.content = answer || reasoning;
                info.answer = answer;
            }
        }
        "message_delta" => {
            #[derive(Deserialize)]
            struct Stop<'a> {
                #[serde(borrow)]
                stop_reason: Option<&'a RawValue>,
            }
            info.usage = raw.usage.as_ref().map(RawUsage::usage);
            info.finish = raw
                .delta
                .and_then(|d| serde_json::from_str::<Stop<'_>>(d.get()).ok())
                .and_then(|d| finish_of(d.stop_reason));
        }
        "message_stop" => info.end = true,
        // A whole (non-streaming) Messages body.
        "message" => {
            info.usage = raw.usage.as_ref().map(RawUsage::usage);
            info.finish = finish_of(raw.stop_reason);
        }
        "error" => {
            info.api = None;
            info.error = Some(
                raw.error
                    .map(|e| describe_error(e.get()))
                    .unwrap_or_else(|| "type=error,code=-".into()),
            );
        }
        "ping" | "content_block_start" | "content_block_stop" => {}
        // Unknown types are forwarded and ignored.
        _ => return None,
    }
    Some(info)
}

fn lenient_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = <Option<&RawValue>>::deserialize(d)?;
    Ok(raw_as(v))
}

/// [`super::fast::inspect_chunk`] without the fast path: the full parse every verdict must agree with.
pub(crate) fn inspect_chunk_full(payload: &[u8]) -> Result<ChunkInfo, serde_json::Error> {
    let raw: RawChunk<'_> = serde_json::from_slice(payload)?;
    if raw.choices.is_none() {
        if let Some(info) = raw.kind.as_deref().and_then(|k| typed(k, &raw)) {
            return Ok(info);
        }
    }
    let (content, answer) = raw.choices.as_ref().map_or((false, false), |c| (c.0, c.1));
    let finish = match &raw.choices {
        Some(c) => c.3.clone(),
        // A whole Responses body.
        None if raw.object.as_deref() == Some("response") => {
            responses_finish(raw.status, raw.incomplete_details)
        }
        None => None,
    };
    let api = match raw.object.as_deref() {
        Some("chat.completion.chunk" | "chat.completion") => Some(Api::Chat),
        Some("text_completion") => Some(Api::Completions),
        Some("response") => Some(Api::Responses),
        // Embeddings and model listings are both a `list`; only embeddings carry usage.
        Some("list") if raw.choices.is_none() && raw.usage.is_some() => Some(Api::Embeddings),
        _ => raw.choices.as_ref().and_then(|c| c.2),
    };
    Ok(ChunkInfo {
        content,
        answer,
        end: false,
        api,
        usage: raw.usage.as_ref().map(RawUsage::usage),
        error: raw.error.map(|e| describe_error(e.get())),
        finish,
        timings: raw
            .metrics
            .map(|m| server_timings(m.get()))
            .unwrap_or_default(),
    })
}

#[derive(Deserialize)]
struct RawError<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    code: Option<&'a RawValue>,
}

/// `type=…,code=…` of an OpenAI-shaped error object; the message is deliberately left out.
pub fn describe_error(error_json: &str) -> String {
    let parsed: Option<RawError<'_>> = serde_json::from_str(error_json).ok();
    let field = |r: Option<&RawValue>| -> String {
        match r.map(|r| r.get()) {
            None | Some("null") => "-".to_owned(),
            Some(s) => s
                .trim_matches('"')
                .chars()
                .filter(|c| !c.is_control())
                .take(64)
                .collect(),
        }
    };
    match parsed {
        Some(e) => format!("type={},code={}", field(e.kind), field(e.code)),
        None => "error".to_owned(),
    }
}

/// Read vLLM's per-request server timings (`PerRequestMetrics` in vLLM's protocol).
fn server_timings(json: &str) -> ServerTimings {
    #[derive(Deserialize)]
    struct RawTimings<'a> {
        #[serde(borrow)]
        queue_time_ms: Option<&'a RawValue>,
        #[serde(borrow)]
        time_to_first_token_ms: Option<&'a RawValue>,
        #[serde(borrow)]
        generation_time_ms: Option<&'a RawValue>,
    }
    let ms = |r: Option<&RawValue>| raw_as::<f64>(r).filter(|v| v.is_finite() && *v >= 0.0);
    match serde_json::from_str::<RawTimings<'_>>(json) {
        Ok(t) => ServerTimings {
            queue_ms: ms(t.queue_time_ms),
            ttft_ms: ms(t.time_to_first_token_ms),
            generation_ms: ms(t.generation_time_ms),
        },
        Err(_) => ServerTimings::default(),
    }
}

#[derive(Deserialize)]
struct ObjectOf<'a> {
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    /// Read only when it is a string: an odd `id` must not cost the model.
    #[serde(borrow)]
    id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ServedBy<'a> {
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    /// Responses: `response.created` carries the response object.
    #[serde(borrow)]
    response: Option<ObjectOf<'a>>,
    /// Messages: `message_start` carries the message object.
    #[serde(borrow)]
    message: Option<ObjectOf<'a>>,
}

/// What a response says of itself: the model that served it and its id.
#[derive(Debug, Default, PartialEq)]
pub struct Served {
    /// At most 256 characters.
    pub model: Option<String>,
    /// As sent, when it is a non-empty string (the caller bounds it).
    pub id: Option<String>,
}

/// The model a response says served it and the response's id: a chunk's or body's `model` and
/// `id` (`chatcmpl-…`), a Responses event's `response.model` / `response.id`, a Messages
/// `message_start`'s `message.model` / `message.id`. Read on a stream's first events only (the
/// caller stops once it has both), never per token.
pub fn served(payload: &[u8]) -> Served {
    let Ok(m) = serde_json::from_slice::<ServedBy<'_>>(payload) else {
        return Served::default();
    };
    let (r, g) = (m.response, m.message);
    let (rm, ri) = r.map_or((None, None), |o| (o.model, o.id));
    let (gm, gi) = g.map_or((None, None), |o| (o.model, o.id));
    let text = |r: Option<&RawValue>| {
        r.and_then(|r| serde_json::from_str::<String>(r.get()).ok())
            .filter(|s| !s.is_empty())
    };
    Served {
        model: m
            .model
            .or(rm)
            .or(gm)
            .filter(|s| !s.is_empty())
            .map(|s| s.chars().take(256).collect()),
        id: text(m.id).or_else(|| text(ri)).or_else(|| text(gi)),
    }
}
