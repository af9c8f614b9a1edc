//! The stdout summary of a bench run: per bucket × concurrency, percentiles from exact values.

use std::fmt::Write;

use super::RunInfo;
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
        "{:<11} {:<8} {:>3} {:>4} {:>4} | {:>7} {:>7} {:>7} | {:>6} {:>9} {:>9} | {:>8} {:>8}",
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
        for arm in &arms {
            let rs: Vec<&RequestRecord> = records
                .iter()
                .filter(|r| {
                    r.bucket.as_deref() == Some(cell.bucket)
                        && r.concurrency == Some(cell.concurrency as u64)
                        && r.experiment.as_ref().map(|e| &e.arm) == arm.as_ref()
                })
                .collect();
            let errors = rs.iter().filter(|r| r.outcome != Outcome::Ok).count();
            let out_tokens: u64 = rs.iter().filter_map(|r| r.output_tokens).sum();
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
            "{:<11} {:<8} {:>3} {:>4} {:>4} | {:>7} {:>7} {:>7} | {:>6} {:>9} {:>9.0} | {:>8} {:>8}",
            cell.bucket,
            arm.as_deref().unwrap_or("-"),
            cell.concurrency,
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
    let _ = writeln!(s, "TTFT/TPOT in ms (p50/p95/p99 of the cell); tok/s/str = per stream (1000 ÷ TPOT p50); agg tok/s = all output tokens ÷ cell wall time.");
    if let Some(o) = &info.client_overhead_ttft_ms {
        let _ = writeln!(
            s,
            "bench client's own TTFT overhead: p50 {:.3} ms, p99 {:.3} ms (n={}).",
            o.p50, o.p99, o.n
        );
    }
    let _ = write!(
        s,
        "prompt set sha256 {} (seed {})",
        info.prompt_set_sha256, info.seed
    );
    s
}
