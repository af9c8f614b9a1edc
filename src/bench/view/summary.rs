//! The stdout summary of a bench run: per bucket × concurrency, percentiles from exact values;
//! the open loops' schedules, failures, and bench's own lag with its warnings.

use std::fmt::Write;

use crate::bench::{CellInfo, RunInfo};
use crate::meter::{Outcome, RequestRecord};
use crate::stats::{pct, sorted};

fn f(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

/// The table printed at the end of `bench` (and `demo`).
pub fn table(records: &[RequestRecord], info: &RunInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<13} {:<8} {:>6} {:>4} {:>4} | {:>7} {:>7} {:>7} | {:>6} {:>9} {:>9} | {:>8} {:>8}",
        "bucket",
        "arm",
        "C",
        "n",
        "err",
        "TTFT50",
        "TTFT95",
        "TTFT99",
        "TPOT50",
        "tok/s/str",
        "agg tok/s",
        "E2E50 s",
        "E2E95 s"
    );
    let mut arms: Vec<Option<String>> = records
        .iter()
        .map(|r| r.experiment.as_ref().map(|e| e.arm.clone()))
        .collect();
    arms.sort();
    arms.dedup();
    for cell in &info.cells {
        rows(
            &mut s,
            cell,
            records.get(cell.records.clone()).unwrap_or_default(),
            &arms,
        );
    }
    let _ = writeln!(s, "TTFT/TPOT in ms (p50/p95/p99 of the cell); tok/s/str = per stream (1000 ÷ TPOT p50); agg tok/s = all output tokens ÷ cell wall time.");
    if let Some(n) = info.runs {
        let _ = writeln!(s, "{n} runs (rN: run N); each cell's run-to-run spread is in run.json (spread) and in `tokentap report`.");
    }
    notes(&mut s, info);
    let _ = write!(
        s,
        "prompt set sha256 {} (seed {})",
        info.prompt_set_sha256, info.seed
    );
    s
}

/// A cell's rows: one per experiment arm (one without arms).
fn rows(s: &mut String, cell: &CellInfo, cell_records: &[RequestRecord], arms: &[Option<String>]) {
    let level = match (&cell.open_loop, cell.concurrency) {
        (Some(o), _) if cell.bucket == "replay" => format!("{:.1}/s", o.offered_rate),
        (Some(o), _) => format!("{}/s", o.offered_rate),
        (None, Some(c)) => c.to_string(),
        (None, None) => "-".into(),
    };
    for arm in arms {
        let rs: Vec<&RequestRecord> = cell_records
            .iter()
            .filter(|r| r.experiment.as_ref().map(|e| &e.arm) == arm.as_ref())
            .collect();
        if rs.is_empty() && arm.is_some() {
            continue;
        }
        let errors = rs.iter().filter(|r| r.outcome != Outcome::Ok).count();
        // Only streams served whole: a cut stream's tokens are not a sustained output.
        let out_tokens: u64 = rs
            .iter()
            .filter(|r| crate::bench::verdict::served(r))
            .filter_map(|r| r.output_tokens)
            .sum();
        // With two arms interleaved in one cell, each arm's share of the cell's wall time.
        let agg = if cell.wall_s > 0.0 {
            out_tokens as f64 / cell.wall_s
        } else {
            0.0
        };
        let ok: Vec<&&RequestRecord> = rs.iter().filter(|r| r.outcome == Outcome::Ok).collect();
        let ttft = sorted(ok.iter().filter_map(|r| r.ttft_ms));
        let tpot = sorted(ok.iter().filter_map(|r| r.tpot_ms));
        let e2e = sorted(ok.iter().map(|r| r.e2e_ms / 1000.0));
        let tpot50 = pct(&tpot, 0.5);
        let _ = writeln!(
            s,
            "{:<13} {:<8} {:>6} {:>4} {:>4} | {:>7} {:>7} {:>7} | {:>6} {:>9} {:>9.0} | {:>8} {:>8}",
            // `--runs N`: the bucket with its run (`long-short r2`).
            match cell.run {
                Some(r) => format!("{} r{r}", cell.bucket),
                None => cell.bucket.clone(),
            },
            arm.as_deref().unwrap_or("-"),
            level,
            rs.len(),
            errors,
            f(pct(&ttft, 0.5), 0),
            f(pct(&ttft, 0.95), 0),
            f(pct(&ttft, 0.99), 0),
            f(tpot50, 1),
            f(tpot50.filter(|t| *t > 0.0).map(|t| 1000.0 / t), 1),
            agg,
            f(pct(&e2e, 0.5), 2),
            f(pct(&e2e, 0.95), 2),
        );
    }
}

/// The open loops' schedules and this client's own overhead.
fn notes(s: &mut String, info: &RunInfo) {
    for c in &info.cells {
        if let Some(o) = &c.open_loop {
            let f1 = |v: Option<f64>| f(v, 1);
            let _ = writeln!(
                s,
                "{} at {:.2} req/s offered ({} scheduled): {} req/s sent; client lag p50/p99/max {}/{}/{} ms, queue for --max-concurrency p50/p99 {}/{} ms{}.",
                c.bucket,
                o.offered_rate,
                f(o.scheduled_rate, 2),
                f(o.achieved_rate, 2),
                f1(o.lag_ms.p50),
                f1(o.lag_ms.p99),
                f1(o.lag_ms.max),
                f1(o.queue_ms.p50),
                f1(o.queue_ms.p99),
                if o.behind { " — BEHIND: the client did not keep the schedule" } else { "" }
            );
        }
    }
    for c in info.cells.iter().filter(|c| !c.failures.is_empty()) {
        let level = match (&c.open_loop, c.concurrency) {
            (Some(o), _) => format!("{}/s", o.offered_rate),
            (None, Some(n)) => format!("C={n}"),
            (None, None) => String::new(),
        };
        let why: Vec<String> = c.failures.iter().map(|f| f.to_string()).collect();
        let _ = writeln!(
            s,
            "not served in {} {level}: {} (run.json cells[].failures).",
            c.bucket,
            why.join(", ")
        );
    }
    own_lag(s, info);
    if let Some(o) = &info.client_overhead_ttft_ms {
        let _ = writeln!(
            s,
            "bench client's own TTFT overhead: p50 {:.3} ms, p99 {:.3} ms (n={}).",
            o.p50, o.p99, o.n
        );
    }
}

/// bench's own lag per cell (`stall 0.3 %, reader lag p99 0.4 ms`), then a warning for each
/// cell where it passed its bound (run.json `verdict.client_lag`).
fn own_lag(s: &mut String, info: &RunInfo) {
    for c in &info.cells {
        let lag = c.reader_lag_ms.as_ref();
        if c.stall_share.is_none() && lag.is_none() {
            continue;
        }
        let _ = writeln!(
            s,
            "bench's own lag, {}: stall {} %, reader lag p99 {} ms (max {} ms).",
            crate::bench::verdict::name(c),
            f(c.stall_share.map(|v| 100.0 * v), 1),
            f(lag.and_then(|l| l.p99), 2),
            f(lag.and_then(|l| l.max), 2),
        );
    }
    if let Some(r) = info.stall_share {
        let _ = writeln!(s, "bench's own stall over the run: {:.1} %.", 100.0 * r);
    }
    for w in &info.verdict.client_lag {
        let _ = writeln!(
            s,
            "WARNING bench's own lag: {w} (not a failed run: the exit status stands; run.json verdict.client_lag)."
        );
    }
}
