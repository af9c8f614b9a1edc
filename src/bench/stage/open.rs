//! The open loop: each request starts when it is due, whether or not earlier ones have
//! finished, as production traffic arrives. An optional cap (`--max-concurrency`) bounds the
//! requests in flight; a request that finds the cap full waits for a slot, and that wait is
//! recorded as client queue time (`client_queue_ms`), never as part of its TTFT, which starts
//! when it is sent. How late the client itself was (`client_lag_ms`: a busy machine, a rate it
//! cannot generate) is recorded too, so a schedule the client did not keep is never silent;
//! and, over the cell, the share of its wall time some due request waited (`stall`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::bench::progress::ttft_p95;
use crate::bench::request::{Req, Sent};
use crate::bench::session::Session;
use crate::bench::{LagStats, OpenInfo};
use crate::meter::{duration_ms, Outcome, RequestRecord, Schedule};

/// A request of the plan: when it is due (from the start of the cell) and whether it is
/// measured (warm-up requests are sent on schedule but not recorded).
pub struct Planned {
    pub at: Duration,
    pub req: Req,
    pub measured: bool,
}

pub struct OpenResult {
    /// The measured requests' records, in plan order.
    pub records: Vec<RequestRecord>,
    /// First measured request sent → last one ended.
    pub wall_s: f64,
    /// Measured requests' due and actual send times, seconds from the start of the cell.
    pub due_s: Vec<f64>,
    pub sent_s: Vec<f64>,
    /// bench's own stall share over the wall time (`stall::open_share`).
    pub stall_share: Option<f64>,
    /// bench's reader lag over the cell, ms (`stall::Probe`).
    pub reader_lag_ms: Option<LagStats>,
}

impl OpenResult {
    /// (n − 1) ÷ (last − first) of a list of times, sorted.
    pub fn rate(times: &[f64]) -> Option<f64> {
        let mut t = times.to_vec();
        t.sort_by(f64::total_cmp);
        let span = t.last()? - t.first()?;
        (t.len() > 1 && span > 0.0).then(|| (t.len() - 1) as f64 / span)
    }

    /// What the result says of its schedule, offered at `offered` requests a second.
    pub fn info(&self, offered: f64) -> OpenInfo {
        let lag = LagStats::of(self.records.iter().filter_map(|x| x.client_lag_ms));
        let queue = LagStats::of(self.records.iter().filter_map(|x| x.client_queue_ms));
        let scheduled = OpenResult::rate(&self.due_s);
        let achieved = OpenResult::rate(&self.sent_s);
        let behind = lag.p99.is_some_and(|l| l > 10.0)
            || matches!((scheduled, achieved), (Some(s), Some(a)) if a < 0.95 * s);
        OpenInfo {
            offered_rate: offered,
            scheduled_rate: scheduled,
            achieved_rate: achieved,
            lag_ms: lag,
            queue_ms: queue,
            behind,
        }
    }
}

/// Send the plan on its schedule; `cap` (`--max-concurrency`) bounds the requests in flight.
pub(crate) async fn run(
    s: &Session,
    label: &str,
    plan: Vec<Planned>,
    cap: Option<usize>,
) -> OpenResult {
    let (target, stop, progress) = (&s.target, &s.stop, &s.progress);
    let measured = plan.iter().filter(|p| p.measured).count();
    progress.begin(label, measured, plan.len() - measured);
    let sem = cap.map(|c| Arc::new(Semaphore::new(c.max(1))));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let probe = crate::bench::stall::Probe::start();
    // A little ahead, so the first request is not late by the time it takes to get here.
    let start = Instant::now() + Duration::from_millis(20);
    let mut set = JoinSet::new();
    let mut done: Vec<(usize, Instant, Duration, RequestRecord)> = Vec::with_capacity(measured);
    let mut errors = 0usize;
    let mut on_done =
        |r: Option<(usize, bool, Instant, Duration, RequestRecord)>,
         done: &mut Vec<(usize, Instant, Duration, RequestRecord)>| {
            if r.is_some() {
                progress.request_done();
            }
            if let Some((i, true, sent, at, rec)) = r {
                errors += usize::from(rec.outcome != Outcome::Ok);
                done.push((i, sent, at, rec));
                progress.update(label, done.len(), measured, errors);
            }
        };
    for (i, p) in plan.into_iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let due = start + p.at;
        // The timer wakes on a millisecond tick, up to one late: sleep to a tick before, then
        // spin until due (at most a millisecond of one worker a request; the other workers run
        // the requests meanwhile).
        tokio::time::sleep_until(due - Duration::from_millis(1)).await;
        while Instant::now() < due {
            std::hint::spin_loop();
        }
        let (target, sem, in_flight, stop) =
            (target.clone(), sem.clone(), in_flight.clone(), stop.clone());
        set.spawn(async move {
            let begun = Instant::now();
            let _permit = match &sem {
                Some(s) => s.clone().acquire_owned().await.ok(),
                None => None,
            };
            let sent = Instant::now();
            let schedule = Schedule {
                scheduled_ms: duration_ms(p.at),
                queue_ms: duration_ms(sent.saturating_duration_since(begun)),
                lag_ms: duration_ms(begun.saturating_duration_since(due)),
            };
            let n = in_flight.fetch_add(1, Ordering::Relaxed) + 1;
            let load = Sent {
                in_flight: n as u64,
                schedule: Some(schedule),
            };
            let rec = target.one(&p.req, load, &stop).await;
            in_flight.fetch_sub(1, Ordering::Relaxed);
            (i, p.measured, sent, p.at, rec)
        });
        while let Some(r) = set.try_join_next() {
            on_done(r.ok(), &mut done);
        }
    }
    while let Some(r) = set.join_next().await {
        on_done(r.ok(), &mut done);
    }
    done.sort_by_key(|d| d.0);
    let first = done.iter().map(|d| d.1).min();
    let last = done
        .iter()
        .map(|d| d.1 + Duration::from_secs_f64(d.3.e2e_ms.max(0.0) / 1000.0))
        .max();
    let wall_s = match (first, last) {
        (Some(f), Some(l)) => l.saturating_duration_since(f).as_secs_f64(),
        _ => 0.0,
    };
    let since = |t: Instant| t.saturating_duration_since(start);
    let mut waits: Vec<(Duration, Duration)> = done.iter().map(|d| (d.2, since(d.1))).collect();
    let stall_share = match (first, last) {
        (Some(f), Some(l)) => crate::bench::stall::open_share(&mut waits, since(f), since(l)),
        _ => None,
    };
    let due_s = done.iter().map(|d| d.2.as_secs_f64()).collect();
    let sent_s = done
        .iter()
        .map(|d| d.1.saturating_duration_since(start).as_secs_f64())
        .collect();
    let p95 = ttft_p95(done.iter().map(|d| &d.3));
    progress.cell_done(label, done.len(), errors, wall_s, p95);
    OpenResult {
        records: done.into_iter().map(|d| d.3).collect(),
        wall_s,
        due_s,
        sent_s,
        stall_share,
        reader_lag_ms: probe.finish(),
    }
}
