//! The response stream: the SSE splitter and the per-event classifier with its fast path.

use crate::openai::chunk::{inspect_chunk_full, ChunkInfo};
use crate::openai::fast::{fast_content, inspect_chunk, inspect_chunk_in, Shape};
use crate::sse::{SseItem, SseSplitter};

/// An event as the splitter reports it, owned.
#[derive(Debug, PartialEq, Eq)]
enum Ev {
    Data(Vec<u8>),
    Oversize,
}

fn own(item: SseItem<'_>) -> Ev {
    match item {
        SseItem::Data(d) => Ev::Data(d.to_vec()),
        SseItem::Oversize => Ev::Oversize,
    }
}

/// The splitter's contract written plainly over the whole input: lines end in `\n`, `\r\n` or
/// `\r`; a blank line ends an event; `data` values are joined by `\n`; a line or an event's
/// data over `max` bytes makes the event `Oversize`; a last line with no end is not a line.
fn reference(input: &[u8], max: usize) -> Vec<Ev> {
    let mut out = Vec::new();
    let mut data: Option<Vec<u8>> = None;
    let mut oversize = false;
    let mut i = 0;
    while let Some(off) = input[i..].iter().position(|&b| b == b'\n' || b == b'\r') {
        let line = &input[i..i + off];
        i += off + 1;
        if input[i - 1] == b'\r' && input.get(i) == Some(&b'\n') {
            i += 1;
        }
        if line.len() > max {
            oversize = true;
            data = None;
            continue;
        }
        if line.is_empty() {
            if oversize {
                out.push(Ev::Oversize);
            } else if let Some(d) = data.take() {
                out.push(Ev::Data(d));
            }
            oversize = false;
            data = None;
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if name != b"data" || oversize {
            continue;
        }
        let d = match data.take() {
            Some(mut d) => {
                d.push(b'\n');
                d.extend_from_slice(value);
                d
            }
            None => value.to_vec(),
        };
        if d.len() > max {
            oversize = true;
        } else {
            data = Some(d);
        }
    }
    out
}

/// The SSE splitter: the first byte sets the event bound, the second where reads split, the
/// rest is the stream. Whole or split, the events are the same and are the reference's; what
/// it holds between reads stays within the bound.
pub fn sse_split(data: &[u8]) {
    let [knob, seed, stream @ ..] = data else {
        return;
    };
    let max = if knob & 0x80 != 0 {
        1 << 20
    } else {
        16 + usize::from(*knob) * 4
    };
    let run = |pieces: Vec<&[u8]>| {
        let mut s = SseSplitter::new(max);
        let mut evs = Vec::new();
        for p in pieces {
            s.feed(p, &mut |item| evs.push(own(item)));
            assert!(
                s.buffered() <= 8 * max + 128 * 1024,
                "{} bytes held with a bound of {max}",
                s.buffered()
            );
        }
        evs
    };
    let whole = run(vec![stream]);
    let split = run(super::pieces(stream, *seed));
    assert_eq!(whole, reference(stream, max), "whole vs the reference");
    assert_eq!(
        whole,
        split,
        "split at {:?}",
        super::cuts(stream.len(), *seed)
    );
}

/// Token events as vLLM writes them, the text between the two halves.
const TEMPLATES: &[(&[u8], &[u8])] = &[
    (
        br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"tiny","choices":[{"index":0,"delta":{"content":""#,
        br#""},"logprobs":null,"finish_reason":null}]}"#,
    ),
    (
        br#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,"text":""#,
        br#"","logprobs":null,"finish_reason":null}]}"#,
    ),
];

/// The verdict without the shape: the fast path leaves `api` unknown (`None`), and the meter
/// takes a stream's shape from its first event that names one (see docs/fuzzing.md).
fn verdict(info: &ChunkInfo) -> ChunkInfo {
    ChunkInfo {
        api: None,
        ..info.clone()
    }
}

/// The event classifier: every line of the input is one event's payload (a leading `data: `
/// is taken off, so an SSE body is an input as it is), and the line is also put, unescaped, as
/// the text of vLLM's chat and completions token events. The per-stream shape cache (carried
/// from event to event, as in a stream) never changes a verdict of the stateless path; the fast
/// path never hides usage, an error, engine timings, an end marker or a finish reason the full
/// parse finds; and on token events of the engines' shapes that are JSON, every path gives the
/// full parse's verdict.
pub fn event_verdict(data: &[u8]) {
    let mut shape = Shape::default();
    let mut check = |p: &[u8], templated: bool| {
        let stateless = inspect_chunk(p).ok();
        let cached = inspect_chunk_in(&mut shape, p).ok();
        let fresh = inspect_chunk_in(&mut Shape::default(), p).ok();
        let text = || String::from_utf8_lossy(p).into_owned();
        assert_eq!(cached, stateless, "cache: {}", text());
        assert_eq!(fresh, stateless, "fresh: {}", text());
        if serde_json::from_slice::<serde::de::IgnoredAny>(p).is_err() {
            return; // not JSON: the fast path's contract is JSON (docs/fuzzing.md)
        }
        let full = inspect_chunk_full(p).ok();
        if fast_content(p).is_some() {
            if let Some(f) = &full {
                assert!(
                    f.usage.is_none()
                        && f.error.is_none()
                        && f.timings.is_empty()
                        && !f.end
                        && f.finish.is_none(),
                    "the fast path hid {f:?}: {}",
                    text()
                );
            }
        }
        if templated {
            assert_eq!(
                stateless.as_ref().map(verdict),
                full.as_ref().map(verdict),
                "{}",
                text()
            );
        }
    };
    for line in data.split(|&b| b == b'\n') {
        let p = line.strip_prefix(b"data: ").unwrap_or(line);
        check(p, false);
        for (head, tail) in TEMPLATES {
            check(&[head, p, tail].concat(), true);
        }
    }
}
