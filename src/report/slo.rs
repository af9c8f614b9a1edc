//! SLO thresholds read from a TOML file, and the cells that miss them.

use std::path::Path;

pub use super::model::Slos;
use super::{Report, ReportError};

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
}

/// What `--fail-on-slo` found for one SLO: the cells judged, those that miss, and those with
/// nothing to judge (nothing streamed: no TTFT, no TPOT, and no failed stream).
#[derive(Debug, Clone, PartialEq)]
pub struct SloGate {
    pub name: String,
    pub judged: usize,
    /// Cells that miss, named `balanced [gateway] C=8`.
    pub missed: Vec<String>,
    pub not_judged: Vec<String>,
}

/// How the gate ends: the first that holds of a miss (1), an SLO no cell could judge (3), met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateVerdict {
    Met,
    Missed,
    NotJudged,
}

impl SloGate {
    /// The gate over every named SLO: a miss anywhere fails it; an SLO no cell could judge
    /// fails it closed (not judged). Cells not judged beside judged ones do not fail it.
    pub fn verdict(gates: &[SloGate]) -> GateVerdict {
        if gates.iter().any(|g| !g.missed.is_empty()) {
            GateVerdict::Missed
        } else if gates.iter().any(|g| g.judged == 0) {
            GateVerdict::NotJudged
        } else {
            GateVerdict::Met
        }
    }
}

/// Each named SLO over the report's cells.
pub fn gate(report: &Report, names: &[String]) -> Vec<SloGate> {
    names
        .iter()
        .map(|n| {
            let mut g = SloGate {
                name: n.clone(),
                judged: 0,
                missed: Vec::new(),
                not_judged: Vec::new(),
            };
            for c in &report.cells {
                let arm = c
                    .arm
                    .as_deref()
                    .map(|a| format!(" [{a}]"))
                    .unwrap_or_default();
                let cell = format!("{}{arm} {}", c.bucket, super::words::at(c));
                match c.slo.get(n.as_str()) {
                    Some(true) => g.judged += 1,
                    Some(false) => {
                        g.judged += 1;
                        g.missed.push(cell);
                    }
                    None => g.not_judged.push(cell),
                }
            }
            g
        })
        .collect()
}
