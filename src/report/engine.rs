//! The engine's and the GPUs' side of a cell, as `tokentap bench` summarises its scrapes in
//! `run.json` (`cells[].scrape.telemetry`): KV-cache usage, running and waiting requests,
//! preemptions, the prefix cache, achieved FLOP/s and bytes/s per GPU, and DCGM's GPU figures.
//! One type, written by bench and read by report.

use serde::Deserialize;

pub use super::model::{Gauge, Hardware, Slice, Steady, SteadyClock, SteadyDist, Telemetry};

/// What `report` reads of a `run.json`: each cell's level, telemetry and bench's own lag, and
/// the hardware.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RunFile {
    cells: Vec<RunCell>,
    hardware: Option<Hardware>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RunCell {
    bucket: String,
    concurrency: Option<u64>,
    open_loop: Option<RunOpen>,
    scrape: Option<RunScrape>,
    timeslices: Vec<Slice>,
    steady_state: Option<Steady>,
    /// bench's own stall share and reader lag (docs/bench.md "bench's own lag").
    stall_share: Option<f64>,
    reader_lag_ms: Option<RunLag>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RunLag {
    p99: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RunOpen {
    offered_rate: f64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RunScrape {
    telemetry: Telemetry,
}

/// The `run.json` beside each input (a folder's own, a file's folder's), each once, that exist.
/// A folder without one gives those of its sub-folders: a distributed run's shard folders
/// (`bench --shard` writes `OUT/shard-I-of-N/`).
pub fn run_json_paths(paths: &[std::path::PathBuf]) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = Vec::new();
    let mut add = |f: std::path::PathBuf| {
        if !out.contains(&f) && f.is_file() {
            out.push(f);
        }
    };
    for p in paths {
        let dir = if p.is_dir() {
            Some(p.as_path())
        } else {
            p.parent()
        };
        let Some(d) = dir else { continue };
        if d.join("run.json").is_file() || !p.is_dir() {
            add(d.join("run.json"));
            continue;
        }
        let mut subs: Vec<std::path::PathBuf> = std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("run.json"))
            .collect();
        subs.sort();
        subs.into_iter().for_each(&mut add);
    }
    out
}

/// The `run.json` beside each input, read once each.
fn run_files(paths: &[std::path::PathBuf], warn: &mut dyn FnMut(String)) -> Vec<RunFile> {
    let mut out = Vec::new();
    for f in run_json_paths(paths) {
        match std::fs::read_to_string(&f)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<RunFile>(&t).map_err(|e| e.to_string()))
        {
            Ok(r) => out.push(r),
            Err(e) => warn(format!(
                "{}: not read ({e}); no engine figures from it",
                f.display()
            )),
        }
    }
    out
}

/// What the gateway board reads of the `run.json` beside each input, leniently (a key absent or
/// of another shape is not known): `experiment.baseline` (the first found) and `arm_resources`
/// (`{arm, cpu_s, peak_rss_bytes}` or `{arm, error}`; an entry without `arm` is left out).
pub fn board_run(
    paths: &[std::path::PathBuf],
) -> (Option<String>, Vec<super::board::ArmResources>) {
    let (mut baseline, mut resources) = (None, Vec::new());
    for f in run_json_paths(paths) {
        let Some(v) = std::fs::read_to_string(&f)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        else {
            continue;
        };
        if baseline.is_none() {
            baseline = v["experiment"]["baseline"].as_str().map(str::to_owned);
        }
        for r in v["arm_resources"].as_array().into_iter().flatten() {
            if let Ok(r) = serde_json::from_value::<super::board::ArmResources>(r.clone()) {
                if !r.arm.is_empty() {
                    resources.push(r);
                }
            }
        }
    }
    (baseline, resources)
}

/// Attach the engine's figures from the `run.json` files beside `paths` to the report's cells
/// (a closed-loop cell by bucket and concurrency, an open-loop one by bucket and rate), then
/// name each bucket's binding constraint and answer the questions they settle.
pub fn attach(r: &mut super::Report, paths: &[std::path::PathBuf], warn: &mut dyn FnMut(String)) {
    let runs = run_files(paths, warn);
    for run in &runs {
        for rc in &run.cells {
            let t = rc.scrape.as_ref().map(|s| &s.telemetry);
            let reader_lag = rc.reader_lag_ms.as_ref().and_then(|l| l.p99);
            let own = rc.stall_share.is_some() || reader_lag.is_some();
            if t.is_none() && rc.timeslices.is_empty() && rc.steady_state.is_none() && !own {
                continue;
            }
            for c in r.cells.iter_mut().filter(|c| c.bucket == rc.bucket) {
                let same = match (rc.concurrency, &rc.open_loop, c.request_rate) {
                    (Some(n), _, None) => c.axis == super::Axis::Concurrency && c.level == n,
                    (None, Some(o), Some(rate)) => (o.offered_rate - rate).abs() < 1e-9,
                    _ => false,
                };
                if same {
                    c.bench_stall_share = rc.stall_share;
                    c.bench_reader_lag_p99_ms = reader_lag;
                    c.engine = t.cloned();
                    c.timeslices.clone_from(&rc.timeslices);
                    if rc.steady_state.is_some() {
                        c.steady_state.clone_from(&rc.steady_state);
                    }
                }
            }
        }
        if r.hardware.is_none() {
            r.hardware.clone_from(&run.hardware);
        }
    }
    super::binding::settle(r);
}
