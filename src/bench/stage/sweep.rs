//! The sweep: every bucket with prompts at every level — the closed loop's concurrencies or the
//! open loop's rates — `--runs` times, each run in its rotated order; and one cell measured at a
//! level, which the sweep and the search share.

use std::sync::atomic::Ordering;

use super::{closed, open};
use crate::bench::cell::{grid, run_order, Level, Out};
use crate::bench::dataset::Chosen;
use crate::bench::model::settings::OpenLoop;
use crate::bench::session::Session;
use crate::bench::shard::{Fleet, Late};
use std::time::SystemTime;

/// Measure the sweep's cells, each level at its pace (an open loop's arrivals and cap), `runs`
/// times; with several runs, each record and cell says its run.
pub(crate) async fn run(
    s: &Session,
    chosen: &[&Chosen],
    (levels, runs, pace): (&[Level], u32, Option<&OpenLoop>),
    (cells, fleet): ((usize, usize), &Fleet),
    out: &mut Out,
) {
    let grid = grid(levels, chosen.len());
    let many = runs > 1;
    let mut k = 0;
    for run in 1..=runs {
        if many {
            s.progress.line(&format!("run {run} of {runs}"));
        }
        for (b, level) in run_order(&grid, run, runs) {
            if s.stop.load(Ordering::Relaxed) {
                return;
            }
            if let Some(w) = fleet.windows {
                let label = format!("{} {}", chosen[b].spec.name, level.label());
                if let Some(late) = window(s, w.cell_start(k), label).await {
                    out.late.push(late);
                }
                k += 1;
            }
            let at = measure(s, chosen[b], (level, pace), (cells, fleet), out).await;
            if many {
                out.mark_run(at, run);
            }
        }
    }
}

/// Wait for a cell's window to open; a cell that begins over 100 ms after it (the one before
/// ran over) is said on stderr and returned.
async fn window(s: &Session, start: SystemTime, cell: String) -> Option<Late> {
    let now = SystemTime::now();
    match start.duration_since(now) {
        Ok(wait) => {
            // In steps, so that Ctrl-C ends a wait as it ends a cell.
            let until = tokio::time::Instant::now() + wait;
            while tokio::time::Instant::now() < until && !s.stop.load(Ordering::Relaxed) {
                let left = until - tokio::time::Instant::now();
                tokio::time::sleep(left.min(std::time::Duration::from_millis(100))).await;
            }
            None
        }
        Err(e) => {
            let late_ms = e.duration().as_secs_f64() * 1000.0;
            (late_ms > 100.0).then(|| {
                eprintln!(
                    "tokentap bench: {cell} began {late_ms:.0} ms after its window: the cell before ran over --cell-window, so the shards did not run it side by side throughout"
                );
                Late { cell, late_ms }
            })
        }
    }
}

/// The buckets with prompts; a line for each one without, saying why (`why`, in bucket order).
pub(crate) fn with_prompts<'a>(
    s: &Session,
    chosen: &'a [Chosen],
    why: &[String],
) -> Vec<&'a Chosen> {
    for line in why {
        s.progress.line(&format!("{line} — skipped"));
    }
    chosen.iter().filter(|c| !c.prompts.is_empty()).collect()
}

/// One cell of a bucket at a level, closed or open loop (its arrivals and cap in `pace`), with
/// `(requests, warmup)` requests; its records kept in `out`. Returns where they are.
pub(crate) async fn measure(
    s: &Session,
    c: &Chosen,
    (level, pace): (Level, Option<&OpenLoop>),
    ((requests, warmup), fleet): ((usize, usize), &Fleet),
    out: &mut Out,
) -> std::ops::Range<usize> {
    let label = format!("{} {}", c.spec.name, level.label());
    // Whole groups of copies, one per arm (a search's levels choose their own counts).
    let n = s.load.experiment.arms.len();
    let (requests, warmup) = (
        crate::bench::arms::whole_groups(requests, n),
        crate::bench::arms::whole_groups(warmup, n),
    );
    let from = out.records.len();
    let begun = s.load.mark().await;
    match level {
        Level::Concurrency(conc) => {
            if requests < conc {
                s.progress.line(&format!(
                    "{label}: {requests} measured requests cannot keep {conc} in flight; --requests {} or more would",
                    2 * conc
                ));
            }
            // A shard sends its positions of the one plan's sequence (all of them alone).
            let mine = fleet.positions(warmup + requests, n);
            let warm = mine.iter().filter(|j| **j < warmup).count();
            let make = |i: usize| s.load.request(c, mine.get(i).copied().unwrap_or(i), level);
            let shape = (conc, fleet.workers(conc));
            let cell = closed::run(s, &label, &make, shape, (mine.len() - warm, warm)).await;
            out.push(c.spec.name, Some(conc), cell.records, cell.wall_s, None);
            out.own_lag(cell.stall_share, cell.reader_lag_ms);
        }
        Level::Rate(rate) => {
            let n = warmup + requests;
            // NB: a plan's rate levels come with their open loop's settings; the default stands
            // in only for a caller that gave none.
            let default = OpenLoop::default();
            let pace = pace.unwrap_or(&default);
            let mine = fleet.positions(n, s.load.experiment.arms.len());
            let due = pace.arrivals.offsets(rate, n);
            let plan = mine
                .into_iter()
                .map(|i| (i, due[i]))
                .map(|(i, at)| open::Planned {
                    at,
                    req: s.load.request(c, i, level),
                    measured: i >= warmup,
                })
                .collect();
            let r = open::run(s, &label, plan, pace.max_concurrency).await;
            let oi = r.info(rate);
            if oi.behind {
                s.progress.line(&format!(
                    "{label}: the client fell behind its schedule: {} of {:.2} req/s sent, lag p99 {} ms",
                    oi.achieved_rate
                        .map_or_else(|| "-".into(), |a| format!("{a:.2}")),
                    oi.scheduled_rate.unwrap_or(rate),
                    oi.lag_ms.p99.map_or_else(|| "-".into(), |l| format!("{l:.1}"))
                ));
            }
            out.push(c.spec.name, None, r.records, r.wall_s, Some(oi));
            out.own_lag(r.stall_share, r.reader_lag_ms);
        }
    }
    let ended = s.load.mark().await;
    out.window(begun, ended);
    from..out.records.len()
}
