//! `tokentap bench`'s flags as clap reads them: every flag, its help and its default. What
//! they mean for a run is read in `flags.rs`.

use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Base URL of an OpenAI-compatible server (tokentap, vLLM, LiteLLM).
    #[arg(long)]
    pub target: String,
    /// Output folder (requests.jsonl, run.json). One that already holds a run is refused
    /// unless --force: it may be a comparison's baseline.
    #[arg(long)]
    pub out: PathBuf,
    /// Overwrite the run already in --out.
    #[arg(long)]
    pub force: bool,
    /// Fail the run (exit 1) when a cell fails more than this share of its requests: 0.05 or
    /// 5%. Without it, a run fails only when a cell serves no request at all.
    #[arg(long, value_parser = parse_share)]
    pub max_error_rate: Option<f64>,
    /// ShareGPT JSON file; default: the bundled sample.
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// Synthetic prompts of these token lengths instead of a dataset (e.g. 1019,558,127).
    #[arg(long, value_delimiter = ',')]
    pub synthetic: Option<Vec<u64>>,
    /// Seed of the prompt sample, the arrivals and the arm order: the same seed, the same run.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Concurrency levels of the closed-loop sweep: requests in flight at once [default:
    /// 1,2,4,8]. Not with --request-rate, whose cap on requests in flight is
    /// --max-concurrency.
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Option<Vec<usize>>,
    /// Measured requests per cell.
    #[arg(long, default_value_t = 30)]
    pub requests: usize,
    /// Warm-up requests per cell (not recorded).
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Model name; default: the first of GET /v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// Environment variable holding the bearer key.
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,
    /// Send ignore_eos + min_tokens so output length is exact (vLLM extension).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub fixed_output: bool,
    /// Ask for streamed answers (default). --stream false sends "stream": false and measures
    /// each whole JSON body: E2E and tokens from its usage; no TTFT, TPOT or ITL (null).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub stream: bool,
    /// Prompts under this many (estimated) tokens are "short".
    #[arg(long, default_value_t = 200)]
    pub short_max: u64,
    /// Prompts from this many tokens are "long".
    #[arg(long, default_value_t = 700)]
    pub long_min: u64,
    /// Output tokens for long-short, balanced, short-long.
    #[arg(long, value_delimiter = ',', default_value = "64,256,512")]
    pub outputs: Vec<u64>,
    /// Prompts drawn from the dataset for each prompt-shape bucket.
    #[arg(long, default_value_t = 50)]
    pub prompts_per_bucket: usize,
    /// Skip measuring this client's own overhead against a server that answers at once.
    #[arg(long)]
    pub no_calibrate: bool,
    /// Send each prompt through every experiment arm (--arms), choosing the arm with this
    /// request header (tokentap's `experiment.route_header`, e.g. x-tokentap-route). Each
    /// group's copies go in the order of a balanced Latin square's row (two arms: ABBA), so no
    /// arm always goes first.
    #[arg(long)]
    pub route_header: Option<String>,
    /// The API shape to send: chat, completions, responses (OpenAI's Responses API) or messages
    /// (Anthropic's Messages API).
    #[arg(long, value_enum, default_value = "chat")]
    pub api: BenchApi,
    /// The arm (route) names for --route-header: two or more, distinct. --requests and
    /// --warmup count copies and are rounded up to whole groups (one copy per arm): 30 with 4
    /// arms is 32.
    /// Default with --route-header: direct,gateway.
    #[arg(long, value_delimiter = ',')]
    pub arms: Option<Vec<String>>,
    /// The baseline arm, one of --arms (recorded in run.json) [default: direct if it is an
    /// arm, else the first].
    #[arg(long)]
    pub baseline: Option<String>,
    /// Add "cache_salt": "<pair_id>-<arm>" to each request's JSON body (vLLM's per-request
    /// prefix-cache isolation), so no arm's copy reads another's cached prompt. For gateways
    /// that forward it; an engine without prefix caching needs none.
    #[arg(long)]
    pub cache_salt: bool,
    /// Read this arm's own CPU seconds and peak RSS from /proc while the run lasts: NAME=PID,
    /// the process and its descendants (repeatable; NAME one of --arms).
    #[arg(long, value_name = "NAME=PID")]
    pub arm_pid: Vec<String>,
    /// Read this arm's CPU seconds and peak memory from a cgroup v2 directory: NAME=PATH
    /// (cpu.stat, memory.peak; repeatable; NAME one of --arms).
    #[arg(long, value_name = "NAME=PATH")]
    pub arm_cgroup: Vec<String>,
    /// Only these buckets (long-short, balanced, short-long).
    #[arg(long, value_delimiter = ',')]
    pub buckets: Vec<String>,
    /// Open loop: requests arrive at these rates (requests a second), one cell each, instead of
    /// the concurrency sweep; they start on schedule whether or not earlier ones finished.
    #[arg(long, value_delimiter = ',')]
    pub request_rate: Vec<f64>,
    /// The open loop's arrival process.
    #[arg(long, value_enum, default_value = "poisson")]
    pub arrival: super::Process,
    /// With --arrival gamma: its shape K (gaps' coefficient of variation 1/√K; K < 1 is
    /// burstier than Poisson, K = 1 is Poisson).
    #[arg(long)]
    pub burstiness: Option<f64>,
    /// The open loop's cap on requests in flight; a request that finds it full waits, and the
    /// wait is recorded as client queue time (client_queue_ms), not TTFT.
    #[arg(long)]
    pub max_concurrency: Option<usize>,
    /// Saturation search: step the level up (concurrency, or the rate with --request-rate)
    /// until this breaks, then refine: slo:NAME (slo:interactive, …), errors, ttft_p95_ms:N.
    #[arg(long)]
    pub until: Option<String>,
    /// The search's highest level (default 256 in flight, or 1000 req/s).
    #[arg(long)]
    pub max_level: Option<f64>,
    /// The search's or replay's time bound (e.g. 30m).
    #[arg(long, default_value = "30m")]
    pub max_time: humantime::Duration,
    /// SLO thresholds for --until slo:NAME (the report's --slo file).
    #[arg(long)]
    pub slo: Option<PathBuf>,
    /// Replay recorded traffic: tokentap logs (files or folders, .gz too) or a Mooncake trace.
    #[arg(long, num_args = 1..)]
    pub replay: Vec<PathBuf>,
    /// Replay time scale: 2 sends the same traffic twice as fast.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Replay only this slice: FROM..TO, each an offset from the first request (10m) or an RFC
    /// 3339 time; either may be left out.
    #[arg(long)]
    pub window: Option<String>,
    /// A shared system prompt of this many tokens on every request of a bucket.
    #[arg(long, default_value_t = 0)]
    pub shared_prefix: u64,
    /// Distinct shared prefixes per bucket (requests take them in turn).
    #[arg(long, default_value_t = 1)]
    pub prefix_groups: usize,
    /// Send ShareGPT conversations turn by turn, each request with the history so far (default
    /// dataset: the bundled conversations); --concurrency is conversations in flight.
    #[arg(long)]
    pub multi_turn: bool,
    /// Mean think time between turns (exponential, seeded; 0 for none).
    #[arg(long, default_value = "1s")]
    pub think_time: humantime::Duration,
    /// At most this many turns of a conversation.
    #[arg(long, default_value_t = 8)]
    pub max_turns: usize,
    /// Send no probe requests before the load: no estimate, and the ETA waits for the first
    /// cell.
    #[arg(long)]
    pub no_estimate: bool,
    /// Scrape these Prometheus endpoints during every cell (vLLM's or SGLang's /metrics, a DCGM
    /// exporter, …); default: the target's own /metrics when it answers with vLLM's or SGLang's
    /// metrics; `off` for none. Raw samples go to DIR/scrape.jsonl, per-cell summaries to
    /// run.json. Credentials in a URL are used, never written.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    pub scrape: Vec<String>,
    /// How often to scrape (each cell's start and end are scraped too).
    #[arg(long, default_value = "1s")]
    pub scrape_interval: humantime::Duration,
    /// Summarise this metric per cell too (counter: rate; else mean, peak, p95), besides the
    /// known vLLM, SGLang and DCGM names.
    #[arg(long, value_delimiter = ',')]
    pub scrape_metric: Vec<String>,
    /// The GPU, for its published peak bandwidth and FLOP/s (MBU, MFU): v100, a100-40g,
    /// a100-80g, h100-sxm, h100-pcie, h200, l40s, l4, mi300x (docs/hardware.md).
    #[arg(long)]
    pub gpu: Option<String>,
    /// One GPU's peak memory bandwidth, GB/s (overrides --gpu's).
    #[arg(long)]
    pub peak_bandwidth: Option<f64>,
    /// One GPU's peak dense FLOP/s, TFLOP/s (overrides --gpu's).
    #[arg(long)]
    pub peak_flops: Option<f64>,
    /// Serve bench's own metrics while it runs, in Prometheus' text format on GET /metrics:
    /// requests sent, in flight, finished and in error, the open loop's schedule lag, and the
    /// cell under way (e.g. 127.0.0.1:9091).
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// Cut each cell into windows this long (e.g. 1s): per window its requests' TTFT p95 and
    /// TPOT p50, output tok/s and the engine's KV usage, running and waiting (run.json
    /// cells[].timeslices; the HTML report charts them over time).
    #[arg(long)]
    pub timeslice: Option<humantime::Duration>,
    /// Repeat the whole sweep N times; run r visits the cells rotated left by ⌊(r−1)·K÷N⌋ of
    /// its K cells, so drift spreads over all of them. Records carry `run`; run.json and the
    /// report give each cell's run-to-run spread (mean, sd, CV, 95 % t-interval over runs), and
    /// compare takes its intervals from the runs. A sweep's only (not --until, --replay or
    /// --multi-turn).
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Run shard I of N of one distributed run (I from 1; N alone in a Kubernetes Indexed Job
    /// takes I from JOB_COMPLETION_INDEX): every shard computes the one plan and sends every
    /// N-th request of each cell (C ÷ N workers, --requests ÷ N, the rate ÷ N), into
    /// OUT/shard-I-of-N. A closed or open sweep; needs --start-at and --cell-window.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Begin the first cell at this wall-clock time (RFC 3339, UTC: 2026-12-05T10:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
    /// With --start-at: cell k begins at --start-at + k × this (e.g. 90s), on every shard; a
    /// cell that begins late (the one before ran over) is said on stderr and in run.json.
    #[arg(long, value_name = "DURATION")]
    pub cell_window: Option<humantime::Duration>,
    /// The run's id, in every record and in run.json (default: from --start-at, so every
    /// shard of a run has the same; else drawn at random).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Also insert every record into ClickHouse, into the table of
    /// deploy/clickhouse/schema.sql as serve's [clickhouse] does:
    /// http[s]://[USER[:PASSWORD]@]HOST:PORT (else CLICKHOUSE_USER, CLICKHOUSE_PASSWORD).
    #[arg(long, value_name = "URL")]
    pub clickhouse: Option<String>,
    /// The table --clickhouse inserts into.
    #[arg(long, value_name = "[DB.]TABLE", default_value = "default.requests")]
    pub clickhouse_table: String,
    /// Print a progress line after this long without one (a terminal's bar is redrawn instead).
    #[arg(long, default_value = "10s", hide = true)]
    pub progress_every: humantime::Duration,
}

/// A share: `0.05` or `5%`, from 0 to 1.
fn parse_share(s: &str) -> Result<f64, String> {
    let v = match s.trim().strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => s.trim().parse::<f64>(),
    }
    .map_err(|_| format!("{s:?}: a share, e.g. 0.05 or 5%"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{s:?}: a share from 0 to 1 (0 % to 100 %)"))
    }
}

/// `--api`: the shapes bench can send.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum BenchApi {
    Chat,
    Completions,
    Responses,
    Messages,
}

impl From<BenchApi> for crate::openai::Api {
    fn from(a: BenchApi) -> Self {
        match a {
            BenchApi::Chat => crate::openai::Api::Chat,
            BenchApi::Completions => crate::openai::Api::Completions,
            BenchApi::Responses => crate::openai::Api::Responses,
            BenchApi::Messages => crate::openai::Api::Messages,
        }
    }
}
