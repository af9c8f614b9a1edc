//! The run-to-run spread of a repeated sweep (`tokentap bench --runs N`): per cell (bucket ×
//! level × arm), each run's TTFT/TPOT/E2E p50 and p95 and per-stream tok/s p50 from that run's
//! successful requests, then across runs their mean, sd, CV and 95 % t-interval. Computed from
//! the records' `run` field alone, so `bench`'s run.json, the report and compare agree.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::meter::{Outcome, RequestRecord};
use crate::stats::{pct, sorted, spread, Spread};

/// The metrics of a run that the spread is taken over, in order (compare's names).
pub const METRICS: [&str; 7] = [
    "ttft_p50",
    "ttft_p95",
    "tpot_p50",
    "tpot_p95",
    "e2e_p50",
    "e2e_p95",
    "tok_s_per_stream_p50",
];

/// A cell of a repeated sweep.
#[derive(Debug, Clone, PartialEq, PartialOrd, Serialize)]
pub struct CellKey {
    pub bucket: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arm: Option<String>,
}

/// One metric of one cell: its value in each run (1 to N; null when that run had no value),
/// and their spread.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricSpread {
    pub metric: &'static str,
    /// ms, or tok/s for `tok_s_per_stream_p50`.
    pub unit: &'static str,
    pub per_run: Vec<Option<f64>>,
    #[serde(flatten)]
    pub spread: Spread,
}

/// The spread of one cell across runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellSpread {
    #[serde(flatten)]
    pub key: CellKey,
    /// Runs in which the cell has records.
    pub runs: usize,
    pub metrics: Vec<MetricSpread>,
}

impl CellSpread {
    /// One metric's spread, by name.
    pub fn metric(&self, name: &str) -> Option<&MetricSpread> {
        self.metrics.iter().find(|m| m.metric == name)
    }
}

/// One request's share of the spread: its cell, run and figures (latencies of a served request
/// only).
#[derive(Debug, Clone)]
pub struct Obs {
    pub key: CellKey,
    pub run: u32,
    pub ok: bool,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: f64,
}

impl Obs {
    /// A record's share; `None` without a run.
    pub fn of(r: &RequestRecord) -> Option<Obs> {
        Some(Obs {
            key: CellKey {
                bucket: r.bucket.clone().unwrap_or_else(|| "-".into()),
                concurrency: r.concurrency,
                request_rate: r.request_rate,
                arm: r.experiment.as_ref().map(|e| e.arm.clone()),
            },
            run: r.run.filter(|n| *n >= 1)?,
            ok: r.outcome == Outcome::Ok,
            ttft_ms: r.ttft_ms,
            tpot_ms: r.tpot_ms,
            e2e_ms: r.e2e_ms,
        })
    }
}

/// Each metric of one run's requests of a cell (served requests only).
pub fn run_metrics<'a>(obs: impl IntoIterator<Item = &'a Obs>) -> [Option<f64>; 7] {
    let ok: Vec<&Obs> = obs.into_iter().filter(|o| o.ok).collect();
    let ttft = sorted(ok.iter().filter_map(|r| r.ttft_ms));
    let tpot = sorted(ok.iter().filter_map(|r| r.tpot_ms));
    let e2e = sorted(ok.iter().map(|r| r.e2e_ms));
    let tok_s = sorted(
        ok.iter()
            .filter_map(|r| r.tpot_ms.filter(|t| *t > 0.0).map(|t| 1000.0 / t)),
    );
    [
        pct(&ttft, 0.5),
        pct(&ttft, 0.95),
        pct(&tpot, 0.5),
        pct(&tpot, 0.95),
        pct(&e2e, 0.5),
        pct(&e2e, 0.95),
        pct(&tok_s, 0.5),
    ]
}

/// Requests with a run, gathered per cell (in the order cells first appear) and run.
#[derive(Debug, Default)]
pub struct Collect {
    cells: Vec<(CellKey, BTreeMap<u32, Vec<Obs>>)>,
}

impl Collect {
    pub fn add(&mut self, o: Obs) {
        let i = match self.cells.iter().position(|(k, _)| *k == o.key) {
            Some(i) => i,
            None => {
                self.cells.push((o.key.clone(), BTreeMap::new()));
                self.cells.len() - 1
            }
        };
        self.cells[i].1.entry(o.run).or_default().push(o);
    }

    /// Per cell, the spread across runs 1 to the highest run seen; empty when no request had a
    /// run (a single run).
    pub fn finish(self) -> Vec<CellSpread> {
        let runs = self
            .cells
            .iter()
            .flat_map(|(_, m)| m.keys().copied())
            .max()
            .unwrap_or(0);
        self.cells
            .into_iter()
            .map(|(key, by_run)| {
                let values: Vec<[Option<f64>; 7]> = (1..=runs)
                    .map(|r| run_metrics(by_run.get(&r).into_iter().flatten()))
                    .collect();
                let metrics = METRICS
                    .iter()
                    .enumerate()
                    .filter_map(|(m, name)| {
                        let per_run: Vec<Option<f64>> = values.iter().map(|v| v[m]).collect();
                        let present: Vec<f64> = per_run.iter().flatten().copied().collect();
                        Some(MetricSpread {
                            metric: name,
                            unit: if name.starts_with("tok_s") {
                                "tok/s"
                            } else {
                                "ms"
                            },
                            spread: spread(&present)?,
                            per_run,
                        })
                    })
                    .collect();
                CellSpread {
                    key,
                    runs: by_run.len(),
                    metrics,
                }
            })
            .collect()
    }
}

/// Per cell, the spread across runs of the records that carry a `run`; empty when none does.
pub fn of_records(records: &[RequestRecord]) -> Vec<CellSpread> {
    let mut c = Collect::default();
    for o in records.iter().filter_map(Obs::of) {
        c.add(o);
    }
    c.finish()
}

/// The spread of records as a JSONL file holds them (each read back as the report reads it: a
/// double serde_json parses may differ from the one written by an ulp), so bench's run.json and
/// `tokentap report` give the same figures.
pub fn as_written(records: &[RequestRecord]) -> Vec<CellSpread> {
    let read: Vec<RequestRecord> = records
        .iter()
        .filter_map(|r| serde_json::to_string(r).ok())
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect();
    of_records(&read)
}
