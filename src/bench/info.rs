//! What `run.json` says of a bench run: the tool, the prompts, every knob of the load, each
//! cell (and an open loop's offered, scheduled and achieved rates with the client's lag), the
//! saturation search and the replay; bench's own lag (its stall share and reader lag).

use std::collections::BTreeMap;

use serde::Serialize;

pub use crate::bench::scrape::ScrapeInfo;

use crate::bench::stage::search::SaturationInfo;

#[derive(Debug, Serialize)]
pub struct TokenStats {
    pub min: u64,
    pub median: u64,
    pub max: u64,
}

#[derive(Debug, Serialize)]
pub struct BucketInfo {
    pub name: &'static str,
    pub output_tokens: u64,
    pub prompts: usize,
    /// Estimated input tokens of the chosen prompts (about four bytes per token).
    pub input_tokens_est: Option<TokenStats>,
}

#[derive(Debug, Serialize)]
pub struct CellInfo {
    /// The bucket; `conversations` for a multi-turn cell, `replay` for a replay.
    pub bucket: String,
    /// A closed-loop cell's level (absent for an open-loop cell).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    pub measured: usize,
    pub errors: usize,
    /// Requests served: the stream ended well, with a success status.
    pub served: usize,
    /// Requests bench itself cancelled (its stop): neither served nor failed.
    pub cancelled: usize,
    /// Why requests were not served, counted: status, outcome, the upstream's error type and
    /// code (`verdict::FailureCount`); absent when every request was served.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<crate::bench::verdict::FailureCount>,
    /// Each experiment arm's asked and served requests (`--arms`); absent without arms.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arms: Vec<crate::bench::verdict::ArmServed>,
    pub wall_s: f64,
    /// Output tokens of the requests served (a cut stream's partial output is not counted).
    pub output_tokens: u64,
    /// Those output tokens ÷ wall time across all streams of the cell (not per stream).
    pub aggregate_tok_s: f64,
    /// An open-loop cell: its arrivals, offered against sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_loop: Option<OpenInfo>,
    /// `--runs N` (N > 1): the run this cell was measured in, from 1 (cells are listed in the
    /// order they ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<u32>,
    /// The cell's records in the run's records (for the summary).
    #[serde(skip)]
    pub records: std::ops::Range<usize>,
    /// The cell's first and last scrape (ms since the run began).
    #[serde(skip)]
    pub window_ms: Option<(f64, f64)>,
    /// The engine's and GPUs' metrics over the cell (`--scrape`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrape: Option<crate::bench::scrape::summary::CellScrape>,
    /// A closed-loop cell's plateau: the requests that lived while C were in flight, and
    /// their figures (the cell's top-level figures are the whole cell's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady_state: Option<crate::bench::steady::SteadyState>,
    /// `--timeslice`: the cell's windows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeslices: Vec<crate::report::engine::Slice>,
    /// bench's own stall share: the share of the cell's wall time its scheduler was behind its
    /// plan or held at its in-flight limit (docs/bench.md "bench's own lag"); absent for
    /// conversations, whose think time is the plan's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_share: Option<f64>,
    /// How late bench's runtime polled a ready task over the cell, ms (its reader lag).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reader_lag_ms: Option<LagStats>,
}

/// What an open-loop cell offered and what the client achieved.
#[derive(Debug, Clone, Serialize)]
pub struct OpenInfo {
    /// The rate asked for (requests a second); a replay's is its records ÷ their span.
    pub offered_rate: f64,
    /// The rate of the schedule drawn (its due times; a Poisson draw is not exactly the mean).
    pub scheduled_rate: Option<f64>,
    /// The rate requests were sent at.
    pub achieved_rate: Option<f64>,
    /// How late the client sent requests (beyond any queue for `--max-concurrency`), ms.
    pub lag_ms: LagStats,
    /// Waiting for a slot under `--max-concurrency`, ms.
    pub queue_ms: LagStats,
    /// True when the client fell behind its schedule: lag p99 over 10 ms, or the achieved rate
    /// under 95 % of the scheduled one.
    pub behind: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LagStats {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl LagStats {
    pub(crate) fn of(v: impl Iterator<Item = f64>) -> LagStats {
        let v = crate::stats::sorted(v);
        LagStats {
            p50: crate::stats::pct(&v, 0.5),
            p99: crate::stats::pct(&v, 0.99),
            max: v.last().copied(),
        }
    }
}

/// The load's knobs as the load read them (`run.json`): a knob only another load reads shows
/// its default, or is left out.
#[derive(Debug, Serialize)]
pub struct LoadInfo {
    /// `closed` (a concurrency sweep), `open` (arrival rates), `search` or `replay`.
    pub mode: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub request_rates: Vec<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<crate::bench::Arrivals>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_level: Option<f64>,
    pub max_time_s: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<String>,
    pub shared_prefix_tokens: u64,
    pub prefix_groups: usize,
    pub multi_turn: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub think_time_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<usize>,
    pub api: &'static str,
}

/// `run.json`.
#[derive(Debug, Serialize)]
pub struct RunInfo {
    pub tool: &'static str,
    pub tool_version: &'static str,
    pub target: String,
    pub model: String,
    pub dataset: String,
    pub seed: u64,
    pub prompt_set_sha256: String,
    pub fixed_output: bool,
    /// Whether requests asked for a stream (`--stream`): a non-streamed run has no TTFT.
    pub stream: bool,
    pub concurrency: Vec<usize>,
    pub requests_per_cell: usize,
    pub warmup_per_cell: usize,
    pub buckets: Vec<BucketInfo>,
    pub started_at: String,
    pub ended_at: String,
    pub interrupted: bool,
    pub client_overhead_ttft_ms: Option<crate::bench::runner::Overhead>,
    pub cells: Vec<CellInfo>,
    pub load: LoadInfo,
    /// `--until`: per bucket, the ceiling, the knee and the levels measured.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub saturation: BTreeMap<String, SaturationInfo>,
    /// `--replay`: what was read and what was sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<crate::bench::stage::replay::ReplayInfo>,
    /// `--scrape`: what was scraped (credentials never written), how often, how many failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrape: Option<ScrapeInfo>,
    /// `--gpu`, `--peak-bandwidth`, `--peak-flops`: one GPU's peaks (MBU, MFU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hardware: Option<crate::report::engine::Hardware>,
    /// `--runs N` (N > 1): how many times the sweep was repeated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<u32>,
    /// `--runs N` (N > 1): per cell, each run's figures and their spread across runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<crate::spread::CellSpread>,
    /// `--arms`: the arms, the baseline, their order, the route header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub experiment: Option<crate::bench::arms::ExperimentInfo>,
    /// `--arm-pid`, `--arm-cgroup`: each arm's own CPU seconds and peak memory over the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub arm_resources: Vec<crate::bench::resources::ArmResources>,
    /// The run's id, in every record (`--run-id`; every shard of a distributed run shares it).
    pub run_id: String,
    /// `--shard I/N`: I (from 1) and N; `report` reads the shards of one run as one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// `--start-at`, `--cell-window`: the common windows, and the cells that began late.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<crate::bench::shard::FleetInfo>,
    /// `--clickhouse`: the rows inserted and those that were not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clickhouse: Option<crate::bench::clickhouse::Inserted>,
    /// bench's own stall share over the run: its cells' stalled time ÷ their wall time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_share: Option<f64>,
    /// Whether the run measured what it was asked to (its exit status): `ok`, `failed` (a
    /// cell served nothing, or failed above `--max-error-rate`) or `not_judged` (nothing, or
    /// not every planned cell, was measured), with each reason.
    pub verdict: crate::bench::verdict::RunVerdict,
}
