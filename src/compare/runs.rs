//! With several runs a side (`tokentap bench --runs N`), the interval of a difference comes from
//! the runs: each run's value of a metric in the cell (its TTFT/TPOT/E2E p50 and p95, its
//! per-stream tok/s p50), then NEW − BASE of the runs' means with Welch's 95 % t-interval. The
//! run-to-run spread holds what a single run's bootstrap cannot see: drift between runs.

use std::collections::BTreeMap;

use super::boot::{judged, Diff};
use super::evidence::{needed, NotJudged, Why};
use super::side::Req;
use super::CellDiff;
use crate::stats::{pct, sorted, spread, welch};

/// A request's value of a metric.
type Field = fn(&Req) -> Option<f64>;

/// A metric the runs give an interval for: its name (one of `crate::spread::METRICS`), field
/// and percentile.
fn field(metric: &str) -> Option<(Field, f64)> {
    let f: Field = match metric.split('_').next()? {
        "ttft" => |r| r.ttft,
        "tpot" => |r| r.tpot,
        "e2e" => |r| r.e2e,
        "tok" => |r| r.tok_s,
        _ => return None,
    };
    let q = match metric.rsplit('_').next()? {
        "p50" => 0.5,
        "p95" => 0.95,
        _ => return None,
    };
    crate::spread::METRICS.contains(&metric).then_some((f, q))
}

/// A side's requests by run; `None` unless they carry two runs or more.
fn by_run(reqs: &[Req]) -> Option<BTreeMap<u32, Vec<&Req>>> {
    let mut m: BTreeMap<u32, Vec<&Req>> = BTreeMap::new();
    for r in reqs {
        m.entry(r.run?).or_default().push(r);
    }
    (m.len() >= 2).then_some(m)
}

/// Each run's value of a metric, and the fewest values a run had.
fn values(runs: &BTreeMap<u32, Vec<&Req>>, f: Field, q: f64) -> (Vec<f64>, usize) {
    let mut fewest = usize::MAX;
    let v = runs
        .values()
        .filter_map(|rs| {
            let s = sorted(rs.iter().filter_map(|r| f(r)));
            fewest = fewest.min(s.len());
            pct(&s, q)
        })
        .collect();
    (v, fewest)
}

/// When both sides of a cell have several runs, replace the metrics the runs cover with the
/// runs' means and Welch's interval of their difference (the relative interval is the absolute
/// one over BASE's mean). Returns the runs a side, or `None` (the bootstrap stays). A run's
/// value is evidence only from the values its percentile needs (`evidence::needed`), and a
/// zero-width interval only from the runs the rule of three asks (`evidence::needed_flat`).
pub fn apply(base: &[Req], new: &[Req], metrics: &mut [Diff]) -> Option<[usize; 2]> {
    let (b, n) = (by_run(base)?, by_run(new)?);
    for d in metrics.iter_mut() {
        let Some((f, q)) = field(d.metric) else {
            continue;
        };
        let ((vb, fb), (vn, fn_)) = (values(&b, f, q), values(&n, f, q));
        let (Some(sb), Some(sn)) = (spread(&vb), spread(&vn)) else {
            continue;
        };
        let ci = welch(&vn, &vb);
        let abs = sn.mean - sb.mean;
        let base_mean = (sb.mean != 0.0).then_some(sb.mean);
        *d = Diff {
            base: Some(sb.mean),
            new: Some(sn.mean),
            abs: Some(abs),
            abs_ci: ci,
            rel: base_mean.map(|m| abs / m),
            rel_ci: ci.zip(base_mean).map(|(c, m)| [c[0] / m, c[1] / m]),
            interval: "runs",
            n: [vb.len(), vn.len()],
            ..d.clone()
        };
        let need = needed(q);
        d.not_judged = if fb.min(fn_) < need {
            Some(NotJudged::new(Why::TooFew, Some(need)))
        } else {
            judged(d)
        };
    }
    Some([b.len(), n.len()])
}

/// The comparison's word on its intervals: `runs` when any cell's came from the runs.
pub fn note(cells: &[CellDiff]) -> (&'static str, String) {
    let with: Vec<[usize; 2]> = cells.iter().filter_map(|c| c.runs).collect();
    if with.is_empty() {
        return (
            "bootstrap",
            "bootstrap 95 % over requests (one run a side, or no run numbers in the records)"
                .to_owned(),
        );
    }
    let runs = |i: usize| {
        let (lo, hi) = with
            .iter()
            .map(|r| r[i])
            .fold((usize::MAX, 0), |(a, b), r| (a.min(r), b.max(r)));
        if lo == hi {
            lo.to_string()
        } else {
            format!("{lo}–{hi}")
        }
    };
    (
        "runs",
        format!(
            "run-to-run spread: Welch 95 % t-interval over the runs' values (BASE {} runs, NEW {} runs) in {} of {} cells, for {}; the differences there are of the runs' means. Bootstrap 95 % for the other metrics and the pooled rows",
            runs(0),
            runs(1),
            with.len(),
            cells.iter().filter(|c| !c.pooled).count(),
            crate::spread::METRICS.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(run: u32, tpot: f64) -> Req {
        Req {
            tpot: Some(tpot),
            tok_s: Some(1000.0 / tpot),
            run: Some(run),
            ..Req::default()
        }
    }

    #[test]
    fn several_runs_a_side_give_welch_over_the_runs_values() {
        // BASE runs: TPOT p50 10, 11, 12; NEW: 9, 9.5, 10 (each run 3 requests, p50 the middle).
        let side = |p50s: [f64; 3]| -> Vec<Req> {
            (0..3)
                .flat_map(|r| {
                    let m = p50s[r as usize];
                    [m - 1.0, m, m + 1.0].map(|t| req(r + 1, t))
                })
                .collect()
        };
        let (b, n) = (side([10.0, 11.0, 12.0]), side([9.0, 9.5, 10.0]));
        let mut m = vec![Diff {
            metric: "tpot_p50",
            unit: "ms",
            base: None,
            new: None,
            abs: None,
            abs_ci: None,
            rel: None,
            rel_ci: None,
            interval: "bootstrap",
            ..Diff::default()
        }];
        assert_eq!(apply(&b, &n, &mut m), Some([3, 3]));
        let d = &m[0];
        assert_eq!((d.interval, d.base, d.new), ("runs", Some(11.0), Some(9.5)));
        let w = welch(&[9.0, 9.5, 10.0], &[10.0, 11.0, 12.0]).unwrap();
        assert_eq!(d.abs_ci, Some(w));
        assert!((d.rel.unwrap() + 1.5 / 11.0).abs() < 1e-12);
        assert!((d.rel_ci.unwrap()[0] - w[0] / 11.0).abs() < 1e-12);
        // Three requests a run: each run's median is no evidence (a p50 needs 9 values).
        assert_eq!(d.n, [3, 3], "runs a side");
        assert_eq!(
            d.not_judged,
            Some(NotJudged::new(Why::TooFew, Some(9))),
            "{d:?}"
        );
        // One run on a side: nothing replaced.
        let one: Vec<Req> = b.iter().filter(|r| r.run == Some(1)).cloned().collect();
        let mut m2 = m.clone();
        m2[0].interval = "bootstrap";
        assert_eq!(apply(&one, &n, &mut m2), None);
        assert_eq!(m2[0].interval, "bootstrap");
        assert!(field("error_rate").is_none() && field("ttft_p99").is_none());
    }
}
