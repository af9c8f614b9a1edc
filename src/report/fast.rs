//! The report's fast path through a line: one pass over the top-level object that picks out
//! the fields [`Row`] has and steps over everything else, checked but not parsed. Lines from
//! one writer have their keys in one order, so the keys of the last line are kept (a
//! template): a key where the template expects it is recognised by one or two 8-byte
//! compares; any other key is read and looked up by one multiply. Strings are crossed eight
//! bytes at a time and numbers are read without serde. Anything it is not sure of (an escaped
//! key or needed string, a repeated field, a value of an unexpected type, a missing required
//! field, a number serde reads by its slower route) returns `None`, and the caller parses the
//! line with serde instead, which reads it or says why not. So the fast path never reads a
//! line differently: it only reads the common one sooner.
//!
//! Numbers give the same double serde_json gives (`scan::f64_at`, tested against it), and a
//! value stepped over is checked as serde checks a value it ignores.

use super::json::{
    api, boolean, eat, nested, opt_f64, opt_text, opt_u64, outcome, plain, skip_value, split, text,
    ws,
};
use super::row::{DeliveryRow, ExpRow, Row, TapRow, Text};
use super::scan::{f64_at, u64_at, word};
use crate::meter::Outcome;

/// The fields the report reads, in [`FIELDS`] order.
#[derive(Debug, Clone, Copy)]
enum F {
    Ts,
    Route,
    Experiment,
    Api,
    KeyId,
    Outcome,
    InputTokens,
    OutputTokens,
    CachedTokens,
    ReasoningTokens,
    TtftMs,
    TtfoMs,
    TpotMs,
    E2eMs,
    UpstreamHeadersMs,
    InFlight,
    Bucket,
    GatewayOverheadMs,
    Concurrency,
    TtftSplit,
    GatewayTap,
    RequestRate,
    ClientQueueMs,
    ClientLagMs,
    Turn,
    Run,
    ScheduledMs,
    Method,
    Endpoint,
    Status,
    Stream,
    Delivery,
    ItlP50Ms,
    ItlP99Ms,
    ItlMaxMs,
    FinishReason,
    Id,
    JoinId,
    JoinSent,
    BootId,
}

const FIELDS: [(&[u8], F); 40] = [
    (b"ts", F::Ts),
    (b"route", F::Route),
    (b"experiment", F::Experiment),
    (b"api", F::Api),
    (b"key_id", F::KeyId),
    (b"outcome", F::Outcome),
    (b"input_tokens", F::InputTokens),
    (b"output_tokens", F::OutputTokens),
    (b"cached_tokens", F::CachedTokens),
    (b"reasoning_tokens", F::ReasoningTokens),
    (b"ttft_ms", F::TtftMs),
    (b"ttfo_ms", F::TtfoMs),
    (b"tpot_ms", F::TpotMs),
    (b"e2e_ms", F::E2eMs),
    (b"upstream_headers_ms", F::UpstreamHeadersMs),
    (b"in_flight", F::InFlight),
    (b"bucket", F::Bucket),
    (b"gateway_overhead_ms", F::GatewayOverheadMs),
    (b"concurrency", F::Concurrency),
    (b"ttft_split", F::TtftSplit),
    (b"gateway_tap", F::GatewayTap),
    (b"request_rate", F::RequestRate),
    (b"client_queue_ms", F::ClientQueueMs),
    (b"client_lag_ms", F::ClientLagMs),
    (b"turn", F::Turn),
    (b"run", F::Run),
    (b"scheduled_ms", F::ScheduledMs),
    (b"method", F::Method),
    (b"endpoint", F::Endpoint),
    (b"status", F::Status),
    (b"stream", F::Stream),
    (b"delivery", F::Delivery),
    (b"itl_p50_ms", F::ItlP50Ms),
    (b"itl_p99_ms", F::ItlP99Ms),
    (b"itl_max_ms", F::ItlMaxMs),
    (b"finish_reason", F::FinishReason),
    (b"id", F::Id),
    (b"join_id", F::JoinId),
    (b"join_sent", F::JoinSent),
    (b"boot_id", F::BootId),
];

/// The names of the fields the fast path reads: [`Row`]'s (`tests/suite/schema.rs` holds them to it).
pub fn fields() -> Vec<&'static str> {
    FIELDS
        .iter()
        .filter_map(|(k, _)| std::str::from_utf8(k).ok())
        .collect()
}

/// A key's first eight bytes (zero-padded), little-endian.
#[inline(always)]
const fn head(k: &[u8]) -> u64 {
    if k.len() >= 8 {
        return u64::from_le_bytes([k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]]);
    }
    let mut w = 0u64;
    let mut i = 0;
    while i < k.len() {
        w |= (k[i] as u64) << (8 * i);
        i += 1;
    }
    w
}

/// A key's last eight bytes (keys of 8 to 16 bytes: with its head, the whole key).
#[inline(always)]
const fn tail(k: &[u8]) -> u64 {
    let n = k.len();
    if n < 8 {
        return 0;
    }
    u64::from_le_bytes([
        k[n - 8],
        k[n - 7],
        k[n - 6],
        k[n - 5],
        k[n - 4],
        k[n - 3],
        k[n - 2],
        k[n - 1],
    ])
}

/// A key's slot: its head plus its length, multiplied and shifted (the multiplier was
/// searched for; the table below fails the build if two fields collide).
#[inline(always)]
const fn slot(head: u64, len: usize) -> usize {
    (head
        .wrapping_add(len as u64)
        .wrapping_mul(0xd829_6b5c_1fdb_9a59)
        >> 57) as usize
}

/// Slot → (head, tail, length, index into [`FIELDS`] + 1); index 0: no field.
const TABLE: [(u64, u64, usize, u8); 128] = {
    let mut t = [(0, 0, 0, 0u8); 128];
    let mut i = 0;
    while i < FIELDS.len() {
        let k = FIELDS[i].0;
        let s = slot(head(k), k.len());
        assert!(
            t[s].3 == 0,
            "two report fields share a slot: pick another multiplier"
        );
        t[s] = (head(k), tail(k), k.len(), i as u8 + 1);
        i += 1;
    }
    t
};

/// The field a key names, if the report reads it.
#[inline(always)]
fn field(k: &[u8]) -> Option<F> {
    let h = head(k);
    let (th, tt, len, i) = TABLE[slot(h, k.len())];
    if i == 0 || len != k.len() || th != h {
        return None;
    }
    let (name, f) = FIELDS[usize::from(i - 1)];
    let same = match len {
        0..=8 => true,
        9..=16 => tail(k) == tt,
        _ => name == k,
    };
    same.then_some(f)
}

/// Read the value of field `f` at `i` into `r`; its end.
#[inline]
fn read<'a>(b: &'a [u8], i: usize, f: F, r: &mut Row<'a>) -> Option<usize> {
    macro_rules! set {
        ($field:ident, $read:expr) => {{
            let (v, e) = $read?;
            r.$field = v;
            e
        }};
    }
    Some(match f {
        F::Ts => set!(ts, text(b, i)),
        F::Route => set!(route, text(b, i)),
        F::Experiment => set!(experiment, nested::<ExpRow<'_>>(b, i)),
        F::Api => {
            let (s, e) = plain(b, i)?;
            r.api = Some(api(s)?);
            e
        }
        F::KeyId => set!(key_id, opt_text(b, i)),
        F::Outcome => {
            let (s, e) = plain(b, i)?;
            r.outcome = outcome(s)?;
            e
        }
        F::InputTokens => set!(input_tokens, opt_u64(b, i)),
        F::OutputTokens => set!(output_tokens, opt_u64(b, i)),
        F::CachedTokens => set!(cached_tokens, opt_u64(b, i)),
        F::ReasoningTokens => set!(reasoning_tokens, opt_u64(b, i)),
        F::TtftMs => set!(ttft_ms, opt_f64(b, i)),
        F::TtfoMs => set!(ttfo_ms, opt_f64(b, i)),
        F::TpotMs => set!(tpot_ms, opt_f64(b, i)),
        F::E2eMs => {
            let (v, e) = f64_at(b, ws(b, i))?;
            r.e2e_ms = v;
            e
        }
        F::UpstreamHeadersMs => set!(upstream_headers_ms, opt_f64(b, i)),
        F::InFlight => {
            let (v, e) = u64_at(b, ws(b, i))?;
            r.in_flight = v;
            e
        }
        F::Bucket => set!(bucket, opt_text(b, i)),
        F::GatewayOverheadMs => set!(gateway_overhead_ms, opt_f64(b, i)),
        F::Concurrency => set!(concurrency, opt_u64(b, i)),
        F::TtftSplit => set!(ttft_split, split(b, i)),
        F::GatewayTap => set!(gateway_tap, nested::<TapRow>(b, i)),
        F::RequestRate => set!(request_rate, opt_f64(b, i)),
        F::ClientQueueMs => set!(client_queue_ms, opt_f64(b, i)),
        F::ClientLagMs => set!(client_lag_ms, opt_f64(b, i)),
        F::Turn => set!(turn, opt_u64(b, i)),
        F::Run => set!(run, opt_u64(b, i)),
        F::ScheduledMs => set!(scheduled_ms, opt_f64(b, i)),
        F::Method => set!(method, text(b, i)),
        F::Endpoint => set!(endpoint, text(b, i)),
        F::Status => {
            let (v, e) = u64_at(b, ws(b, i))?;
            r.status = u16::try_from(v).ok()?;
            e
        }
        F::Stream => set!(stream, boolean(b, i)),
        F::Delivery => set!(delivery, nested::<DeliveryRow>(b, i)),
        F::ItlP50Ms => set!(itl_p50_ms, opt_f64(b, i)),
        F::ItlP99Ms => set!(itl_p99_ms, opt_f64(b, i)),
        F::ItlMaxMs => set!(itl_max_ms, opt_f64(b, i)),
        F::FinishReason => set!(finish_reason, opt_text(b, i)),
        F::Id => set!(id, text(b, i)),
        F::JoinId => set!(join_id, opt_text(b, i)),
        F::JoinSent => set!(join_sent, boolean(b, i)),
        F::BootId => set!(boot_id, opt_text(b, i)),
    })
}

/// A key as the last line had it, to be matched where it was.
#[derive(Debug)]
struct Known {
    /// `"key":`, exactly.
    pat: Box<[u8]>,
    /// The words of `pat` at 0, 8 and `len - 8` (zero-padded under 8 bytes).
    head: u64,
    mid: u64,
    tail: u64,
    field: Option<F>,
}

impl Known {
    fn new(key: &[u8], field: Option<F>) -> Known {
        let pat: Box<[u8]> = [&b"\""[..], key, b"\":"].concat().into();
        Known {
            head: head(&pat),
            mid: pat.get(8..).map_or(0, head),
            tail: tail(&pat),
            pat,
            field,
        }
    }

    /// Whether the line has this key (with its quotes and colon) at `i`.
    #[inline(always)]
    fn at(&self, b: &[u8], i: usize) -> bool {
        let n = self.pat.len();
        match (n, word(b, i)) {
            (0..=8, Some(w)) => (w ^ self.head) & (u64::MAX >> (64 - 8 * n)) == 0,
            (9..=16, Some(w)) => w == self.head && word(b, i + n - 8) == Some(self.tail),
            (17..=24, Some(w)) => {
                w == self.head
                    && word(b, i + 8) == Some(self.mid)
                    && word(b, i + n - 8) == Some(self.tail)
            }
            _ => b.get(i..i + n) == Some(&self.pat[..]),
        }
    }
}

/// Keys a template holds at most (records have about 55).
const TEMPLATE_KEYS: usize = 128;

/// The fast path, with what it learned of the lines before: the keys it has seen, in the
/// order lines have them. A line of the usual shape is matched key after key where the
/// template expects each; a line without a key the template has skips it (the next two places
/// are tried too); a key the template does not have is read, looked up, and put in where it
/// was. So a line with a field more or less costs one lookup, not one per key that follows.
#[derive(Debug, Default)]
pub struct Fast {
    /// Every key seen (compactly written), at most [`TEMPLATE_KEYS`].
    keys: Vec<Known>,
    /// Indexes into `keys`, in line order.
    order: Vec<u8>,
}

impl Fast {
    /// The key at `order[at]`, when it is at `i` in the line.
    #[inline(always)]
    fn expects(&self, at: usize, b: &[u8], i: usize) -> Option<&Known> {
        let k = self.keys.get(usize::from(*self.order.get(at)?))?;
        k.at(b, i).then_some(k)
    }

    /// The key at `i`, read and looked up (and learned, when it is written compactly and new),
    /// with `*at` moved past it in the order: its field and the index after its colon.
    #[cold]
    fn unexpected(&mut self, b: &[u8], i: usize, at: &mut usize) -> Option<(Option<F>, usize)> {
        let (key, e) = plain(b, i)?;
        // serde reads a key as a str: UTF-8 even when no field has its name.
        if !key.is_ascii() {
            std::str::from_utf8(key).ok()?;
        }
        let after = eat(b, e, b':')?;
        let f = field(key);
        let known = self
            .keys
            .iter()
            .position(|k| k.pat.len() == key.len() + 3 && k.pat[1..=key.len()] == *key);
        let placed = known.and_then(|k| self.order.iter().position(|o| usize::from(*o) == k));
        match (known, placed) {
            (_, Some(place)) => *at = place + 1,
            (Some(k), None) => {
                self.order.insert((*at).min(self.order.len()), k as u8);
                *at += 1;
            }
            (None, _) => {
                let compact = b[i] == b'"' && after == e + 1;
                if compact && self.keys.len() < TEMPLATE_KEYS {
                    self.keys.push(Known::new(key, f));
                    let k = (self.keys.len() - 1) as u8;
                    self.order.insert((*at).min(self.order.len()), k);
                    *at += 1;
                }
            }
        }
        Some((f, after))
    }

    /// The line's [`Row`], or `None`: parse it with serde instead.
    pub fn row<'a>(&mut self, b: &'a [u8]) -> Option<Row<'a>> {
        let mut r = Row {
            ts: Text::default(),
            id: Text::default(),
            join_id: None,
            join_sent: false,
            boot_id: None,
            route: Text::default(),
            method: Text::default(),
            endpoint: Text::default(),
            status: 0,
            stream: false,
            experiment: None,
            api: None,
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
            request_rate: None,
            client_queue_ms: None,
            client_lag_ms: None,
            turn: None,
            run: None,
            scheduled_ms: None,
            ttft_split: None,
            gateway_tap: None,
            delivery: None,
            itl_p50_ms: None,
            itl_p99_ms: None,
            itl_max_ms: None,
            finish_reason: None,
        };
        let mut seen = 0u64;
        let mut i = eat(b, 0, b'{')?;
        // Where the line is in the template's order.
        let mut at = 0usize;
        let end = match eat(b, i, b'}') {
            Some(e) => e,
            None => loop {
                let (f, after) = if let Some(k) = self.expects(at, b, i) {
                    at += 1;
                    (k.field, i + k.pat.len())
                } else if let Some(k) = self.expects(at + 1, b, i) {
                    at += 2;
                    (k.field, i + k.pat.len())
                } else if let Some(k) = self.expects(at + 2, b, i) {
                    at += 3;
                    (k.field, i + k.pat.len())
                } else {
                    self.unexpected(b, i, &mut at)?
                };
                i = match f {
                    Some(f) => {
                        let bit = 1u64 << (f as u32);
                        if seen & bit != 0 {
                            return None;
                        }
                        seen |= bit;
                        read(b, after, f, &mut r)?
                    }
                    None => skip_value(b, after)?,
                };
                match b.get(i) {
                    Some(b',') => i += 1,
                    Some(b'}') => break i + 1,
                    _ => match eat(b, i, b',') {
                        Some(e) => i = e,
                        None => break eat(b, i, b'}')?,
                    },
                }
            },
        };
        // The whole line is the object, and the two required fields are there.
        let required = (1u64 << F::Outcome as u32) | (1u64 << F::E2eMs as u32);
        (ws(b, end) == b.len() && seen & required == required).then_some(r)
    }
}

#[cfg(test)]
#[path = "fast_tests.rs"]
mod tests;
