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
//!
//! Laid out as the report is: `model/` is the run as asked (`Bench`: the shared settings and
//! the load with its own), `plan.rs` takes it into a `Plan`, `run.rs` runs it, `stage/` sends
//! the loads (each handed what it reads), `view/` writes `run.json` and the table.
// The process clock is this module's own: bench times requests on its own client-side clock, and dates its run.
#![allow(clippy::disallowed_methods)]

pub mod args;
pub mod arms;
pub mod arrival;
mod cell;
pub mod cli;
pub mod clickhouse;
pub mod dataset;
mod estimate;
mod flags;
mod forecast;
pub mod gpu;
mod info;
mod live;
pub mod model;
mod plan;
mod progress;
pub mod request;
pub mod resources;
mod run;
mod runner;
pub mod scrape;
mod session;
pub mod shard;
mod slices;
mod stage;
mod stall;
mod stamped;
mod steady;
pub mod verdict;
pub mod view;

pub use args::Args;
pub use arrival::{Arrivals, Process};
pub use cli::cli;
pub use info::{
    BucketInfo, CellInfo, LagStats, LoadInfo, OpenInfo, RunInfo, ScrapeInfo, TokenStats,
};
pub use model::settings;
pub use model::settings::{
    Bench, Closed, Common, Conversations, Experiment, Load, Open, OpenLoop, PromptSpec, Replay,
    Scraping, Search, SearchOver,
};
pub use model::until::Until;
pub use runner::{Overhead, Target};
pub use stage::replay;
pub use stage::search::SaturationInfo;
pub use view::summary;

pub use run::run;

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
    /// `--clickhouse`: rows not inserted (the records are in the run folder).
    #[error("{0}")]
    ClickHouse(String),
}
