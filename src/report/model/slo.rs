//! A cell's p95 as an SLO judges it. The thresholds and what each bounds live in the leaf
//! `crate::slo`, which the proxy's per-request counts share.

pub use crate::slo::{SloKind, Slos};

/// A cell's p95 as an SLO judges it (docs/report.md, "What each verdict needs"): over the
/// requests served with the figure and the streams the service failed or throttled, each
/// failure beyond every threshold. Requests the client cancelled are not in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SloP95 {
    /// Nothing to judge: no request with the figure, and no failure.
    NotJudged,
    /// The p95 falls on a failure: beyond every threshold.
    Beyond,
    /// The p95 falls on a served request's value.
    Value(f64),
}

impl SloP95 {
    /// The nearest-rank p95 of `served` values (`at(i)` gives the i-th smallest, 0-based) with
    /// `failed` failures ranked above them all.
    pub fn of(served: usize, failed: usize, at: impl FnOnce(usize) -> Option<f64>) -> SloP95 {
        let total = served + failed;
        if total == 0 {
            return SloP95::NotJudged;
        }
        let r = crate::stats::rank(total, 0.95);
        if r >= served {
            return SloP95::Beyond;
        }
        at(r).map_or(SloP95::NotJudged, SloP95::Value)
    }

    /// Whether the SLO is met: `Some(p95 ≤ ms)` for a TTFT bound.
    pub fn at_most(self, ms: f64) -> Option<bool> {
        match self {
            SloP95::NotJudged => None,
            SloP95::Beyond => Some(false),
            SloP95::Value(p) => Some(p <= ms),
        }
    }

    /// Whether a tok/s floor is met by the slowest 5 % of streams, this being the p95 of TPOT:
    /// `Some(1000 ÷ p95 ≥ tok_s)`.
    pub fn tok_s_at_least(self, tok_s: f64) -> Option<bool> {
        match self {
            SloP95::NotJudged => None,
            SloP95::Beyond => Some(false),
            SloP95::Value(p) => Some(p > 0.0 && 1000.0 / p >= tok_s),
        }
    }
}
