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
