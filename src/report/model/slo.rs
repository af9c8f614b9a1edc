//! SLO thresholds (the write-up's, overridable by a TOML file) and what each one bounds.

use serde::{Deserialize, Serialize};

/// SLO thresholds (defaults from the write-up), overridable by a TOML file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Slos {
    /// TTFT p95 bounds in ms.
    pub ttft_interactive_ms: f64,
    pub ttft_strict_ms: f64,
    pub ttft_code_completion_ms: f64,
    pub ttft_agents_ms: f64,
    /// Per-stream output tok/s floors (at p95, i.e. the slowest 5 % of streams).
    pub reading_tok_s: f64,
    pub coding_tok_s: f64,
    /// The knee: first concurrency whose p95 TTFT exceeds this multiple of its C=1 value.
    pub knee_factor: f64,
    /// Goodput: a request counts when its TTFT ≤ this and its tok/s ≥ `goodput_tok_s`.
    pub goodput_ttft_ms: f64,
    pub goodput_tok_s: f64,
}

impl Default for Slos {
    fn default() -> Self {
        Slos {
            ttft_interactive_ms: 500.0,
            ttft_strict_ms: 200.0,
            ttft_code_completion_ms: 100.0,
            ttft_agents_ms: 1000.0,
            reading_tok_s: 6.0,
            coding_tok_s: 60.0,
            knee_factor: 2.0,
            goodput_ttft_ms: 500.0,
            goodput_tok_s: 6.0,
        }
    }
}

/// What an SLO bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SloKind {
    /// p95 TTFT at most the threshold, ms.
    #[serde(rename = "ttft")]
    Ttft,
    /// The slowest 5 % of streams (1000 ÷ TPOT p95) at least the threshold, tok/s.
    #[serde(rename = "tok_s")]
    TokS,
}

impl SloKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SloKind::Ttft => "ttft",
            SloKind::TokS => "tok_s",
        }
    }
}

impl Slos {
    /// (name, kind, threshold): [`SloKind::Ttft`] = p95 TTFT ≤ ms; [`SloKind::TokS`] =
    /// p95-slowest tok/s ≥.
    pub fn list(&self) -> Vec<(&'static str, SloKind, f64)> {
        use SloKind::{TokS, Ttft};
        vec![
            ("interactive", Ttft, self.ttft_interactive_ms),
            ("strict", Ttft, self.ttft_strict_ms),
            ("code_completion", Ttft, self.ttft_code_completion_ms),
            ("agents", Ttft, self.ttft_agents_ms),
            ("reading_speed", TokS, self.reading_tok_s),
            ("interactive_coding", TokS, self.coding_tok_s),
        ]
    }
}

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
