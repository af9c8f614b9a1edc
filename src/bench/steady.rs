//! A cell's plateau: the span during which the level was held (C requests in flight), found
//! from the cell's own records, and the figures of the requests that lived wholly inside it —
//! ramp-up and drain left out. Like vllm-bench's steady-state window (the first time the
//! in-flight count reaches the target to the last time it falls below), but a request counts
//! only when it both started and finished inside, so a request whose decode ran on into the
//! drain (a lighter batch) is not counted as steady.

use serde::Serialize;

use crate::meter::{Outcome, RequestRecord};
use crate::report::{dist, Dist};

/// `cells[].steady_state` in `run.json`.
#[derive(Debug, Clone, Serialize)]
pub struct SteadyState {
    /// The plateau, ms since the run began (the clock of the scrapes' `t_ms`).
    pub from_ms: f64,
    pub to_ms: f64,
    /// Requests that started and finished inside it (and ended well).
    pub requests: usize,
    /// The in-flight count that had to be held: the cell's concurrency.
    pub target: usize,
    pub ttft_ms: Dist,
    pub tpot_ms: Dist,
    pub e2e_ms: Dist,
    /// The engine's figures over the plateau alone (when scraped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<crate::report::engine::Telemetry>,
}

/// A record's start and end, ms since `origin`.
fn span(r: &RequestRecord, origin: std::time::SystemTime) -> Option<(f64, f64)> {
    let t = humantime::parse_rfc3339(&r.ts).ok()?;
    let start = match t.duration_since(origin) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(e) => -(e.duration().as_secs_f64() * 1000.0),
    };
    Some((start, start + r.e2e_ms))
}

/// The plateau of a closed-loop cell held at `target` in flight, or none when the records
/// never reach it.
pub fn find(
    records: &[RequestRecord],
    target: usize,
    origin: std::time::SystemTime,
) -> Option<SteadyState> {
    let spans: Vec<(f64, f64)> = records.iter().filter_map(|r| span(r, origin)).collect();
    let (from, to) = crate::report::steady::window(spans.iter().copied(), target)?;
    let inside: Vec<&RequestRecord> = records
        .iter()
        .zip(spans.iter())
        .filter(|(r, &(s, e))| s >= from && e <= to && r.outcome == Outcome::Ok)
        .map(|(r, _)| r)
        .collect();
    if inside.is_empty() {
        return None;
    }
    Some(SteadyState {
        from_ms: from,
        to_ms: to,
        requests: inside.len(),
        target,
        ttft_ms: dist(inside.iter().filter_map(|r| r.ttft_ms)),
        tpot_ms: dist(inside.iter().filter_map(|r| r.tpot_ms)),
        e2e_ms: dist(inside.iter().map(|r| r.e2e_ms)),
        telemetry: None,
    })
}

/// Each closed-loop cell's plateau (not a conversation's: between turns a conversation holds
/// no request), with the engine's figures over it when scraped.
pub(super) fn attach(
    hw: &crate::report::engine::Hardware,
    out: &mut super::cell::Out,
    origin: std::time::SystemTime,
    scraped: Option<&super::scrape::Collected>,
) {
    for cell in &mut out.cells {
        let Some(c) = cell.concurrency.filter(|_| cell.bucket != "conversations") else {
            continue;
        };
        let Some(mut s) = find(&out.records[cell.records.clone()], c, origin) else {
            continue;
        };
        if let Some(col) = scraped {
            let facts = super::scrape::summary::CellFacts {
                requests: s.requests,
                output_tokens: 0,
                wall_s: (s.to_ms - s.from_ms) / 1000.0,
                peak_bandwidth: hw.peak_bandwidth_bytes_s,
                peak_flops: hw.peak_flops,
            };
            s.telemetry =
                Some(super::scrape::summary::cell(col, s.from_ms, s.to_ms, &facts).telemetry);
        }
        cell.steady_state = Some(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn rec(origin: SystemTime, start_ms: u64, e2e: u32) -> RequestRecord {
        let e2e = f64::from(e2e);
        let mut r: RequestRecord = serde_json::from_str(r#"{"outcome":"ok","e2e_ms":0}"#).unwrap();
        r.ts =
            humantime::format_rfc3339_millis(origin + Duration::from_millis(start_ms)).to_string();
        r.e2e_ms = e2e;
        r.ttft_ms = Some(e2e / 10.0);
        r
    }

    #[test]
    fn the_plateau_leaves_out_ramp_and_drain() {
        let o = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        // C=2: one starts at 0, the second at 100 (the ramp); each slot refilled as it frees;
        // the last ends alone (the drain).
        let rs = vec![
            rec(o, 0, 300),   // 0..300, up to the plateau
            rec(o, 100, 300), // 100..400: the level reached at 100
            rec(o, 300, 300), // 300..600 inside
            rec(o, 400, 150), // 400..550 inside
            rec(o, 550, 400), // 550..950: runs on after 600, when the level drops
        ];
        let s = find(&rs, 2, o).unwrap();
        assert_eq!((s.from_ms, s.to_ms), (100.0, 600.0));
        assert_eq!(s.requests, 3, "100..400, 300..600, 400..550");
        assert_eq!(s.e2e_ms.max, Some(300.0));
        assert!(find(&rs, 3, o).is_none(), "never three in flight");
    }
}
