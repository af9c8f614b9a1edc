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

pub mod arrival;
mod cell;
pub mod cli;
pub mod dataset;
mod estimate;
pub mod gpu;
mod info;
mod live;
mod open;
mod progress;
pub mod replay;
pub mod request;
mod runner;
pub mod scrape;
mod search;
mod slices;
mod steady;
pub mod summary;
mod turns;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use arrival::{Arrivals, Process};
pub use cli::{cli, Args};
pub use info::{
    BucketInfo, CellInfo, LagStats, LoadInfo, OpenInfo, Overhead, RunInfo, ScrapeInfo, TokenStats,
};
pub use runner::Target;
pub use search::{SaturationInfo, Until};

use crate::meter::RequestRecord;
use cell::{measure, open_info, shared_prefixes, Load, Out};

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
    /// Two arms (name, path prefix under the target) to alternate in ABBA order on identical
    /// prompts; empty = one arm, the target itself.
    pub arms: Vec<(String, String)>,
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
        }
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Run the whole load; `stop` ends it early (Ctrl-C), keeping what was measured.
pub async fn run(cfg: &BenchConfig, stop: Arc<AtomicBool>) -> Result<RunInfo, BenchError> {
    validate(cfg)?;
    let replaying = !cfg.replay.is_empty();
    let live = live::start(cfg).await?;
    let target = Arc::new(
        Target::new(
            &cfg.target,
            cfg.api_key.as_ref().map(|k| k.expose().clone()),
            cfg.headers.clone(),
        )
        .map_err(|e| BenchError::Target(cfg.target.clone(), e))?
        .with_live(live.as_ref().map(|l| l.0.clone())),
    );
    // Prompts: buckets of a dataset (or synthetic lengths), or a dataset's conversations.
    let specs: Vec<_> = dataset::buckets(cfg.short_max, cfg.long_min, cfg.outputs)
        .into_iter()
        .filter(|s| cfg.buckets.is_empty() || cfg.buckets.iter().any(|b| b == s.name))
        .collect();
    let (chosen, convs, dataset_name, hash) = if replaying {
        (Vec::new(), Vec::new(), String::new(), String::new())
    } else if cfg.multi_turn {
        let (convs, name) = dataset::load_conversations(cfg.dataset.as_deref())?;
        let convs = dataset::choose_conversations(convs, cfg.seed, cfg.prompts_per_bucket);
        let hash = dataset::conversations_sha256(&convs);
        (Vec::new(), convs, name, hash)
    } else {
        let (prompts, name) = match &cfg.synthetic {
            Some(lengths) => (
                dataset::synthetic(lengths, 8),
                format!("synthetic {lengths:?} tokens"),
            ),
            None => dataset::load(cfg.dataset.as_deref())?,
        };
        let chosen = dataset::choose(&prompts, &specs, cfg.seed, cfg.prompts_per_bucket);
        let hash = dataset::prompt_set_sha256(&chosen);
        (chosen, Vec::new(), name, hash)
    };
    let mut plan = if replaying {
        Some(replay::plan(cfg)?)
    } else {
        None
    };
    // A replay sends each request's recorded model; the target's first is asked for only when
    // some request names none.
    let ask = plan
        .as_ref()
        .is_none_or(|p| p.0.iter().any(|x| x.req.model.is_empty()));
    let model: Arc<str> = match &cfg.model {
        Some(m) => m.as_str().into(),
        None if ask => target
            .first_model()
            .await
            .map_err(|e| BenchError::Target(cfg.target.clone(), e))?
            .into(),
        None => plan
            .as_ref()
            .and_then(|p| p.1.model.clone())
            .unwrap_or_else(|| "recorded models".into())
            .into(),
    };
    if let Some(p) = &mut plan {
        replay::default_model(&mut p.0, &model);
    }
    std::fs::create_dir_all(&cfg.out).map_err(|source| BenchError::Io {
        path: cfg.out.display().to_string(),
        source,
    })?;
    let started_at = now_rfc3339();
    let overhead = if cfg.calibrate {
        Some(runner::client_overhead().await)
    } else {
        None
    };
    let progress = progress::Progress::new(cfg.quiet, cfg.progress_every)
        .with_live(live.as_ref().map(|l| l.0.clone()));
    // The run's clock: scrapes and plateaus are in ms since here.
    let origin = (tokio::time::Instant::now(), SystemTime::now());
    let scraper = scrape::start_for(cfg, origin.0).await?;
    let prefixes = chosen
        .iter()
        .map(|c| c.spec.name)
        .chain(["conversations"].into_iter().filter(|_| cfg.multi_turn))
        .map(|b| (b, shared_prefixes(cfg, b)))
        .collect();
    let load = Load {
        cfg,
        model: model.clone(),
        prefixes,
        scrape: scraper.as_ref().map(|s| s.handle.clone()),
    };
    if !cfg.quiet && !replaying {
        eprintln!(
            "tokentap bench → {} model {model}; {} {}, seed {}, prompt set sha256 {hash}",
            cfg.target,
            if cfg.multi_turn {
                convs.len()
            } else {
                chosen.iter().map(|c| c.prompts.len()).sum::<usize>()
            },
            if cfg.multi_turn {
                "conversations"
            } else {
                "prompts"
            },
            cfg.seed
        );
    }

    let _beat = progress.heartbeat();
    if !cfg.quiet {
        let replayed = plan.as_ref().map(|p| p.0.as_slice());
        let (c, t) = (&chosen, &target);
        let e = estimate::plan(t, &load, c, &convs, replayed, cfg.estimate, &stop).await;
        progress.plan(e);
    }

    let mut out = Out::default();
    let mut saturation = BTreeMap::new();
    let mut replay_info = None;
    let deadline = tokio::time::Instant::now() + cfg.max_time;
    if let Some((planned, mut info)) = plan {
        let offered = info.offered_rate;
        let begun = load.mark().await;
        let r = open::run_open(
            target.clone(),
            "replay",
            planned,
            cfg.max_concurrency,
            &stop,
            &progress,
        )
        .await;
        let oi = open_info(offered, &r);
        info.sent = Some(oi.clone());
        replay_info = Some(info);
        out.push("replay", None, r.records, r.wall_s, Some(oi));
        out.window(begun, load.mark().await);
    } else if cfg.multi_turn {
        for &conc in &cfg.concurrency {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let begun = load.mark().await;
            let cell =
                turns::run_cell(&target, &load, &convs, &specs, conc, &stop, &progress).await;
            out.push("conversations", Some(conc), cell.records, cell.wall_s, None);
            out.window(begun, load.mark().await);
        }
    } else {
        for c in chosen.iter().filter(|c| c.prompts.is_empty()) {
            progress.line(&format!(
                "bucket {}: no prompts in this dataset — skipped",
                c.spec.name
            ));
        }
        let chosen: Vec<_> = chosen.iter().filter(|c| !c.prompts.is_empty()).collect();
        if let Some(until) = &cfg.until {
            for c in chosen {
                let s = search::run(
                    &target, &load, c, until, deadline, &stop, &progress, &mut out,
                )
                .await;
                progress.line(&s.line(c.spec.name));
                saturation.insert(c.spec.name.to_owned(), s);
            }
        } else {
            let grid = cell::grid(cfg, chosen.len());
            'sweep: for run in 1..=cfg.runs {
                let many = cfg.runs > 1;
                if many {
                    progress.line(&format!("run {run} of {}", cfg.runs));
                }
                for (b, level) in cell::run_order(&grid, run, cfg.runs) {
                    if stop.load(Ordering::Relaxed) {
                        break 'sweep;
                    }
                    let n = (cfg.requests, cfg.warmup);
                    let at = measure(
                        &target, &load, chosen[b], level, n, &stop, &progress, &mut out,
                    )
                    .await;
                    if many {
                        out.mark_run(at, run);
                    }
                }
            }
        }
    }
    write_records(cfg, &out.records)?;
    let scraped = match scraper {
        Some(s) => Some(s.finish().await),
        None => None,
    };
    steady::attach(cfg, &mut out, origin.1, scraped.as_ref());
    slices::attach(cfg, &mut out, origin.1, scraped.as_ref());
    let scrape_info = scraped.map(|c| scrape::summarise(cfg, &c, &mut out.cells));
    let buckets = chosen
        .iter()
        .map(|c| {
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
        })
        .collect();
    let mode = match (replaying, &cfg.until, cfg.request_rates.is_empty()) {
        (true, ..) => "replay",
        (_, Some(_), _) => "search",
        (_, None, false) => "open",
        _ => "closed",
    };
    let info = RunInfo {
        tool: "tokentap bench",
        tool_version: env!("CARGO_PKG_VERSION"),
        target: cfg.target.clone(),
        model: model.to_string(),
        dataset: match &replay_info {
            Some(r) => r.files.join(", "),
            None => dataset_name,
        },
        seed: cfg.seed,
        prompt_set_sha256: hash,
        fixed_output: cfg.fixed_output,
        concurrency: cfg.concurrency.clone(),
        requests_per_cell: cfg.requests,
        warmup_per_cell: cfg.warmup,
        buckets,
        started_at,
        ended_at: now_rfc3339(),
        interrupted: stop.load(Ordering::Relaxed),
        client_overhead_ttft_ms: overhead,
        load: LoadInfo {
            mode,
            request_rates: cfg.request_rates.clone(),
            arrivals: (!cfg.request_rates.is_empty()).then_some(cfg.arrivals),
            max_concurrency: cfg.max_concurrency,
            until: cfg.until.as_ref().map(Until::to_string),
            max_level: cfg.max_level,
            max_time_s: cfg.max_time.as_secs_f64(),
            buckets: cfg.buckets.clone(),
            shared_prefix_tokens: cfg.shared_prefix,
            prefix_groups: cfg.prefix_groups,
            multi_turn: cfg.multi_turn,
            think_time_ms: cfg
                .multi_turn
                .then_some(cfg.think_time.as_secs_f64() * 1000.0),
            max_turns: cfg.multi_turn.then_some(cfg.max_turns),
            api: cfg.api.as_str(),
        },
        cells: out.cells,
        saturation,
        replay: replay_info,
        scrape: scrape_info,
        hardware: (cfg.peak_bandwidth.is_some() || cfg.peak_flops.is_some()).then(|| {
            crate::report::engine::Hardware {
                gpu: cfg.gpu.clone(),
                peak_bandwidth_bytes_s: cfg.peak_bandwidth,
                peak_flops: cfg.peak_flops,
            }
        }),
        runs: (cfg.runs > 1).then_some(cfg.runs),
        spread: match cfg.runs {
            0 | 1 => Vec::new(),
            _ => crate::spread::as_written(&out.records),
        },
    };
    let run_path = cfg.out.join("run.json");
    let json = serde_json::to_string_pretty(&info).unwrap_or_default();
    std::fs::write(&run_path, json + "\n").map_err(|source| BenchError::Io {
        path: run_path.display().to_string(),
        source,
    })?;
    if !cfg.quiet {
        println!("{}", summary::table(&out.records, &info));
    }
    Ok(info)
}

fn validate(cfg: &BenchConfig) -> Result<(), BenchError> {
    let usage = |m: &str| Err(BenchError::Usage(m.into()));
    if cfg.concurrency.is_empty() || cfg.concurrency.contains(&0) {
        return usage("--concurrency needs positive levels, e.g. 1,2,4,8");
    }
    if cfg.requests == 0 {
        return usage("--requests must be at least 1");
    }
    if cfg
        .request_rates
        .iter()
        .any(|r| !r.is_finite() || *r <= 0.0)
    {
        return usage("--request-rate needs positive rates (requests a second), e.g. 1,2,4");
    }
    if !(cfg.arrivals.burstiness.is_finite() && cfg.arrivals.burstiness > 0.0) {
        return usage("--burstiness must be a positive number (the gamma shape; 1 is Poisson)");
    }
    if cfg.max_concurrency == Some(0) {
        return usage("--max-concurrency must be at least 1");
    }
    if !(cfg.speed.is_finite() && cfg.speed > 0.0) {
        return usage("--speed must be a positive number (2 replays twice as fast)");
    }
    if cfg.max_level.is_some_and(|m| !(m.is_finite() && m > 0.0)) {
        return usage("--max-level must be positive");
    }
    if cfg.prefix_groups == 0 {
        return usage("--prefix-groups must be at least 1");
    }
    if cfg.timeslice.is_some_and(|t| t.is_zero()) {
        return usage("--timeslice must be positive");
    }
    if cfg.scrape_interval.is_zero() {
        return usage("--scrape-interval must be positive");
    }
    if cfg.progress_every.is_zero() {
        return usage("--progress-every must be positive");
    }
    if cfg.runs == 0 {
        return usage("--runs must be at least 1");
    }
    if cfg.runs > 1 && (!cfg.replay.is_empty() || cfg.multi_turn || cfg.until.is_some()) {
        return usage(
            "--runs repeats a sweep of cells (buckets × --concurrency or --request-rate); not --replay, --multi-turn or --until",
        );
    }
    if cfg.max_turns == 0 {
        return usage("--max-turns must be at least 1");
    }
    let modes = [
        !cfg.replay.is_empty(),
        cfg.multi_turn,
        cfg.until.is_some() || !cfg.request_rates.is_empty(),
    ];
    if modes.iter().filter(|m| **m).count() > 1 {
        return usage(
            "--replay, --multi-turn and an open-loop or searched load are separate runs: choose one",
        );
    }
    if cfg.multi_turn && !cfg.arms.is_empty() {
        return usage("--multi-turn does not alternate experiment arms (--route-header)");
    }
    if !cfg.replay.is_empty() && !cfg.arms.is_empty() {
        return usage("--replay does not alternate experiment arms (--route-header)");
    }
    for b in &cfg.buckets {
        if !["long-short", "balanced", "short-long"].contains(&b.as_str()) {
            return Err(BenchError::Usage(format!(
                "--buckets: unknown bucket {b:?} (long-short, balanced, short-long)"
            )));
        }
    }
    Ok(())
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
