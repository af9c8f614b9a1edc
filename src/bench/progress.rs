//! What bench says while it runs, on stderr: the estimate before the load, a line per finished
//! cell (its TTFT p95, the run's elapsed time, the ETA), and a heartbeat whenever nothing was
//! printed for a while (10 s; `--progress-every`) — a line when stderr is not a terminal, the
//! redrawn bar when it is. The ETA is the cells still to run, each as estimated and scaled by
//! what the finished cells at its level (or the nearest level) took against theirs, and the
//! cell under way by its requests done. Never holds a request up: the state is behind one short
//! lock, and a poisoned lock only silences progress.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::forecast::{Cell, Estimate};
use crate::meter::{Outcome, RequestRecord};

/// Progress on stderr: a live line on a terminal, lines otherwise.
pub struct Progress {
    tty: bool,
    quiet: bool,
    every: Duration,
    state: Arc<Mutex<State>>,
    /// `--metrics-listen`: the cell under way.
    live: Option<Arc<super::live::Live>>,
}

struct State {
    start: Instant,
    /// When a line was last printed (the heartbeat waits for `every` of silence).
    last_line: Instant,
    plan: Option<(Estimate, Instant)>,
    /// Seconds each planned cell took, once finished.
    took: Vec<Option<f64>>,
    cell: Option<Current>,
    cells_done: usize,
}

/// The cell under way.
struct Current {
    label: String,
    started: Instant,
    /// Its requests, warm-up included, planned and done.
    planned: usize,
    done: usize,
    measured: usize,
    measured_total: usize,
    errors: usize,
    /// Its place in the plan.
    index: Option<usize>,
}

/// What the ETA says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Eta {
    About(f64),
    /// A search's bound, and what is left at the probes' pace.
    AtMost(f64, Option<f64>),
    Unknown,
}

impl std::fmt::Display for Eta {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Eta::About(s) => write!(f, "ETA {}", clock(*s)),
            Eta::AtMost(s, Some(p)) if *s > 0.0 && *p > 0.0 => {
                write!(f, "ETA at most {}, likely {}", clock(*s), clock(*p))
            }
            Eta::AtMost(s, _) if *s > 0.0 => write!(f, "ETA at most {}", clock(*s)),
            Eta::AtMost(..) => f.write_str("ETA: the level under way"),
            Eta::Unknown => f.write_str("ETA -"),
        }
    }
}

/// Elapsed time and ETAs: `42s`, `4m10s`, `1h02m`.
pub(crate) fn clock(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// TTFT p95 of a cell's successful requests.
pub(crate) fn ttft_p95<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Option<f64> {
    let ok = records.into_iter().filter(|r| r.outcome == Outcome::Ok);
    crate::stats::pct(&crate::stats::sorted(ok.filter_map(|r| r.ttft_ms)), 0.95)
}

/// The finished cells' took ÷ estimated at `level`: its own cells', else the nearest level's
/// below, else above.
fn ratio(cells: &[Cell], took: &[Option<f64>], level: f64) -> Option<f64> {
    let at = |l: f64| {
        let (t, e) = cells
            .iter()
            .zip(took)
            .filter(|(c, _)| c.level == l)
            .filter_map(|(c, t)| t.filter(|t| t.is_finite()).map(|t| (t, c.est_s)))
            .fold((0.0, 0.0), |(a, b), (t, e)| (a + t, b + e));
        (e > 0.0).then(|| t / e)
    };
    let done = || {
        let paced = |t: &&Option<f64>| t.is_some_and(f64::is_finite);
        cells.iter().zip(took).filter(move |(_, t)| paced(t))
    };
    let below = done()
        .map(|(c, _)| c.level)
        .filter(|l| *l < level)
        .reduce(f64::max);
    let above = done()
        .map(|(c, _)| c.level)
        .filter(|l| *l > level)
        .reduce(f64::min);
    at(level)
        .or_else(|| below.and_then(at))
        .or_else(|| above.and_then(at))
}

/// Seconds left: every cell not finished, corrected; the one under way (`current`: its index,
/// seconds since it began, fraction of its requests done) by how far it got.
pub(crate) fn remaining(
    cells: &[Cell],
    took: &[Option<f64>],
    calibrated: bool,
    current: Option<(usize, f64, f64)>,
) -> Option<f64> {
    let mut sum = 0.0;
    for (i, c) in cells.iter().enumerate() {
        if took.get(i).copied().flatten().is_some() {
            continue;
        }
        let k = ratio(cells, took, c.level).or(calibrated.then_some(1.0))?;
        let est = c.est_s * k;
        sum += match current {
            // Its estimate blended with its pace so far, as far as it got.
            Some((j, elapsed, f)) if j == i => (1.0 - f) * (elapsed + (1.0 - f) * est),
            _ => est,
        };
    }
    Some(sum.max(0.0))
}

impl State {
    fn eta(&self, now: Instant) -> Eta {
        match &self.plan {
            None => Eta::Unknown,
            Some((
                Estimate::AtMost {
                    bound_s, pace_s, ..
                },
                at,
            )) => {
                let since = now.saturating_duration_since(*at).as_secs_f64();
                Eta::AtMost(bound_s - since, pace_s.map(|p| p - since))
            }
            Some((
                Estimate::Cells {
                    cells, calibrated, ..
                },
                _,
            )) => {
                let current = self.cell.as_ref().and_then(|c| {
                    let f = c.done as f64 / c.planned.max(1) as f64;
                    let e = now.saturating_duration_since(c.started).as_secs_f64();
                    c.index.map(|i| (i, e, f.min(1.0)))
                });
                remaining(cells, &self.took, *calibrated, current).map_or(Eta::Unknown, Eta::About)
            }
        }
    }

    fn elapsed(&self, now: Instant) -> String {
        clock(now.saturating_duration_since(self.start).as_secs_f64())
    }

    /// `cell 3/12`, or `cell 3` when the cells are not known in advance.
    fn count(&self) -> String {
        match &self.plan {
            Some((Estimate::Cells { cells, .. }, _)) => {
                format!("cell {}/{}", self.cells_done, cells.len())
            }
            _ => format!("cell {}", self.cells_done),
        }
    }

    fn bar(&self, now: Instant) -> Option<String> {
        let c = self.cell.as_ref()?;
        let (label, done, total) = (&c.label, c.measured, c.measured_total);
        let w = 30;
        let filled = (done * w / total.max(1)).min(w);
        Some(format!(
            "\r{label:<20} [{}{}] {done}/{total} errors {}  {}   ",
            "#".repeat(filled),
            ".".repeat(w - filled),
            c.errors,
            self.eta(now)
        ))
    }

    fn heartbeat(&self, now: Instant) -> String {
        let what = match &self.cell {
            Some(c) => {
                let warmup = match c.planned - c.measured_total {
                    0 => String::new(),
                    w => format!(" ({w} warm-up)"),
                };
                format!(
                    "{}: {}/{} requests{warmup}, {} errors",
                    c.label, c.done, c.planned, c.errors
                )
            }
            None if self.plan.is_none() => "probing the target".into(),
            None => "between cells".into(),
        };
        format!(
            "progress: {what}; elapsed {}, {}",
            self.elapsed(now),
            self.eta(now)
        )
    }
}

/// Stops the heartbeat when dropped.
pub struct Beat(tokio::task::JoinHandle<()>);

impl Drop for Beat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Progress {
    /// `every`: the heartbeat's interval.
    pub fn new(quiet: bool, every: Duration) -> Self {
        let now = Instant::now();
        Progress {
            tty: std::io::stderr().is_terminal(),
            quiet,
            every,
            state: Arc::new(Mutex::new(State {
                start: now,
                last_line: now,
                plan: None,
                took: Vec::new(),
                cell: None,
                cells_done: 0,
            })),
            live: None,
        }
    }

    /// Tell these live counters which cell is under way (`--metrics-listen`).
    pub fn with_live(mut self, live: Option<Arc<super::live::Live>>) -> Self {
        self.live = live;
        self
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> Option<T> {
        self.state.lock().ok().map(|mut s| f(&mut s))
    }

    /// Print the estimate and take the plan the ETA corrects.
    pub(crate) fn plan(&self, plan: Estimate) {
        self.line(&plan.line());
        self.with(|s| {
            if let Estimate::Cells { cells, .. } = &plan {
                s.took = vec![None; cells.len()];
            }
            s.plan = Some((plan, Instant::now()));
        });
    }

    /// A cell begins: `requests` measured after `warmup` warm-up requests.
    pub fn begin(&self, label: &str, requests: usize, warmup: usize) {
        if let Some(l) = &self.live {
            l.cell(label);
        }
        self.with(|s| {
            let index = match &s.plan {
                Some((Estimate::Cells { cells, .. }, _)) => cells
                    .iter()
                    .zip(&s.took)
                    .position(|(c, t)| t.is_none() && c.label == label),
                _ => None,
            };
            s.cell = Some(Current {
                label: label.to_owned(),
                started: Instant::now(),
                planned: requests + warmup,
                done: 0,
                measured: 0,
                measured_total: requests,
                errors: 0,
                index,
            });
        });
    }

    /// A request of the cell under way ended, warm-up or measured.
    pub fn request_done(&self) {
        self.with(|s| {
            if let Some(c) = &mut s.cell {
                c.done += 1;
            }
        });
    }

    /// `done` of the cell's `total` measured requests ended, `errors` of them in error.
    pub fn update(&self, label: &str, done: usize, total: usize, errors: usize) {
        // The bar is drawn only on a terminal: off one, no text is made per request.
        let drawn = self.tty && !self.quiet;
        let bar = self.with(|s| {
            if let Some(c) = s.cell.as_mut().filter(|c| c.label == label) {
                (c.measured, c.measured_total, c.errors) = (done, total, errors);
            }
            drawn.then(|| s.bar(Instant::now())).flatten()
        });
        if let Some(b) = bar.flatten() {
            eprint!("{b}");
        }
    }

    /// The cell ended: its line, with the run's elapsed time and ETA.
    pub fn cell_done(&self, label: &str, n: usize, errors: usize, wall_s: f64, p95: Option<f64>) {
        let now = Instant::now();
        let tail = self.with(|s| {
            if let Some(c) = s.cell.take() {
                // A cell cut short (Ctrl-C) is done, but says nothing of the pace.
                let took = match c.done >= c.planned {
                    true => now.saturating_duration_since(c.started).as_secs_f64(),
                    false => f64::NAN,
                };
                if let Some(t) = c.index.and_then(|i| s.took.get_mut(i)) {
                    *t = Some(took);
                }
            }
            s.cells_done += 1;
            let ttft = p95.map_or_else(|| "-".into(), |p| format!("{p:.0} ms"));
            format!(
                "; TTFT p95 {ttft}; {}, elapsed {}, {}",
                s.count(),
                s.elapsed(now),
                s.eta(now)
            )
        });
        if self.quiet {
            return;
        }
        if self.tty {
            eprint!("\r{:<110}\r", "");
        }
        let tail = tail.unwrap_or_default();
        self.line(&format!(
            "{label:<20} {n} measured, {errors} errors, {wall_s:.1} s{tail}"
        ));
    }

    pub fn line(&self, s: &str) {
        if !self.quiet {
            eprintln!("{s}");
            self.with(|st| st.last_line = Instant::now());
        }
    }

    /// Start the heartbeat (none when quiet); it stops when the `Beat` is dropped.
    pub fn heartbeat(&self) -> Option<Beat> {
        if self.quiet {
            return None;
        }
        let (state, every, tty) = (self.state.clone(), self.every, self.tty);
        Some(Beat(tokio::spawn(async move {
            loop {
                let Some(next) = state.lock().ok().map(|s| s.last_line + every) else {
                    return;
                };
                tokio::time::sleep_until(next).await;
                let Ok(mut s) = state.lock() else { return };
                let now = Instant::now();
                if now.saturating_duration_since(s.last_line) < every {
                    continue;
                }
                if tty {
                    if let Some(b) = s.bar(now) {
                        eprint!("{b}");
                    }
                } else {
                    eprintln!("{}", s.heartbeat(now));
                }
                s.last_line = now;
            }
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(label: &str, level: f64, est_s: f64) -> Cell {
        Cell {
            label: label.into(),
            level,
            requests: 10,
            est_s,
        }
    }

    #[test]
    fn clocks_read_short() {
        assert_eq!(clock(4.4), "4s");
        assert_eq!(clock(250.0), "4m10s");
        assert_eq!(clock(3600.0 + 150.0), "1h02m");
    }

    #[test]
    fn the_eta_is_the_plan_until_cells_finish_then_their_pace_at_each_level() {
        let cells = [
            cell("a C=1", 1.0, 100.0),
            cell("a C=2", 2.0, 50.0),
            cell("b C=1", 1.0, 200.0),
            cell("b C=2", 2.0, 100.0),
        ];
        // Nothing done: the estimate itself; nothing to go on uncalibrated.
        assert_eq!(remaining(&cells, &[None; 4], true, None), Some(450.0));
        assert_eq!(remaining(&cells, &[None; 4], false, None), None);
        // a C=1 took twice its estimate: C=1 cells double, C=2 (no cell yet) takes the ratio of
        // the level below.
        let took = [Some(200.0), None, None, None];
        assert_eq!(remaining(&cells, &took, false, None), Some(700.0));
        // a C=2 took its estimate: C=2 cells are corrected by their own level.
        let took = [Some(200.0), Some(50.0), None, None];
        assert_eq!(remaining(&cells, &took, true, None), Some(500.0));
        // b C=1 half done in 200 s (its corrected estimate is 400 s): half of the blend.
        let r = remaining(&cells, &took, true, Some((2, 200.0, 0.5)));
        assert_eq!(r, Some(0.5 * (200.0 + 0.5 * 400.0) + 100.0));
        // Done: nothing left.
        let all = [Some(1.0); 4];
        assert_eq!(remaining(&cells, &all, true, None), Some(0.0));
    }

    #[test]
    fn a_level_never_seen_takes_the_nearest_ratio_above_when_none_is_below() {
        let cells = [cell("a C=2", 2.0, 10.0), cell("a C=1", 1.0, 10.0)];
        let took = [Some(30.0), None];
        assert_eq!(ratio(&cells, &took, 1.0), Some(3.0));
        assert_eq!(remaining(&cells, &took, true, None), Some(30.0));
    }

    #[test]
    fn the_etas_say_what_they_are() {
        assert_eq!(Eta::About(70.0).to_string(), "ETA 1m10s");
        assert_eq!(Eta::AtMost(70.0, None).to_string(), "ETA at most 1m10s");
        let likely = Eta::AtMost(70.0, Some(12.0)).to_string();
        assert_eq!(likely, "ETA at most 1m10s, likely 12s");
        let late = Eta::AtMost(70.0, Some(-2.0)).to_string();
        assert_eq!(late, "ETA at most 1m10s");
        let over = Eta::AtMost(-1.0, None).to_string();
        assert_eq!(over, "ETA: the level under way");
        assert_eq!(Eta::Unknown.to_string(), "ETA -");
    }
}
