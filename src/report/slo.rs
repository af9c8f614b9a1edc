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
