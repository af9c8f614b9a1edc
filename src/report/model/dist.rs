//! A figure's distribution: count, p50, p95, p99 and maximum (nearest rank).

use serde::Serialize;

use crate::stats::pct;

/// A figure's nearest-rank percentiles over its values.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Dist {
    pub n: usize,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

pub fn dist(values: impl Iterator<Item = f64>) -> Dist {
    let v = crate::stats::sorted(values);
    Dist {
        n: v.len(),
        p50: pct(&v, 0.5),
        p95: pct(&v, 0.95),
        p99: pct(&v, 0.99),
        max: v.last().copied(),
    }
}
