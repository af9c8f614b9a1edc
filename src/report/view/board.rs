//! The gateway board's table: a row per gateway arm and level (arms in the board's order, by
//! added TTFT p50 at the lowest level), each figure with its 95 % interval or "no interval".

use crate::report::model::{Added, BoardRow, DeliveryCounts, PaceFrom, Report};
use crate::report::words::level_at;

/// The section's title.
pub(super) fn title(r: &Report) -> String {
    match r.gateway_board.first() {
        Some(b) => format!(
            "Gateway board: each gateway against {}, paired by prompt (ms)",
            b.baseline
        ),
        None => "Gateway board".into(),
    }
}

fn ci(ci: Option<[f64; 2]>) -> String {
    match ci {
        Some([lo, hi]) => format!(" [{lo:+.2}, {hi:+.2}]"),
        None => " (no interval)".into(),
    }
}

/// A percentile and its interval: `+5.02 [+4.81, +5.30]`, `+5.02 (no interval)`, `-`.
fn fig(v: Option<f64>, c: Option<[f64; 2]>) -> String {
    v.map_or("-".into(), |v| format!("{v:+.2}{}", ci(c)))
}

fn p50(a: &Added) -> String {
    fig(a.p50, a.p50_ci95)
}

fn p99(a: &Added) -> String {
    fig(a.p99, a.p99_ci95)
}

fn sent(d: &DeliveryCounts) -> String {
    if d.total() == 0 {
        return "-".into();
    }
    format!("{}/{}/{}", d.streamed, d.coalesced, d.buffered)
}

fn resources(b: &BoardRow) -> (String, String) {
    if let Some(e) = &b.resource_error {
        return (format!("error: {e}"), "-".into());
    }
    (
        b.cpu_s.map_or("-".into(), |c| format!("{c:.2}")),
        b.peak_rss_bytes
            .map_or("-".into(), |m| format!("{:.1} MiB", m as f64 / 1048576.0)),
    )
}

/// The section's table, when records carry two arms or more with pair ids.
pub(super) fn table(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    if let Some(why) = &r.gateway_board_not_judged {
        return Some((vec!["gateway board"], vec![vec![why.clone()]]));
    }
    if r.gateway_board.is_empty() {
        return None;
    }
    let head = vec![
        "gateway",
        "level",
        "pairs",
        "added TTFT p50 [95 % CI]",
        "added TTFT p99",
        "added gap p50",
        "added gap p99",
        "tap TTFT p50",
        "streamed/coalesced/buffered",
        "baseline s/c/b",
        "errors (baseline)",
        "sustained streams",
        "CPU s",
        "peak RSS",
    ];
    let mut rows = Vec::new();
    for b in &r.gateway_board {
        let (cpu, rss) = resources(b);
        for (i, l) in b.levels.iter().enumerate() {
            let first = i == 0;
            let sustained = match &b.sustained_label {
                Some(s) => level_at(l.axis, s),
                None => "none".into(),
            };
            let only = |s: &str| if first { s.to_owned() } else { String::new() };
            rows.push(vec![
                only(&b.arm),
                level_at(l.axis, &l.label),
                l.pairs.to_string(),
                p50(&l.added_ttft_ms),
                p99(&l.added_ttft_ms),
                p50(&l.added_gap_ms),
                p99(&l.added_gap_ms),
                l.added_ttft_tap_ms.as_ref().map_or("-".into(), p50),
                sent(&l.delivery),
                sent(&l.baseline_delivery),
                format!("{} ({})", l.errors, l.baseline_errors),
                only(&sustained),
                only(&cpu),
                only(&rss),
            ]);
        }
    }
    Some((head, rows))
}

/// What follows the table: each gateway's sentence, the baseline's sustained streams and the
/// pace they were judged against.
pub(super) fn after(r: &Report) -> Option<Vec<String>> {
    let first = r.gateway_board.first()?;
    let mut s: Vec<String> = r.gateway_board.iter().map(|b| b.summary.clone()).collect();
    let axis = first.levels.first().map(|l| l.axis);
    let base = match (
        &first.baseline_sustained_label,
        axis,
        &first.baseline_sustained_reason,
    ) {
        (Some(l), Some(a), None) => format!("sustained every stream up to {}", level_at(a, l)),
        (Some(l), Some(a), Some(why)) => format!(
            "sustained every stream up to {}, not above ({why})",
            level_at(a, l)
        ),
        (_, _, Some(why)) => format!("sustained no level ({why})"),
        _ => "sustained streams not judged".into(),
    };
    s.push(format!("The baseline, {}, {base}.", first.baseline));
    s.push(match first.pace_ms {
        Some(p) => format!(
            "Sustained: every stream of a level served whole (finish reason, the baseline copy's token count), no gap between events over 2 × the pace ({:.2} ms: the pace {p:.2} ms, from {}), no stream held and let go in bursts (buffered), no failure below 1,000 streams (0.1 % from 1,000), and every lower level sustained too. The wait for the first token is not a stall: it is the added TTFT.",
            2.0 * p,
            match first.pace_from {
                PaceFrom::Flag => "--pace-gap-ms",
                _ => "the baseline's median inter-token gap at its lowest level",
            }
        ),
        None => "Sustained streams are not judged: no pace (--pace-gap-ms).".into(),
    });
    Some(s)
}
