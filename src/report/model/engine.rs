//! The engine's and the GPUs' side of a cell, as `tokentap bench` summarises its scrapes in
//! `run.json`; a cell's plateau. One type, written by bench and read by report.

use serde::{Deserialize, Serialize};

/// A gauge over a cell: mean, peak and p95 of its scrapes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Gauge {
    pub mean: f64,
    pub peak: f64,
    pub p95: f64,
    pub samples: usize,
}

impl Gauge {
    /// Of these values (none: no gauge).
    pub fn of(values: &[f64]) -> Option<Gauge> {
        let v = crate::stats::sorted(values.iter().copied());
        let peak = *v.last()?;
        Some(Gauge {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            peak,
            p95: crate::stats::pct(&v, 0.95).unwrap_or(peak),
            samples: v.len(),
        })
    }
}

/// What the scrapes say of one cell. Every figure is absent when its metric was not scraped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Telemetry {
    /// KV-cache usage, a fraction (1 = full).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage: Option<Gauge>,
    /// The KV cache's size, tokens per engine: `num_gpu_blocks` × `block_size` of vLLM's
    /// `vllm:cache_config_info` (mean over engines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_tokens: Option<f64>,
    /// KV-cache usage at the scrapes where at least one request waited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage_waiting: Option<Gauge>,
    /// Requests in the engine's running batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<Gauge>,
    /// Requests running at the scrapes where at least one request waited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_waiting: Option<Gauge>,
    /// Requests waiting in the engine's queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Gauge>,
    /// Preemptions during the cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
    /// Preemptions ÷ the cell's requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptions_per_request: Option<f64>,
    /// Prefix-cache hits ÷ queries (tokens), over the cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate: Option<f64>,
    /// Requests the engine refused at admission during the cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission_rejections: Option<f64>,
    /// Achieved floating-point operations a second, per GPU (the engine's estimate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flops_per_s_per_gpu: Option<f64>,
    /// Achieved memory reads, bytes a second, per GPU (the engine's estimate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_bytes_per_s_per_gpu: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_bytes_per_s_per_gpu: Option<f64>,
    /// DCGM: GPU utilisation, percent (mean over GPUs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_util_pct: Option<Gauge>,
    /// DCGM: memory interface activity, a fraction (mean over GPUs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dram_active: Option<Gauge>,
    /// DCGM: power, watts (sum over GPUs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_w: Option<Gauge>,
    /// DCGM: framebuffer memory used, MiB (sum over GPUs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fb_used_mib: Option<Gauge>,
    /// Mean power × the cell's wall time ÷ its output tokens, joules a token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub j_per_token: Option<f64>,
    /// Achieved read bytes/s ÷ the card's peak bandwidth (memory-bandwidth utilisation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mbu: Option<f64>,
    /// Achieved FLOP/s ÷ the card's peak FLOP/s (FLOPs utilisation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mfu: Option<f64>,
}

impl Telemetry {
    /// True when nothing was scraped for the cell.
    pub fn is_empty(&self) -> bool {
        *self == Telemetry::default()
    }
}

/// One GPU's peaks, as bench was told them (`hardware` in `run.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Hardware {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_bandwidth_bytes_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_flops: Option<f64>,
}

/// One window of a cell (`bench --timeslice`): its requests' TTFT and TPOT, the output
/// throughput inside it, and the engine's gauges over it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Slice {
    /// The window, ms since the run began.
    pub from_ms: f64,
    pub to_ms: f64,
    /// Requests that started in the window (their TTFT and TPOT are its).
    pub requests: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms_p95: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_ms_p50: Option<f64>,
    /// Output tokens generated inside the window ÷ its length (each request's tokens spread
    /// evenly from its first token to its end), across streams.
    pub output_tok_s: f64,
    /// Means of the scrapes inside the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<f64>,
}

/// A closed-loop cell's plateau (`cells[].steady_state`): the requests that lived while C were
/// in flight, as bench found it (`run.json`) or as the report finds it from the records.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Steady {
    /// The plateau, ms on `clock`.
    pub from_ms: f64,
    pub to_ms: f64,
    pub requests: usize,
    pub ttft_ms: SteadyDist,
    pub tpot_ms: SteadyDist,
    /// What `from_ms` and `to_ms` count from: the run's start (bench's `run.json`) or the
    /// cell's first request (found by the report from the records alone).
    pub clock: SteadyClock,
}

/// The clock of a plateau's bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SteadyClock {
    /// ms since the run began (`run.json`, the clock of `scrape.jsonl`).
    #[default]
    Run,
    /// ms since the cell's first request began.
    Cell,
}

/// The percentiles of a plateau's figure that the report shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SteadyDist {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
}
