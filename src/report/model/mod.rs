//! The report as computed: its figures and verdicts as typed values. The renderers (text,
//! Markdown, JSON, HTML) only format them. NB: imports nothing else of the report; everything
//! the report computes or renders depends on it, never the other way round.

mod binding;
mod board;
mod class;
mod dist;
mod engine;
mod gateway;
mod scope;
mod shapes;
mod slo;
mod steady;

use std::collections::BTreeMap;

use serde::Serialize;

pub use binding::{BindPoint, Binding, Constraint, Figures as BindingFigures};
pub use board::{Added, BoardLevel, BoardRow, DeliveryCounts, LevelValue, PaceFrom, Sustained};
pub use class::Class;
pub use dist::{dist, Dist};
pub use engine::{Gauge, Hardware, Slice, Steady, SteadyClock, SteadyDist, Telemetry};
pub use gateway::{
    AcrossProcesses, ConcurrencyFrom, DiffStats, GatewayHop, GatewayTap, HopSet, OrderEffect,
    SelfReported, SplitStats, TapSet, UnjoinedBy,
};
pub use scope::{BadTime, Distributed, Window};
pub use shapes::{CacheBucket, CacheSplit, Method, PercentileMethod, ShapeRow, StreamRow, TurnRow};
pub use slo::{SloKind, SloP95, Slos};
pub use steady::{Figures, WholeCell, STEADY_MIN_REQUESTS};

#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub bucket: String,
    /// The experiment's arm; else the route, when generations came by more than one.
    pub arm: Option<String>,
    pub concurrency: String,
    /// Sort key for the concurrency label.
    pub level: u64,
    /// What the level is: a load generator's `concurrency`, live traffic's `in_flight` count
    /// (binned 1, 2, 3-4, 5-8, …) or an open loop's `request_rate`. Never mixed on one axis.
    pub axis: Axis,
    pub requests: usize,
    /// Service failures and throttled requests (429); never a client's 4xx.
    pub errors: usize,
    /// Of `errors`, those throttled (429).
    pub throttled: usize,
    /// Generations the client cancelled: counted apart, never held against the service (not
    /// in `goodput`'s share, not in the SLO verdicts).
    pub cancelled: usize,
    /// Streams the service failed or throttled among the requests the figures are of (the
    /// plateau's or the whole cell's): each is a miss for every latency SLO (`slo`).
    pub failed_streams: usize,
    /// Streams that came buffered: their TTFT includes a hop's hold and their TPOT is not a
    /// decode speed (docs/streaming.md). Absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub buffered_streams: usize,
    pub error_rate: f64,
    pub ttft_ms: Dist,
    pub tpot_ms: Dist,
    pub e2e_ms: Dist,
    /// Per-stream output tok/s = 1000 ÷ TPOT, per request.
    pub tok_s_per_stream: Dist,
    /// All output tokens ÷ the cell's wall time (first start to last end), across streams.
    pub aggregate_tok_s: Option<f64>,
    pub input_tokens_median: Option<f64>,
    pub output_tokens_median: Option<f64>,
    /// How the TTFT tail reads: see [`Tail`].
    pub tail: Tail,
    /// SLO name → met at p95, over the served requests with the figure and the failed streams,
    /// each failure beyond every threshold (a cell where every stream failed misses); an SLO
    /// with nothing to judge (nothing streamed) is absent: not judged.
    pub slo: BTreeMap<&'static str, bool>,
    /// Share of requests meeting the goodput SLO pair, of those the service served or failed
    /// (the client's cancels left out).
    pub goodput: f64,
    /// Where `ttft_ms`, `tpot_ms`, `e2e_ms`, `tok_s_per_stream`, `slo`, `goodput` and `tail`
    /// come from: the cell's plateau (`steady_state`, when it holds at least
    /// [`STEADY_MIN_REQUESTS`] requests and `--whole-cell` is not given) or the
    /// whole cell. `requests`, errors, tokens and `aggregate_tok_s` are always the whole cell's.
    pub figures: Figures,
    /// The whole cell's latency figures, when `figures` is the plateau's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub whole_cell: Option<WholeCell>,
    /// Where TTFT went, as medians over the cell's served requests; null when no record says.
    pub ttft_split: Option<SplitCell>,
    /// An open-loop cell (`bench --request-rate`): the offered arrival rate, requests a second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_rate: Option<f64>,
    /// An open-loop cell: the rate of its drawn schedule, (n − 1) ÷ first to last due time (a
    /// Poisson draw is not exactly the offered mean).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled_rate: Option<f64>,
    /// An open-loop cell: the rate the requests were sent at, (n − 1) ÷ first to last send.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub achieved_rate: Option<f64>,
    /// An open-loop cell: time requests waited for the client's `--max-concurrency`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_queue_ms: Option<Dist>,
    /// An open-loop cell: how late the client sent requests beyond their schedule and queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_lag_ms: Option<Dist>,
    /// The engine's and GPUs' figures over the cell, from bench's scrapes (`run.json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<Telemetry>,
    /// bench's own stall share over the cell (`run.json` `cells[].stall_share`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bench_stall_share: Option<f64>,
    /// bench's own reader lag p99 over the cell, ms (`run.json` `cells[].reader_lag_ms.p99`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bench_reader_lag_p99_ms: Option<f64>,
    /// `bench --timeslice`: the cell's windows, from `run.json`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeslices: Vec<Slice>,
    /// The cell's plateau: found from its records (`clock: "cell"`, ms since its first
    /// request), or bench's from `run.json` (`clock: "run"`, with the engine's figures over it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady_state: Option<Steady>,
}

/// Medians of the records' `ttft_split` (each over the records that have that part).
#[derive(Debug, Clone, Serialize)]
pub struct SplitCell {
    pub n: usize,
    pub proxy_ms: Option<f64>,
    pub upstream_headers_ms: Option<f64>,
    pub engine_queue_ms: Option<f64>,
    pub engine_prefill_ms: Option<f64>,
    pub outside_engine_ms: Option<f64>,
    /// What is missing and why, when a part is.
    pub missing: Option<String>,
}

/// What a cell's level is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    /// A load generator's concurrency (closed loop): exact levels.
    Concurrency,
    /// Live traffic: requests in flight on the route at admission, binned 1, 2, 3-4, 5-8, 9-16, …
    InFlight,
    /// A load generator's offered arrival rate (open loop).
    RequestRate,
}

/// How a cell's TTFT tail reads against its group's lowest level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Tail {
    /// p99 ≤ 1.5 × p50, near the lowest level's figure.
    #[serde(rename = "tight")]
    Tight,
    /// p99 > 1.5 × p50: some requests queue.
    #[serde(rename = "widening")]
    Widening,
    /// Tight, above `knee_factor` × the lowest level's p95, while aggregate throughput still
    /// rose (more than 10 % over the level below): contention, not saturation.
    #[serde(rename = "shifted")]
    Shifted,
    /// Tight, above `knee_factor` × the lowest level's p95, and aggregate throughput stopped
    /// rising (at most 10 % over the level below): saturation.
    #[serde(rename = "converged-high")]
    ConvergedHigh,
    /// No TTFT to read.
    #[serde(rename = "-")]
    Unknown,
}

impl Tail {
    pub fn as_str(self) -> &'static str {
        match self {
            Tail::Tight => "tight",
            Tail::Widening => "widening",
            Tail::Shifted => "shifted",
            Tail::ConvergedHigh => "converged-high",
            Tail::Unknown => "-",
        }
    }
}

/// Aggregate throughput "stopped rising": at most this much above the level below.
pub const SATURATION_RISE: f64 = 1.10;
/// Tokens per day are extrapolated only from a load generator's cell with at least this many
/// served requests.
pub const TOKENS_PER_DAY_MIN_REQUESTS: usize = 20;

#[derive(Debug, Clone, Serialize)]
pub struct Provision {
    pub bucket: String,
    /// SLO name → highest concurrency label meeting it (null: none does, or none was judged).
    pub ceiling: BTreeMap<&'static str, Option<String>>,
    /// The SLOs no level had a verdict for (no streamed request was served: no TTFT, no TPOT):
    /// their null ceiling says nothing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_judged: Vec<&'static str>,
    /// The highest level measured: a ceiling equal to it was not reached (`≥ C=4`).
    pub top: String,
    /// First concurrency whose p95 TTFT exceeds `knee_factor` × the C=1 value.
    pub knee: Option<String>,
    /// What happens at the highest level measured: `slower` (latency grows, no errors),
    /// `errors` (error rate ≥ 1 %), or `none`.
    pub failure_mode: FailureMode,
    /// Aggregate output tokens per day at the interactive ceiling: only from a load
    /// generator's cell with at least [`TOKENS_PER_DAY_MIN_REQUESTS`] served requests.
    pub tokens_per_day_at_interactive_ceiling: Option<f64>,
    /// Why there is no tokens-per-day figure, when there is a ceiling but no figure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_day_note: Option<String>,
    /// Why there is no tokens-per-day figure, as a value (`tokens_per_day_note` says it).
    #[serde(skip)]
    pub tokens_per_day_missing: Option<NoTokensPerDay>,
    /// `request_rate` when the levels are open-loop arrival rates (the ceilings and knee are
    /// then rates, `4/s`); absent for concurrency levels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub axis: Option<Axis>,
}

/// Why a ceiling has no tokens-per-day figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoTokensPerDay {
    /// Live traffic: an in-flight level is not a sustained load.
    Live,
    /// Fewer than [`TOKENS_PER_DAY_MIN_REQUESTS`] served requests at the ceiling (so many).
    TooFew(usize),
}

/// What happens at a group's highest level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// Latency grows, no errors.
    Slower,
    /// Error rate ≥ 1 %.
    Errors,
    None,
}

impl FailureMode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureMode::Slower => "slower",
            FailureMode::Errors => "errors",
            FailureMode::None => "none",
        }
    }
}

/// Where the records came from: a load generator's, live traffic's, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sources {
    Bench,
    Live,
    Mixed,
}

impl Sources {
    pub fn as_str(self) -> &'static str {
        match self {
            Sources::Bench => "bench",
            Sources::Live => "live",
            Sources::Mixed => "mixed",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct KeyRow {
    pub key_id: String,
    pub arm: Option<String>,
    /// Generations and client errors (4xx other than 429) by this key.
    pub requests: usize,
    /// Service failures and throttling over `requests`.
    pub error_rate: f64,
    /// Requests refused as the client's fault (4xx other than 429).
    pub client_errors: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub ttft_ms: Dist,
    pub tpot_ms: Dist,
    pub e2e_ms: Dist,
}

/// What the records were, before anything is judged (docs/report.md, "What is judged").
#[derive(Debug, Clone, Default, Serialize)]
pub struct Traffic {
    /// Generations: a generating shape the service answered or failed. Only these are judged.
    pub generation: usize,
    pub served: usize,
    pub cancelled: usize,
    /// Service failures: 5xx, timeouts, resets, cut or broken streams.
    pub failed: usize,
    /// Refused with 429.
    pub throttled: usize,
    /// A generating shape refused as the client's fault (4xx other than 429).
    pub client_errors: usize,
    /// Listings, probes, embeddings, other paths.
    pub other: usize,
    /// Served streams without usage: no input tokens, so no prompt-shape bucket (`unknown`).
    pub streams_without_usage: usize,
    pub streams_served: usize,
}

impl Traffic {
    pub(crate) fn of(classes: [usize; 6], streams: usize, no_usage: usize) -> Traffic {
        let n = |c: Class| classes[c as usize];
        Traffic {
            generation: n(Class::Served)
                + n(Class::Cancelled)
                + n(Class::Failed)
                + n(Class::Throttled),
            served: n(Class::Served),
            cancelled: n(Class::Cancelled),
            failed: n(Class::Failed),
            throttled: n(Class::Throttled),
            client_errors: n(Class::ClientError),
            other: n(Class::Other),
            streams_without_usage: no_usage,
            streams_served: streams,
        }
    }
}

/// The rule, as the report states it.
pub const JUDGED: &str = "Judged: generation requests only (chat, completions, Responses, Messages that the service answered or failed). Client errors (4xx other than 429) and other traffic (listings, probes, embeddings, other paths) are counted apart; failures (5xx, timeouts, resets, cut streams) and throttling (429) are counted apart from each other.";

/// How to get usage into streams, at the source.
pub const USAGE_FIX: &str = "have clients send stream_options.include_usage, or turn it on at the source: vLLM --enable-force-include-usage; LiteLLM general_settings.always_include_stream_usage: true";

/// A request that is not judged, counted by endpoint, method and status.
#[derive(Debug, Clone, Serialize)]
pub struct OtherRow {
    pub endpoint: String,
    pub method: String,
    pub status: u16,
    pub class: Class,
    pub requests: usize,
}

/// A verdict equals its name in the JSON (`failure_mode == "errors"`).
macro_rules! named {
    ($($t:ty),*) => {$(
        impl PartialEq<&str> for $t {
            fn eq(&self, name: &&str) -> bool {
                self.as_str() == *name
            }
        }
    )*};
}

named!(
    PaceFrom,
    Tail,
    FailureMode,
    Sources,
    SloKind,
    ConcurrencyFrom,
    BindPoint,
    PercentileMethod
);

/// One of the write-up's questions and its answer, in a sentence with its figure.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub question: &'static str,
    pub answer: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The write-up's questions answered in sentences, each with its figure.
    pub answers: Vec<Answer>,
    pub records: usize,
    /// `bench`, `live` or `mixed`.
    pub sources: Sources,
    /// `--since` / `--until`: the records are those of this window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// The distributed bench run the records make up, when its shards' `run.json` say so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distributed: Option<Distributed>,
    /// What the records were: generations (judged), client errors, other traffic.
    pub traffic: Traffic,
    /// The rule for what is judged, in one line.
    pub judged: &'static str,
    /// How the percentiles were computed: `exact` nearest rank, or `hdr` sketches with their
    /// stated error bound (when the values outgrew `report --exact-values`).
    pub percentiles: Method,
    pub slos: Slos,
    pub cells: Vec<Cell>,
    pub in_flight: Dist,
    pub provisioning: Vec<Provision>,
    pub keys: Vec<KeyRow>,
    /// Present when records carry the two experiment arms.
    pub gateway_hop: Option<GatewayHop>,
    /// Present when records come from a gateway tap (routes `behind` a gateway).
    pub gateway_tap: Option<GatewayTap>,
    /// The gateway board: per gateway arm, what it adds to a stream against the baseline arm,
    /// paired by prompt; present when records with a pair id carry two arms or more.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gateway_board: Vec<BoardRow>,
    /// Why the board holds no row though records carry arms (no baseline arm), when so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_board_not_judged: Option<String>,
    /// Per API shape (`chat`, `completions`, `responses`, `messages`, `embeddings`, `other`).
    pub by_api: BTreeMap<String, ShapeRow>,
    /// Per prompt-shape bucket, pooled over concurrency levels and arms.
    pub by_bucket: BTreeMap<String, ShapeRow>,
    /// TTFT by prefix-cache hit vs miss, when usage carries `cached_tokens`.
    pub prefix_cache: Option<CacheSplit>,
    /// Per conversation turn (`bench --multi-turn`): where prefix caching pays.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub by_turn: BTreeMap<String, TurnRow>,
    /// Requests not judged (client errors and other traffic), by endpoint, method and status.
    pub other_traffic: Vec<OtherRow>,
    /// Is it really streaming? How each route's (and arm's) streams arrived.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub streaming: Vec<StreamRow>,
    /// One GPU's peaks, from `run.json` (`bench --gpu`, `--peak-bandwidth`, `--peak-flops`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hardware: Option<Hardware>,
    /// Per bucket, what binds at its knee or ceiling (when bench scraped the engine).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub binding: Vec<Binding>,
    /// A repeated sweep (`bench --runs N`): per cell, each run's figures and their spread
    /// across runs (mean, sd, CV, 95 % t-interval).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<crate::spread::CellSpread>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each verdict's `as_str()` (what the renderers print) is its name in the JSON, so a
    /// rename on one side cannot drift from the other.
    #[test]
    fn verdicts_are_named_as_in_the_json() {
        fn check<T: Serialize + Copy + PartialEq<&'static str>>(
            all: &[T],
            str: fn(T) -> &'static str,
        ) {
            for v in all {
                let json = serde_json::to_string(v).unwrap_or_default();
                assert_eq!(json, format!("\"{}\"", str(*v)));
                assert!(*v == str(*v));
            }
        }
        use Tail::*;
        check(
            &[Tight, Widening, Shifted, ConvergedHigh, Unknown],
            Tail::as_str,
        );
        check(
            &[FailureMode::Slower, FailureMode::Errors, FailureMode::None],
            FailureMode::as_str,
        );
        check(
            &[Sources::Bench, Sources::Live, Sources::Mixed],
            Sources::as_str,
        );
        check(&[SloKind::Ttft, SloKind::TokS], SloKind::as_str);
        check(
            &[ConcurrencyFrom::LoadGenerator, ConcurrencyFrom::InFlight],
            ConcurrencyFrom::as_str,
        );
        check(
            &[BindPoint::Knee, BindPoint::Slo, BindPoint::Top],
            BindPoint::as_str,
        );
        check(
            &[PaceFrom::Flag, PaceFrom::BaselineItl, PaceFrom::Unknown],
            PaceFrom::as_str,
        );
        check(
            &[PercentileMethod::Exact, PercentileMethod::Hdr],
            PercentileMethod::as_str,
        );
        // Provisioning's axis is the cells' axis, by the same names.
        let axis = serde_json::to_string(&Some(Axis::RequestRate)).unwrap_or_default();
        assert_eq!(axis, "\"request_rate\"");
    }
}
