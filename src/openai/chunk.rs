//! What one SSE `data:` payload (or one non-streaming JSON body) says: whether it carries
//! generated output, its usage, an in-band error (type and code, never the message), and vLLM's
//! per-request timings.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::fast::fast_content;
use super::raw_as;

/// Token usage as an engine reports it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
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
    pub usage: Option<Usage>,
    /// An in-band error object: its `type` and `code`, never its message (it can echo a key).
    pub error: Option<String>,
    pub timings: ServerTimings,
}

#[derive(Deserialize)]
pub(super) struct RawChunk<'a> {
    pub(super) choices: Option<ChoicesOutput>,
    pub(super) usage: Option<RawUsage>,
    #[serde(borrow)]
    pub(super) error: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) metrics: Option<&'a RawValue>,
}

// NB: the per-event path. The views below decide "does this carry output?" while parsing,
// without allocating, and read strings as raw bytes (no UTF-8 validation: an event's bytes are
// forwarded, never interpreted as text).

#[derive(Deserialize)]
struct RawChoice {
    delta: Option<RawDelta>,
    text: Option<NonEmpty>,
    message: Option<RawDelta>,
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
    fn has_output(&self) -> bool {
        [&self.content, &self.reasoning_content, &self.reasoning]
            .iter()
            .any(|v| v.as_ref().is_some_and(|n| n.0))
            || [&self.tool_calls, &self.function_call]
                .iter()
                .any(|v| v.as_ref().is_some_and(|n| n.0))
    }
}

/// Whether any choice of the event carries output.
pub(super) struct ChoicesOutput(pub(super) bool);

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
                let mut any = false;
                while let Some(c) = seq.next_element::<RawChoice>()? {
                    any |= c.delta.as_ref().is_some_and(RawDelta::has_output)
                        || c.text.as_ref().is_some_and(|t| t.0)
                        || c.message.as_ref().is_some_and(RawDelta::has_output);
                }
                Ok(ChoicesOutput(any))
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

#[derive(Deserialize)]
pub(super) struct RawUsage {
    #[serde(default, deserialize_with = "lenient_u64")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    completion_tokens: Option<u64>,
}

fn lenient_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = <Option<&RawValue>>::deserialize(d)?;
    Ok(raw_as(v))
}

/// Interpret one JSON payload. `Err` means it is not a JSON object we can read (counted as a
/// parse error by the caller; the bytes were forwarded regardless).
pub fn inspect_chunk(payload: &[u8]) -> Result<ChunkInfo, serde_json::Error> {
    if let Some(info) = fast_content(payload) {
        return Ok(info);
    }
    let raw: RawChunk<'_> = serde_json::from_slice(payload)?;
    let content = raw.choices.is_some_and(|c| c.0);
    Ok(ChunkInfo {
        content,
        usage: raw.usage.map(|u| Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        }),
        error: raw.error.map(|e| describe_error(e.get())),
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
