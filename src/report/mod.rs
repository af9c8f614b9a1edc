//! `tokentap report`: request records (bench folders, live proxy logs, rotated files, several
//! replicas) → per bucket × concurrency tables, tail reading, SLO verdicts, provisioning answers,
//! per-key accounting; rendered as a terminal table, Markdown, JSON or one self-contained HTML
//! file with SVG charts. Percentiles come from exact sorted values, so merging files gives the
//! same answer as one file with the same records.

pub mod answers;
pub mod cli;
pub mod hop;
mod html;
mod read;
mod render;
pub mod shapes;
mod slo;
mod svg;
pub mod tap;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::meter::{Outcome, RequestRecord};
use crate::stats::pct;

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
    if let Some(c) = r.concurrency {
        return (c, c.to_string());
    }
    let n = r.in_flight.max(1);
    if n <= 2 {
        return (n, n.to_string());
    }
    let hi = n.next_power_of_two();
    (hi, format!("{}-{}", hi / 2 + 1, hi))
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

fn split_cell(served: &[&&RequestRecord]) -> Option<SplitCell> {
    let splits: Vec<&crate::meter::TtftSplit> = served
        .iter()
        .filter_map(|r| r.ttft_split.as_ref())
        .collect();
    if splits.is_empty() {
        return None;
    }
    let med = |f: &dyn Fn(&crate::meter::TtftSplit) -> Option<f64>| {
        dist(splits.iter().filter_map(|s| f(s))).p50
    };
    let c = SplitCell {
        n: splits.len(),
        proxy_ms: med(&|s| s.proxy_ms),
        upstream_headers_ms: med(&|s| s.upstream_headers_ms),
        engine_queue_ms: med(&|s| s.engine_queue_ms),
        engine_prefill_ms: med(&|s| s.engine_prefill_ms),
        outside_engine_ms: med(&|s| s.outside_engine_ms),
        missing: None,
    };
    let mut missing = Vec::new();
    if c.proxy_ms.is_none() {
        missing.push("proxy_ms: client-side records (tokentap's own share is in its records)");
    }
    if c.engine_queue_ms.is_none() || c.engine_prefill_ms.is_none() {
        missing.push("engine parts: no per-request timings (vLLM --enable-per-request-metrics, with usage in the stream)");
    }
    Some(SplitCell {
        missing: (!missing.is_empty()).then(|| missing.join("; ")),
        ..c
    })
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
}

fn ok(r: &RequestRecord) -> bool {
    r.outcome == Outcome::Ok
}

fn is_error(r: &RequestRecord) -> bool {
    !matches!(r.outcome, Outcome::Ok | Outcome::ClientCancelled)
}

fn tok_s(r: &RequestRecord) -> Option<f64> {
    r.tpot_ms.filter(|t| *t > 0.0).map(|t| 1000.0 / t)
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

/// A record of what a client sent: every record but the inner side of a gateway tap (those are
/// the gateway's own requests, the same requests again; they feed `gateway_tap` only).
fn client_facing(r: &RequestRecord) -> bool {
    r.gateway_tap
        .as_ref()
        .is_none_or(|g| g.side != crate::meter::TapSide::Inner)
}

/// The whole report; `tap_only` records feed the gateway-tap section alone (a proxy log of
/// traffic whose client-side records are `records`, as in the demo).
pub fn compute_all(
    records: &[RequestRecord],
    tap_only: &[RequestRecord],
    slos: &Slos,
    top: usize,
    by_arm: bool,
    arms: (&str, &str),
) -> Report {
    let arm = |r: &RequestRecord| r.experiment.as_ref().map(|e| e.arm.clone());
    let mut groups: BTreeMap<(String, Option<String>, u64, String), Vec<&RequestRecord>> =
        BTreeMap::new();
    for r in records.iter().filter(|r| client_facing(r)) {
        let (lvl, label) = level(r);
        let bucket = r.bucket.clone().unwrap_or_else(|| "unknown".into());
        groups
            .entry((bucket, arm(r), lvl, label))
            .or_default()
            .push(r);
    }
    // C=1 p95 TTFT per (bucket, arm), for the tail reading and the knee.
    let mut base: BTreeMap<(String, Option<String>), f64> = BTreeMap::new();
    let mut cells = Vec::new();
    for ((bucket, arm_name, lvl, label), rs) in &groups {
        let served: Vec<&&RequestRecord> = rs.iter().filter(|r| ok(r)).collect();
        let ttft = dist(served.iter().filter_map(|r| r.ttft_ms));
        let tpot = dist(served.iter().filter_map(|r| r.tpot_ms));
        let tps = dist(served.iter().filter_map(|r| tok_s(r)));
        let errors = rs.iter().filter(|r| is_error(r)).count();
        let start = rs
            .iter()
            .filter_map(|r| humantime::parse_rfc3339(&r.ts).ok())
            .min();
        let end = rs
            .iter()
            .filter_map(|r| {
                humantime::parse_rfc3339(&r.ts)
                    .ok()
                    .map(|t| t + std::time::Duration::from_secs_f64(r.e2e_ms.max(0.0) / 1000.0))
            })
            .max();
        let wall = match (start, end) {
            (Some(s), Some(e)) => e.duration_since(s).map(|d| d.as_secs_f64()).unwrap_or(0.0),
            _ => 0.0,
        };
        let out_tokens: u64 = served.iter().filter_map(|r| r.output_tokens).sum();
        if *lvl == 1 {
            if let Some(p) = ttft.p95 {
                base.insert((bucket.clone(), arm_name.clone()), p);
            }
        }
        let mut slo = BTreeMap::new();
        for (name, kind, thr) in slos.list() {
            let met = match kind {
                "ttft" => ttft.p95.map(|p| p <= thr),
                // The slowest 5 % of streams: the 5th percentile of tok/s = 1000 / TPOT p95.
                _ => tpot.p95.map(|p| p > 0.0 && 1000.0 / p >= thr),
            };
            slo.insert(name, met.unwrap_or(false));
        }
        let good = rs
            .iter()
            .filter(|r| {
                ok(r)
                    && r.ttft_ms.is_none_or(|t| t <= slos.goodput_ttft_ms)
                    && tok_s(r).is_none_or(|s| s >= slos.goodput_tok_s)
            })
            .count();
        let med = |v: Vec<f64>| dist(v.into_iter()).p50;
        cells.push(Cell {
            bucket: bucket.clone(),
            arm: arm_name.clone(),
            concurrency: label.clone(),
            level: *lvl,
            requests: rs.len(),
            errors,
            error_rate: errors as f64 / rs.len().max(1) as f64,
            ttft_ms: ttft,
            tpot_ms: tpot,
            e2e_ms: dist(served.iter().map(|r| r.e2e_ms)),
            tok_s_per_stream: tps,
            aggregate_tok_s: (wall > 0.0).then(|| out_tokens as f64 / wall),
            input_tokens_median: med(served
                .iter()
                .filter_map(|r| r.input_tokens.map(|v| v as f64))
                .collect()),
            output_tokens_median: med(served
                .iter()
                .filter_map(|r| r.output_tokens.map(|v| v as f64))
                .collect()),
            tail: "tight",
            slo,
            goodput: good as f64 / rs.len().max(1) as f64,
            ttft_split: split_cell(&served),
        });
    }
    for c in &mut cells {
        let b = base.get(&(c.bucket.clone(), c.arm.clone())).copied();
        c.tail = match (c.ttft_ms.p50, c.ttft_ms.p99) {
            (Some(p50), Some(p99)) if p50 > 0.0 => {
                if p99 > 1.5 * p50 {
                    "widening"
                } else if b.is_some_and(|b| c.level > 1 && p50 > slos.knee_factor * b) {
                    "converged-high"
                } else {
                    "tight"
                }
            }
            _ => "-",
        };
    }

    let mut provisioning = Vec::new();
    let mut keyset: Vec<(String, Option<String>)> = cells
        .iter()
        .map(|c| (c.bucket.clone(), c.arm.clone()))
        .collect();
    keyset.dedup();
    for (bucket, arm_name) in keyset {
        let cs: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.bucket == bucket && c.arm == arm_name)
            .collect();
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
        let b = base.get(&(bucket.clone(), arm_name.clone())).copied();
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
        });
    }

    let live: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.concurrency.is_none() && client_facing(r))
        .collect();
    let in_flight = dist(live.iter().map(|r| r.in_flight as f64));

    let mut by_key: BTreeMap<(String, Option<String>), Vec<&RequestRecord>> = BTreeMap::new();
    for r in records.iter().filter(|r| client_facing(r)) {
        let k = r.key_id.clone().unwrap_or_else(|| "(no key)".into());
        by_key
            .entry((k, if by_arm { arm(r) } else { None }))
            .or_default()
            .push(r);
    }
    let mut keys: Vec<KeyRow> = by_key
        .into_iter()
        .map(|((key_id, arm_name), rs)| {
            let served: Vec<&&RequestRecord> = rs.iter().filter(|r| ok(r)).collect();
            KeyRow {
                key_id,
                arm: arm_name,
                requests: rs.len(),
                error_rate: rs.iter().filter(|r| is_error(r)).count() as f64
                    / rs.len().max(1) as f64,
                input_tokens: rs.iter().filter_map(|r| r.input_tokens).sum(),
                output_tokens: rs.iter().filter_map(|r| r.output_tokens).sum(),
                ttft_ms: dist(served.iter().filter_map(|r| r.ttft_ms)),
                tpot_ms: dist(served.iter().filter_map(|r| r.tpot_ms)),
                e2e_ms: dist(served.iter().map(|r| r.e2e_ms)),
            }
        })
        .collect();
    keys.sort_by(|a, b| {
        b.requests
            .cmp(&a.requests)
            .then_with(|| a.key_id.cmp(&b.key_id))
    });
    keys.truncate(top);

    let sources = match (live.is_empty(), live.len() == records.len()) {
        (true, _) => "bench",
        (false, true) => "live",
        _ => "mixed",
    };
    let gateway_tap = tap::compute(records.iter().chain(tap_only));
    let gateway_hop = hop::compute(records, arms.0, arms.1, gateway_tap.as_ref());
    let mut report = Report {
        answers: Vec::new(),
        records: records.len(),
        sources,
        slos: slos.clone(),
        cells,
        in_flight,
        provisioning,
        keys,
        gateway_hop,
        gateway_tap,
        by_api: shapes::by_api(records.iter().filter(|r| client_facing(r))),
        by_bucket: shapes::by_bucket(records.iter().filter(|r| client_facing(r))),
        prefix_cache: shapes::cache_split(records.iter().filter(|r| client_facing(r))),
    };
    report.answers = answers::answers(&report);
    report
}
