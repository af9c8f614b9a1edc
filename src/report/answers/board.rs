//! The gateway board in sentences: per gateway arm, what it adds to TTFT at its lowest level,
//! what it does to streams when their delivery says so (set against the baseline's), its
//! errors and its sustained streams — each with its figures.

use crate::report::model::{BoardLevel, BoardRow, DeliveryCounts};
use crate::report::words::level_at;

/// How a count of streams arrived, against the baseline's: `buffered 40 of 40 streams (direct:
/// 0 of 40)`; `None` when nothing was held or coalesced, or nothing says how streams arrived.
fn delivery(arm: &DeliveryCounts, base: &DeliveryCounts, baseline: &str) -> Option<String> {
    let (n, bn) = (arm.total(), base.total());
    if n == 0 {
        return None;
    }
    let share = |x: usize, of: usize| x as f64 / of.max(1) as f64;
    let mut parts = Vec::new();
    for (what, x, bx) in [
        ("buffered", arm.buffered, base.buffered),
        ("coalesced", arm.coalesced, base.coalesced),
    ] {
        if x == 0 {
            continue;
        }
        let also = bn > 0 && bx > 0 && share(bx, bn) >= share(x, n);
        parts.push(if also {
            format!("{what} {x} of {n} streams, as the baseline's did ({baseline}: {bx} of {bn}): the cause lies on the baseline's path too")
        } else {
            format!("{what} {x} of {n} streams ({baseline}: {bx} of {bn})")
        });
    }
    if parts.is_empty() {
        // The delivery verdict is per read: it says nothing of silences between events (the
        // sustained-streams reason does).
        return Some(format!("delivered all {n} streams event by event"));
    }
    Some(parts.join(", "))
}

/// `adds +1.20 ms to TTFT`, or `takes 0.40 ms off TTFT` for a negative difference.
fn adds(m: f64) -> String {
    if m < 0.0 {
        format!("takes {:.2} ms off TTFT", -m)
    } else {
        format!("adds {m:+.2} ms to TTFT")
    }
}

fn first_token(l: &BoardLevel) -> String {
    let a = &l.added_ttft_ms;
    let at = level_at(l.axis, &l.label);
    match (a.p50, a.p50_ci95) {
        (Some(m), Some([lo, hi])) => format!(
            "{} at p50 at {at} (95 % CI [{lo:+.2}, {hi:+.2}], {} pairs)",
            adds(m),
            l.pairs
        ),
        (Some(m), None) => format!(
            "{} at p50 at {at} (no interval: {} pairs)",
            adds(m),
            l.pairs
        ),
        _ => format!("has no served pair at {at}"),
    }
}

/// One gateway's row of the board, in a sentence.
pub fn board_summary(r: &BoardRow) -> String {
    let mut parts = Vec::new();
    if let Some(l) = r.levels.first() {
        parts.push(first_token(l));
    }
    let sum = |f: &dyn Fn(&BoardLevel) -> DeliveryCounts| {
        r.levels
            .iter()
            .map(f)
            .fold(DeliveryCounts::default(), |a, d| DeliveryCounts {
                streamed: a.streamed + d.streamed,
                coalesced: a.coalesced + d.coalesced,
                buffered: a.buffered + d.buffered,
            })
    };
    let (mine, base) = (sum(&|l| l.delivery), sum(&|l| l.baseline_delivery));
    parts.extend(delivery(&mine, &base, &r.baseline));
    let count = |f: &dyn Fn(&BoardLevel) -> usize| r.levels.iter().map(f).sum::<usize>();
    let (e, n) = (count(&|l| l.errors), count(&|l| l.requests));
    if e > 0 {
        let (be, bn) = (
            count(&|l| l.baseline_errors),
            count(&|l| l.baseline_requests),
        );
        parts.push(format!(
            "left {e} of {n} requests unserved ({}: {be} of {bn})",
            r.baseline
        ));
    }
    match (&r.sustained_label, r.levels.first(), &r.sustained_reason) {
        (Some(s), Some(l), None) => parts.push(format!(
            "sustained every stream up to {}",
            level_at(l.axis, s)
        )),
        (Some(s), Some(l), Some(why)) => parts.push(format!(
            "sustained every stream up to {}, not above ({why})",
            level_at(l.axis, s)
        )),
        (None, _, Some(why)) => parts.push(format!("sustained no level ({why})")),
        _ => {}
    }
    format!("{} {}.", r.arm, parts.join("; "))
}
