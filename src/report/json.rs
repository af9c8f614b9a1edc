//! Stepping over and reading the JSON values of a record's line, for the report's fast path:
//! whitespace, strings, numbers, literals, nested objects and arrays, each checked as serde
//! checks a value it reads or ignores, so that a line the fast path accepts is one serde
//! accepts too. `None` everywhere means "not sure": the caller defers to serde.

use std::borrow::Cow;

use serde::Deserialize;

use super::row::Text;
use super::scan::{f64_at, number_end, string_stop, u64_at};
use crate::meter::{Outcome, TtftSplit};
use crate::openai::Api;

#[inline(always)]
pub(super) fn is_ws(c: u8) -> bool {
    const WS: u64 = 1 << b' ' | 1 << b'\t' | 1 << b'\r' | 1 << b'\n';
    c <= b' ' && (WS >> c) & 1 == 1
}

/// `i`, or past the whitespace at `i` (records as tokentap writes them have none).
#[inline(always)]
pub(super) fn ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).copied().is_some_and(is_ws) {
        i += 1;
    }
    i
}

/// `i` past `c` (after optional whitespace).
#[inline(always)]
pub(super) fn eat(b: &[u8], i: usize, c: u8) -> Option<usize> {
    match b.get(i) {
        Some(&x) if x == c => Some(i + 1),
        Some(&x) if is_ws(x) => {
            let i = ws(b, i);
            (b.get(i) == Some(&c)).then_some(i + 1)
        }
        _ => None,
    }
}

/// The bytes of a string without escapes at `i` (after optional whitespace), and its end.
#[inline]
pub(super) fn plain(b: &[u8], i: usize) -> Option<(&[u8], usize)> {
    let i = eat(b, i, b'"')?;
    let end = string_stop(b, i)?;
    (b[end] == b'"').then(|| (&b[i..end], end + 1))
}

/// Step over the string whose opening quote is at `i`, checked as serde checks a string it
/// ignores: no control character, only JSON's escapes.
#[inline]
pub(super) fn skip_str(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    loop {
        let at = string_stop(b, i)?;
        match b[at] {
            b'"' => return Some(at + 1),
            b'\\' => {
                i = match *b.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at + 2,
                    b'u' if b.get(at + 2..at + 6)?.iter().all(u8::is_ascii_hexdigit) => at + 6,
                    _ => return None,
                }
            }
            _ => return None,
        }
    }
}

/// Step over any value at `i` (after optional whitespace), checked as JSON as serde checks a
/// value it ignores.
pub(super) fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_str(b, i),
        b'{' | b'[' => skip_nested(b, i),
        b't' => lit(b, i, b"true"),
        b'f' => lit(b, i, b"false"),
        b'n' => lit(b, i, b"null"),
        c if is_ws(c) => skip_value(b, ws(b, i)),
        _ => number_end(b, i),
    }
}

/// Step over the object or array at `i`, every part checked. Deeper than 128 levels is left to
/// serde.
pub(super) fn skip_nested(b: &[u8], mut i: usize) -> Option<usize> {
    // One bit a level: 1 an object, 0 an array.
    let mut stack = 0u128;
    let mut depth = 0u32;
    loop {
        // A value starts at `i`.
        i = ws(b, i);
        match *b.get(i)? {
            c @ (b'{' | b'[') => {
                if depth == 128 {
                    return None;
                }
                let object = c == b'{';
                stack = (stack << 1) | u128::from(object);
                depth += 1;
                i = ws(b, i + 1);
                let close = if object { b'}' } else { b']' };
                if b.get(i) != Some(&close) {
                    if object {
                        i = key(b, i)?;
                    }
                    continue;
                }
                // Empty: it closes at once, below.
            }
            _ => {
                i = skip_value(b, i)?;
                i = ws(b, i);
            }
        }
        // After a value (or at an empty container's close): commas and closes.
        loop {
            let object = stack & 1 == 1;
            match *b.get(i)? {
                b',' => {
                    i += 1;
                    if object {
                        i = key(b, ws(b, i))?;
                    }
                    break;
                }
                b'}' if object => {}
                b']' if !object => {}
                _ => return None,
            }
            i += 1;
            stack >>= 1;
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
            i = ws(b, i);
        }
    }
}

/// An object's key and its colon, at `i`: the index after the colon.
pub(super) fn key(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    eat(b, skip_str(b, i)?, b':')
}

#[inline(always)]
pub(super) fn lit(b: &[u8], i: usize, w: &[u8]) -> Option<usize> {
    b.get(i..)?.starts_with(w).then_some(i + w.len())
}

/// `null` at `i` (after optional whitespace): its end.
#[inline(always)]
pub(super) fn null(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i) {
        Some(b'n') => lit(b, i, b"null"),
        Some(&c) if is_ws(c) => lit(b, ws(b, i), b"null"),
        _ => None,
    }
}

#[inline]
pub(super) fn opt_f64(b: &[u8], i: usize) -> Option<(Option<f64>, usize)> {
    if let Some(e) = null(b, i) {
        return Some((None, e));
    }
    let (v, e) = f64_at(b, ws(b, i))?;
    Some((Some(v), e))
}

#[inline]
pub(super) fn opt_u64(b: &[u8], i: usize) -> Option<(Option<u64>, usize)> {
    if let Some(e) = null(b, i) {
        return Some((None, e));
    }
    let (v, e) = u64_at(b, ws(b, i))?;
    Some((Some(v), e))
}

/// `true` or `false` (after optional whitespace).
#[inline]
pub(super) fn boolean(b: &[u8], i: usize) -> Option<(bool, usize)> {
    let i = ws(b, i);
    match b.get(i) {
        Some(b't') => Some((true, lit(b, i, b"true")?)),
        Some(b'f') => Some((false, lit(b, i, b"false")?)),
        _ => None,
    }
}

pub(super) fn text(b: &[u8], i: usize) -> Option<(Text<'_>, usize)> {
    let (s, e) = plain(b, i)?;
    Some((Text(Cow::Borrowed(std::str::from_utf8(s).ok()?)), e))
}

pub(super) fn opt_text(b: &[u8], i: usize) -> Option<(Option<Text<'_>>, usize)> {
    if let Some(e) = null(b, i) {
        return Some((None, e));
    }
    let (t, e) = text(b, i)?;
    Some((Some(t), e))
}

/// A small nested object, handed to serde (the slice is its whole value).
pub(super) fn nested<'a, T: Deserialize<'a>>(b: &'a [u8], i: usize) -> Option<(Option<T>, usize)> {
    if let Some(e) = null(b, i) {
        return Some((None, e));
    }
    let start = ws(b, i);
    let end = skip_value(b, start)?;
    Some((Some(serde_json::from_slice(&b[start..end]).ok()?), end))
}

/// `ttft_split`, on nearly every served record: five numbers or nulls, read here.
pub(super) fn split(b: &[u8], i: usize) -> Option<(Option<TtftSplit>, usize)> {
    if let Some(e) = null(b, i) {
        return Some((None, e));
    }
    let mut s = TtftSplit {
        proxy_ms: None,
        upstream_headers_ms: None,
        engine_queue_ms: None,
        engine_prefill_ms: None,
        outside_engine_ms: None,
    };
    let mut i = eat(b, i, b'{')?;
    if let Some(e) = eat(b, i, b'}') {
        return Some((Some(s), e));
    }
    // The parts as tokentap writes them, in its order: each is first looked for where it
    // is expected, and read and matched only when it is not there.
    const PARTS: [&[u8]; 5] = [
        b"\"proxy_ms\":",
        b"\"upstream_headers_ms\":",
        b"\"engine_queue_ms\":",
        b"\"engine_prefill_ms\":",
        b"\"outside_engine_ms\":",
    ];
    let mut seen = 0u8;
    let mut n = 0;
    loop {
        let part = match PARTS.get(n) {
            Some(p) if b.get(i..i + p.len()) == Some(p) => {
                i += p.len();
                Some(n)
            }
            _ => {
                let (k, e) = plain(b, i)?;
                if !k.is_ascii() {
                    std::str::from_utf8(k).ok()?;
                }
                i = eat(b, e, b':')?;
                // A part a newer tokentap adds is skipped, as serde skips it.
                PARTS.iter().position(|p| p.get(1..p.len() - 2) == Some(k))
            }
        };
        // The next part expected is the one after this, wherever this was.
        n = part.map_or(n, |p| p + 1);
        let (bit, slot) = match part {
            Some(0) => (1, Some(&mut s.proxy_ms)),
            Some(1) => (2, Some(&mut s.upstream_headers_ms)),
            Some(2) => (4, Some(&mut s.engine_queue_ms)),
            Some(3) => (8, Some(&mut s.engine_prefill_ms)),
            Some(4) => (16, Some(&mut s.outside_engine_ms)),
            _ => (0, None),
        };
        if seen & bit != 0 {
            return None;
        }
        seen |= bit;
        i = match slot {
            Some(slot) => {
                let (v, e) = opt_f64(b, i)?;
                *slot = v;
                e
            }
            None => skip_value(b, i)?,
        };
        if let Some(e) = eat(b, i, b',') {
            i = e;
        } else {
            return Some((Some(s), eat(b, i, b'}')?));
        }
    }
}

pub(super) fn outcome(s: &[u8]) -> Option<Outcome> {
    Some(match s {
        b"ok" => Outcome::Ok,
        b"upstream_error" => Outcome::UpstreamError,
        b"stream_error" => Outcome::StreamError,
        b"incomplete" => Outcome::Incomplete,
        b"upstream_reset" => Outcome::UpstreamReset,
        b"connect_error" => Outcome::ConnectError,
        b"timeout" => Outcome::Timeout,
        b"client_cancelled" => Outcome::ClientCancelled,
        b"rejected" => Outcome::Rejected,
        b"shutdown_cut" => Outcome::ShutdownCut,
        _ => return None,
    })
}

pub(super) fn api(s: &[u8]) -> Option<Api> {
    Some(match s {
        b"chat" => Api::Chat,
        b"completions" => Api::Completions,
        b"responses" => Api::Responses,
        b"messages" => Api::Messages,
        b"embeddings" => Api::Embeddings,
        b"models" => Api::Models,
        b"other" => Api::Other,
        _ => return None,
    })
}
