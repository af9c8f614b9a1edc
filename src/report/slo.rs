//! SLO thresholds (the write-up's, overridable by a TOML file) and the cells that miss them.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Report, ReportError};

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

impl Slos {
    pub fn load(path: &Path) -> Result<Slos, ReportError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ReportError::Io {
            path: file.clone(),
            source,
        })?;
        let de = toml::Deserializer::new(&text);
        serde_path_to_error::deserialize(de).map_err(|e| ReportError::Slo {
            file,
            key: e.path().to_string(),
            message: e.into_inner().message().to_owned(),
        })
    }

    /// (name, kind, threshold): kind "ttft" = p95 TTFT ≤ ms; "tok_s" = p95-slowest tok/s ≥.
    pub fn list(&self) -> Vec<(&'static str, &'static str, f64)> {
        vec![
            ("interactive", "ttft", self.ttft_interactive_ms),
            ("strict", "ttft", self.ttft_strict_ms),
            ("code_completion", "ttft", self.ttft_code_completion_ms),
            ("agents", "ttft", self.ttft_agents_ms),
            ("reading_speed", "tok_s", self.reading_tok_s),
            ("interactive_coding", "tok_s", self.coding_tok_s),
        ]
    }
}

/// The SLOs (by name) that some cell misses.
pub fn missed(report: &Report, names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for c in &report.cells {
        for n in names {
            if c.slo.get(n.as_str()) == Some(&false) {
                let arm = c
                    .arm
                    .as_deref()
                    .map(|a| format!(" [{a}]"))
                    .unwrap_or_default();
                out.push(format!("{n}: {}{arm} C={}", c.bucket, c.concurrency));
            }
        }
    }
    out
}
