//! The sweep: every bucket with prompts at every level — the closed loop's concurrencies or the
//! open loop's rates — `--runs` times, each run in its rotated order; and one cell measured at a
//! level, which the sweep and the search share.

use std::sync::atomic::Ordering;

use super::{closed, open};
use crate::bench::cell::{grid, run_order, Level, Out};
use crate::bench::dataset::Chosen;
use crate::bench::model::settings::OpenLoop;
use crate::bench::session::Session;

/// Measure the sweep's cells, each level at its pace (an open loop's arrivals and cap), `runs`
/// times; with several runs, each record and cell says its run.
pub(crate) async fn run(
    s: &Session,
    chosen: &[&Chosen],
    (levels, runs, pace): (&[Level], u32, Option<&OpenLoop>),
    cells: (usize, usize),
    out: &mut Out,
) {
    let grid = grid(levels, chosen.len());
    let many = runs > 1;
    for run in 1..=runs {
        if many {
            s.progress.line(&format!("run {run} of {runs}"));
        }
        for (b, level) in run_order(&grid, run, runs) {
            if s.stop.load(Ordering::Relaxed) {
                return;
            }
            let at = measure(s, chosen[b], (level, pace), cells, out).await;
            if many {
                out.mark_run(at, run);
            }
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
    (requests, warmup): (usize, usize),
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
            let make = |i: usize| s.load.request(c, i, level);
            let cell = closed::run(s, &label, &make, conc, (requests, warmup)).await;
            out.push(c.spec.name, Some(conc), cell.records, cell.wall_s, None);
            out.own_lag(cell.stall_share, cell.reader_lag_ms);
        }
        Level::Rate(rate) => {
            let n = warmup + requests;
            // NB: a plan's rate levels come with their open loop's settings; the default stands
            // in only for a caller that gave none.
            let default = OpenLoop::default();
            let pace = pace.unwrap_or(&default);
            let plan = pace
                .arrivals
                .offsets(rate, n)
                .into_iter()
                .enumerate()
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
