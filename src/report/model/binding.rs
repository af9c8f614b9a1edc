//! The binding constraint's verdict per bucket and the figures it is read from.

use serde::Serialize;

/// What binds. Each cause is named only when its own figures show it (docs/report.md's "The
/// binding constraint"); otherwise `NotIdentified`, with the figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Constraint {
    /// The cell examined served no request: every one failed. There is no latency to explain;
    /// the failure mode says why.
    Failed,
    Client,
    Gateway,
    /// Preemptions, or admission blocked: requests waited while the free KV cache was smaller
    /// than a waiting prompt.
    KvCache,
    /// The running batch flat at the bucket's plateau while requests waited, the KV cache with
    /// room for them.
    BatchLimit,
    /// MFU near the card's peak.
    Compute,
    /// MBU near the card's peak.
    MemoryBandwidth,
    /// Neither MBU nor MFU near the peak, the decode step's time flat while the batch grew.
    StepOverhead,
    /// Requests waited, the KV cache had room, and nothing above explains the wait.
    Queueing,
    /// The engine was scraped, but its figures show no cause.
    NotIdentified,
    /// Neither a knee nor an SLO failure in the levels measured.
    NotReached,
    /// A knee, but no engine figures to say why (`bench --scrape`).
    Unknown,
}

impl Constraint {
    pub fn as_str(self) -> &'static str {
        match self {
            Constraint::Failed => "failed",
            Constraint::Client => "client",
            Constraint::Gateway => "gateway",
            Constraint::KvCache => "KV cache",
            Constraint::BatchLimit => "batch limit",
            Constraint::Compute => "compute",
            Constraint::MemoryBandwidth => "memory bandwidth",
            Constraint::StepOverhead => "per-step overhead",
            Constraint::Queueing => "queueing",
            Constraint::NotIdentified => "not identified",
            Constraint::NotReached => "not reached",
            Constraint::Unknown => "unknown",
        }
    }
}

/// The figures a verdict is read from.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    pub kv_cache_usage_peak: Option<f64>,
    pub preemptions_per_request: Option<f64>,
    pub waiting_mean: Option<f64>,
    pub running_mean: Option<f64>,
    pub mbu: Option<f64>,
    pub mfu: Option<f64>,
    pub client_lag_p99_ms: Option<f64>,
    /// bench's own stall share and reader lag p99 (ms) over the cell, from its `run.json`.
    pub bench_stall_share: Option<f64>,
    pub bench_reader_lag_p99_ms: Option<f64>,
    /// The cell's TTFT p50: bench's reader lag binds only as a material share of it.
    pub ttft_ms_p50: Option<f64>,
    /// Time outside the engine ÷ TTFT (medians).
    pub outside_engine_share: Option<f64>,
    /// The KV cache's size, tokens per engine (vLLM's `vllm:cache_config_info`).
    pub kv_cache_tokens: Option<f64>,
    /// KV-cache usage, mean of the scrapes where a request waited.
    pub kv_cache_usage_waiting: Option<f64>,
    /// Free KV-cache tokens while requests waited: (1 − that usage) × the cache's size.
    pub kv_free_tokens_waiting: Option<f64>,
    /// What a waiting prompt needs: the cell's median prompt tokens (and its median output, which
    /// an engine that reserves the output at admission needs too).
    pub prompt_tokens_median: Option<f64>,
    pub output_tokens_median: Option<f64>,
    /// Requests running while requests waited (mean of those scrapes).
    pub running_waiting_mean: Option<f64>,
    /// The most requests running at any scrape of any of the bucket's levels: its plateau.
    pub running_limit: Option<f64>,
    /// The decode step's time, TPOT p50, here and at the bucket's lowest level (`lowest_at`),
    /// with the batch (running mean) there.
    pub tpot_ms_p50: Option<f64>,
    pub lowest_at: Option<String>,
    pub tpot_ms_p50_lowest: Option<f64>,
    pub running_mean_lowest: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Binding {
    pub bucket: String,
    /// The level examined (`C=8`, `4/s`).
    pub at: Option<String>,
    /// Why that level: `knee`, `slo` (the interactive SLO's first failure) or `top` (neither
    /// reached: the highest level).
    pub point: BindPoint,
    pub constraint: Constraint,
    pub figures: Figures,
    /// The verdict in a sentence, with its figures.
    pub text: String,
}

/// Why a binding verdict examines its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BindPoint {
    /// The knee.
    Knee,
    /// The interactive SLO's first failure.
    Slo,
    /// Neither reached: the highest level.
    Top,
}

impl BindPoint {
    pub fn as_str(self) -> &'static str {
        match self {
            BindPoint::Knee => "knee",
            BindPoint::Slo => "slo",
            BindPoint::Top => "top",
        }
    }
}
