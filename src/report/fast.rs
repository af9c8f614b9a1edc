//! The report's fast path through a line: one pass over the top-level object that picks out
//! the fields [`Row`] has and steps over everything else without parsing it (strings by
//! `memchr`, objects and arrays by depth). Anything it is not sure of (an escaped key or
//! string it would have to unescape, a repeated field, a value of an unexpected type, a
//! missing required field) returns `None`, and the caller parses the line with serde instead,
//! which reads it or says why not. So the fast path never reads a line differently: it only
//! reads the common one sooner.
//!
//! Numbers are parsed by serde_json's own number parser, so a value is the same double
//! whichever path read it.

use std::borrow::Cow;

use serde::Deserialize;

use super::row::{ExpRow, Row, TapRow, Text};
use crate::meter::{Outcome, TtftSplit};
use crate::openai::Api;

struct P<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> P<'a> {
    fn ws(&mut self) {
        while let Some(c) = self.b.get(self.i) {
            if !matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                break;
            }
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// The bytes of a string without escapes (the opening quote is next).
    fn plain_bytes(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let rest = &self.b[self.i..];
        let end = quote_or_escape(rest)?;
        if rest[end] != b'"' {
            return None;
        }
        self.i += end + 1;
        Some(&rest[..end])
    }

    /// A string without escapes, borrowed.
    fn plain_str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.plain_bytes()?).ok()
    }

    /// Step over a string (the opening quote is next), escapes included.
    fn skip_str(&mut self) -> Option<()> {
        self.i += 1;
        loop {
            let rest = &self.b[self.i..];
            let at = quote_or_escape(rest)?;
            if rest[at] == b'"' {
                self.i += at + 1;
                return Some(());
            }
            self.i += at + 2;
        }
    }

    /// Step over any value; literals and numbers are checked for their characters only.
    fn skip_value(&mut self) -> Option<()> {
        self.ws();
        match self.peek()? {
            b'"' => self.skip_str(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.skip_str()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            b't' => self.lit(b"true"),
            b'f' => self.lit(b"false"),
            b'n' => self.lit(b"null"),
            _ => self.number().map(|_| ()),
        }
    }

    fn lit(&mut self, w: &[u8]) -> Option<()> {
        self.b[self.i..].starts_with(w).then(|| self.i += w.len())
    }

    /// The bytes of a number.
    fn number(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        while let Some(c) = self.peek() {
            if !matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                break;
            }
            self.i += 1;
        }
        (self.i > start).then(|| &self.b[start..self.i])
    }

    fn null(&mut self) -> bool {
        self.ws();
        self.b[self.i..].starts_with(b"null") && {
            self.i += 4;
            true
        }
    }

    fn f64(&mut self) -> Option<Option<f64>> {
        if self.null() {
            return Some(None);
        }
        let n = self.number()?;
        // Digits only (with a sign, point or exponent): parsed as serde parses it.
        let mut de = serde_json::Deserializer::from_slice(n);
        Some(Some(f64::deserialize(&mut de).ok()?))
    }

    fn u64(&mut self) -> Option<Option<u64>> {
        if self.null() {
            return Some(None);
        }
        let n = self.number()?;
        if n.len() > 19 || n.is_empty() {
            return None;
        }
        let mut v = 0u64;
        for c in n {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u64::from(c - b'0');
        }
        Some(Some(v))
    }

    fn text(&mut self) -> Option<Option<Text<'a>>> {
        if self.null() {
            return Some(None);
        }
        Some(Some(Text(Cow::Borrowed(self.plain_str()?))))
    }

    /// A small nested object, handed to serde (the slice is its whole value).
    fn nested<T: Deserialize<'a>>(&mut self) -> Option<Option<T>> {
        if self.null() {
            return Some(None);
        }
        let start = self.i;
        self.skip_value()?;
        serde_json::from_slice(&self.b[start..self.i])
            .ok()
            .map(Some)
    }

    /// `ttft_split`, on nearly every served record: five numbers or nulls, read here.
    fn split(&mut self) -> Option<Option<TtftSplit>> {
        if self.null() {
            return Some(None);
        }
        let mut s = TtftSplit {
            proxy_ms: None,
            upstream_headers_ms: None,
            engine_queue_ms: None,
            engine_prefill_ms: None,
            outside_engine_ms: None,
        };
        let mut seen = 0u8;
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(Some(s));
        }
        loop {
            let k = self.plain_bytes()?;
            self.eat(b':')?;
            let (bit, slot) = match k {
                b"proxy_ms" => (1, Some(&mut s.proxy_ms)),
                b"upstream_headers_ms" => (2, Some(&mut s.upstream_headers_ms)),
                b"engine_queue_ms" => (4, Some(&mut s.engine_queue_ms)),
                b"engine_prefill_ms" => (8, Some(&mut s.engine_prefill_ms)),
                b"outside_engine_ms" => (16, Some(&mut s.outside_engine_ms)),
                // A part a newer tokentap adds: serde skips it too.
                _ => (0, None),
            };
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            match slot {
                Some(slot) => *slot = self.f64()?,
                None => self.skip_value()?,
            }
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(Some(s));
                }
                _ => return None,
            }
            self.ws();
        }
    }
}

/// The first `"` or `\\`, eight bytes at a time (SWAR: a byte equal to either zeroes in one of
/// two XORs, and the classic has-zero-byte test finds the lowest such byte exactly).
fn quote_or_escape(b: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let (q, e) = (LO * u64::from(b'"'), LO * u64::from(b'\\'));
    let mut i = 0;
    while let Some(w) = b.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        let w = u64::from_le_bytes(word);
        let (x, y) = (w ^ q, w ^ e);
        let m = ((x.wrapping_sub(LO) & !x) | (y.wrapping_sub(LO) & !y)) & HI;
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    b[i..]
        .iter()
        .position(|c| matches!(c, b'"' | b'\\'))
        .map(|p| p + i)
}

fn outcome(s: &[u8]) -> Option<Outcome> {
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

fn api(s: &[u8]) -> Option<Api> {
    Some(match s {
        b"chat" => Api::Chat,
        b"completions" => Api::Completions,
        b"responses" => Api::Responses,
        b"messages" => Api::Messages,
        b"embeddings" => Api::Embeddings,
        b"other" => Api::Other,
        _ => return None,
    })
}

/// The line's [`Row`], or `None`: parse it with serde instead.
pub fn row(line: &[u8]) -> Option<Row<'_>> {
    let mut p = P { b: line, i: 0 };
    let mut r = Row {
        ts: Text::default(),
        route: Text::default(),
        experiment: None,
        api: Api::Other,
        key_id: None,
        outcome: Outcome::Ok,
        input_tokens: None,
        output_tokens: None,
        cached_tokens: None,
        reasoning_tokens: None,
        ttft_ms: None,
        ttfo_ms: None,
        tpot_ms: None,
        e2e_ms: 0.0,
        upstream_headers_ms: None,
        in_flight: 0,
        bucket: None,
        gateway_overhead_ms: None,
        concurrency: None,
        ttft_split: None,
        gateway_tap: None,
    };
    let mut seen = 0u32;
    p.eat(b'{')?;
    p.ws();
    if p.peek()? != b'}' {
        loop {
            let k = p.plain_bytes()?;
            p.eat(b':')?;
            let bit = match k {
                b"ts" => {
                    r.ts = Text(Cow::Borrowed(p.plain_str()?));
                    1
                }
                b"route" => {
                    r.route = Text(Cow::Borrowed(p.plain_str()?));
                    1 << 1
                }
                b"experiment" => {
                    r.experiment = p.nested::<ExpRow<'_>>()?;
                    1 << 2
                }
                b"api" => {
                    r.api = api(p.plain_bytes()?)?;
                    1 << 3
                }
                b"key_id" => {
                    r.key_id = p.text()?;
                    1 << 4
                }
                b"outcome" => {
                    r.outcome = outcome(p.plain_bytes()?)?;
                    1 << 5
                }
                b"input_tokens" => {
                    r.input_tokens = p.u64()?;
                    1 << 6
                }
                b"output_tokens" => {
                    r.output_tokens = p.u64()?;
                    1 << 7
                }
                b"cached_tokens" => {
                    r.cached_tokens = p.u64()?;
                    1 << 8
                }
                b"reasoning_tokens" => {
                    r.reasoning_tokens = p.u64()?;
                    1 << 9
                }
                b"ttft_ms" => {
                    r.ttft_ms = p.f64()?;
                    1 << 10
                }
                b"ttfo_ms" => {
                    r.ttfo_ms = p.f64()?;
                    1 << 11
                }
                b"tpot_ms" => {
                    r.tpot_ms = p.f64()?;
                    1 << 12
                }
                b"e2e_ms" => {
                    r.e2e_ms = p.f64()??;
                    1 << 13
                }
                b"upstream_headers_ms" => {
                    r.upstream_headers_ms = p.f64()?;
                    1 << 14
                }
                b"in_flight" => {
                    r.in_flight = p.u64()??;
                    1 << 15
                }
                b"bucket" => {
                    r.bucket = p.text()?;
                    1 << 16
                }
                b"gateway_overhead_ms" => {
                    r.gateway_overhead_ms = p.f64()?;
                    1 << 17
                }
                b"concurrency" => {
                    r.concurrency = p.u64()?;
                    1 << 18
                }
                b"ttft_split" => {
                    r.ttft_split = p.split()?;
                    1 << 19
                }
                b"gateway_tap" => {
                    r.gateway_tap = p.nested::<TapRow>()?;
                    1 << 20
                }
                _ => {
                    p.skip_value()?;
                    0
                }
            };
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            p.ws();
            match p.peek()? {
                b',' => p.i += 1,
                b'}' => break,
                _ => return None,
            }
            p.ws();
        }
    }
    p.i += 1;
    p.ws();
    // The whole line is the object, and the two required fields are there.
    (p.i == line.len() && seen & (1 << 5) != 0 && seen & (1 << 13) != 0).then_some(r)
}

#[cfg(test)]
mod tests {
    #[test]
    fn quotes_and_escapes_are_found_at_every_offset() {
        for len in 0..40 {
            for at in 0..len {
                for c in [b'"', b'\\'] {
                    let mut v = vec![b'a'; len];
                    v[at] = c;
                    if at + 1 < len {
                        v[at + 1] = b'"';
                    }
                    assert_eq!(super::quote_or_escape(&v), Some(at), "{len} {at}");
                }
            }
            assert_eq!(super::quote_or_escape(&vec![0x80 | b'"'; len]), None);
        }
    }

    #[test]
    fn the_fast_path_reads_what_serde_reads_or_defers() {
        let lines = [
            r#"{"ts":"t","outcome":"ok","e2e_ms":1.5,"x":{"a":[1,"}",{"b":null}]},"ttft_split":{"proxy_ms":0.25,"engine_queue_ms":null},"bucket":null}"#,
            r#"{"outcome":"timeout","e2e_ms":3e2,"key_id":"sha256:ab","in_flight":7,"concurrency":4}"#,
            r#"{"outcome":"ok","e2e_ms":2,"route":"esc\"aped"}"#,
            r#"{"outcome":"ok"}"#,
            r#"{"outcome":"ok","e2e_ms":1,"e2e_ms":2}"#,
            r#"{"outcome":"ok","e2e_ms":1,"input_tokens":1.0}"#,
            r#"{"outcome":"ok","e2e_ms":1} trailing"#,
            r#"{"outcome":"ok","e2e_ms":1,"experiment":{"arm":"gateway","pair_id":"p1"},"gateway_tap":{"side":"outer","peer":"x","join":"header","unjoined":null}}"#,
            r#"{"ttft_split":{"_":"ok","proxy_ms":1},"outcome":"ok","e2e_ms":12.5}"#,
        ];
        for l in lines {
            let fast = super::row(l.as_bytes());
            let slow = serde_json::from_str::<super::Row<'_>>(l);
            match (&fast, &slow) {
                (Some(f), Ok(s)) => assert_eq!(format!("{f:?}"), format!("{s:?}"), "{l}"),
                (Some(f), Err(e)) => panic!("{l}: fast read {f:?}, serde says {e}"),
                (None, _) => {}
            }
        }
        assert!(super::row(lines[0].as_bytes()).is_some());
        assert!(super::row(lines[1].as_bytes()).is_some());
        assert!(super::row(lines[2].as_bytes()).is_none(), "escapes defer");
        assert!(
            super::row(lines[3].as_bytes()).is_none(),
            "missing e2e_ms defers"
        );
        assert!(
            super::row(lines[4].as_bytes()).is_none(),
            "a repeated field defers"
        );
        assert!(super::row(lines[7].as_bytes()).is_some());
        assert!(
            super::row(lines[8].as_bytes()).is_some(),
            "a split part it does not know is skipped"
        );
    }

    use proptest::prelude::*;

    /// A JSON value as text, of the kinds records and other tools' lines hold.
    fn value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            any::<u32>().prop_map(|n| n.to_string()),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| f.to_string()),
            (0u64..1000, -5i32..5).prop_map(|(m, e)| format!("{m}e{e}")),
            Just("-0.0".to_owned()),
            Just("1.5e-7".to_owned()),
            "[a-z_ ]{0,12}".prop_map(|s| format!("\"{s}\"")),
            Just(r#""esc\"aped\\ \u00e9""#.to_owned()),
            Just("\"ok\"".to_owned()),
            Just("\"outer\"".to_owned()),
            Just("\"chat\"".to_owned()),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                proptest::collection::vec(("[a-z_]{1,8}", inner), 0..4).prop_map(|v| {
                    let fields: Vec<String> =
                        v.into_iter().map(|(k, x)| format!("\"{k}\":{x}")).collect();
                    format!("{{{}}}", fields.join(","))
                }),
            ]
        })
    }

    const KEYS: [&str; 26] = [
        "ts",
        "route",
        "experiment",
        "api",
        "key_id",
        "outcome",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "ttft_ms",
        "ttfo_ms",
        "tpot_ms",
        "e2e_ms",
        "upstream_headers_ms",
        "in_flight",
        "bucket",
        "gateway_overhead_ms",
        "concurrency",
        "ttft_split",
        "gateway_tap",
        "method",
        "trace_id",
        "id",
        "stream",
        "x",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// Whatever the line, the fast path reads it as serde does, or leaves it to serde.
        #[test]
        fn the_fast_path_never_reads_a_line_differently(
            fields in proptest::collection::vec((0..KEYS.len(), value(), 0u8..3), 0..14),
            required in any::<bool>(),
        ) {
            let mut parts: Vec<String> = fields
                .iter()
                .map(|(k, v, ws)| {
                    let pad = " ".repeat(usize::from(*ws));
                    format!("{pad}\"{}\"{pad}:{pad}{v}", KEYS[*k])
                })
                .collect();
            if required {
                parts.push("\"outcome\":\"ok\"".into());
                parts.push("\"e2e_ms\":12.5".into());
            }
            let line = format!("{{{}}}", parts.join(","));
            let fast = super::row(line.as_bytes());
            let slow = serde_json::from_str::<super::Row<'_>>(&line);
            // Without escapes there is nothing the fast path leaves to serde: it reads every line
            // serde reads.
            if slow.is_ok() && !line.contains('\\') {
                prop_assert!(fast.is_some(), "deferred a plain line serde reads: {}", line);
            }
            if let Some(f) = fast {
                match slow {
                    Ok(s) => prop_assert_eq!(format!("{f:?}"), format!("{s:?}"), "{}", line),
                    Err(e) => prop_assert!(false, "fast read {:?}, serde says {} of {}", f, e, line),
                }
            }
        }
    }
}
