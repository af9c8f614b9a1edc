//! The per-event fast path: a plain token event (one string of text, nothing else) recognised
//! without a JSON parse, and the per-stream `Shape` cache that classifies the next events of the
//! same shape by two compares. Same answers as [`inspect_chunk`] (tested on every fixture).

use super::chunk::{inspect_chunk_full, ChunkInfo};

/// The common event — one token of text, nothing else — recognised without a JSON parse, in
/// one pass over the bytes.
///
/// NB: sound because in valid JSON a string followed by `:` is an object key, and inside a
/// string every `"` is escaped. A `content` or `text` key whose value starts `"` + a non-`"`
/// byte has non-empty text. Events with a `usage`, `error` or `metrics` key (at any depth, any
/// spacing), a `finish_reason` that is not `null` (vLLM's last token event carries it), an
/// escaped key, other spacing after `content`, only empty text, or unbalanced braces take the
/// full parse.
pub(crate) fn fast_content(p: &[u8]) -> Option<ChunkInfo> {
    fast_content_span(p).map(|_| ChunkInfo {
        content: true,
        answer: true,
        ..ChunkInfo::default()
    })
}

/// Interpret one JSON payload. `Err` means it is not a JSON object we can read (counted as a
/// parse error by the caller; the bytes were forwarded regardless).
pub fn inspect_chunk(payload: &[u8]) -> Result<ChunkInfo, serde_json::Error> {
    if let Some(info) = fast_content(payload) {
        return Ok(info);
    }
    inspect_chunk_full(payload)
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
                        b"finish_reason" if !p[k + 1..].trim_ascii_start().starts_with(b"null") => {
                            return None
                        }
                        // The Responses API's events repeat the text in `*.done` events: only
                        // the full parse tells a delta from them.
                        b"type" if p[k + 1..].trim_ascii_start().starts_with(b"\"response.") => {
                            return None
                        }
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
        answer: true,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::chunk::RawChunk;

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
            // The last token: its finish reason must be read.
            br#"{"id":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}],"created":1}"#,
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
                        let info = inspect_chunk_full(v.as_bytes()).unwrap();
                        assert_eq!(info.finish, None, "fast path hid a finish reason: {v}");
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
            br#"{"choices":[{"delta":{"content":"x"},"finish_reason":"length"}]}"#,
            br#"{"choices":[{"delta":{"content":"x"},"finish_reason" : "abort"}]}"#,
        ] {
            assert!(
                fast_content(bail).is_none(),
                "{}",
                String::from_utf8_lossy(bail)
            );
        }
        assert!(fast_content(br#"{"choices":[{"delta":{"content":"a \"q\" {"}}]}"#).is_some());
        assert!(
            fast_content(br#"{"choices":[{"delta":{"content":"x"},"finish_reason": null}]}"#)
                .is_some()
        );
    }
}
