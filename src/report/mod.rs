//! `tokentap report`: request records (bench folders, live proxy logs, rotated files, several
//! replicas) → per bucket × concurrency tables, tail reading, SLO verdicts, provisioning answers,
//! per-key accounting; rendered as a terminal table, Markdown, JSON or one self-contained HTML
//! file with SVG charts. Percentiles come from exact sorted values, so merging files gives the
//! same answer as one file with the same records.

mod acc;
pub mod answers;
pub mod binding;
mod cellacc;
pub mod cli;
pub mod clickhouse;
mod clock;
pub mod engine;
mod fast;
pub(crate) mod fast_check;
pub mod hop;
pub(crate) mod html;
mod json;
mod model;
mod names;
pub mod read;
pub(crate) mod render;
pub mod row;
mod runs;
mod scan;
mod sections;
pub mod shapes;
mod slo;
pub mod sql;
pub mod steady;
pub mod streaming;
pub(crate) mod svg;
pub mod tap;
mod traffic;
pub mod values;

use std::collections::BTreeMap;

use crate::meter::RequestRecord;

pub use acc::{Acc, DEFAULT_EXACT_VALUES};
pub use fast::fields as fast_fields;
pub use model::*;
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
pub fn finish(mut acc: Acc, slos: &Slos, top: usize, arms: (&str, &str)) -> Report {
    let spread = acc.take_spread();
    let mut report = report_of(acc.finish(top), slos, arms);
    report.spread = spread;
    report
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
        let take = |v: &mut Values| std::mem::replace(v, Values::new(false));
        let whole = steady::WholeCell {
            requests: c.requests,
            ttft_ms: take(&mut c.ttft).dist(),
            tpot_ms: take(&mut c.tpot).dist(),
            e2e_ms: take(&mut c.e2e).dist(),
            tok_s_per_stream: take(&mut c.tps).dist(),
            goodput: c.good as f64 / c.requests.max(1) as f64,
        };
        let plateau = match kind {
            acc::Kind::Concurrency => steady::plateau(&c.spans, lvl as usize),
            _ => None,
        };
        let first_ms = c.spans.iter().map(|s| s.start_ms).reduce(f64::min);
        let steady_state = plateau.as_ref().map(|p| engine::Steady {
            from_ms: p.from_ms - first_ms.unwrap_or(p.from_ms),
            to_ms: p.to_ms - first_ms.unwrap_or(p.from_ms),
            requests: p.requests,
            ttft_ms: engine::SteadyDist {
                p50: p.ttft.p50,
                p95: p.ttft.p95,
            },
            tpot_ms: engine::SteadyDist {
                p50: p.tpot.p50,
                p95: p.tpot.p95,
            },
            clock: engine::SteadyClock::Cell,
        });
        let used =
            plateau.filter(|p| !read.whole_cell && p.requests >= steady::STEADY_MIN_REQUESTS);
        let (figures, whole_cell, ttft, tpot, e2e, tps, goodput) = match used {
            Some(p) => (
                steady::Figures::SteadyState,
                Some(whole),
                p.ttft,
                p.tpot,
                p.e2e,
                p.tps,
                p.good as f64 / p.requests as f64,
            ),
            None => (
                steady::Figures::WholeCell,
                None,
                whole.ttft_ms,
                whole.tpot_ms,
                whole.e2e_ms,
                whole.tok_s_per_stream,
                whole.goodput,
            ),
        };
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
            buffered_streams: c.buffered,
            error_rate: c.errors as f64 / c.requests.max(1) as f64,
            ttft_ms: ttft,
            tpot_ms: tpot,
            e2e_ms: e2e,
            tok_s_per_stream: tps,
            aggregate_tok_s: (wall > 0.0).then(|| c.out_tokens as f64 / wall),
            input_tokens_median: take(&mut c.input).median(),
            output_tokens_median: take(&mut c.output).median(),
            tail: Tail::Tight,
            slo,
            goodput,
            figures,
            whole_cell,
            ttft_split,
            request_rate: rate,
            scheduled_rate: scheduled.filter(|_| rate.is_some()),
            achieved_rate: achieved,
            client_queue_ms: queue,
            client_lag_ms: lag,
            engine: None,
            timeslices: Vec::new(),
            steady_state,
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
        streaming: read.streaming,
        hardware: None,
        binding: Vec::new(),
        spread: Vec::new(),
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
    let mut keyset: Vec<Group> = Vec::new();
    for g in cells.iter().map(group_of) {
        if !keyset.contains(&g) {
            keyset.push(g);
        }
    }
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
