//! bench's own lag, per cell: its stall share (the share of the cell's wall time its scheduler
//! was behind its plan or held at its in-flight limit: MLPerf Endpoints' "stall %") and its
//! reader lag (how late its runtime polls a task that is ready: the part of a TTFT that is
//! bench's own), and the warning a run gives when either passes its bound. Never on the
//! request path: the open loop's share is reckoned from the stamps it already keeps, the closed
//! loop's is one atomic add per request, the reader lag a task of its own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{CellInfo, LagStats};
pub use crate::report::binding::{BENCH_READER_LAG_MS, BENCH_STALL_SHARE};

/// A wait of this or less is not a stall: it is the cost of sending a request at all (a task
/// spawned, a body built), not bench falling behind.
pub const STALL_GRACE: Duration = Duration::from_millis(1);

/// How often the reader-lag probe wakes.
const PROBE_EVERY: Duration = Duration::from_millis(5);

/// The reader-lag probe: a task that wakes every 5 ms, yields, and times how long bench's
/// runtime takes to poll it again. A task that yields is put behind every task already ready
/// and woken after the runtime's next look at its sockets, as a stream whose bytes just arrived
/// is: that wait is how late bench reads, and stamps, a token. (Not a timer's overshoot: tokio's
/// timer rounds to whole milliseconds, so an idle runtime overshoots by 0–1 ms anyway.)
pub(crate) struct Probe {
    stop: Arc<AtomicBool>,
    lags: Arc<Mutex<Vec<f64>>>,
}

impl Probe {
    pub fn start() -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let lags = Arc::new(Mutex::new(Vec::with_capacity(1024)));
        let (s, l) = (stop.clone(), lags.clone());
        tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                tokio::time::sleep(PROBE_EVERY).await;
                let ready = Instant::now();
                tokio::task::yield_now().await;
                let lag = ready.elapsed().as_secs_f64() * 1000.0;
                if let Ok(mut v) = l.lock() {
                    v.push(lag);
                }
            }
        });
        Probe { stop, lags }
    }

    /// Stop the probe (it ends at its next wake); its lags so far, ms. `None` when it never
    /// woke (a cell shorter than 5 ms).
    pub fn finish(self) -> Option<LagStats> {
        self.stop.store(true, Ordering::Relaxed);
        let v = self.lags.lock().map(|v| v.clone()).unwrap_or_default();
        (!v.is_empty()).then(|| LagStats::of(v.into_iter()))
    }
}

/// The open loop's stall share: of the window `[from, to]` (the cell's wall time), the share
/// covered by at least one measured request that was due and not yet sent, late past its
/// instant or waiting for a `--max-concurrency` slot, for more than [`STALL_GRACE`]. A union,
/// so many requests late together count once: the scheduler was behind, or it was not.
/// `waits` are each request's (due, sent), as offsets from the cell's start.
pub fn open_share(waits: &mut [(Duration, Duration)], from: Duration, to: Duration) -> Option<f64> {
    if to <= from {
        return None;
    }
    waits.sort_unstable();
    let mut held = Duration::ZERO;
    let mut reach = from;
    for &(due, sent) in waits.iter() {
        if sent.saturating_sub(due) <= STALL_GRACE {
            continue;
        }
        let (a, b) = (due.max(reach), sent.min(to));
        if b > a {
            held += b - a;
            reach = b;
        }
    }
    Some(held.as_secs_f64() / (to - from).as_secs_f64())
}

/// The closed loop's stall: per worker, the time from reading one response's end to setting
/// out its next request, summed where it was over [`STALL_GRACE`]. One atomic add a request.
#[derive(Default)]
pub(crate) struct Gaps {
    nanos: AtomicU64,
}

impl Gaps {
    /// A worker read a response's end at `ended` and sets out its next request now.
    pub fn next(&self, ended: Instant) {
        let gap = ended.elapsed();
        if gap > STALL_GRACE {
            let n = u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX);
            self.nanos.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Σ gaps ÷ (workers × wall).
    pub fn share(&self, workers: usize, wall_s: f64) -> Option<f64> {
        let denominator = workers as f64 * wall_s;
        (denominator > 0.0)
            .then(|| self.nanos.load(Ordering::Relaxed) as f64 / 1e9 / denominator)
            .map(|s| s.min(1.0))
    }
}

/// The run's stall share: its cells' stalled time ÷ their wall time.
pub fn run_share(cells: &[CellInfo]) -> Option<f64> {
    let (mut held, mut wall) = (0.0, 0.0);
    for c in cells {
        if let Some(s) = c.stall_share {
            held += s * c.wall_s;
            wall += c.wall_s;
        }
    }
    (wall > 0.0).then(|| held / wall)
}

/// What to do about a lag of bench's own making.
const QUIETER: &str =
    "run bench on a quieter machine, with fewer streams, or across more processes";

/// A sentence per cell whose own lag passed its bound: the figure, what it means and what to do.
pub fn warnings(cells: &[CellInfo]) -> Vec<String> {
    let mut out = Vec::new();
    for c in cells {
        let mut over = Vec::new();
        if let Some(s) = c.stall_share.filter(|s| *s > BENCH_STALL_SHARE) {
            // An open loop whose waits were mostly for a slot was held by its own cap.
            let held = c
                .open_loop
                .as_ref()
                .is_some_and(|o| o.queue_ms.p50.unwrap_or(0.0) > o.lag_ms.p50.unwrap_or(0.0));
            let (what, fix) = if held {
                (
                    "requests waited for a --max-concurrency slot",
                    "raise --max-concurrency or lower the rate",
                )
            } else {
                ("its scheduler was behind its plan", QUIETER)
            };
            over.push(format!(
                "stall share {:.1} % (bound {:.0} %): {what} that long, so bench, not the server, set the pace; {fix}",
                100.0 * s,
                100.0 * BENCH_STALL_SHARE
            ));
        }
        if let Some(l) = c
            .reader_lag_ms
            .as_ref()
            .and_then(|l| l.p99)
            .filter(|l| *l > BENCH_READER_LAG_MS)
        {
            over.push(format!(
                "reader lag p99 {l:.1} ms (bound {BENCH_READER_LAG_MS:.0} ms): TTFT and gaps here carry up to that much of bench's own delay; {QUIETER}"
            ));
        }
        if !over.is_empty() {
            out.push(format!("{}: {}", super::verdict::name(c), over.join("; ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_open_loop_counts_each_stalled_instant_once_and_forgives_the_grace() {
        // Two requests late together over 10–30 ms, one on time, one late by the grace alone.
        let mut w = vec![
            (ms(10), ms(30)),
            (ms(20), ms(25)),
            (ms(40), ms(40)),
            (ms(50), ms(51)),
        ];
        let near = |v: Option<f64>, want: f64| v.is_some_and(|v| (v - want).abs() < 1e-9);
        assert!(near(open_share(&mut w, ms(0), ms(100)), 0.2));
        // Clipped to the window; an empty window has no share.
        let mut w = vec![(ms(0), ms(60))];
        assert!(near(open_share(&mut w, ms(10), ms(110)), 0.5));
        assert_eq!(open_share(&mut w, ms(10), ms(10)), None);
        assert_eq!(open_share(&mut [], ms(0), ms(10)), Some(0.0));
    }

    #[test]
    fn the_closed_loop_sums_gaps_over_the_grace_per_worker() {
        let g = Gaps::default();
        g.nanos.store(300_000_000, Ordering::Relaxed);
        assert!(g.share(3, 1.0).is_some_and(|s| (s - 0.1).abs() < 1e-9));
        assert_eq!(g.share(0, 1.0), None);
        assert_eq!(g.share(1, 0.1), Some(1.0));
    }
}
