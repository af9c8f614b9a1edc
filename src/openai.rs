//! Lenient, read-only views of OpenAI-compatible requests and stream chunks.
//!
//! Nothing here re-serializes what it reads: the proxy forwards the original bytes. Every field is
//! taken as raw JSON and interpreted on its own, so one odd field (a string where a number was
//! expected) loses that field, not the whole event. The only write is [`rewrite_model`], which
//! splices one top-level string and leaves every other byte as it was.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// What the proxy learns from a request body. All fields are optional: a body that is not JSON
/// yields the default and is forwarded anyway.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RequestInfo {
    pub model: Option<String>,
    pub stream: bool,
    /// `max_completion_tokens` when present, else `max_tokens`.
    pub max_tokens: Option<u64>,
    pub include_usage: bool,
}

#[derive(Deserialize)]
struct RawRequest<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    #[serde(borrow)]
    stream: Option<&'a RawValue>,
    #[serde(borrow)]
    max_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    max_completion_tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    stream_options: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawStreamOptions {
    include_usage: Option<bool>,
}

fn raw_as<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<T> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

/// Peek at a request body. Never fails: what cannot be read is left out.
pub fn peek_request(body: &[u8]) -> RequestInfo {
    let Ok(raw) = serde_json::from_slice::<RawRequest<'_>>(body) else {
        return RequestInfo::default();
    };
    let model: Option<Cow<'_, str>> = raw_as(raw.model);
    let max_completion: Option<u64> = raw_as(raw.max_completion_tokens);
    let opts: Option<RawStreamOptions> = raw_as(raw.stream_options);
    RequestInfo {
        model: model.map(Cow::into_owned),
        stream: raw_as(raw.stream).unwrap_or(false),
        max_tokens: max_completion.or_else(|| raw_as(raw.max_tokens)),
        include_usage: opts.and_then(|o| o.include_usage).unwrap_or(false),
    }
}

/// Replace the top-level `"model"` string of a JSON object with `new_model`, leaving every other
/// byte untouched. Returns `None` when the body has no top-level string `model`.
pub fn rewrite_model(body: &[u8], new_model: &str) -> Option<Vec<u8>> {
    let (start, end) = top_level_string_span(body, b"model")?;
    let quoted = serde_json::to_string(new_model).ok()?;
    let mut out = Vec::with_capacity(body.len() + quoted.len());
    out.extend_from_slice(&body[..start]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[end..]);
    Some(out)
}

/// Insert `"key":"value"` as the first member of a top-level JSON object, leaving every other
/// byte untouched. `None` when the body is not an object or already has `key`.
pub fn insert_field(body: &[u8], key: &str, value: &str) -> Option<Vec<u8>> {
    let start = skip_ws(body, 0);
    if body.get(start) != Some(&b'{') || top_level_string_span(body, key.as_bytes()).is_some() {
        return None;
    }
    let after = skip_ws(body, start + 1);
    let empty = body.get(after) == Some(&b'}');
    let member = format!(
        "{}:{}{}",
        serde_json::to_string(key).ok()?,
        serde_json::to_string(value).ok()?,
        if empty { "" } else { "," }
    );
    let mut out = Vec::with_capacity(body.len() + member.len());
    out.extend_from_slice(&body[..=start]);
    out.extend_from_slice(member.as_bytes());
    out.extend_from_slice(&body[start + 1..]);
    Some(out)
}

/// Byte span (quotes included) of the string value of top-level key `key` in a JSON object.
fn top_level_string_span(body: &[u8], key: &[u8]) -> Option<(usize, usize)> {
    let mut i = skip_ws(body, 0);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(body, i);
        match body.get(i)? {
            b'}' => return None,
            b',' => {
                i += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(body, i)?;
        let this_key = &body[i + 1..key_end - 1];
        i = skip_ws(body, key_end);
        if body.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(body, i + 1);
        let value_end = value_end(body, i)?;
        if this_key == key && body.get(i) == Some(&b'"') {
            return Some((i, value_end));
        }
        i = value_end;
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// Index just past the closing quote of the string starting at `i`.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match b.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// Index just past the JSON value starting at `i` (strings, nesting and scalars).
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while !matches!(
                b.get(j),
                None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            ) {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

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
    pub mean_itl_ms: Option<f64>,
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
struct RawChunk<'a> {
    choices: Option<ChoicesOutput>,
    usage: Option<RawUsage>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    metrics: Option<&'a RawValue>,
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
struct ChoicesOutput(bool);

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
struct RawUsage {
    #[serde(default, deserialize_with = "lenient_u64")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    completion_tokens: Option<u64>,
}

fn lenient_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = <Option<&RawValue>>::deserialize(d)?;
    Ok(raw_as(v))
}

/// The common event — one token of text, nothing else — recognised without a JSON parse, in
/// one pass over the bytes.
///
/// NB: sound because in valid JSON a string followed by `:` is an object key, and inside a
/// string every `"` is escaped. A `content` or `text` key whose value starts `"` + a non-`"`
/// byte has non-empty text. Events with a `usage`, `error` or `metrics` key (at any depth, any
/// spacing), an escaped key, other spacing after `content`, only empty text, or unbalanced
/// braces take the full parse.
fn fast_content(p: &[u8]) -> Option<ChunkInfo> {
    fast_content_span(p).map(|_| ChunkInfo {
        content: true,
        ..ChunkInfo::default()
    })
}

/// `fast_content`, returning the span of the text value it found (from after its opening quote
/// to its closing quote).
fn fast_content_span(p: &[u8]) -> Option<(usize, usize)> {
    if p.first() != Some(&b'{') {
        return None;
    }
    let n = p.len();
    let mut depth = 0i32;
    let mut hit: Option<(usize, usize)> = None;
    let mut value_at = usize::MAX;
    let mut i = 0;
    while i < n {
        match p[i] {
            b'"' => {
                let start = i + 1;
                let mut j = start;
                let mut escaped = false;
                loop {
                    match p.get(j)? {
                        b'\\' => {
                            escaped = true;
                            j += 2;
                        }
                        b'"' => break,
                        _ => j += 1,
                    }
                }
                let s = &p[start..j];
                if start == value_at {
                    hit = Some((start, j));
                }
                i = j + 1;
                let mut k = i;
                while p.get(k).is_some_and(u8::is_ascii_whitespace) {
                    k += 1;
                }
                if p.get(k) == Some(&b':') {
                    if escaped {
                        return None;
                    }
                    match s {
                        b"usage" | b"error" | b"metrics" => return None,
                        b"content" | b"text"
                            if k == i
                                && hit.is_none()
                                && p.get(k + 1) == Some(&b'"')
                                && p.get(k + 2).is_some_and(|b| *b != b'"') =>
                        {
                            value_at = k + 2;
                        }
                        _ => {}
                    }
                }
                continue;
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    let rest_blank = p[i + 1..].iter().all(u8::is_ascii_whitespace);
                    return hit.filter(|_| rest_blank);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The shape of a stream's last plain token event: its bytes before the text and after it.
/// Consecutive events of one stream usually differ only in the text (vLLM and LiteLLM repeat
/// `id`, `created`, `model` and the rest), so an event with the same prefix and suffix around a
/// plain string body is the same JSON with other text — classified by two compares and a scan
/// of the text instead of a pass over every byte.
#[derive(Debug, Default, Clone)]
pub struct Shape {
    prefix: Vec<u8>,
    suffix: Vec<u8>,
}

impl Shape {
    /// Longest prefix/suffix kept (a shape is not cached beyond this).
    const MAX: usize = 4096;

    fn matches(&self, p: &[u8]) -> bool {
        let (a, b) = (self.prefix.len(), self.suffix.len());
        if a == 0 || p.len() <= a + b || !p.starts_with(&self.prefix) || !p.ends_with(&self.suffix)
        {
            return false;
        }
        // The text between must be a plain string body: no unescaped quote, and not ending in
        // an escape (which would swallow the closing quote).
        let mid = &p[a..p.len() - b];
        // Most texts are a token or two: a plain loop beats the vector search's set-up there.
        let find = |s: &[u8]| {
            if s.len() < 32 {
                s.iter().position(|&c| c == b'"' || c == b'\\')
            } else {
                memchr::memchr2(b'"', b'\\', s)
            }
        };
        let mut i = 0;
        while let Some(off) = find(&mid[i..]) {
            let at = i + off;
            if mid[at] == b'"' || at + 1 >= mid.len() {
                return false;
            }
            i = at + 2;
            if i >= mid.len() {
                break;
            }
        }
        true
    }

    fn remember(&mut self, p: &[u8], (start, end): (usize, usize)) {
        self.prefix.clear();
        self.suffix.clear();
        if start <= Self::MAX && p.len() - end <= Self::MAX {
            self.prefix.extend_from_slice(&p[..start]);
            self.suffix.extend_from_slice(&p[end..]);
        }
    }
}

/// `inspect_chunk` for the events of one stream, with its `Shape` cache. Same answers.
pub fn inspect_chunk_in(shape: &mut Shape, payload: &[u8]) -> Result<ChunkInfo, serde_json::Error> {
    let plain = ChunkInfo {
        content: true,
        ..ChunkInfo::default()
    };
    if shape.matches(payload) {
        return Ok(plain);
    }
    if let Some(span) = fast_content_span(payload) {
        shape.remember(payload, span);
        return Ok(plain);
    }
    inspect_chunk(payload)
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
        #[serde(borrow)]
        mean_itl_ms: Option<&'a RawValue>,
    }
    let ms = |r: Option<&RawValue>| raw_as::<f64>(r).filter(|v| v.is_finite() && *v >= 0.0);
    match serde_json::from_str::<RawTimings<'_>>(json) {
        Ok(t) => ServerTimings {
            queue_ms: ms(t.queue_time_ms),
            ttft_ms: ms(t.time_to_first_token_ms),
            generation_ms: ms(t.generation_time_ms),
            mean_itl_ms: ms(t.mean_itl_ms),
        },
        Err(_) => ServerTimings::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-stream shape cache gives the same answer as the stateless path on every event of
    /// every fixture, in stream order, and on events built to slip past it.
    #[test]
    fn shape_cache_agrees_with_the_stateless_path() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sse");
        let (mut events, mut cached) = (0, 0);
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "sse") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let mut shape = Shape::default();
            for ev in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
                let hit = shape.matches(ev.as_bytes());
                let a = inspect_chunk_in(&mut shape, ev.as_bytes()).ok();
                let b = inspect_chunk(ev.as_bytes()).ok();
                assert_eq!(a, b, "{}: {ev}", p.display());
                events += 1;
                cached += usize::from(hit);
            }
        }
        assert!(
            cached * 2 > events,
            "most events hit the cache: {cached} of {events}"
        );

        let mut shape = Shape::default();
        let base = br#"{"id":"x","choices":[{"index":0,"delta":{"content":"hello"}}],"created":1}"#;
        assert!(inspect_chunk_in(&mut shape, base).unwrap().content);
        assert!(shape.matches(
            br#"{"id":"x","choices":[{"index":0,"delta":{"content":"a \"b\" c"}}],"created":1}"#
        ));
        // Long texts take the vector search: escapes pass, a bare quote does not.
        assert!(shape.matches(
            br#"{"id":"x","choices":[{"index":0,"delta":{"content":"a long text of many words, then \"quoted\" ones"}}],"created":1}"#
        ));
        assert!(!shape.matches(
            br#"{"id":"x","choices":[{"index":0,"delta":{"content":"a long text of many words before a quote","x":"y"}}],"created":1}"#
        ));
        for slip in [
            // A quote in the "text" turns the rest into structure: here a usage key.
            &br#"{"id":"x","choices":[{"index":0,"delta":{"content":"a","usage":{"completion_tokens":9},"x":"b"}}],"created":1}"#[..],
            // A trailing backslash escapes the closing quote.
            br#"{"id":"x","choices":[{"index":0,"delta":{"content":"a\"}}],"created":1}"#,
            // Empty text.
            br#"{"id":"x","choices":[{"index":0,"delta":{"content":""}}],"created":1}"#,
            // Other suffix (a usage object).
            br#"{"id":"x","choices":[{"index":0,"delta":{"content":"a"}}],"created":1,"usage":{"completion_tokens":2}}"#,
        ] {
            assert!(!shape.matches(slip), "{}", String::from_utf8_lossy(slip));
            let mut fresh = Shape::default();
            assert_eq!(
                inspect_chunk_in(&mut shape.clone(), slip).ok(),
                inspect_chunk_in(&mut fresh, slip).ok()
            );
        }
    }

    /// The fast path never disagrees with the full parse, on every real event in the fixtures
    /// and on spacing/escaping variants of them.
    #[test]
    fn fast_path_agrees_with_the_full_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sse");
        let mut checked = 0;
        let mut fast = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "sse") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for ev in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
                let variants = [
                    ev.to_owned(),
                    ev.replace("\":", "\": "),
                    ev.replace("\"content\":\"", "\"content\":\"\\\""),
                ];
                for v in variants {
                    let full = serde_json::from_slice::<RawChunk<'_>>(v.as_bytes()).ok();
                    if let Some(f) = fast_content(v.as_bytes()) {
                        fast += 1;
                        let full =
                            full.unwrap_or_else(|| panic!("fast path accepted unparsable {v}"));
                        assert!(f.content && full.choices.is_some_and(|c| c.0), "{v}");
                        assert!(
                            full.usage.is_none() && full.error.is_none() && full.metrics.is_none()
                        );
                    }
                    checked += 1;
                }
            }
        }
        assert!(fast > 100 && checked > fast, "{fast} of {checked}");
        assert!(
            fast_content(br#"{"choices":[{"delta":{"content":"ok"}}"#).is_none(),
            "truncated"
        );
        assert!(
            fast_content(br#"{"choices":[{"delta":{"content":""}}]}"#).is_none(),
            "empty"
        );
        assert!(fast_content(br#"{"choices":[{"delta":{"reasoning_content":"x"}}]}"#).is_none());
        for bail in [
            &br#"{"choices":[{"delta":{"content":"x"}}],"usage" : {"completion_tokens":1}}"#[..],
            br#"{"choices":[{"delta":{"content":"x"}}],"us\u0061ge":{"completion_tokens":1}}"#,
            br#"{"choices":[{"delta":{"content":"x"}}],"error":null}"#,
            br#"{"choices":[{"delta":{"content":"x"}}]}}"#,
        ] {
            assert!(
                fast_content(bail).is_none(),
                "{}",
                String::from_utf8_lossy(bail)
            );
        }
        assert!(fast_content(br#"{"choices":[{"delta":{"content":"a \"q\" {"}}]}"#).is_some());
    }
}
