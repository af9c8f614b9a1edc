//! `tokentap bench`: a load generator measured on its own clock with the proxy's definitions
//! (the same `Meter`), raw records persisted to `requests.jsonl`, every knob described in
//! `run.json`. Loads:
//! - a closed loop (C requests in flight) over prompt-shape buckets × a concurrency sweep;
//! - an open loop (`--request-rate`): requests arrive by a seeded process, capped by
//!   `--max-concurrency`, the client's queue and lag recorded;
//! - a saturation search (`--until`): levels stepped up until an SLO breaks or errors appear,
//!   then refined between the last good and the first bad level;
//! - a replay of recorded traffic (`--replay`): a tokentap log's or a Mooncake trace's arrivals,
//!   token counts, API shapes and models;
//! - shared system prompts (`--shared-prefix`) and conversations turn by turn (`--multi-turn`).
//!
//! Errors are counted per cell and never abort the run; Ctrl-C keeps what was measured.
// The process clock is this module's own: bench times requests on its own client-side clock, and dates its run.
#![allow(clippy::disallowed_methods)]

pub mod arms;
pub mod arrival;
mod cell;
pub mod cli;
mod closed;
pub mod dataset;
mod estimate;
mod forecast;
pub mod gpu;
mod info;
mod live;
mod open;
mod plan;
mod progress;
pub mod replay;
pub mod request;
pub mod resources;
mod run_json;
mod runner;
pub mod scrape;
mod search;
mod session;
pub mod shard;
mod slices;
mod stall;
mod steady;
pub mod summary;
mod sweep;
mod turns;
pub mod verdict;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

pub use arrival::{Arrivals, Process};
pub use cli::{cli, Args};
pub use info::{
    BucketInfo, CellInfo, LagStats, LoadInfo, OpenInfo, RunInfo, ScrapeInfo, TokenStats,
};
pub use runner::{Overhead, Target};
pub use search::{SaturationInfo, Until};

use crate::meter::RequestRecord;
use cell::Out;
use plan::Plan;
use run_json::Findings;
use session::{Client, Session};

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Dataset(#[from] dataset::DatasetError),
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("target {0}: {1}")]
    Target(String, String),
    #[error("{0}")]
    Replay(String),
}

/// Everything a run needs; the CLI and the demo fill it.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub target: String,
    pub out: PathBuf,
    pub dataset: Option<PathBuf>,
    pub synthetic: Option<Vec<u64>>,
    pub seed: u64,
    pub concurrency: Vec<usize>,
    pub requests: usize,
    pub warmup: usize,
    pub model: Option<String>,
    pub api_key: Option<crate::keys::Secret<String>>,
    pub fixed_output: bool,
    pub short_max: u64,
    pub long_min: u64,
    pub outputs: [u64; 3],
    pub prompts_per_bucket: usize,
    pub calibrate: bool,
    /// Extra request headers (e.g. the experiment route header).
    pub headers: Vec<(String, String)>,
    /// Two or more arms (name, path prefix under the target), each prompt sent through every
    /// one in the order of a balanced Latin square (two arms: ABBA); empty = one arm, the
    /// target itself.
    pub arms: Vec<(String, String)>,
    /// The baseline arm (`--baseline`; default: `direct` if it is an arm, else the first).
    pub baseline: Option<String>,
    /// Add `"cache_salt": "<pair_id>-<arm>"` to each arm's copy (`--cache-salt`).
    pub cache_salt: bool,
    /// Arms whose CPU and memory are read while the run lasts (`--arm-pid`, `--arm-cgroup`).
    pub arm_watch: Vec<resources::Watch>,
    /// Choose the arm with this request header (tokentap's experiment route header) instead of
    /// a path prefix: each request carries `header: arm-name`.
    pub route_header: Option<String>,
    /// The API shape to send requests in (`chat` by default).
    pub api: crate::openai::Api,
    pub quiet: bool,
    /// Before the load, send one probe request per bucket (not recorded) for an estimate of the
    /// run's length; never when quiet. Without it the ETA waits for the first cell.
    pub estimate: bool,
    /// Without a line for this long, a heartbeat line (on a terminal, the bar redrawn).
    pub progress_every: Duration,
    /// Only these buckets (all three when empty).
    pub buckets: Vec<String>,
    /// Open-loop cells at these arrival rates (requests a second) instead of the concurrency
    /// sweep.
    pub request_rates: Vec<f64>,
    pub arrivals: Arrivals,
    /// The open loop's cap on requests in flight (none: unbounded).
    pub max_concurrency: Option<usize>,
    /// Search levels until this breaks (`--until`).
    pub until: Option<Until>,
    /// The search's highest level (a concurrency, or a rate with `--request-rate`).
    pub max_level: Option<f64>,
    /// The search's (or replay's) time bound.
    pub max_time: Duration,
    /// The SLO thresholds `--until slo:NAME` reads.
    pub slos: crate::report::Slos,
    /// Replay these logs or traces instead of buckets.
    pub replay: Vec<PathBuf>,
    /// Replay time scale: 2 = twice as fast.
    pub speed: f64,
    /// Replay only this slice.
    pub window: Option<replay::Window>,
    /// A shared system prompt of this many tokens on every request of a bucket (0: none).
    pub shared_prefix: u64,
    /// Distinct shared prefixes per bucket.
    pub prefix_groups: usize,
    /// Send conversations turn by turn, each request with the history so far.
    pub multi_turn: bool,
    /// Mean think time between turns (exponential, seeded).
    pub think_time: Duration,
    pub max_turns: usize,
    /// What to scrape while the load runs (`--scrape`).
    pub scrape: scrape::ScrapePlan,
    pub scrape_interval: Duration,
    /// Unknown metrics to summarise per cell too (`--scrape-metric`).
    pub scrape_metrics: Vec<String>,
    /// One GPU's peak memory bandwidth (bytes/s) and FLOP/s, for MBU and MFU.
    pub peak_bandwidth: Option<f64>,
    pub peak_flops: Option<f64>,
    /// `--gpu`'s name, for run.json.
    pub gpu: Option<String>,
    /// Serve bench's own counters here while it runs (`--metrics-listen`).
    pub metrics_listen: Option<String>,
    /// Cut each cell into windows of this length (`--timeslice`).
    pub timeslice: Option<Duration>,
    /// Repeat the sweep this many times, each run visiting the cells in a rotated order.
    pub runs: u32,
    /// A cell failing a larger share of its requests fails the run (`--max-error-rate`).
    pub max_error_rate: Option<f64>,
    /// Write into an output folder that already holds a run (`--force`).
    pub force: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            target: "http://127.0.0.1:8080".into(),
            out: PathBuf::from("bench-out"),
            dataset: None,
            synthetic: None,
            seed: 42,
            concurrency: vec![1, 2, 4, 8],
            requests: 30,
            warmup: 5,
            model: None,
            api_key: None,
            fixed_output: true,
            short_max: 200,
            long_min: 700,
            outputs: [64, 256, 512],
            prompts_per_bucket: 50,
            calibrate: true,
            headers: Vec::new(),
            arms: Vec::new(),
            baseline: None,
            cache_salt: false,
            arm_watch: Vec::new(),
            route_header: None,
            api: crate::openai::Api::Chat,
            quiet: false,
            estimate: true,
            progress_every: Duration::from_secs(10),
            buckets: Vec::new(),
            request_rates: Vec::new(),
            arrivals: Arrivals {
                process: Process::Poisson,
                burstiness: 1.0,
                seed: 42,
            },
            max_concurrency: None,
            until: None,
            max_level: None,
            max_time: Duration::from_secs(30 * 60),
            slos: crate::report::Slos::default(),
            replay: Vec::new(),
            speed: 1.0,
            window: None,
            shared_prefix: 0,
            prefix_groups: 1,
            multi_turn: false,
            think_time: Duration::from_secs(1),
            max_turns: 8,
            scrape: scrape::ScrapePlan::Auto,
            scrape_interval: Duration::from_secs(1),
            scrape_metrics: Vec::new(),
            peak_bandwidth: None,
            peak_flops: None,
            gpu: None,
            metrics_listen: None,
            timeslice: None,
            runs: 1,
            max_error_rate: None,
            force: false,
        }
    }
}

/// Run the whole load; `stop` ends it early (Ctrl-C), keeping what was measured. The run's
/// verdict (`RunInfo::verdict`) says whether it measured what it was asked to.
pub async fn run(cfg: &BenchConfig, stop: Arc<AtomicBool>) -> Result<RunInfo, BenchError> {
    let cfg = &whole_groups(cfg);
    let mut plan = Plan::of(cfg)?;
    claim_out(cfg)?;
    let client = Client::connect(cfg).await?;
    let model = plan.model(cfg, &client.target).await?;
    let mut s = Session::open(cfg, client, model, &plan.prefixed(), stop).await?;
    plan.announce(cfg, &s.load.model);
    let _beat = s.progress.heartbeat();
    if !cfg.quiet {
        s.progress.plan(estimate::of(&s, &plan).await);
    }
    let mut out = Out::default();
    // The arms' own CPU and memory: from the first cell's start to the last one's end.
    let sampler = resources::Sampler::start(&cfg.arm_watch).await;
    let found = drive(&s, &mut plan, &mut out).await;
    let arm_resources = match sampler {
        Some(sm) => sm.finish().await,
        None => Vec::new(),
    };
    write_records(cfg, &out.records)?;
    let scrape = run_json::scraped(&mut s, &mut out).await;
    let mut info = RunInfo::of(&s, &plan, found, scrape, &mut out);
    info.arm_resources = arm_resources;
    let run_path = cfg.out.join("run.json");
    let json = serde_json::to_string_pretty(&info).unwrap_or_default();
    std::fs::write(&run_path, json + "\n").map_err(|source| BenchError::Io {
        path: run_path.display().to_string(),
        source,
    })?;
    if !cfg.quiet {
        crate::outln!("{}", summary::table(&out.records, &info));
        for r in &info.arm_resources {
            crate::outln!("{}", resources::line(r));
        }
    }
    Ok(info)
}

/// The config with, for two or more arms, `--requests` and `--warmup` rounded up to whole groups
/// (one copy per arm), so that every group is measured whole or not at all.
fn whole_groups(cfg: &BenchConfig) -> BenchConfig {
    let n = cfg.arms.len();
    BenchConfig {
        requests: arms::whole_groups(cfg.requests, n),
        warmup: arms::whole_groups(cfg.warmup, n),
        ..cfg.clone()
    }
}

/// The output folder, made; one that already holds a run (its `run.json` or `requests.jsonl`)
/// is refused unless `--force`: it may be the baseline of a comparison.
fn claim_out(cfg: &BenchConfig) -> Result<(), BenchError> {
    let held: Vec<&str> = ["run.json", "requests.jsonl"]
        .into_iter()
        .filter(|f| cfg.out.join(f).exists())
        .collect();
    if !held.is_empty() && !cfg.force {
        return Err(BenchError::Usage(format!(
            "--out {}: already holds a run ({}); choose another folder, or --force to overwrite it",
            cfg.out.display(),
            held.join(", ")
        )));
    }
    std::fs::create_dir_all(&cfg.out).map_err(|source| BenchError::Io {
        path: cfg.out.display().to_string(),
        source,
    })
}

/// Send the plan's load, its cells kept in `out`.
async fn drive(s: &Session<'_>, plan: &mut Plan, out: &mut Out) -> Findings {
    match plan {
        Plan::Closed(w) | Plan::Open(w) => {
            let chosen = sweep::with_prompts(s, &w.prompts.chosen, &w.prompts.empty);
            sweep::run(s, &chosen, &w.levels, w.runs, out).await;
            Findings::default()
        }
        Plan::Search {
            prompts,
            until,
            ladder,
        } => {
            let chosen = sweep::with_prompts(s, &prompts.chosen, &prompts.empty);
            let saturation = search::buckets(s, &chosen, until, *ladder, out).await;
            Findings {
                saturation,
                replay: None,
            }
        }
        Plan::Replay { requests, info } => {
            let requests = std::mem::take(requests);
            let info = replay::send(s, requests, (**info).clone(), out).await;
            Findings {
                saturation: BTreeMap::new(),
                replay: Some(info),
            }
        }
        Plan::Conversations {
            convs,
            specs,
            levels,
            ..
        } => {
            turns::run(s, convs, specs, levels, out).await;
            Findings::default()
        }
    }
}

fn write_records(cfg: &BenchConfig, records: &[RequestRecord]) -> Result<(), BenchError> {
    use std::io::Write;
    let path = cfg.out.join("requests.jsonl");
    let io = |source| BenchError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
    for r in records {
        let line = serde_json::to_string(r).unwrap_or_default();
        writeln!(w, "{line}").map_err(io)?;
    }
    w.flush().map_err(io)
}
