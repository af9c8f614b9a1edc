//! `tokentap bench`: a closed-loop load generator. Prompt-shape buckets × a concurrency sweep,
//! seeded, with warm-up, measured on its own clock with the proxy's definitions (the same
//! `Meter`), raw records persisted to `requests.jsonl`, the run described in `run.json`.
//! Errors are counted per cell and never abort the sweep; Ctrl-C keeps what was measured.

pub mod cli;
pub mod dataset;
mod runner;
pub mod summary;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

pub use cli::{cli, Args};
pub use runner::Target;

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
        }
    }
}

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
    pub bucket: &'static str,
    pub concurrency: usize,
    pub measured: usize,
    pub errors: usize,
    pub wall_s: f64,
    pub output_tokens: u64,
    /// Total output tokens ÷ wall time across all streams of the cell (not per stream).
    pub aggregate_tok_s: f64,
}

#[derive(Debug, Serialize)]
pub struct Overhead {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub how: &'static str,
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
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Run a whole sweep; `stop` ends it early (Ctrl-C), keeping what was measured.
pub async fn run(cfg: &BenchConfig, stop: Arc<AtomicBool>) -> Result<RunInfo, BenchError> {
    if cfg.concurrency.is_empty() || cfg.concurrency.contains(&0) {
        return Err(BenchError::Usage(
            "--concurrency needs positive levels, e.g. 1,2,4,8".into(),
        ));
    }
    if cfg.requests == 0 {
        return Err(BenchError::Usage("--requests must be at least 1".into()));
    }
    let (prompts, dataset_name) = match &cfg.synthetic {
        Some(lengths) => (
            dataset::synthetic(lengths, 8),
            format!("synthetic {lengths:?} tokens"),
        ),
        None => dataset::load(cfg.dataset.as_deref())?,
    };
    let specs = dataset::buckets(cfg.short_max, cfg.long_min, cfg.outputs);
    let chosen = dataset::choose(&prompts, &specs, cfg.seed, cfg.prompts_per_bucket);
    let hash = dataset::prompt_set_sha256(&chosen);
    let mut target = Target::new(
        &cfg.target,
        cfg.api_key.as_ref().map(|k| k.expose().clone()),
        cfg.headers.clone(),
    )
    .map_err(|e| BenchError::Target(cfg.target.clone(), e))?;
    target.api = cfg.api;
    let model = match &cfg.model {
        Some(m) => m.clone(),
        None => target
            .first_model()
            .await
            .map_err(|e| BenchError::Target(cfg.target.clone(), e))?,
    };
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
    if !cfg.quiet {
        eprintln!(
            "tokentap bench → {} model {model}; {} prompts, seed {}, prompt set sha256 {hash}",
            cfg.target,
            chosen.iter().map(|c| c.prompts.len()).sum::<usize>(),
            cfg.seed
        );
    }

    let records_path = cfg.out.join("requests.jsonl");
    let mut writer =
        std::io::BufWriter::new(std::fs::File::create(&records_path).map_err(|source| {
            BenchError::Io {
                path: records_path.display().to_string(),
                source,
            }
        })?);
    let mut cells = Vec::new();
    let mut all = Vec::new();
    let progress = runner::Progress::new(cfg.quiet);
    'sweep: for c in &chosen {
        if c.prompts.is_empty() {
            progress.line(&format!(
                "bucket {}: no prompts in this dataset — skipped",
                c.spec.name
            ));
            continue;
        }
        for &conc in &cfg.concurrency {
            if stop.load(Ordering::Relaxed) {
                break 'sweep;
            }
            let cell = runner::run_cell(&target, &model, c, conc, cfg, &stop, &progress).await;
            let out_tokens: u64 = cell.records.iter().filter_map(|r| r.output_tokens).sum();
            for r in &cell.records {
                use std::io::Write;
                let line = serde_json::to_string(r).unwrap_or_default();
                let _ = writeln!(writer, "{line}");
            }
            cells.push(CellInfo {
                bucket: c.spec.name,
                concurrency: conc,
                measured: cell.records.len(),
                errors: cell.errors,
                wall_s: cell.wall_s,
                output_tokens: out_tokens,
                aggregate_tok_s: if cell.wall_s > 0.0 {
                    out_tokens as f64 / cell.wall_s
                } else {
                    0.0
                },
            });
            all.extend(cell.records);
        }
    }
    {
        use std::io::Write;
        writer.flush().map_err(|source| BenchError::Io {
            path: records_path.display().to_string(),
            source,
        })?;
    }
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
    let info = RunInfo {
        tool: "tokentap bench",
        tool_version: env!("CARGO_PKG_VERSION"),
        target: cfg.target.clone(),
        model,
        dataset: dataset_name,
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
        cells,
    };
    let run_path = cfg.out.join("run.json");
    let json = serde_json::to_string_pretty(&info).unwrap_or_default();
    std::fs::write(&run_path, json + "\n").map_err(|source| BenchError::Io {
        path: run_path.display().to_string(),
        source,
    })?;
    if !cfg.quiet {
        println!("{}", summary::table(&all, &info));
    }
    Ok(info)
}
