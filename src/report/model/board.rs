//! The gateway board's figures: per gateway arm and level, what the arm adds to a stream against
//! the baseline arm, paired by prompt (`pair_id`); per arm, the highest level its streams were
//! sustained at, and its own CPU and memory.

use serde::Serialize;

use super::Axis;

/// A percentile pair of per-pair differences (or of tapped values), each with its bootstrap
/// 95 % interval when the values allow one (`stats::interval_needs`: p50 9, p99 100).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Added {
    /// Values behind the figures.
    pub n: usize,
    pub p50: Option<f64>,
    pub p50_ci95: Option<[f64; 2]>,
    pub p99: Option<f64>,
    pub p99_ci95: Option<[f64; 2]>,
}

/// Streams by their `delivery` verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DeliveryCounts {
    pub streamed: usize,
    pub coalesced: usize,
    pub buffered: usize,
}

impl DeliveryCounts {
    pub fn total(&self) -> usize {
        self.streamed + self.coalesced + self.buffered
    }
}

/// A level as a number: a concurrency (or live in-flight bin's top), or an arrival rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum LevelValue {
    Count(u64),
    Rate(f64),
}

/// One gateway arm at one level, against the baseline.
#[derive(Debug, Clone, Serialize)]
pub struct BoardLevel {
    pub level: LevelValue,
    /// As the other tables write it: `4`, `2/s`, `3-4`.
    pub label: String,
    pub axis: Axis,
    /// Prompts served by both the arm and the baseline.
    pub pairs: usize,
    /// Per pair, arm TTFT − baseline TTFT.
    pub added_ttft_ms: Added,
    /// Per pair, the difference of the two copies' `itl_p50_ms` (for p50) and `itl_p99_ms` (for
    /// p99).
    pub added_gap_ms: Added,
    /// The gateway tap's share of TTFT (`gateway_tap.ttft_ms` of the arm's outer records), when
    /// tapped.
    pub added_ttft_tap_ms: Option<Added>,
    /// The arm's records with a pair id at this level, and the baseline's.
    pub requests: usize,
    pub baseline_requests: usize,
    pub delivery: DeliveryCounts,
    pub baseline_delivery: DeliveryCounts,
    /// Records not served: any outcome but `ok` and `client_cancelled`.
    pub errors: usize,
    pub baseline_errors: usize,
}

/// Sustained streams of one arm: the highest level every lower level of which also held.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sustained {
    pub level: Option<LevelValue>,
    /// The level as the tables write it (not written: `level` says it).
    #[serde(skip)]
    pub label: Option<String>,
    /// Why no level (or no higher level) held; absent when the highest level measured held.
    pub reason: Option<String>,
}

/// One gateway arm's row.
#[derive(Debug, Clone, Serialize)]
pub struct BoardRow {
    pub arm: String,
    pub baseline: String,
    pub levels: Vec<BoardLevel>,
    pub sustained_streams: Option<LevelValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sustained_reason: Option<String>,
    pub baseline_sustained_streams: Option<LevelValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_sustained_reason: Option<String>,
    /// The pace the silences were judged against (ms), and where it came from.
    pub pace_ms: Option<f64>,
    pub pace_from: PaceFrom,
    /// From `run.json`'s `arm_resources` (null: not known).
    pub cpu_s: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_error: Option<String>,
    /// What the hop does to streams, in a sentence (`answers::board_summary`).
    pub summary: String,
    /// The sustained levels as the tables write them (not written: the numbers say them).
    #[serde(skip)]
    pub sustained_label: Option<String>,
    #[serde(skip)]
    pub baseline_sustained_label: Option<String>,
}

/// Where the board's pace came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PaceFrom {
    /// `report --pace-gap-ms`.
    Flag,
    /// The baseline's median `itl_p50_ms` at its lowest level.
    BaselineItl,
    /// Neither: sustained streams are not judged.
    Unknown,
}

impl PaceFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            PaceFrom::Flag => "flag",
            PaceFrom::BaselineItl => "baseline_itl",
            PaceFrom::Unknown => "unknown",
        }
    }
}
