//! How a stream arrived from its upstream, read by read: whether its events came one by one
//! (`streamed`), a few together (`coalesced`, as an engine under load or a TCP read joining two
//! writes does), or held back and let go in bursts (`buffered`, as a compressing or buffering
//! hop does). Counted from the reads tokentap's meter sees; it never touches the bytes.
//!
//! The thresholds and the data they were set from are in `docs/streaming.md`.

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// A read carrying this many content events or more is a burst no engine sends by itself
/// (vLLM on a CPU-starved host sent up to 10 at once: docs/streaming.md).
pub const BURST_EVENTS: u64 = 32;
/// A stream of at least this many content events…
pub const MIN_EVENTS: u64 = 8;
/// …of which at least this share came joined to an earlier one in its read, was buffered
/// (vLLM at most 0.5, on a 16-token stream; a whole stream in one read (n − 1) ÷ n).
pub const BUFFERED_SHARE: f64 = 0.75;
/// A stream where at least this share came joined, or whose events carry this many tokens
/// each on average, was coalesced.
pub const COALESCED_SHARE: f64 = 0.1;
pub const COALESCED_TOKENS_PER_EVENT: f64 = 1.5;

/// The verdict on one stream's delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Streamed,
    Coalesced,
    Buffered,
}

impl Verdict {
    pub const ALL: [Verdict; 3] = [Verdict::Streamed, Verdict::Coalesced, Verdict::Buffered];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Streamed => "streamed",
            Verdict::Coalesced => "coalesced",
            Verdict::Buffered => "buffered",
        }
    }
}

/// What a record says of its stream's delivery (`delivery` in the JSONL record).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// Reads that carried at least one content event.
    pub content_reads: u64,
    /// The most content events one read carried.
    pub max_events_per_read: u64,
    /// Content events in the first read that carried any.
    pub first_read_events: u64,
    /// The share of content events that came in one read together with an earlier one.
    pub coalesced_share: f64,
    /// The longest silence before a read of two or more content events (ms), from the read
    /// before it or, for the first, from the response head.
    #[serde(default)]
    pub burst_silence_ms: Option<f64>,
    pub verdict: Verdict,
}

/// The counts, kept while the stream is read.
#[derive(Debug, Default, Clone)]
pub struct Counter {
    reads: u64,
    events: u64,
    max: u64,
    first: u64,
    silence_us: Option<u64>,
}

impl Counter {
    /// A read at `now` carried `n` content events; the previous content read (or the response
    /// head) was at `since`.
    pub fn on_read(&mut self, n: u64, now: Instant, since: Option<Instant>) {
        if n == 0 {
            return;
        }
        if self.reads == 0 {
            self.first = n;
        }
        self.reads += 1;
        self.events += n;
        self.max = self.max.max(n);
        if n >= 2 {
            if let Some(s) = since {
                let us = now.saturating_duration_since(s).as_micros() as u64;
                self.silence_us = Some(self.silence_us.map_or(us, |m| m.max(us)));
            }
        }
    }

    /// The delivery of a stream that carried content, with its output tokens when known.
    pub fn delivery(&self, output_tokens: Option<u64>) -> Option<Delivery> {
        if self.events == 0 {
            return None;
        }
        let joined = self.events - self.reads;
        let share = joined as f64 / self.events as f64;
        let tokens_per_event = output_tokens.map(|t| t as f64 / self.events as f64);
        Some(Delivery {
            content_reads: self.reads,
            max_events_per_read: self.max,
            first_read_events: self.first,
            coalesced_share: (share * 1e4).round() / 1e4,
            burst_silence_ms: self.silence_us.map(|us| us as f64 / 1000.0),
            verdict: verdict(self.events, self.max, share, tokens_per_event),
        })
    }
}

/// The rule (docs/streaming.md): a burst of `BURST_EVENTS` in one read, or most of a stream of
/// `MIN_EVENTS` or more joined to earlier events, is buffered; some joining, or several tokens
/// per event, is coalesced; else streamed.
pub fn verdict(events: u64, max: u64, share: f64, tokens_per_event: Option<f64>) -> Verdict {
    if max >= BURST_EVENTS || (events >= MIN_EVENTS && share >= BUFFERED_SHARE) {
        Verdict::Buffered
    } else if share >= COALESCED_SHARE
        || tokens_per_event.is_some_and(|t| t >= COALESCED_TOKENS_PER_EVENT)
    {
        Verdict::Coalesced
    } else {
        Verdict::Streamed
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests drive their own clock and environment
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_event_per_read_is_streamed_and_a_whole_stream_in_one_read_is_buffered() {
        let t0 = Instant::now();
        let mut c = Counter::default();
        for i in 1..=20u64 {
            c.on_read(1, t0 + Duration::from_millis(i * 10), None);
        }
        let d = c.delivery(Some(20)).unwrap();
        assert_eq!(d.verdict, Verdict::Streamed);
        assert_eq!((d.content_reads, d.max_events_per_read), (20, 1));
        assert_eq!(d.coalesced_share, 0.0);
        assert_eq!(d.burst_silence_ms, None);

        let mut c = Counter::default();
        c.on_read(64, t0 + Duration::from_millis(885), Some(t0));
        let d = c.delivery(Some(64)).unwrap();
        assert_eq!(d.verdict, Verdict::Buffered);
        assert_eq!(d.first_read_events, 64);
        assert_eq!(d.burst_silence_ms, Some(885.0));
        assert!((d.coalesced_share - 63.0 / 64.0).abs() < 1e-4);
    }

    #[test]
    fn pairs_under_load_and_many_tokens_per_event_are_coalesced_never_buffered() {
        let t0 = Instant::now();
        let mut c = Counter::default();
        // 40 events: 8 reads of 2, 24 of 1 (a loaded engine's writes joined by TCP).
        for i in 0..32u64 {
            c.on_read(
                if i % 4 == 0 { 2 } else { 1 },
                t0 + Duration::from_millis(i),
                None,
            );
        }
        assert_eq!(c.delivery(None).unwrap().verdict, Verdict::Coalesced);
        // vLLM's stream_interval: one event per read, four tokens each.
        let mut c = Counter::default();
        for i in 0..10u64 {
            c.on_read(1, t0 + Duration::from_millis(i), None);
        }
        assert_eq!(c.delivery(Some(40)).unwrap().verdict, Verdict::Coalesced);
        assert_eq!(c.delivery(Some(10)).unwrap().verdict, Verdict::Streamed);
    }

    #[test]
    fn a_starved_engine_front_ends_bursts_are_coalesced_not_buffered() {
        // Seen from vLLM 0.32 on a 2-core host: 16 events in 8 reads, 7 of them in one read
        // after a 115 ms silence.
        let t0 = Instant::now();
        let mut c = Counter::default();
        for (i, n) in [1u64, 1, 1, 1, 2, 7, 2, 1].iter().enumerate() {
            c.on_read(*n, t0 + Duration::from_millis(10 * i as u64), None);
        }
        let d = c.delivery(Some(16)).unwrap();
        assert_eq!((d.coalesced_share, d.verdict), (0.5, Verdict::Coalesced));
        // 16 of 16 in two reads: held.
        let mut c = Counter::default();
        c.on_read(1, t0, None);
        c.on_read(15, t0, None);
        assert_eq!(c.delivery(None).unwrap().verdict, Verdict::Buffered);
    }

    #[test]
    fn a_short_stream_in_two_reads_is_not_called_buffered() {
        let t0 = Instant::now();
        let mut c = Counter::default();
        c.on_read(2, t0, None);
        c.on_read(2, t0, None);
        assert_eq!(c.delivery(Some(4)).unwrap().verdict, Verdict::Coalesced);
        assert!(Counter::default().delivery(Some(0)).is_none());
    }
}
