//! A closed-loop cell's plateau: the span during which its level was held (C requests in
//! flight), and the figures of the requests that lived wholly inside it — ramp-up and drain
//! left out. Like vllm-bench's steady-state window (from the first time the in-flight count
//! reaches the target to the last time it falls below), but a request counts only when it both
//! started and finished inside, so one whose decode ran on into the drain (a lighter batch) is
//! not counted as steady. When the plateau holds at least [`STEADY_MIN_REQUESTS`], the cell's
//! latency figures are the plateau's (`cells[].figures`); the whole cell's stay beside them.

use super::model::{dist, Dist, SloP95};
pub use super::model::{Figures, WholeCell, STEADY_MIN_REQUESTS};

/// One request of a closed-loop cell, as the plateau needs it (ms on the wall clock).
#[derive(Debug, Clone, Copy)]
pub(super) struct Span {
    pub start_ms: f64,
    pub end_ms: f64,
    /// Ended well: only these give latency figures.
    pub ok: bool,
    /// A stream the service failed or throttled: a miss for every latency SLO.
    pub failed_stream: bool,
    pub good: bool,
    pub ttft: Option<f64>,
    pub tpot: Option<f64>,
    pub tps: Option<f64>,
    pub e2e: f64,
}

/// A plateau found in a cell's spans, with the figures of the requests wholly inside it.
#[derive(Debug, Clone)]
pub(super) struct Plateau {
    pub from_ms: f64,
    pub to_ms: f64,
    pub requests: usize,
    /// Streams the service failed or throttled that started on the plateau.
    pub failed: usize,
    /// The SLO p95s of TTFT and TPOT, the failures ranked in.
    pub slo: [SloP95; 2],
    pub ttft: Dist,
    pub tpot: Dist,
    pub e2e: Dist,
    pub tps: Dist,
    pub good: usize,
}

/// From the first moment `target` intervals overlap to the last moment the count falls below
/// it; none when it is never reached or never left.
pub fn window(spans: impl Iterator<Item = (f64, f64)>, target: usize) -> Option<(f64, f64)> {
    if target == 0 {
        return None;
    }
    // Events in time order, an end before a start at the same instant.
    let mut events: Vec<(f64, i32)> = spans.flat_map(|(s, e)| [(s, 1), (e, -1)]).collect();
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut level, mut up, mut down) = (0usize, None, None);
    for (t, d) in events {
        let before = level;
        level = if d > 0 {
            level + 1
        } else {
            level.saturating_sub(1)
        };
        if before < target && level >= target && up.is_none() {
            up = Some(t);
        }
        if before >= target && level < target {
            down = Some(t);
        }
    }
    Some((up?, down?))
}

/// The plateau of a cell held at `target` in flight, or none when no request lived wholly on
/// it.
pub(super) fn plateau(spans: &[Span], target: usize) -> Option<Plateau> {
    let (from, to) = window(spans.iter().map(|s| (s.start_ms, s.end_ms)), target)?;
    let inside: Vec<&Span> = spans
        .iter()
        .filter(|s| s.ok && s.start_ms >= from && s.end_ms <= to)
        .collect();
    if inside.is_empty() {
        return None;
    }
    let failed = spans
        .iter()
        .filter(|s| s.failed_stream && s.start_ms >= from && s.start_ms <= to)
        .count();
    let slo = |v: Vec<f64>| {
        let v = crate::stats::sorted(v);
        SloP95::of(v.len(), failed, |r| v.get(r).copied())
    };
    Some(Plateau {
        from_ms: from,
        to_ms: to,
        requests: inside.len(),
        failed,
        slo: [
            slo(inside.iter().filter_map(|s| s.ttft).collect()),
            slo(inside.iter().filter_map(|s| s.tpot).collect()),
        ],
        ttft: dist(inside.iter().filter_map(|s| s.ttft)),
        tpot: dist(inside.iter().filter_map(|s| s.tpot)),
        e2e: dist(inside.iter().map(|s| s.e2e)),
        tps: dist(inside.iter().filter_map(|s| s.tps)),
        good: inside.iter().filter(|s| s.good).count(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start_ms: f64, e2e: f64) -> Span {
        Span {
            start_ms,
            end_ms: start_ms + e2e,
            ok: true,
            failed_stream: false,
            good: true,
            ttft: Some(e2e / 10.0),
            tpot: None,
            tps: None,
            e2e,
        }
    }

    #[test]
    fn the_plateau_leaves_out_ramp_and_drain() {
        // C=2: one starts at 0, the second at 100 (the ramp); each slot refilled as it frees;
        // the last ends alone (the drain).
        let s = [
            span(0.0, 300.0),   // 0..300, up to the plateau
            span(100.0, 300.0), // 100..400: the level reached at 100
            span(300.0, 300.0), // 300..600 inside
            span(400.0, 150.0), // 400..550 inside
            span(550.0, 400.0), // 550..950: runs on after 600, when the level drops
        ];
        let p = plateau(&s, 2).unwrap();
        assert_eq!((p.from_ms, p.to_ms), (100.0, 600.0));
        assert_eq!(p.requests, 3, "100..400, 300..600, 400..550");
        assert_eq!(p.e2e.max, Some(300.0));
        assert!(plateau(&s, 3).is_none(), "never three in flight");
    }

    #[test]
    fn one_at_a_time_the_plateau_is_the_whole_cell() {
        let s: Vec<Span> = (0..5).map(|i| span(f64::from(i) * 100.0, 100.0)).collect();
        let p = plateau(&s, 1).unwrap();
        assert_eq!((p.from_ms, p.to_ms, p.requests), (0.0, 500.0, 5));
    }
}
