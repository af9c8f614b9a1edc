//! The relay of every token through a gateway: token k's arrival outside the gateway (the outer
//! route) minus its arrival inside (the inner route), on tokentap's one clock. It says whether
//! the gateway passed the stream on as it came or held it.

use tokio::time::Instant;

use crate::meter::TokenTimes;

/// A token relayed later than this was held by the gateway (docs/streaming.md).
pub const HELD_MS: f64 = 50.0;
/// A stream with this many held tokens was held (one late token alone is a blip: LiteLLM on a
/// loaded host relays one token of a stream 50–60 ms late now and then).
pub const HELD_MIN_TOKENS: u64 = 2;

/// An outer token may seem to come this much before its inner one (the two sides stamp on
/// different tasks); beyond it the sides are not aligned.
const SLACK_MS: f64 = 1.0;

/// Per-token relay through the gateway, for one joined request.
#[derive(Debug, Clone, PartialEq)]
pub struct Relay {
    /// Each aligned token's relay (ms), in token order.
    pub ms: Vec<f64>,
    pub p50_ms: f64,
    pub max_ms: f64,
    /// Tokens relayed later than `HELD_MS`.
    pub held_tokens: u64,
}

/// Why the two sides could not be aligned token by token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unaligned {
    /// The gateway re-chunked the stream: the two sides' event counts differ.
    CountsDiffer,
    /// An outer token came before its inner one: the alignment would be wrong.
    OutOfOrder,
}

/// Align by token order: the inner side's tokens so far against the outer side's, while the
/// counts match (the inner side may not have recorded its last read yet: then its prefix).
pub fn relay(inner: &TokenTimes, outer: &[Instant]) -> Result<Option<Relay>, Unaligned> {
    let n = inner.times.len().min(outer.len());
    if inner.times.len() != outer.len() && (inner.done || inner.times.len() > outer.len()) {
        return Err(Unaligned::CountsDiffer);
    }
    if n == 0 {
        return Ok(None);
    }
    let mut ms = Vec::with_capacity(n);
    for (i, o) in inner.times.iter().zip(outer) {
        let v = match o.checked_duration_since(*i) {
            Some(d) => crate::meter::duration_ms(d),
            None => -crate::meter::duration_ms(i.saturating_duration_since(*o)),
        };
        if v < -SLACK_MS {
            return Err(Unaligned::OutOfOrder);
        }
        ms.push(v.max(0.0));
    }
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(Some(Relay {
        p50_ms: sorted[crate::stats::rank(n, 0.5)],
        max_ms: sorted[n - 1],
        held_tokens: ms.iter().filter(|v| **v > HELD_MS).count() as u64,
        ms,
    }))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests drive their own clock and environment
mod tests {
    use super::*;
    use std::time::Duration;

    fn times(t0: Instant, ms: &[u64], done: bool) -> TokenTimes {
        TokenTimes {
            times: ms.iter().map(|m| t0 + Duration::from_millis(*m)).collect(),
            done,
        }
    }

    #[test]
    fn order_alignment_gives_each_tokens_hold() {
        let t0 = Instant::now();
        let inner = times(t0, &[10, 20, 30, 40], true);
        // A hop that held the first three tokens until the fourth.
        let outer: Vec<_> = [101, 101, 101, 102]
            .iter()
            .map(|m| t0 + Duration::from_millis(*m))
            .collect();
        let r = relay(&inner, &outer).unwrap().unwrap();
        assert_eq!(r.ms, vec![91.0, 81.0, 71.0, 62.0]);
        assert_eq!((r.max_ms, r.held_tokens), (91.0, 4));
        assert_eq!(r.p50_ms, 71.0);
    }

    #[test]
    fn counts_that_differ_at_the_end_or_tokens_out_of_order_are_not_aligned() {
        let t0 = Instant::now();
        let at = |ms: &[u64]| -> Vec<Instant> {
            ms.iter().map(|m| t0 + Duration::from_millis(*m)).collect()
        };
        assert_eq!(
            relay(&times(t0, &[1, 2, 3], true), &at(&[5, 6])),
            Err(Unaligned::CountsDiffer)
        );
        // Not done yet: its prefix.
        let r = relay(&times(t0, &[1, 2], false), &at(&[5, 6, 7])).unwrap();
        assert_eq!(r.unwrap().ms, vec![4.0, 4.0]);
        assert_eq!(
            relay(&times(t0, &[10, 20], true), &at(&[5, 25])),
            Err(Unaligned::OutOfOrder)
        );
        assert_eq!(relay(&times(t0, &[], true), &[]), Ok(None));
    }
}
