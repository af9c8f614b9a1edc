//! NEW − BASE of one cell, metric by metric, with seeded bootstrap 95 % intervals: requests
//! resampled as pairs (same prompt on both sides) when the runs are paired, each side on its
//! own otherwise. Every metric of a draw comes from the same resample.

use serde::Serialize;

use super::evidence::{needed, needed_flat, quantile, Change, NotJudged, Why, FLAT, RULE_OF_THREE};
use super::side::Req;
use crate::stats::{pct, sorted};

/// Resamples behind every interval.
pub const RESAMPLES: usize = 2000;

/// The metrics compared, in order: the names `--fail-on-regression` takes.
pub const METRICS: [&str; 16] = [
    "ttft_p50",
    "ttft_p95",
    "ttft_p99",
    "ttfo_p50",
    "ttfo_p95",
    "ttfo_p99",
    "tpot_p50",
    "tpot_p95",
    "tpot_p99",
    "e2e_p50",
    "e2e_p95",
    "e2e_p99",
    "tok_s_per_stream_p50",
    "aggregate_tok_s",
    "error_rate",
    "goodput",
];

/// How a metric's values read.
pub fn unit(metric: &str) -> &'static str {
    match metric {
        "error_rate" | "goodput" => "share",
        m if m.starts_with("tok_s") || m.starts_with("aggregate") => "tok/s",
        _ => "ms",
    }
}

/// Whether a rise is the bad direction (latencies, errors) or a fall is (throughput, goodput).
pub fn higher_is_worse(metric: &str) -> bool {
    !(metric.starts_with("tok_s") || metric.starts_with("aggregate") || metric == "goodput")
}

/// One metric of one cell: both sides' figures and NEW − BASE with its intervals.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Diff {
    pub metric: &'static str,
    pub unit: &'static str,
    pub base: Option<f64>,
    pub new: Option<f64>,
    /// NEW − BASE.
    pub abs: Option<f64>,
    pub abs_ci: Option<[f64; 2]>,
    /// NEW ÷ BASE − 1 (null when BASE is 0).
    pub rel: Option<f64>,
    pub rel_ci: Option<[f64; 2]>,
    /// Where the intervals come from: `bootstrap` (requests resampled) or `runs` (Welch's
    /// t-interval over the runs' values, with several runs a side).
    pub interval: &'static str,
    /// Values each side's interval rests on (BASE, NEW): requests with a value of the metric
    /// (the pairs, when paired), or runs for a run-level interval.
    pub n: [usize; 2],
    /// Why this difference is no evidence, when it is not (`evidence.rs`).
    pub not_judged: Option<NotJudged>,
    /// The difference read against the equivalence margin.
    pub verdict: Change,
    /// A rate whose side showed no event (or only events): its interval widened by the rule of
    /// three, 3 ÷ n, in the direction it could move.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rule_of_three: bool,
}

/// How the two sides' requests are drawn.
pub enum Sample<'a> {
    /// (base, new) pairs on the same prompt.
    Paired(Vec<(&'a Req, &'a Req)>),
    Unpaired(Vec<&'a Req>, Vec<&'a Req>),
}

impl Sample<'_> {
    /// Requests on each side.
    pub fn sizes(&self) -> (usize, usize) {
        match self {
            Sample::Paired(p) => (p.len(), p.len()),
            Sample::Unpaired(b, n) => (b.len(), n.len()),
        }
    }
}

/// Every metric of a set of requests. `agg` scales Σ output tokens ÷ Σ E2E to the side's
/// measured aggregate tok/s (its value at the full sample), or leaves it out. `buf` is scratch.
fn figures(reqs: &[&Req], agg: Option<(f64, f64)>, buf: &mut Vec<f64>) -> [Option<f64>; 16] {
    let mut out = [None; 16];
    let fields: [fn(&Req) -> Option<f64>; 5] =
        [|r| r.ttft, |r| r.ttfo, |r| r.tpot, |r| r.e2e, |r| r.tok_s];
    for (k, f) in fields.into_iter().enumerate() {
        buf.clear();
        buf.extend(reqs.iter().filter_map(|r| f(r)));
        buf.sort_unstable_by(f64::total_cmp);
        if k == 4 {
            out[12] = pct(buf, 0.5);
        } else {
            for (j, q) in [0.5, 0.95, 0.99].into_iter().enumerate() {
                out[3 * k + j] = pct(buf, q);
            }
        }
    }
    let n = reqs.len() as f64;
    if n > 0.0 {
        let (mut e2e, mut tok, mut errors, mut good) = (0.0, 0.0, 0usize, 0usize);
        for r in reqs {
            e2e += r.any_e2e;
            tok += r.out_tokens;
            errors += usize::from(r.error);
            good += usize::from(r.good);
        }
        out[13] = agg.and_then(|(point, full)| {
            (e2e > 0.0 && full > 0.0).then(|| point * (tok / e2e) / full)
        });
        out[14] = Some(errors as f64 / n);
        out[15] = Some(good as f64 / n);
    }
    out
}

/// Σ output tokens ÷ Σ E2E of a full sample, and the side's aggregate tok/s.
fn agg_of(reqs: &[&Req], aggregate: Option<f64>) -> Option<(f64, f64)> {
    let e2e: f64 = reqs.iter().map(|r| r.any_e2e).sum();
    let tok: f64 = reqs.iter().map(|r| r.out_tokens).sum();
    aggregate.filter(|_| e2e > 0.0).map(|a| (a, tok / e2e))
}

/// NEW − BASE of every metric, with bootstrap 95 % intervals (`None` with fewer than two
/// requests a side). `aggregate` is each side's measured aggregate tok/s.
pub fn compare(s: &Sample<'_>, aggregate: [Option<f64>; 2], seed: u64) -> Vec<Diff> {
    let (bs, ns): (Vec<&Req>, Vec<&Req>) = match s {
        Sample::Paired(p) => p.iter().copied().unzip(),
        Sample::Unpaired(b, n) => (b.clone(), n.clone()),
    };
    let (ab, an) = (agg_of(&bs, aggregate[0]), agg_of(&ns, aggregate[1]));
    let mut buf = Vec::with_capacity(bs.len().max(ns.len()));
    let (mut fb, mut fn_) = (figures(&bs, ab, &mut buf), figures(&ns, an, &mut buf));
    // The full sample's aggregate is the measured one, exactly.
    fb[13] = ab.map(|a| a.0);
    fn_[13] = an.map(|a| a.0);
    let mut abs_draws: Vec<Vec<f64>> = (0..16).map(|_| Vec::with_capacity(RESAMPLES)).collect();
    let mut rel_draws: Vec<Vec<f64>> = (0..16).map(|_| Vec::with_capacity(RESAMPLES)).collect();
    if bs.len() >= 2 && ns.len() >= 2 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let (mut rb, mut rn) = (Vec::with_capacity(bs.len()), Vec::with_capacity(ns.len()));
        for _ in 0..RESAMPLES {
            rb.clear();
            rn.clear();
            match s {
                Sample::Paired(p) => {
                    for _ in 0..p.len() {
                        let (b, n) = p[rng.usize(..p.len())];
                        rb.push(b);
                        rn.push(n);
                    }
                }
                Sample::Unpaired(b, n) => {
                    rb.extend((0..b.len()).map(|_| b[rng.usize(..b.len())]));
                    rn.extend((0..n.len()).map(|_| n[rng.usize(..n.len())]));
                }
            }
            let (xb, xn) = (figures(&rb, ab, &mut buf), figures(&rn, an, &mut buf));
            for m in 0..16 {
                if let (Some(b), Some(n)) = (xb[m], xn[m]) {
                    abs_draws[m].push(n - b);
                    if b != 0.0 {
                        rel_draws[m].push(n / b - 1.0);
                    }
                }
            }
        }
    }
    (0..16)
        .map(|m| {
            let (b, n) = (fb[m], fn_[m]);
            let counts = [values(m, &bs), values(m, &ns)];
            // Below the values a percentile needs, no interval is given: a percentile with no
            // value beyond it is a side's maximum, which no resample passes.
            let need = needed(quantile(METRICS[m]));
            let short = counts[0].min(counts[1]) < need;
            if short {
                abs_draws[m].clear();
                rel_draws[m].clear();
            }
            let mut d = Diff {
                metric: METRICS[m],
                unit: unit(METRICS[m]),
                base: b,
                new: n,
                abs: b.zip(n).map(|(b, n)| n - b),
                abs_ci: interval(std::mem::take(&mut abs_draws[m])),
                rel: b
                    .zip(n)
                    .filter(|(b, _)| *b != 0.0)
                    .map(|(b, n)| n / b - 1.0),
                rel_ci: interval(std::mem::take(&mut rel_draws[m])),
                interval: "bootstrap",
                n: counts,
                ..Diff::default()
            };
            if m >= 14 {
                let flag: fn(&Req) -> bool = if m == 14 { |r| r.error } else { |r| r.good };
                widen(&mut d, [all_alike(&bs, flag), all_alike(&ns, flag)]);
            }
            d.not_judged = if b.is_none() || n.is_none() || counts.contains(&0) {
                Some(NotJudged::new(Why::NoValues, None))
            } else if short {
                Some(NotJudged::new(Why::TooFew, Some(need)))
            } else {
                judged(&d)
            };
            d
        })
        .collect()
}

/// A side's requests with a value of metric `m` (index into [`METRICS`]); every request for the
/// aggregate and the rates.
fn values(m: usize, reqs: &[&Req]) -> usize {
    let f: fn(&Req) -> bool = match m {
        0..=2 => |r| r.ttft.is_some(),
        3..=5 => |r| r.ttfo.is_some(),
        6..=8 => |r| r.tpot.is_some(),
        9..=11 => |r| r.e2e.is_some(),
        12 => |r| r.tok_s.is_some(),
        _ => |_| true,
    };
    reqs.iter().filter(|r| f(r)).count()
}

/// Whether a side's requests all agree on a flag: `Some(flag)` when they do.
fn all_alike(reqs: &[&Req], flag: fn(&Req) -> bool) -> Option<bool> {
    let first = flag(reqs.first()?);
    reqs.iter().all(|r| flag(r) == first).then_some(first)
}

/// A rate's interval when a side showed no event (or only events): that side's rate may still be
/// up to 3 ÷ n from what it showed (the rule of three, 95 %), so the interval is widened by it
/// in the direction the side could move. `alike`: (BASE, NEW), each `Some(flag)` when every
/// request agreed.
pub fn widen(d: &mut Diff, alike: [Option<bool>; 2]) {
    let (Some(ci), Some(base)) = (d.abs_ci, d.base) else {
        return;
    };
    let bound = |k: usize| RULE_OF_THREE / d.n[k].max(1) as f64;
    let (mut lo, mut hi) = (0.0, 0.0);
    // BASE at 0 could be higher (NEW − BASE lower); at 1, lower. NEW the other way round.
    match alike[0] {
        Some(false) => lo += bound(0),
        Some(true) => hi += bound(0),
        None => {}
    }
    match alike[1] {
        Some(false) => hi += bound(1),
        Some(true) => lo += bound(1),
        None => {}
    }
    if lo == 0.0 && hi == 0.0 {
        return;
    }
    d.rule_of_three = true;
    d.abs_ci = Some([(ci[0] - lo).max(-1.0), (ci[1] + hi).min(1.0)]);
    if let (Some(r), true) = (d.rel_ci, base > 0.0) {
        d.rel_ci = Some([r[0] - lo / base, r[1] + hi / base]);
    }
}

/// The evidence of a difference with enough values: an interval, a relative one for what reads
/// relative, and a zero-width one only from enough values (`needed_flat`). A bootstrap interval
/// is zero-width below [`FLAT`] (no resample can pass its sample's values, so requests that
/// did not vary give one however the population varies); a t-interval over runs only when the
/// runs' values did not vary at all (it is not bounded by its sample, and a narrow one is
/// just precise).
pub fn judged(d: &Diff) -> Option<NotJudged> {
    let share = d.unit == "share";
    let Some(abs) = d.abs_ci else {
        return Some(NotJudged::new(Why::NoInterval, None));
    };
    let width = match (share, d.rel_ci) {
        (true, _) => abs[1] - abs[0],
        (false, Some(r)) => r[1] - r[0],
        (false, None) => return Some(NotJudged::new(Why::ZeroBase, None)),
    };
    let flat = match d.interval {
        "runs" => abs[1] - abs[0] <= 0.0,
        _ => width < FLAT,
    };
    let flat_need = needed_flat(quantile(d.metric));
    (flat && d.n[0].min(d.n[1]) < flat_need)
        .then(|| NotJudged::new(Why::NoVariation, Some(flat_need)))
}

/// The 2.5th and 97.5th percentiles of the draws; none from fewer than half the resamples.
fn interval(draws: Vec<f64>) -> Option<[f64; 2]> {
    if draws.len() < RESAMPLES / 2 {
        return None;
    }
    let s = sorted(draws);
    Some([pct(&s, 0.025)?, pct(&s, 0.975)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(tpot: f64) -> Req {
        Req {
            ttft: Some(100.0 + tpot),
            ttfo: Some(100.0 + tpot),
            tpot: Some(tpot),
            e2e: Some(100.0 + 64.0 * tpot),
            tok_s: Some(1000.0 / tpot),
            out_tokens: 64.0,
            any_e2e: 100.0 + 64.0 * tpot,
            good: true,
            ..Req::default()
        }
    }

    fn tpot_p50(d: &[Diff]) -> &Diff {
        &d[6]
    }

    #[test]
    fn seeded_and_covers_a_known_shift() {
        // Per-prompt TPOT spread widely; NEW is every prompt's TPOT × 0.9.
        let mut rng = fastrand::Rng::with_seed(1);
        let base: Vec<Req> = (0..60).map(|_| req(20.0 + 20.0 * rng.f64())).collect();
        let new: Vec<Req> = base
            .iter()
            .map(|r| req(r.tpot.unwrap_or(0.0) * 0.9))
            .collect();
        let paired = Sample::Paired(base.iter().zip(&new).collect());
        let a = compare(&paired, [Some(100.0), Some(110.0)], 9);
        assert_eq!(a, compare(&paired, [Some(100.0), Some(110.0)], 9));
        let d = tpot_p50(&a);
        let ci = d.rel_ci.unwrap();
        assert!((d.rel.unwrap() + 0.1).abs() < 1e-9, "{d:?}");
        assert!(ci[0] <= -0.1 && -0.1 <= ci[1], "{ci:?}");
        // An exact multiple on every prompt: the paired interval is the point.
        assert!(ci[1] - ci[0] < 1e-9, "{ci:?}");
        let un = Sample::Unpaired(base.iter().collect(), new.iter().collect());
        let u = compare(&un, [Some(100.0), Some(110.0)], 9);
        let uci = tpot_p50(&u).rel_ci.unwrap();
        assert!(uci[0] < -0.1 && -0.1 < uci[1], "{uci:?}");
        assert!(uci[1] - uci[0] > 0.05, "unpaired is wide here: {uci:?}");
        // Aggregate tok/s: the measured figures, and an interval around their difference.
        let agg = &a[13];
        assert_eq!((agg.base, agg.new), (Some(100.0), Some(110.0)));
        let aci = agg.abs_ci.unwrap();
        assert!(aci[0] <= 10.0 && 10.0 <= aci[1], "{aci:?}");
        // No errors on either side: zero, widened by the rule of three (3 ÷ 60 a side).
        assert_eq!(a[14].abs, Some(0.0));
        assert_eq!(a[14].abs_ci, Some([-0.05, 0.05]));
        assert!(a[14].rule_of_three && a[14].not_judged.is_none());
        // TPOT p50 an exact multiple on every prompt: a zero-width interval, from 60 pairs.
        assert_eq!(d.not_judged, None);
    }

    #[test]
    fn a_percentile_at_the_samples_end_has_no_interval() {
        let a: Vec<Req> = (0..19).map(|i| req(10.0 + f64::from(i))).collect();
        let b: Vec<Req> = (0..19).map(|i| req(11.0 + f64::from(i))).collect();
        let s = Sample::Paired(a.iter().zip(&b).collect());
        let d = compare(&s, [None, None], 5);
        // 19 requests: p95 is the maximum (rank 19); p50 is not.
        assert_eq!(d[7].metric, "tpot_p95");
        assert!(d[7].abs.is_some() && d[7].abs_ci.is_none(), "{:?}", d[7]);
        assert!(d[6].abs_ci.is_some());
        assert_eq!(d[7].not_judged, Some(NotJudged::new(Why::TooFew, Some(20))));
        assert_eq!(d[7].n, [19, 19]);
        let a: Vec<Req> = (0..20).map(|i| req(10.0 + f64::from(i))).collect();
        let s = Sample::Paired(a.iter().zip(&a).collect());
        let d = compare(&s, [None, None], 5);
        assert!(d[7].abs_ci.is_some(), "20: one value beyond");
        // The same requests on both sides: a zero-width interval, which a p50 may rest on from 6
        // values a side, a p95 from 60 (the rule of three).
        assert_eq!(d[7].abs_ci, Some([0.0, 0.0]));
        assert_eq!(
            d[7].not_judged,
            Some(NotJudged::new(Why::NoVariation, Some(60)))
        );
        assert_eq!(d[6].not_judged, None);
    }

    #[test]
    fn too_few_requests_give_no_interval() {
        let one = [req(10.0)];
        let s = Sample::Unpaired(one.iter().collect(), one.iter().collect());
        let d = compare(&s, [None, None], 1);
        assert_eq!(tpot_p50(&d).abs, Some(0.0));
        assert_eq!(tpot_p50(&d).abs_ci, None);
        assert_eq!(tpot_p50(&d).not_judged.map(|n| n.why), Some(Why::TooFew));
        assert_eq!(d[13].base, None);
        assert_eq!(d[13].not_judged.map(|n| n.why), Some(Why::NoValues));
        // Eight a side: a p50 needs nine.
        let eight: Vec<Req> = (0..8).map(|i| req(10.0 + f64::from(i))).collect();
        let s = Sample::Paired(eight.iter().zip(&eight).collect());
        let d = compare(&s, [None, None], 1);
        assert_eq!(
            tpot_p50(&d).not_judged,
            Some(NotJudged::new(Why::TooFew, Some(9)))
        );
        assert_eq!(tpot_p50(&d).abs_ci, None);
    }

    #[test]
    fn a_narrow_interval_over_runs_is_precise_a_bootstrap_one_flat() {
        let runs = Diff {
            metric: "tpot_p50",
            unit: "ms",
            base: Some(26.85),
            abs_ci: Some([-4.01, -3.99]),
            rel_ci: Some([-0.14935, -0.14925]),
            interval: "runs",
            n: [3, 3],
            ..Diff::default()
        };
        assert_eq!(judged(&runs), None);
        let boot = Diff {
            interval: "bootstrap",
            ..runs.clone()
        };
        assert_eq!(
            judged(&boot),
            Some(NotJudged::new(Why::NoVariation, Some(6)))
        );
        let still = Diff {
            abs_ci: Some([-4.0, -4.0]),
            ..runs
        };
        assert_eq!(judged(&still).map(|n| n.why), Some(Why::NoVariation));
    }

    #[test]
    fn error_rate_counts_every_request() {
        let ok: Vec<Req> = (0..40).map(|_| req(10.0)).collect();
        let mut bad = ok.clone();
        for r in bad.iter_mut().take(10) {
            *r = Req {
                error: true,
                any_e2e: 5.0,
                ..Req::default()
            };
        }
        let s = Sample::Paired(ok.iter().zip(&bad).collect());
        let d = compare(&s, [None, None], 3);
        assert_eq!(d[14].abs, Some(0.25));
        assert_eq!(d[15].abs, Some(-0.25));
        // BASE had no error in 40: its rate may be up to 3 ÷ 40, so the interval's low end
        // falls by 7.5 pp.
        let ci = d[14].abs_ci.unwrap();
        assert!(d[14].rule_of_three);
        assert!(
            ci[0] > -0.075 && ci[0] <= 0.25 - 0.075 && ci[1] >= 0.25,
            "{ci:?}"
        );
    }
}
