//! What a bench run is asked: the settings every load shares ([`Common`]) and the load with
//! its own ([`Load`]: a closed or open sweep, a search, a replay, conversations). The CLI
//! (`flags.rs`) and the demo fill it; the plan (`plan.rs`) takes each load's settings into its
//! variant, so that a stage reads only the settings of the load it sends. Nothing here does I/O.

use std::path::PathBuf;
use std::time::Duration;

use super::until::Until;
use super::window::Window;
use crate::bench::arrival::{Arrivals, Process};
use crate::bench::resources::Watch;
pub use crate::bench::scrape::Scraping;
use crate::report::engine::Hardware;

/// A run: the shared settings and the load.
#[derive(Debug, Clone, Default)]
pub struct Bench {
    pub common: Common,
    pub load: Load,
}

/// What every load reads: where requests go and how they are made, the prompts, what is said
/// while it runs, what is scraped, where it is written and how it is judged.
#[derive(Debug, Clone)]
pub struct Common {
    pub target: String,
    pub out: PathBuf,
    /// Write into an output folder that already holds a run (`--force`).
    pub force: bool,
    pub model: Option<String>,
    pub api_key: Option<crate::keys::Secret<String>>,
    /// Extra request headers (e.g. the experiment route header).
    pub headers: Vec<(String, String)>,
    /// The API shape to send requests in (`chat` by default).
    pub api: crate::openai::Api,
    /// The prompt sample's, the arrivals', the arm order's and the think times' seed.
    pub seed: u64,
    pub fixed_output: bool,
    /// Ask for streamed answers (`--stream`, default); false: whole JSON bodies, measured
    /// without TTFT, TPOT or ITL (DESIGN: a non-streaming response has none).
    pub stream: bool,
    /// Measure this client's own overhead first (`--no-calibrate` turns it off).
    pub calibrate: bool,
    /// Measured and warm-up requests per cell (a replay sends its recorded ones).
    pub requests: usize,
    pub warmup: usize,
    pub prompts: PromptSpec,
    pub quiet: bool,
    /// Before the load, send one probe request per bucket (not recorded) for an estimate of the
    /// run's length; never when quiet. Without it the ETA waits for the first cell.
    pub estimate: bool,
    /// Without a line for this long, a heartbeat line (on a terminal, the bar redrawn).
    pub progress_every: Duration,
    /// Serve bench's own counters here while it runs (`--metrics-listen`).
    pub metrics_listen: Option<String>,
    pub scrape: Scraping,
    /// One GPU's name and peaks, for MBU and MFU (`--gpu`, `--peak-*`).
    pub hardware: Hardware,
    /// Cut each cell into windows of this length (`--timeslice`).
    pub timeslice: Option<Duration>,
    /// A cell failing a larger share of its requests fails the run (`--max-error-rate`).
    pub max_error_rate: Option<f64>,
    /// The run's place in a fleet: its shard, the common windows, the run id (`--shard`,
    /// `--start-at`, `--cell-window`, `--run-id`).
    pub fleet: crate::bench::shard::Fleet,
    /// Also insert every record into ClickHouse (`--clickhouse URL`, `--clickhouse-table`).
    pub clickhouse: Option<(String, String)>,
}

/// The prompts: where they come from, how they are sorted into buckets, and the shared system
/// prompts they carry (a replay's requests carry their own).
#[derive(Debug, Clone)]
pub struct PromptSpec {
    pub dataset: Option<PathBuf>,
    pub synthetic: Option<Vec<u64>>,
    pub short_max: u64,
    pub long_min: u64,
    pub outputs: [u64; 3],
    pub prompts_per_bucket: usize,
    /// Only these buckets (all three when empty).
    pub buckets: Vec<String>,
    /// A shared system prompt of this many tokens on every request of a bucket (0: none).
    pub shared_prefix: u64,
    /// Distinct shared prefixes per bucket.
    pub prefix_groups: usize,
}

/// The load a run sends, with the settings only it reads.
#[derive(Debug, Clone)]
pub enum Load {
    /// Every bucket at every concurrency.
    Closed(Closed),
    /// Every bucket at every arrival rate (`--request-rate`).
    Open(Open),
    /// Levels stepped up until a criterion breaks (`--until`).
    Search(Search),
    /// Recorded traffic on its own schedule (`--replay`).
    Replay(Replay),
    /// Conversations turn by turn (`--multi-turn`).
    Conversations(Conversations),
}

/// A closed-loop sweep: its concurrencies, repeated `runs` times, through the arms.
#[derive(Debug, Clone)]
pub struct Closed {
    pub concurrency: Vec<usize>,
    /// Repeat the sweep this many times, each run visiting the cells in a rotated order.
    pub runs: u32,
    pub experiment: Experiment,
}

/// An open-loop sweep: its arrival rates, repeated `runs` times, through the arms.
#[derive(Debug, Clone)]
pub struct Open {
    pub rates: OpenLoop,
    pub runs: u32,
    pub experiment: Experiment,
}

/// How an open loop's requests arrive: the rates (requests a second), the process, the cap.
#[derive(Debug, Clone)]
pub struct OpenLoop {
    pub rates: Vec<f64>,
    pub arrivals: Arrivals,
    /// The cap on requests in flight (none: unbounded).
    pub max_concurrency: Option<usize>,
}

/// A saturation search: what it steps up, until what breaks, how far and how long.
#[derive(Debug, Clone)]
pub struct Search {
    pub until: Until,
    pub over: SearchOver,
    /// The highest level (a concurrency, or a rate).
    pub max_level: Option<f64>,
    /// The search's time bound.
    pub max_time: Duration,
    /// The knee: the first level whose p95 TTFT exceeds this multiple of the first's (the SLO
    /// file's `knee_factor`).
    pub knee_factor: f64,
    pub experiment: Experiment,
}

/// A search's levels: concurrencies from the lowest given, or rates from the lowest given.
#[derive(Debug, Clone)]
pub enum SearchOver {
    Concurrency(Vec<usize>),
    Rate(OpenLoop),
}

/// A replay: the logs or traces, their time scale and slice, its time bound, its cap.
#[derive(Debug, Clone)]
pub struct Replay {
    pub files: Vec<PathBuf>,
    /// Time scale: 2 = twice as fast.
    pub speed: f64,
    /// Replay only this slice.
    pub window: Option<Window>,
    pub max_time: Duration,
    /// The cap on requests in flight (none: unbounded).
    pub max_concurrency: Option<usize>,
}

/// Conversations turn by turn: how many in flight, the think time, the turns.
#[derive(Debug, Clone)]
pub struct Conversations {
    pub concurrency: Vec<usize>,
    /// Mean think time between turns (exponential, seeded).
    pub think_time: Duration,
    pub max_turns: usize,
}

/// Two or more arms (name, path prefix under the target), each prompt sent through every one
/// in the order of a balanced Latin square (two arms: ABBA); no arms = one arm, the target.
#[derive(Debug, Clone, Default)]
pub struct Experiment {
    pub arms: Vec<(String, String)>,
    /// The baseline arm (`--baseline`; default: `direct` if it is an arm, else the first).
    pub baseline: Option<String>,
    /// Add `"cache_salt": "<pair_id>-<arm>"` to each arm's copy (`--cache-salt`).
    pub cache_salt: bool,
    /// Arms whose CPU and memory are read while the run lasts (`--arm-pid`, `--arm-cgroup`).
    pub watch: Vec<Watch>,
    /// Choose the arm with this request header instead of a path prefix.
    pub route_header: Option<String>,
}

/// The concurrency levels when none are given.
pub const CONCURRENCY: [usize; 4] = [1, 2, 4, 8];
/// A search's or replay's time bound when none is given.
pub const MAX_TIME: Duration = Duration::from_secs(30 * 60);

impl Default for Common {
    fn default() -> Self {
        Common {
            target: "http://127.0.0.1:8080".into(),
            out: PathBuf::from("bench-out"),
            force: false,
            model: None,
            api_key: None,
            headers: Vec::new(),
            api: crate::openai::Api::Chat,
            seed: 42,
            fixed_output: true,
            stream: true,
            calibrate: true,
            requests: 30,
            warmup: 5,
            prompts: PromptSpec::default(),
            quiet: false,
            estimate: true,
            progress_every: Duration::from_secs(10),
            metrics_listen: None,
            scrape: Scraping::default(),
            hardware: Hardware::default(),
            timeslice: None,
            max_error_rate: None,
            fleet: Default::default(),
            clickhouse: None,
        }
    }
}

impl Default for PromptSpec {
    fn default() -> Self {
        PromptSpec {
            dataset: None,
            synthetic: None,
            short_max: 200,
            long_min: 700,
            outputs: [64, 256, 512],
            prompts_per_bucket: 50,
            buckets: Vec::new(),
            shared_prefix: 0,
            prefix_groups: 1,
        }
    }
}

impl Load {
    /// A closed sweep at these concurrencies, once, without arms.
    pub fn closed(concurrency: Vec<usize>) -> Load {
        Load::Closed(Closed {
            concurrency,
            ..Closed::default()
        })
    }
}

impl Default for Load {
    fn default() -> Self {
        Load::Closed(Closed::default())
    }
}

impl Default for Closed {
    fn default() -> Self {
        Closed {
            concurrency: CONCURRENCY.to_vec(),
            runs: 1,
            experiment: Experiment::default(),
        }
    }
}

impl Default for Open {
    fn default() -> Self {
        Open {
            rates: OpenLoop::default(),
            runs: 1,
            experiment: Experiment::default(),
        }
    }
}

impl Default for OpenLoop {
    fn default() -> Self {
        OpenLoop {
            rates: vec![1.0],
            arrivals: Arrivals {
                process: Process::Poisson,
                burstiness: 1.0,
                seed: 42,
            },
            max_concurrency: None,
        }
    }
}

impl Default for Replay {
    fn default() -> Self {
        Replay {
            files: Vec::new(),
            speed: 1.0,
            window: None,
            max_time: MAX_TIME,
            max_concurrency: None,
        }
    }
}

impl Default for Conversations {
    fn default() -> Self {
        Conversations {
            concurrency: CONCURRENCY.to_vec(),
            think_time: Duration::from_secs(1),
            max_turns: 8,
        }
    }
}

impl Search {
    /// A search until `until` breaks, over concurrencies from 1, with the default bounds.
    pub fn until(until: Until) -> Search {
        Search {
            until,
            over: SearchOver::Concurrency(CONCURRENCY.to_vec()),
            max_level: None,
            max_time: MAX_TIME,
            knee_factor: crate::report::Slos::default().knee_factor,
            experiment: Experiment::default(),
        }
    }
}

impl Experiment {
    /// Arms chosen by the route header `header`, each named, under the target itself.
    pub fn by_header(header: &str, arms: &[&str]) -> Experiment {
        Experiment {
            arms: arms
                .iter()
                .map(|a| (a.to_string(), String::new()))
                .collect(),
            route_header: Some(header.into()),
            ..Experiment::default()
        }
    }
}

impl Bench {
    /// A closed sweep of `target` at the default levels, written to `out`; the rest default.
    pub fn new(target: impl Into<String>, out: impl Into<PathBuf>) -> Bench {
        Bench {
            common: Common {
                target: target.into(),
                out: out.into(),
                ..Common::default()
            },
            load: Load::default(),
        }
    }

    /// The experiment's arms, for the loads that alternate them (a sweep or a search).
    pub fn experiment(&self) -> Option<&Experiment> {
        match &self.load {
            Load::Closed(c) => Some(&c.experiment),
            Load::Open(o) => Some(&o.experiment),
            Load::Search(s) => Some(&s.experiment),
            Load::Replay(_) | Load::Conversations(_) => None,
        }
    }
}
