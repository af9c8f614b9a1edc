//! One run from many bench processes (`bench --shard I/N`): no coordinator. Every shard computes
//! the same plan from the same flags, the one a single process would run, and takes its part of
//! it: of each cell's sequence of requests (in the order one process would send them, with
//! their prompts and, in an open loop, their due times), shard I takes those whose position j
//! has j mod N = I − 1. The union of the shards is then the single process's plan exactly:
//! every prompt once, every due time once, for Poisson, gamma and constant arrivals alike (a
//! constant schedule dealt round-robin is each shard's own constant schedule phase-shifted by
//! (I − 1)/N of its interval; a gamma schedule stays the one gamma schedule). A closed loop's
//! C workers are split the same way (C ÷ N, the remainder to the first shards).
//!
//! Cells start together on the wall clock: cell k at `--start-at` + k × `--cell-window`. A shard
//! that finishes early waits for the next window; one that overruns starts its next cell late
//! and says so.

use std::time::{Duration, SystemTime};

/// `--shard I/N`: shard I (from 1) of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Shard {
    pub index: u32,
    pub of: u32,
}

/// The Kubernetes Indexed Job's index (from 0), which `--shard N` reads.
pub const JOB_INDEX: &str = "JOB_COMPLETION_INDEX";

impl Shard {
    /// `I/N`, or `N` alone with the Indexed Job's index (`job_index`, from 0) as I − 1.
    pub fn parse(s: &str, job_index: Option<&str>) -> Result<Shard, String> {
        let bad = || {
            format!("--shard {s:?}: I/N with 1 <= I <= N (or N alone in a Kubernetes Indexed Job, which sets {JOB_INDEX})")
        };
        let (i, n) = match s.split_once('/') {
            Some((i, n)) => (
                i.trim().parse::<u32>().map_err(|_| bad())?,
                n.trim().parse::<u32>().map_err(|_| bad())?,
            ),
            None => {
                let n = s.trim().parse::<u32>().map_err(|_| bad())?;
                let Some(k) = job_index else {
                    return Err(format!(
                        "--shard {s}: N alone takes I from {JOB_INDEX}, which is not set; give I/N"
                    ));
                };
                let k = k
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| format!("{JOB_INDEX}={k:?}: not a number"))?;
                (k + 1, n)
            }
        };
        if n == 0 || i == 0 || i > n {
            return Err(bad());
        }
        Ok(Shard { index: i, of: n })
    }

    /// Whether position `j` (from 0) of a cell's sequence is this shard's.
    pub fn takes(&self, j: usize) -> bool {
        j % self.of as usize == (self.index - 1) as usize
    }

    /// How many of `total` positions are this shard's: `total ÷ N`, one more for the first
    /// `total mod N` shards. The shards' shares sum to `total`.
    pub fn share(&self, total: usize) -> usize {
        let (n, i) = (self.of as usize, (self.index - 1) as usize);
        total / n + usize::from(i < total % n)
    }

    /// The shard's own run folder below `--out`.
    pub fn folder(&self) -> String {
        format!("shard-{}-of-{}", self.index, self.of)
    }

    /// Whether this shard scrapes the engine (shard 1 alone, so the engine is asked once).
    pub fn scrapes(&self) -> bool {
        self.index == 1
    }
}

/// The wall-clock windows every shard computes alike.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Windows {
    pub start: SystemTime,
    pub window: Duration,
}

impl Windows {
    /// When cell `k` (from 0, in the plan's order) begins.
    pub fn cell_start(&self, k: usize) -> SystemTime {
        self.start + self.window * u32::try_from(k).unwrap_or(u32::MAX)
    }
}

/// A run's place in a fleet: its shard (none: the whole plan), the common windows (with
/// `--start-at`) and the run id every record carries.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    pub shard: Option<Shard>,
    pub windows: Option<Windows>,
    pub start: Option<SystemTime>,
    /// `--run-id`, else derived from `--start-at`, else drawn when the run begins.
    pub run_id: Option<String>,
}

/// A cell that began after its window's start (the shard's previous cell ran over), by how
/// much: `run.json`'s `fleet.late_cells`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Late {
    pub cell: String,
    pub late_ms: f64,
}

/// What `run.json` says of the run's place in a fleet.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FleetInfo {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cell_window_s: Option<f64>,
    /// Cells that began late: each shard must begin cell k together, so a late cell is one the
    /// shards did not run side by side for all of its length.
    pub late_cells: Vec<Late>,
}

impl Fleet {
    /// The flags read: `--shard` needs `--start-at` and `--cell-window` (every shard begins
    /// cell k at the same instant); `--cell-window` needs `--start-at`.
    pub fn of(
        shard: Option<&str>,
        start_at: Option<&str>,
        cell_window: Option<Duration>,
        run_id: Option<&str>,
        job_index: Option<&str>,
    ) -> Result<Fleet, String> {
        let shard = shard.map(|s| Shard::parse(s, job_index)).transpose()?;
        let start = start_at
            .map(|t| {
                humantime::parse_rfc3339_weak(t.trim()).map_err(|_| {
                    format!(
                        "--start-at {t:?}: not a time like 2026-12-05T10:00:00Z (RFC 3339, UTC)"
                    )
                })
            })
            .transpose()?;
        if shard.is_some() && (start.is_none() || cell_window.is_none()) {
            return Err("--shard needs --start-at and --cell-window: every shard begins cell k at --start-at + k × --cell-window".into());
        }
        if cell_window.is_some() && start.is_none() {
            return Err("--cell-window needs --start-at, where the first window begins".into());
        }
        if cell_window.is_some_and(|w| w.is_zero()) {
            return Err("--cell-window must be longer than 0".into());
        }
        if let Some(id) = run_id.filter(|id| !crate::report::sql::run_id_ok(id)) {
            return Err(format!(
                "--run-id {id:?}: letters, digits, '.', '_', '-' and ':'"
            ));
        }
        Ok(Fleet {
            shard,
            windows: start
                .zip(cell_window)
                .map(|(start, window)| Windows { start, window }),
            start,
            run_id: run_id.map(str::to_owned).or(start.map(run_id_of)),
        })
    }

    /// The positions of a cell's sequence of `total` (a multiple of `unit`, the arms' group:
    /// a group's copies stay together) this run sends, in order: every one without a shard.
    pub fn positions(&self, total: usize, unit: usize) -> Vec<usize> {
        let unit = unit.max(1);
        (0..total)
            .filter(|j| self.shard.is_none_or(|s| s.takes(j / unit)))
            .collect()
    }

    /// This run's workers of a closed loop's `conc` (the flags refuse a level below N).
    pub fn workers(&self, conc: usize) -> usize {
        self.shard.map_or(conc, |s| s.share(conc))
    }
}

/// The run id every shard derives alike from the common start, when `--run-id` is not given:
/// `r` and the start's UTC digits (`r20261205T100000Z`).
pub fn run_id_of(start: SystemTime) -> String {
    let t = humantime::format_rfc3339_seconds(start).to_string();
    let digits: String = t.chars().filter(|c| !matches!(c, '-' | ':')).collect();
    format!("r{digits}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_from_the_flag_or_the_indexed_job() {
        assert_eq!(Shard::parse("2/4", None), Ok(Shard { index: 2, of: 4 }));
        assert_eq!(Shard::parse("4", Some("0")), Ok(Shard { index: 1, of: 4 }));
        assert_eq!(Shard::parse("4", Some("3")), Ok(Shard { index: 4, of: 4 }));
        assert!(Shard::parse("4", Some("4")).is_err());
        assert!(Shard::parse("4", None).unwrap_err().contains(JOB_INDEX));
        for bad in ["0/4", "5/4", "1/0", "a/b", ""] {
            assert!(Shard::parse(bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_shards_deal_every_position_once_and_their_shares_sum() {
        for n in 1..=5u32 {
            for total in [0usize, 1, 3, 7, 8, 100, 1001] {
                let shards: Vec<Shard> = (1..=n).map(|i| Shard { index: i, of: n }).collect();
                assert_eq!(shards.iter().map(|s| s.share(total)).sum::<usize>(), total);
                for j in 0..total {
                    assert_eq!(shards.iter().filter(|s| s.takes(j)).count(), 1);
                }
                for s in &shards {
                    assert_eq!((0..total).filter(|j| s.takes(*j)).count(), s.share(total));
                }
            }
        }
    }

    #[test]
    fn a_constant_schedule_dealt_round_robin_is_each_shards_own_phase_shifted() {
        // One process at 10/s: due every 100 ms. Shard 2 of 4 takes 100, 500, 900 ms: every
        // 400 ms from 100 ms, its own constant schedule shifted by 1/4 of 400 ms.
        let s = Shard { index: 2, of: 4 };
        let due: Vec<u64> = (0..12)
            .filter(|j| s.takes(*j))
            .map(|j| j as u64 * 100)
            .collect();
        assert_eq!(due, [100, 500, 900]);
    }

    #[test]
    fn windows_and_the_run_id_are_alike_for_every_shard() {
        let start = humantime::parse_rfc3339("2026-12-05T10:00:00Z").unwrap();
        let w = Windows {
            start,
            window: Duration::from_secs(90),
        };
        assert_eq!(
            humantime::format_rfc3339_seconds(w.cell_start(2)).to_string(),
            "2026-12-05T10:03:00Z"
        );
        assert_eq!(run_id_of(start), "r20261205T100000Z");
    }
}
