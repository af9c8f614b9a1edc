//! A cell cut into windows of `--timeslice` (from its first scrape or its first request): per
//! window, its requests' TTFT p95 and TPOT p50, the output tokens generated inside it a second,
//! and the engine's KV usage, running and waiting over it. What the HTML report's time charts
//! draw.

use crate::meter::RequestRecord;
use crate::report::engine::Slice;

use super::scrape::names::Role;
use super::scrape::Collected;

/// A record's start, first token and end, ms since `origin`.
fn times(r: &RequestRecord, origin: std::time::SystemTime) -> Option<(f64, f64, f64)> {
    let t = humantime::parse_rfc3339(&r.ts).ok()?;
    let start = match t.duration_since(origin) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(e) => -(e.duration().as_secs_f64() * 1000.0),
    };
    Some((start, start + r.ttft_ms.unwrap_or(0.0), start + r.e2e_ms))
}

/// The cell's windows of `every` ms.
pub fn cut(
    records: &[RequestRecord],
    every_ms: f64,
    origin: std::time::SystemTime,
    window: Option<(f64, f64)>,
    scraped: Option<&Collected>,
) -> Vec<Slice> {
    let spans: Vec<(&RequestRecord, (f64, f64, f64))> = records
        .iter()
        .filter_map(|r| Some((r, times(r, origin)?)))
        .collect();
    let first = spans.iter().map(|s| s.1 .0).fold(f64::INFINITY, f64::min);
    let last = spans
        .iter()
        .map(|s| s.1 .2)
        .fold(f64::NEG_INFINITY, f64::max);
    let (from, to) = window.unwrap_or((first, last));
    if !(every_ms > 0.0 && from.is_finite() && to > from) {
        return Vec::new();
    }
    let n = ((to - from) / every_ms).ceil().min(10_000.0) as usize;
    (0..n)
        .map(|i| {
            let a = from + i as f64 * every_ms;
            let b = (a + every_ms).min(to);
            let started: Vec<&RequestRecord> = spans
                .iter()
                .filter(|(_, (s, _, _))| *s >= a && *s < b)
                .map(|x| x.0)
                .collect();
            let ttft = crate::stats::sorted(started.iter().filter_map(|r| r.ttft_ms));
            let tpot = crate::stats::sorted(started.iter().filter_map(|r| r.tpot_ms));
            // Each request's tokens spread evenly over its generation, first token to end.
            let tokens: f64 = spans
                .iter()
                .filter_map(|(r, (_, f, e))| {
                    let out = r.output_tokens? as f64;
                    if *e <= *f {
                        return (*e >= a && *e < b).then_some(out);
                    }
                    let overlap = (e.min(b) - f.max(a)).max(0.0);
                    Some(out * overlap / (e - f))
                })
                .sum();
            let mean = |role: Role| -> Option<f64> {
                let v: Vec<f64> = scraped?
                    .rounds
                    .iter()
                    .filter(|r| r.t_ms >= a && r.t_ms < b)
                    .filter_map(|r| r.roles.get(&role).copied())
                    .collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            };
            Slice {
                from_ms: a,
                to_ms: b,
                requests: started.len(),
                ttft_ms_p95: crate::stats::pct(&ttft, 0.95),
                tpot_ms_p50: crate::stats::pct(&tpot, 0.5),
                output_tok_s: if b > a {
                    tokens / ((b - a) / 1000.0)
                } else {
                    0.0
                },
                kv_cache_usage: mean(Role::KvUsage),
                running: mean(Role::Running),
                waiting: mean(Role::Waiting),
            }
        })
        .collect()
}

/// Each cell's windows, with `--timeslice`.
pub(super) fn attach(
    timeslice: Option<std::time::Duration>,
    out: &mut super::cell::Out,
    origin: std::time::SystemTime,
    scraped: Option<&Collected>,
) {
    let Some(every) = timeslice else { return };
    let every_ms = every.as_secs_f64() * 1000.0;
    for cell in &mut out.cells {
        let records = &out.records[cell.records.clone()];
        cell.timeslices = cut(records, every_ms, origin, cell.window_ms, scraped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn windows_hold_their_requests_and_tokens() {
        let o = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let rec = |start: u64, ttft: f64, e2e: f64, out: u64| {
            let mut r: RequestRecord = serde_json::from_str(r#"{"outcome":"ok","e2e_ms":0}"#)
                .unwrap_or_else(|e| panic!("{e}"));
            r.ts = humantime::format_rfc3339_millis(o + Duration::from_millis(start)).to_string();
            r.ttft_ms = Some(ttft);
            r.e2e_ms = e2e;
            r.output_tokens = Some(out);
            r
        };
        // 0..1000 ms: first token at 100, 90 tokens to 1000; 1200..1700: 50 tokens 1300..1700.
        let rs = vec![rec(0, 100.0, 1000.0, 90), rec(1200, 100.0, 500.0, 50)];
        let s = cut(&rs, 500.0, o, None, None);
        assert_eq!(s.len(), 4);
        assert_eq!((s[0].from_ms, s[3].to_ms), (0.0, 1700.0));
        assert_eq!((s[0].requests, s[1].requests, s[2].requests), (1, 0, 1));
        assert_eq!(s[0].ttft_ms_p95, Some(100.0));
        // 40 of the first request's 90 tokens fall in 0..500 (100..500 of 100..1000).
        assert!(
            (s[0].output_tok_s - 80.0).abs() < 1e-9,
            "{}",
            s[0].output_tok_s
        );
        // 1000..1500: the second request's 1300..1500, half its 400 ms = 25 tokens.
        assert!(
            (s[2].output_tok_s - 50.0).abs() < 1e-9,
            "{}",
            s[2].output_tok_s
        );
        assert!(s[0].kv_cache_usage.is_none());
    }
}
