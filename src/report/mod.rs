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
    pub arm: Option<String>,
    pub concurrency: String,
    /// Sort key for the concurrency label.
    pub level: u64,
    pub requests: usize,
    pub errors: usize,
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
    /// `tight` (p99 ≤ 1.5 × p50), `widening` (some requests queue) or `converged-high`
    /// (tight, but far above the bucket's C=1 value: saturation).
    pub tail: &'static str,
    /// SLO name → met at p95.
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

#[derive(Debug, Clone, Serialize)]
pub struct Provision {
    pub bucket: String,
    /// SLO name → highest concurrency label meeting it (null: none does).
    pub ceiling: BTreeMap<&'static str, Option<String>>,
    /// First concurrency whose p95 TTFT exceeds `knee_factor` × the C=1 value.
    pub knee: Option<String>,
    /// What happens at the highest level measured: `slower` (latency grows, no errors),
    /// `errors` (error rate ≥ 1 %), or `none`.
    pub failure_mode: &'static str,
    /// Aggregate output tokens per day at the interactive ceiling.
    pub tokens_per_day_at_interactive_ceiling: Option<f64>,
    /// `request_rate` when the levels are open-loop arrival rates (the ceilings and knee are
    /// then rates, `4/s`); absent for concurrency levels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub axis: Option<&'static str>,
}

#[derive(Debug, Clone, Serialize)]
pub struct KeyRow {
    pub key_id: String,
    pub arm: Option<String>,
    pub requests: usize,
    pub error_rate: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub ttft_ms: Dist,
    pub tpot_ms: Dist,
    pub e2e_ms: Dist,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The write-up's questions answered in sentences, each with its figure.
    pub answers: Vec<answers::Answer>,
    pub records: usize,
    pub sources: &'static str,
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
            acc: mut c,
        } = cell;
        let ttft = std::mem::replace(&mut c.ttft, Values::new(false)).dist();
        let tpot = std::mem::replace(&mut c.tpot, Values::new(false)).dist();
        let wall = match (c.start, c.end) {
            (Some(s), Some(e)) => e.duration_since(s).map(|d| d.as_secs_f64()).unwrap_or(0.0),
            _ => 0.0,
        };
        let group = (bucket.clone(), arm_name.clone(), rate.is_some());
        // Cells come in level order: the lowest rate is the first of its group.
        if lvl == 1 && rate.is_none() || rate.is_some() && !base.contains_key(&group) {
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
            slo.insert(name, met.unwrap_or(false));
        }
        let take = |v: &mut Values| std::mem::replace(v, Values::new(false));
        let ttft_split = c.split_cell();
        cells.push(Cell {
            bucket,
            arm: arm_name,
            concurrency: label,
            level: lvl,
            requests: c.requests,
            errors: c.errors,
            error_rate: c.errors as f64 / c.requests.max(1) as f64,
            ttft_ms: ttft,
            tpot_ms: tpot,
            e2e_ms: take(&mut c.e2e).dist(),
            tok_s_per_stream: take(&mut c.tps).dist(),
            aggregate_tok_s: (wall > 0.0).then(|| c.out_tokens as f64 / wall),
            input_tokens_median: take(&mut c.input).median(),
            output_tokens_median: take(&mut c.output).median(),
            tail: "tight",
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
    // The lowest level of each group (C=1; an open-loop group's lowest rate).
    let mut lowest: BTreeMap<Group, u64> = BTreeMap::new();
    for c in &cells {
        let e = lowest.entry(group_of(c)).or_insert(c.level);
        *e = (*e).min(c.level);
    }
    for c in &mut cells {
        let b = base.get(&group_of(c)).copied();
        let above = match c.request_rate {
            Some(_) => lowest.get(&group_of(c)).is_some_and(|l| c.level > *l),
            None => c.level > 1,
        };
        c.tail = match (c.ttft_ms.p50, c.ttft_ms.p99) {
            (Some(p50), Some(p99)) if p50 > 0.0 => {
                if p99 > 1.5 * p50 {
                    "widening"
                } else if b.is_some_and(|b| above && p50 > slos.knee_factor * b) {
                    "converged-high"
                } else {
                    "tight"
                }
            }
            _ => "-",
        };
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
    };
    report.answers = answers::answers(&report);
    report
}

/// Cells whose levels are one axis: (bucket, arm, open-loop).
type Group = (String, Option<String>, bool);

fn group_of(c: &Cell) -> Group {
    (c.bucket.clone(), c.arm.clone(), c.request_rate.is_some())
}

/// Ceilings, knee and failure mode per (bucket, arm) and axis (concurrency, or open-loop
/// rate), from its cells in level order.
fn provision(cells: &[Cell], base: &BTreeMap<Group, f64>, slos: &Slos) -> Vec<Provision> {
    let mut provisioning = Vec::new();
    let mut keyset: Vec<Group> = cells.iter().map(group_of).collect();
    keyset.dedup();
    for group in keyset {
        let cs: Vec<&Cell> = cells.iter().filter(|c| group_of(c) == group).collect();
        let (bucket, arm_name, open_loop) = group;
        let mut ceiling = BTreeMap::new();
        for (name, _, _) in slos.list() {
            // Highest level such that it and every level below it meet the SLO.
            let mut best = None;
            for c in &cs {
                if c.slo.get(name).copied().unwrap_or(false) {
                    best = Some(c.concurrency.clone());
                } else {
                    break;
                }
            }
            ceiling.insert(name, best);
        }
        let b = base
            .get(&(bucket.clone(), arm_name.clone(), open_loop))
            .copied();
        let knee = b.and_then(|b| {
            cs.iter()
                .find(|c| c.ttft_ms.p95.is_some_and(|p| p > slos.knee_factor * b))
                .map(|c| c.concurrency.clone())
        });
        let last = cs.last();
        let failure_mode = match last {
            Some(c) if c.error_rate >= 0.01 => "errors",
            Some(c) if c.tail != "tight" || knee.is_some() => "slower",
            _ => "none",
        };
        let tpd = ceiling
            .get("interactive")
            .and_then(|c| c.as_ref())
            .and_then(|label| cs.iter().find(|c| &c.concurrency == label))
            .and_then(|c| c.aggregate_tok_s)
            .map(|t| t * 86_400.0);
        let name = match &arm_name {
            Some(a) => format!("{bucket} [{a}]"),
            None => bucket,
        };
        provisioning.push(Provision {
            bucket: name,
            ceiling,
            knee,
            failure_mode,
            tokens_per_day_at_interactive_ceiling: tpd,
            axis: open_loop.then_some("request_rate"),
        });
    }
    provisioning
}
