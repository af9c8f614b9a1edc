//! What `run.json` says of a bench run: the tool, the prompts, every knob of the load, each
//! cell (and an open loop's offered, scheduled and achieved rates with the client's lag), the
//! saturation search and the replay.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde::Serialize;

use super::cell::Out;
use super::dataset::Chosen;
use super::plan::Plan;
use super::search::{SaturationInfo, Until};
use super::session::Session;
use super::BenchConfig;

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
    pub wall_s: f64,
    pub output_tokens: u64,
    /// Total output tokens ÷ wall time across all streams of the cell (not per stream).
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
    pub scrape: Option<super::scrape::summary::CellScrape>,
    /// A closed-loop cell's plateau: the requests that lived while C were in flight, and
    /// their figures (the cell's top-level figures are the whole cell's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady_state: Option<super::steady::SteadyState>,
    /// `--timeslice`: the cell's windows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeslices: Vec<crate::report::engine::Slice>,
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

#[derive(Debug, Clone, Serialize)]
pub struct Overhead {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub how: &'static str,
}

/// The load's knobs, as given (`run.json`).
#[derive(Debug, Serialize)]
pub struct LoadInfo {
    /// `closed` (a concurrency sweep), `open` (arrival rates), `search` or `replay`.
    pub mode: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub request_rates: Vec<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<super::Arrivals>,
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
    pub concurrency: Vec<usize>,
    pub requests_per_cell: usize,
    pub warmup_per_cell: usize,
    pub buckets: Vec<BucketInfo>,
    pub started_at: String,
    pub ended_at: String,
    pub interrupted: bool,
    pub client_overhead_ttft_ms: Option<Overhead>,
    pub cells: Vec<CellInfo>,
    pub load: LoadInfo,
    /// `--until`: per bucket, the ceiling, the knee and the levels measured.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub saturation: BTreeMap<String, SaturationInfo>,
    /// `--replay`: what was read and what was sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<super::replay::ReplayInfo>,
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
}

/// `scrape` in `run.json`.
#[derive(Debug, Serialize)]
pub struct ScrapeInfo {
    /// The endpoints, credentials replaced by `REDACTED`.
    pub endpoints: Vec<String>,
    pub interval_ms: f64,
    /// Rounds over every endpoint (each cell's start and end add one).
    pub rounds: usize,
    /// Scrapes that failed (an endpoint in a round); they never stop the run.
    pub failures: usize,
    /// Raw samples written to `scrape.jsonl`.
    pub samples: u64,
    pub file: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_error: Option<String>,
}

/// What `run.json` says of a load besides its cells: the search's findings, the replay's
/// account.
#[derive(Default)]
pub(crate) struct Findings {
    pub saturation: BTreeMap<String, SaturationInfo>,
    pub replay: Option<super::replay::ReplayInfo>,
}

impl RunInfo {
    /// `run.json` once the load is over: the session's knobs and clock, the plan's prompts and
    /// mode, the cells (taken from `out`; the records stay), what the load found and scraped.
    pub(crate) fn of(
        s: &Session<'_>,
        plan: &Plan,
        found: Findings,
        scrape: Option<ScrapeInfo>,
        out: &mut Out,
    ) -> RunInfo {
        let cfg = s.cfg;
        let (dataset, prompt_set_sha256) = plan.source();
        RunInfo {
            tool: "tokentap bench",
            tool_version: env!("CARGO_PKG_VERSION"),
            target: cfg.target.clone(),
            model: s.load.model.to_string(),
            dataset,
            seed: cfg.seed,
            prompt_set_sha256,
            fixed_output: cfg.fixed_output,
            concurrency: cfg.concurrency.clone(),
            requests_per_cell: cfg.requests,
            warmup_per_cell: cfg.warmup,
            buckets: plan.chosen().iter().map(BucketInfo::of).collect(),
            started_at: s.started_at.clone(),
            ended_at: super::session::now_rfc3339(),
            interrupted: s.stop.load(Ordering::Relaxed),
            client_overhead_ttft_ms: s.overhead.clone(),
            load: LoadInfo::of(cfg, plan),
            cells: std::mem::take(&mut out.cells),
            saturation: found.saturation,
            replay: found.replay,
            scrape,
            hardware: (cfg.peak_bandwidth.is_some() || cfg.peak_flops.is_some()).then(|| {
                crate::report::engine::Hardware {
                    gpu: cfg.gpu.clone(),
                    peak_bandwidth_bytes_s: cfg.peak_bandwidth,
                    peak_flops: cfg.peak_flops,
                }
            }),
            runs: (plan.runs() > 1).then_some(plan.runs()),
            spread: match plan.runs() {
                0 | 1 => Vec::new(),
                _ => crate::spread::as_written(&out.records),
            },
        }
    }
}

impl LoadInfo {
    /// The load's knobs as given, and its mode as planned.
    fn of(cfg: &BenchConfig, plan: &Plan) -> LoadInfo {
        let turns = matches!(plan, Plan::Conversations { .. });
        LoadInfo {
            mode: plan.mode(),
            request_rates: cfg.request_rates.clone(),
            arrivals: (!cfg.request_rates.is_empty()).then_some(cfg.arrivals),
            max_concurrency: cfg.max_concurrency,
            until: cfg.until.as_ref().map(Until::to_string),
            max_level: cfg.max_level,
            max_time_s: cfg.max_time.as_secs_f64(),
            buckets: cfg.buckets.clone(),
            shared_prefix_tokens: cfg.shared_prefix,
            prefix_groups: cfg.prefix_groups,
            multi_turn: turns,
            think_time_ms: turns.then_some(cfg.think_time.as_secs_f64() * 1000.0),
            max_turns: turns.then_some(cfg.max_turns),
            api: cfg.api.as_str(),
        }
    }
}

impl BucketInfo {
    /// A bucket's prompts: how many, and their estimated input tokens.
    fn of(c: &Chosen) -> BucketInfo {
        let mut t: Vec<u64> = c.prompts.iter().map(|p| p.est_tokens).collect();
        t.sort_unstable();
        BucketInfo {
            name: c.spec.name,
            output_tokens: c.spec.output_tokens,
            prompts: c.prompts.len(),
            input_tokens_est: (!t.is_empty()).then(|| TokenStats {
                min: t[0],
                median: t[t.len() / 2],
                max: t[t.len() - 1],
            }),
        }
    }
}
