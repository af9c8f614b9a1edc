//! The gateway-hop section: paired differences gateway − direct (same pair id, both ok) of TTFT,
//! response-header time, TPOT and E2E, with a bootstrap 95 % interval for the median; for split
//! traffic (no pairs), the difference of the two arms' percentiles with bootstrap intervals; and
//! a test for an order effect (a prompt's second copy hitting a warm prefix cache).

use std::collections::BTreeMap;

use super::model::GatewayTap as Tap;
pub use super::model::{DiffStats, GatewayHop, HopSet, OrderEffect, SplitStats};
use super::row::{level_of, Row};
use crate::stats::{bootstrap, bootstrap_diff, pct, sorted};

/// What the section keeps of a served record of either arm (about 100 bytes): the paired
/// differences and their bootstrap intervals need every pair.
#[derive(Debug, Clone)]
pub struct HopRec {
    pub pair_id: Option<Box<str>>,
    pub gateway: bool,
    pub bucket: std::sync::Arc<str>,
    pub concurrency: Option<u64>,
    pub in_flight: u64,
    pub ts: Option<std::time::SystemTime>,
    pub ttft_ms: Option<f64>,
    pub upstream_headers_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: f64,
}

impl HopRec {
    /// The record's part, when it is a served record of one of the two arms.
    pub fn of(
        r: &Row<'_>,
        gateway: &str,
        direct: &str,
        bucket: std::sync::Arc<str>,
        ts: Option<std::time::SystemTime>,
    ) -> Option<HopRec> {
        let arm = r.arm()?;
        if !r.ok() || (arm != gateway && arm != direct) {
            return None;
        }
        Some(HopRec {
            pair_id: r
                .experiment
                .as_ref()
                .and_then(|e| e.pair_id.as_ref())
                .map(|p| p.as_str().into()),
            gateway: arm == gateway,
            bucket,
            concurrency: r.concurrency,
            in_flight: r.in_flight,
            ts,
            ttft_ms: r.ttft_ms,
            upstream_headers_ms: r.upstream_headers_ms,
            tpot_ms: r.tpot_ms,
            e2e_ms: r.e2e_ms,
        })
    }
}

/// Seeds of the section's bootstrap intervals (fixed: the same records give the same report).
const SEED_MEDIAN: u64 = 0x7153_11a5;
const SEED_PERCENTILE: u64 = 0x5b17;

pub(super) fn diff_stats(v: Vec<f64>) -> DiffStats {
    let v = sorted(v);
    DiffStats {
        n: v.len(),
        median: pct(&v, 0.5),
        p95: pct(&v, 0.95),
        p99: pct(&v, 0.99),
        ci95: bootstrap(&v, SEED_MEDIAN, |s| pct(s, 0.5)),
    }
}

type Pair<'a> = (&'a HopRec, &'a HopRec);

fn hop_set(pairs: &[Pair<'_>]) -> HopSet {
    let d = |f: &dyn Fn(&HopRec) -> Option<f64>| -> Vec<f64> {
        pairs
            .iter()
            .filter_map(|(g, d)| Some(f(g)? - f(d)?))
            .collect()
    };
    HopSet {
        pairs: pairs.len(),
        ttft_ms: diff_stats(d(&|r| r.ttft_ms)),
        upstream_headers_ms: diff_stats(d(&|r| r.upstream_headers_ms)),
        tpot_ms: diff_stats(d(&|r| r.tpot_ms)),
        e2e_ms: diff_stats(d(&|r| Some(r.e2e_ms))),
    }
}

fn percentile_diff(g: &[f64], d: &[f64], p: f64) -> (Option<f64>, Option<[f64; 2]>) {
    let point = pct(g, p).zip(pct(d, p)).map(|(a, b)| a - b);
    (point, bootstrap_diff(g, d, p, SEED_PERCENTILE))
}

/// Whether a level's paired difference `d` is still the hop: against the tap's figure at that
/// level when there is one, else against the lowest level's interval. It is not when it moved
/// by more than max(3 ms, 10 %) outside that reference.
fn departs(d: &DiffStats, reference: &DiffStats) -> bool {
    let (Some(m), Some(r)) = (d.median, reference.median) else {
        return false;
    };
    let slack = 3.0_f64.max(0.1 * r.abs());
    let outside = match reference.ci95 {
        Some([lo, hi]) => m < lo - slack || m > hi + slack,
        None => (m - r).abs() > slack,
    };
    outside && (m - r).abs() > slack
}

/// The section, when records carry two arms named `gateway` and `direct`; `tap` is the gateway
/// tap's section of the same report, when there is one.
pub fn compute(
    recs: &[HopRec],
    gateway: &str,
    direct: &str,
    tap: Option<&Tap>,
) -> Option<GatewayHop> {
    let g_recs: Vec<&HopRec> = recs.iter().filter(|r| r.gateway).collect();
    let d_recs: Vec<&HopRec> = recs.iter().filter(|r| !r.gateway).collect();
    if g_recs.is_empty() || d_recs.is_empty() {
        return None;
    }
    let mut by_pair: BTreeMap<&str, (Option<&HopRec>, Option<&HopRec>)> = BTreeMap::new();
    for r in &g_recs {
        if let Some(p) = r.pair_id.as_deref() {
            by_pair.entry(p).or_default().0 = Some(r);
        }
    }
    for r in &d_recs {
        if let Some(p) = r.pair_id.as_deref() {
            by_pair.entry(p).or_default().1 = Some(r);
        }
    }
    let pairs: Vec<Pair<'_>> = by_pair
        .values()
        .filter_map(|(g, d)| Some(((*g)?, (*d)?)))
        .collect();
    let overall = hop_set(&pairs);
    let mut buckets: BTreeMap<String, Vec<Pair<'_>>> = BTreeMap::new();
    for p in &pairs {
        buckets.entry(p.0.bucket.to_string()).or_default().push(*p);
    }
    let by_bucket = buckets
        .into_iter()
        .map(|(b, ps)| (b, hop_set(&ps)))
        .collect();
    let mut levels: BTreeMap<(u64, String), Vec<Pair<'_>>> = BTreeMap::new();
    for p in &pairs {
        levels
            .entry(level_of(p.0.concurrency, p.0.in_flight))
            .or_default()
            .push(*p);
    }
    let per_level: Vec<(String, HopSet)> = levels
        .into_iter()
        .map(|((_, l), ps)| (l, hop_set(&ps)))
        .collect();
    let pooled_over: Vec<String> = per_level.iter().map(|(l, _)| l.clone()).collect();
    let contention_from = per_level.iter().skip(1).find_map(|(l, set)| {
        let reference = tap
            .and_then(|t| t.by_concurrency.get(l))
            .map(|t| &t.ttft_ms)
            .or_else(|| per_level.first().map(|(_, s)| &s.ttft_ms))?;
        departs(&set.ttft_ms, reference).then(|| l.clone())
    });

    let order_effect = order_effect(&pairs);
    let split = pairs.is_empty().then(|| split_stats(&g_recs, &d_recs));
    Some(GatewayHop {
        gateway_arm: gateway.into(),
        direct_arm: direct.into(),
        overall,
        by_bucket,
        by_concurrency: per_level.into_iter().collect(),
        pooled_over,
        contention_from,
        order_effect,
        split,
        // The sentence is the answers' (`answers::hop_summary`).
        summary: String::new(),
    })
}

/// Order effect: did the gateway copy or the direct copy start first? Present when the
/// difference between the two orders is clear.
fn order_effect(pairs: &[Pair<'_>]) -> Option<OrderEffect> {
    let (mut gf, mut df) = (Vec::new(), Vec::new());
    for (g, d) in pairs {
        if let (Some(tg), Some(td), Some(a), Some(b)) = (g.ts, d.ts, g.ttft_ms, d.ttft_ms) {
            if tg <= td {
                gf.push(a - b);
            } else {
                df.push(a - b);
            }
        }
    }
    (gf.len() >= 5 && df.len() >= 5).then(|| {
        let (gs, ds) = (sorted(gf), sorted(df));
        let (difference, ci95) = percentile_diff(&gs, &ds, 0.5);
        OrderEffect {
            gateway_first_median: pct(&gs, 0.5),
            direct_first_median: pct(&ds, 0.5),
            difference,
            ci95,
            // Present when the interval excludes 0 and the shift is more than a millisecond.
            present: ci95.is_some_and(|[lo, hi]| lo > 0.0 || hi < 0.0)
                && difference.is_some_and(|d| d.abs() > 1.0),
        }
    })
}

/// Split traffic (no pairs): the difference of the two arms' percentiles.
fn split_stats(g_recs: &[&HopRec], d_recs: &[&HopRec]) -> SplitStats {
    let g_ttft = sorted(g_recs.iter().filter_map(|r| r.ttft_ms));
    let d_ttft = sorted(d_recs.iter().filter_map(|r| r.ttft_ms));
    let g_tpot = sorted(g_recs.iter().filter_map(|r| r.tpot_ms));
    let d_tpot = sorted(d_recs.iter().filter_map(|r| r.tpot_ms));
    let ps = [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)];
    SplitStats {
        gateway_n: g_recs.len(),
        direct_n: d_recs.len(),
        ttft_ms: ps
            .iter()
            .map(|(n, p)| (*n, percentile_diff(&g_ttft, &d_ttft, *p)))
            .collect(),
        tpot_ms: ps
            .iter()
            .map(|(n, p)| (*n, percentile_diff(&g_tpot, &d_tpot, *p)))
            .collect(),
    }
}
