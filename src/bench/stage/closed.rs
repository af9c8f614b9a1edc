//! The closed loop: exactly C requests in flight, each worker sending its next request as its
//! last one ends; W warm-up requests first, not recorded. A cell's requests are tallied as they
//! finish (`Tally`, which conversations share). bench's own lag: each worker's gap from reading
//! a response's end to setting out its next request (`stall::Gaps`), and its reader lag.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::time::Instant;

use crate::bench::progress::{ttft_p95, Progress};
use crate::bench::request::{Req, Sent};
use crate::bench::session::Session;
use crate::meter::{Outcome, RequestRecord};

pub struct CellResult {
    pub records: Vec<RequestRecord>,
    pub wall_s: f64,
    /// bench's own stall share (`stall::Gaps`); none for conversations (think time is planned).
    pub stall_share: Option<f64>,
    /// bench's reader lag over the cell, ms (`stall::Probe`).
    pub reader_lag_ms: Option<crate::bench::LagStats>,
}

/// A closed loop's requests as they finish: the measured ones (index `warmup` on) counted,
/// kept in order and shown; the first one's start begins the cell's wall time.
pub(crate) struct Tally<'a> {
    label: &'a str,
    requests: usize,
    warmup: usize,
    progress: &'a Progress,
    done: AtomicUsize,
    errors: AtomicUsize,
    results: Mutex<Vec<(usize, RequestRecord)>>,
    first: Mutex<Option<Instant>>,
    probe: crate::bench::stall::Probe,
}

impl<'a> Tally<'a> {
    pub fn new(label: &'a str, requests: usize, warmup: usize, progress: &'a Progress) -> Self {
        progress.begin(label, requests, warmup);
        Tally {
            label,
            requests,
            warmup,
            progress,
            done: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
            results: Mutex::new(Vec::with_capacity(requests)),
            first: Mutex::new(None),
            probe: crate::bench::stall::Probe::start(),
        }
    }

    /// Request `i` is about to be sent.
    pub fn starting(&self, i: usize) {
        if i >= self.warmup {
            if let Ok(mut f) = self.first.lock() {
                f.get_or_insert_with(Instant::now);
            }
        }
    }

    /// Request `i` ended with this record.
    pub fn finished(&self, i: usize, rec: RequestRecord) {
        self.progress.request_done();
        if i < self.warmup {
            return;
        }
        if rec.outcome != Outcome::Ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut r) = self.results.lock() {
            r.push((i, rec));
        }
        let d = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let errors = self.errors.load(Ordering::Relaxed);
        self.progress.update(self.label, d, self.requests, errors);
    }

    /// The cell: its records in order and its wall time (first measured start to now).
    pub fn finish(self) -> CellResult {
        let wall_s = self
            .first
            .lock()
            .ok()
            .and_then(|f| *f)
            .map_or(0.0, |s| s.elapsed().as_secs_f64());
        let records = in_order(self.results.into_inner().unwrap_or_default());
        let errors = self.errors.load(Ordering::Relaxed);
        let p95 = ttft_p95(records.iter());
        self.progress
            .cell_done(self.label, records.len(), errors, wall_s, p95);
        CellResult {
            records,
            wall_s,
            stall_share: None,
            reader_lag_ms: self.probe.finish(),
        }
    }
}

/// One closed-loop cell: `(requests, warmup)` — W warm-up then N measured requests, `workers`
/// always in flight (of the fleet's level `conc`, which the records carry: the same unless the
/// run is a shard); request `i` is `make(i)`.
pub(crate) async fn run(
    s: &Session,
    label: &str,
    make: &(dyn Fn(usize) -> Req + Sync),
    (conc, workers): (usize, usize),
    (requests, warmup): (usize, usize),
) -> CellResult {
    let (target, stop) = (&s.target, &s.stop);
    let total = warmup + requests;
    let next = AtomicUsize::new(0);
    let tally = Tally::new(label, requests, warmup, &s.progress);
    let sent = Sent {
        in_flight: conc as u64,
        schedule: None,
    };
    // The first round's connections, before the cell: warm-up covers them when W >= C.
    if workers > warmup {
        target.preconnect(workers).await;
    }
    let gaps = crate::bench::stall::Gaps::default();
    let worker = || async {
        // When this worker read its last response's end (its next request is then due).
        let mut ended: Option<Instant> = None;
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= total || stop.load(Ordering::Relaxed) {
                return;
            }
            tally.starting(i);
            let req = make(i);
            // Only between measured requests: the cell's wall time is theirs.
            if let Some(e) = ended.filter(|_| i >= warmup) {
                gaps.next(e);
            }
            let rec = target.one(&req, sent, stop).await;
            ended = Some(Instant::now());
            tally.finished(i, rec);
        }
    };
    let tasks: Vec<_> = (0..workers).map(|_| worker()).collect();
    super::join::join_all(tasks).await;
    target.opened(workers.min(total));
    let mut cell = tally.finish();
    cell.stall_share = gaps.share(workers, cell.wall_s);
    cell
}

/// Records in the order of their requests, each moved once (a record is large: sorting them
/// in place moves each many times).
fn in_order(finished: Vec<(usize, RequestRecord)>) -> Vec<RequestRecord> {
    let mut order: Vec<(usize, usize)> = finished
        .iter()
        .enumerate()
        .map(|(k, (i, _))| (*i, k))
        .collect();
    order.sort_unstable();
    let mut slots: Vec<Option<RequestRecord>> =
        finished.into_iter().map(|(_, r)| Some(r)).collect();
    order
        .into_iter()
        .filter_map(|(_, k)| slots.get_mut(k).and_then(Option::take))
        .collect()
}
