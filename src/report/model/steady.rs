//! Where a cell's latency figures come from: its plateau or the whole cell.

use serde::Serialize;

use super::dist::Dist;

/// The fewest requests a plateau must hold for the cell's figures to be its own: below this a
/// p95 is one or two requests, and the whole cell is the better estimate.
pub const STEADY_MIN_REQUESTS: usize = 20;

/// Where a cell's latency figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Figures {
    /// The plateau's requests (ramp-up and drain left out).
    SteadyState,
    /// Every request of the cell.
    WholeCell,
}

/// The whole cell's latency figures, kept beside a cell whose figures are its plateau's.
#[derive(Debug, Clone, Serialize)]
pub struct WholeCell {
    pub requests: usize,
    pub ttft_ms: Dist,
    pub tpot_ms: Dist,
    pub e2e_ms: Dist,
    pub tok_s_per_stream: Dist,
    pub goodput: f64,
}
