//! `tokentap report`: request records (bench folders, live proxy logs, rotated files, several
//! replicas) → per bucket × concurrency tables, tail reading, SLO verdicts, provisioning answers,
//! per-key accounting; rendered as a terminal table, Markdown, JSON or one self-contained HTML
//! file with SVG charts. Percentiles come from exact sorted values, so merging files gives the
//! same answer as one file with the same records.

mod acc;
pub mod answers;
pub mod cli;
pub mod clickhouse;
mod clock;
mod fast;
pub mod hop;
mod html;
mod json;
mod names;
pub mod read;
mod render;
pub mod row;
mod scan;
mod sections;
pub mod shapes;
mod slo;
pub mod sql;
mod svg;
pub mod tap;
pub mod values;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::meter::RequestRecord;
use crate::stats::pct;

pub use acc::{Acc, DEFAULT_EXACT_VALUES};
pub use row::Class;
use row::Row;
use values::Values;

pub use cli::{cli, Args};
pub use read::load;
pub use render::{render, Format};
pub use slo::{missed, Slos};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}: no .jsonl records found")]
    Empty(String),
    #[error("{paths}: no readable record{skipped}")]
    NoRecords { paths: String, skipped: String },
    #[error("{file}: {key}: {message}")]
    Slo {
        file: String,
        key: String,
        message: String,
    },
}

/// Concurrency label of a record: bench's level, or the live in-flight count bucketed
/// 1, 2, 3–4, 5–8, 9–16, …
pub fn level(r: &RequestRecord) -> (u64, String) {
    row::level_of(r.concurrency, r.in_flight)
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Dist {
    pub n: usize,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

pub fn dist(values: impl Iterator<Item = f64>) -> Dist {
    let v = crate::stats::sorted(values);
    Dist {
        n: v.len(),
        p50: pct(&v, 0.5),
        p95: pct(&v, 0.95),
        p99: pct(&v, 0.99),
        max: v.last().copied(),
    }
}

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
    /// SLO name → met at p95; an SLO the cell has no value for (no served request with a
    /// TTFT, or with a TPOT) is absent: not judged.
    pub slo: BTreeMap<&'static str, bool>,
    /// Share of requests meeting the goodput SLO pair.
    pub goodput: f64,
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
    /// SLO name → highest concurrency label meeting it (null: none does).
    pub ceiling: BTreeMap<&'static str, Option<String>>,
    /// The highest level measured: a ceiling equal to it was not reached (`≥ C=4`).
    pub top: String,
    /// First concurrency whose p95 TTFT exceeds `knee_factor` × the C=1 value.
    pub knee: Option<String>,
    /// What happens at the highest level measured: `slower` (latency grows, no errors),
    /// `errors` (error rate ≥ 1 %), or `none`.
    pub failure_mode: &'static str,
    /// Aggregate output tokens per day at the interactive ceiling: only from a load
    /// generator's cell with at least [`TOKENS_PER_DAY_MIN_REQUESTS`] served requests.
    pub tokens_per_day_at_interactive_ceiling: Option<f64>,
    /// Why there is no tokens-per-day figure, when there is a ceiling but no figure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_per_day_note: Option<String>,
    /// `request_rate` when the levels are open-loop arrival rates (the ceilings and knee are
    /// then rates, `4/s`); absent for concurrency levels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub axis: Option<&'static str>,
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

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The write-up's questions answered in sentences, each with its figure.
    pub answers: Vec<answers::Answer>,
    pub records: usize,
    pub sources: &'static str,
    /// What the records were: generations (judged), client errors, other traffic.
    pub traffic: Traffic,
    /// The rule for what is judged, in one line.
    pub judged: &'static str,
    /// How the percentiles were computed: `exact` nearest rank, or `hdr` sketches with their
    /// stated error bound (when the values outgrew `report --exact-values`).
    pub percentiles: values::Method,
    pub slos: Slos,
    pub cells: Vec<Cell>,
    pub in_flight: Dist,
    pub provisioning: Vec<Provision>,
    pub keys: Vec<KeyRow>,
    /// Present when records carry the two experiment arms.
    pub gateway_hop: Option<hop::GatewayHop>,
    /// Present when records come from a gateway tap (routes `behind` a gateway).
    pub gateway_tap: Option<tap::GatewayTap>,
    /// Per API shape (`chat`, `completions`, `responses`, `messages`, `embeddings`, `other`).
    pub by_api: BTreeMap<String, shapes::ShapeRow>,
    /// Per prompt-shape bucket, pooled over concurrency levels and arms.
    pub by_bucket: BTreeMap<String, shapes::ShapeRow>,
    /// TTFT by prefix-cache hit vs miss, when usage carries `cached_tokens`.
    pub prefix_cache: Option<shapes::CacheSplit>,
    /// Per conversation turn (`bench --multi-turn`): where prefix caching pays.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub by_turn: BTreeMap<String, shapes::TurnRow>,
    /// Requests not judged (client errors and other traffic), by endpoint, method and status.
    pub other_traffic: Vec<OtherRow>,
}

/// Compute the whole report. `top` keys; `by_arm` splits the key table by experiment arm.
/// The gateway-hop section compares the arms named `gateway` and `direct`.
pub fn compute(records: &[RequestRecord], slos: &Slos, top: usize, by_arm: bool) -> Report {
    compute_with_arms(records, slos, top, by_arm, ("gateway", "direct"))
}

pub fn compute_with_arms(
    records: &[RequestRecord],
    slos: &Slos,
    top: usize,
    by_arm: bool,
    arms: (&str, &str),
) -> Report {
    compute_all(records, &[], slos, top, by_arm, arms)
}

/// The whole report of records in memory; `tap_only` records feed the gateway-tap section alone
/// (a proxy log of traffic whose client-side records are `records`, as in the demo).
pub fn compute_all(
    records: &[RequestRecord],
    tap_only: &[RequestRecord],
    slos: &Slos,
    top: usize,
    by_arm: bool,
    arms: (&str, &str),
) -> Report {
    let mut acc = Acc::new(slos, by_arm, arms, DEFAULT_EXACT_VALUES);
    for r in records {
        acc.add(&Row::of(r));
    }
    for r in tap_only {
        acc.add_tap_only(&Row::of(r));
    }
    finish(acc, slos, top, arms)
}

/// The report of what an [`Acc`] has read.
pub fn finish(acc: Acc, slos: &Slos, top: usize, arms: (&str, &str)) -> Report {
    report_of(acc.finish(top), slos, arms)
}

/// The report of figures read (from records, or from ClickHouse's answers).
fn report_of(read: acc::Read, slos: &Slos, arms: (&str, &str)) -> Report {
    // C=1 p95 TTFT per (bucket, arm), for the tail reading and the knee; for open-loop cells,
    // the lowest rate's.
    let mut base: BTreeMap<Group, f64> = BTreeMap::new();
    let mut cells = Vec::new();
    for cell in read.cells {
        let acc::CellIn {
            bucket,
            arm: arm_name,
            level: lvl,
            label,
            rate,
            kind,
            acc: mut c,
        } = cell;
        let axis = match kind {
            acc::Kind::Concurrency => Axis::Concurrency,
            acc::Kind::Live => Axis::InFlight,
            acc::Kind::Rate => Axis::RequestRate,
        };
        let ttft = std::mem::replace(&mut c.ttft, Values::new(false)).dist();
        let tpot = std::mem::replace(&mut c.tpot, Values::new(false)).dist();
        let wall = match (c.start, c.end) {
            (Some(s), Some(e)) => e.duration_since(s).map(|d| d.as_secs_f64()).unwrap_or(0.0),
            _ => 0.0,
        };
        let group = (bucket.clone(), arm_name.clone(), axis);
        // Cells come in level order: the lowest level is the first of its group.
        if !base.contains_key(&group) && (axis != Axis::Concurrency || lvl == 1) {
            if let Some(p) = ttft.p95 {
                base.insert(group, p);
            }
        }
        let achieved = c.sent.and_then(|(first, last)| {
            let span = last.duration_since(first).ok()?.as_secs_f64();
            (c.requests > 1 && span > 0.0).then(|| (c.requests - 1) as f64 / span)
        });
        let scheduled = c
            .scheduled
            .filter(|(a, b, n)| *n > 1 && b > a)
            .map(|(a, b, n)| (n - 1) as f64 / ((b - a) / 1000.0));
        let (queue, lag) = match rate {
            Some(_) => (
                Some(std::mem::replace(&mut c.queue, Values::new(false)).dist()),
                Some(std::mem::replace(&mut c.lag, Values::new(false)).dist()),
            ),
            None => (None, None),
        };
        let mut slo = BTreeMap::new();
        for (name, kind, thr) in slos.list() {
            let met = match kind {
                "ttft" => ttft.p95.map(|p| p <= thr),
                // The slowest 5 % of streams: the 5th percentile of tok/s = 1000 / TPOT p95.
                _ => tpot.p95.map(|p| p > 0.0 && 1000.0 / p >= thr),
            };
            if let Some(met) = met {
                slo.insert(name, met);
            }
        }
        let take = |v: &mut Values| std::mem::replace(v, Values::new(false));
        let ttft_split = c.split_cell();
        cells.push(Cell {
            bucket,
            arm: arm_name,
            concurrency: label,
            level: lvl,
            axis,
            requests: c.requests,
            errors: c.errors,
            throttled: c.throttled,
            error_rate: c.errors as f64 / c.requests.max(1) as f64,
            ttft_ms: ttft,
            tpot_ms: tpot,
            e2e_ms: take(&mut c.e2e).dist(),
            tok_s_per_stream: take(&mut c.tps).dist(),
            aggregate_tok_s: (wall > 0.0).then(|| c.out_tokens as f64 / wall),
            input_tokens_median: take(&mut c.input).median(),
            output_tokens_median: take(&mut c.output).median(),
            tail: Tail::Tight,
            slo,
            goodput: c.good as f64 / c.requests.max(1) as f64,
            ttft_split,
            request_rate: rate,
            scheduled_rate: scheduled.filter(|_| rate.is_some()),
            achieved_rate: achieved,
            client_queue_ms: queue,
            client_lag_ms: lag,
        });
    }
    // The tail: against the group's lowest level, and (for saturation) the level below's
    // aggregate throughput. Cells are in level order within a group.
    let mut below: Option<(Group, Option<f64>)> = None;
    for c in &mut cells {
        let group = group_of(c);
        let b = base.get(&group).copied();
        let prev = match &below {
            Some((g, t)) if *g == group => Some(*t),
            _ => None,
        };
        let above = prev.is_some();
        let rising = match (prev.flatten(), c.aggregate_tok_s) {
            (Some(p), Some(t)) if c.axis != Axis::InFlight => t > SATURATION_RISE * p,
            // Live cells' throughput is the traffic's, not a sustained load: never saturation.
            _ => true,
        };
        c.tail = match (c.ttft_ms.p50, c.ttft_ms.p99) {
            (Some(p50), Some(p99)) if p50 > 0.0 => {
                if p99 > 1.5 * p50 {
                    Tail::Widening
                } else if b.is_some_and(|b| above && p50 > slos.knee_factor * b) {
                    if rising {
                        Tail::Shifted
                    } else {
                        Tail::ConvergedHigh
                    }
                } else {
                    Tail::Tight
                }
            }
            _ => Tail::Unknown,
        };
        below = Some((group, c.aggregate_tok_s));
    }
    let provisioning = provision(&cells, &base, slos);
    let sources = match (read.live == 0, read.live == read.records) {
        (true, _) => "bench",
        (false, true) => "live",
        _ => "mixed",
    };
    let gateway_tap = tap::compute(read.tap.iter());
    let gateway_hop = hop::compute(&read.hop, arms.0, arms.1, gateway_tap.as_ref());
    let mut report = Report {
        answers: Vec::new(),
        records: read.records,
        sources,
        traffic: read.traffic,
        judged: JUDGED,
        percentiles: read.method,
        slos: slos.clone(),
        cells,
        in_flight: read.in_flight,
        provisioning,
        keys: read.keys,
        gateway_hop,
        gateway_tap,
        by_api: read.by_api,
        by_bucket: read.by_bucket,
        prefix_cache: read.prefix_cache,
        by_turn: read.by_turn,
        other_traffic: read.other,
    };
    report.answers = answers::answers(&report);
    report
}

/// Cells whose levels are one axis: (bucket, arm, axis).
type Group = (String, Option<String>, Axis);

fn group_of(c: &Cell) -> Group {
    (c.bucket.clone(), c.arm.clone(), c.axis)
}

/// Ceilings, knee and failure mode per (bucket, arm) and axis, from its cells in level order.
fn provision(cells: &[Cell], base: &BTreeMap<Group, f64>, slos: &Slos) -> Vec<Provision> {
    let mut provisioning = Vec::new();
    let mut keyset: Vec<Group> = cells.iter().map(group_of).collect();
    keyset.dedup();
    for group in keyset {
        let cs: Vec<&Cell> = cells.iter().filter(|c| group_of(c) == group).collect();
        let b = base.get(&group).copied();
        let (bucket, arm_name, axis) = group;
        let mut ceiling = BTreeMap::new();
        for (name, _, _) in slos.list() {
            // Highest level such that it and every level below it meet the SLO; a level with
            // no verdict (nothing served) neither meets nor breaks it.
            let mut best = None;
            for c in &cs {
                match c.slo.get(name) {
                    Some(true) => best = Some(c.concurrency.clone()),
                    Some(false) => break,
                    None => {}
                }
            }
            ceiling.insert(name, best);
        }
        let knee = b.and_then(|b| {
            cs.iter()
                .find(|c| c.ttft_ms.p95.is_some_and(|p| p > slos.knee_factor * b))
                .map(|c| c.concurrency.clone())
        });
        let last = cs.last();
        let failure_mode = match last {
            Some(c) if c.error_rate >= 0.01 => "errors",
            Some(c) if !matches!(c.tail, Tail::Tight | Tail::Unknown) || knee.is_some() => "slower",
            _ => "none",
        };
        let at_ceiling = ceiling
            .get("interactive")
            .and_then(|c| c.as_ref())
            .and_then(|label| cs.iter().find(|c| &c.concurrency == label));
        let served = |c: &Cell| c.ttft_ms.n.max(c.e2e_ms.n);
        let (tpd, tpd_note) = match at_ceiling {
            None => (None, None),
            Some(c) if c.axis == Axis::InFlight => (
                None,
                Some("live traffic: an in-flight level is not a sustained load".to_owned()),
            ),
            Some(c) if served(c) < TOKENS_PER_DAY_MIN_REQUESTS => (
                None,
                Some(format!(
                    "{} served requests at the ceiling: fewer than {TOKENS_PER_DAY_MIN_REQUESTS}",
                    served(c)
                )),
            ),
            Some(c) => (c.aggregate_tok_s.map(|t| t * 86_400.0), None),
        };
        let name = match &arm_name {
            Some(a) => format!("{bucket} [{a}]"),
            None => bucket,
        };
        provisioning.push(Provision {
            bucket: name,
            ceiling,
            top: last.map(|c| c.concurrency.clone()).unwrap_or_default(),
            knee,
            failure_mode,
            tokens_per_day_at_interactive_ceiling: tpd,
            tokens_per_day_note: tpd_note,
            axis: match axis {
                Axis::Concurrency => None,
                Axis::InFlight => Some("in_flight"),
                Axis::RequestRate => Some("request_rate"),
            },
        });
    }
    provisioning
}
