//! How long a run will take, said before the load starts: one probe request per bucket (TTFT
//! and TPOT on this client's clock, a synthetic prompt of the bucket's median length, never one
//! of the measured prompts), and from it every planned cell's duration. The ETA then corrects
//! the cells still to run by what the finished ones took (`progress.rs`). Never sends a measured
//! request; a probe that fails leaves the estimate unknown, never the run.

use std::time::Duration;

use super::cell::Level;
use super::dataset::{Chosen, Conversation};
use super::forecast::{about, Cell, Estimate};
use super::model::settings::{self, OpenLoop};
use super::plan::{Plan, Sweep};
use super::request::{text_of_tokens, Req, Sent};
use super::session::Session;
use super::stage::open::Planned;
use super::stage::search::{Axis, Ladder};
use crate::meter::Outcome;
use crate::tokens::estimate_tokens;

/// Output tokens a probe asks for: enough gaps for a TPOT, few enough to cost little.
const PROBE_TOKENS: u64 = 16;

/// What a probe measured, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Probe {
    pub ttft_s: f64,
    pub tpot_s: f64,
}

impl Probe {
    /// Used to weigh cells against each other when no probe answered; never printed.
    const NOMINAL: Probe = Probe {
        ttft_s: 0.1,
        tpot_s: 0.03,
    };

    /// One request's duration with `out` output tokens.
    pub fn e2e_s(self, out: u64) -> f64 {
        self.ttft_s + out.saturating_sub(1) as f64 * self.tpot_s
    }
}

/// What the estimate reads besides the plan: whether to send probes at all, each cell's
/// `(requests, warmup)`, the shared prefix a probe's prompt carries, the probe text's seed.
pub(crate) struct Asked {
    pub probe: bool,
    pub cells: (usize, usize),
    pub shared_prefix: u64,
    pub seed: u64,
}

/// Probe the target and estimate the plan's cells.
pub(crate) async fn of(s: &Session, plan: &Plan, asked: &Asked) -> Estimate {
    let n = asked.cells.0 + asked.cells.1;
    match plan {
        Plan::Replay {
            requests, replay, ..
        } => replayed(replay.speed, requests),
        Plan::Conversations { convs, turns, .. } => {
            let probes = match asked.probe {
                true => vec![first_turns(s, asked, convs).await],
                false => Vec::new(),
            };
            let p = Probed::of(probes, asked.probe);
            let probe = p.probes.first().copied().flatten().unwrap_or(p.fallback);
            let cells = turns
                .concurrency
                .iter()
                .map(|&conc| Cell {
                    label: format!("conversations C={conc}"),
                    level: conc as f64,
                    requests: n,
                    est_s: rounds(n, conc) * turn_s(turns, convs, probe),
                })
                .collect();
            p.cells(cells)
        }
        Plan::Search {
            prompts,
            ladder,
            search: sought,
        } => {
            let probes = bucket_probes(s, asked, &prompts.chosen).await;
            let p = Probed::of(probes, asked.probe);
            let buckets = p.per_bucket(&prompts.chosen);
            search((sought, *ladder), asked.cells, &buckets, p)
        }
        Plan::Closed(w) | Plan::Open(w) => {
            let probes = bucket_probes(s, asked, &w.prompts.chosen).await;
            let p = Probed::of(probes, asked.probe);
            sweep(&p.per_bucket(&w.prompts.chosen), w, n, p)
        }
    }
}

/// A replay: its one cell lasts the span of its schedule.
fn replayed(speed: f64, requests: &[Planned]) -> Estimate {
    let span = requests.iter().map(|p| p.at).max().unwrap_or_default();
    let cell = Cell {
        label: "replay".into(),
        level: 0.0,
        requests: requests.len(),
        est_s: span.as_secs_f64(),
    };
    let basis =
        format!("the replay's span at --speed {speed}; the last requests' own time comes on top");
    Estimate::Cells {
        cells: vec![cell],
        calibrated: true,
        basis,
    }
}

/// What the probes found: one per bucket (the conversations' first turns are one bucket).
struct Probed {
    probes: Vec<Option<Probe>>,
    calibrated: bool,
    /// For a bucket whose probe failed: the first that answered (or a nominal one).
    fallback: Probe,
    basis: String,
}

impl Probed {
    fn of(probes: Vec<Option<Probe>>, sent: bool) -> Probed {
        let got: Vec<Probe> = probes.iter().flatten().copied().collect();
        let calibrated = !got.is_empty();
        let fallback = got.first().copied().unwrap_or(Probe::NOMINAL);
        let basis = if calibrated {
            probe_basis(&got, probes.len())
        } else if !sent {
            "no probe sent".into()
        } else if probes.is_empty() {
            "no bucket to probe".into()
        } else {
            "the probe requests failed".into()
        };
        Probed {
            probes,
            calibrated,
            fallback,
            basis,
        }
    }

    /// Each bucket with prompts, with its probe (or the fallback).
    fn per_bucket<'c>(&self, chosen: &'c [Chosen]) -> Vec<(&'c Chosen, Probe)> {
        let buckets = chosen.iter().filter(|c| !c.prompts.is_empty());
        buckets
            .enumerate()
            .map(|(i, c)| {
                (
                    c,
                    self.probes
                        .get(i)
                        .copied()
                        .flatten()
                        .unwrap_or(self.fallback),
                )
            })
            .collect()
    }

    fn cells(self, cells: Vec<Cell>) -> Estimate {
        Estimate::Cells {
            cells,
            calibrated: self.calibrated,
            basis: self.basis,
        }
    }
}

/// One probe per bucket with prompts, of its median prompt length (none without `--estimate`).
async fn bucket_probes(s: &Session, asked: &Asked, chosen: &[Chosen]) -> Vec<Option<Probe>> {
    let mut probes = Vec::new();
    if !asked.probe {
        return probes;
    }
    for c in chosen.iter().filter(|c| !c.prompts.is_empty()) {
        let mut t: Vec<u64> = c.prompts.iter().map(|p| p.est_tokens).collect();
        t.sort_unstable();
        let tokens = t[t.len() / 2] + asked.shared_prefix;
        probes.push(probe(s, asked.seed, tokens).await);
    }
    probes
}

/// One probe of the conversations' median first turn.
async fn first_turns(s: &Session, asked: &Asked, convs: &[Conversation]) -> Option<Probe> {
    let firsts = convs.iter().filter_map(|c| c.turns.first());
    let mut t: Vec<u64> = firsts.map(|(h, _)| estimate_tokens(h)).collect();
    t.sort_unstable();
    let tokens = t.get(t.len() / 2).copied().unwrap_or(100);
    probe(s, asked.seed, tokens).await
}

/// A search: at most `--max-time`, and its pace if no level breaks.
fn search(
    (sought, ladder): (&settings::Search, Ladder),
    cells: (usize, usize),
    buckets: &[(&Chosen, Probe)],
    p: Probed,
) -> Estimate {
    let bound_s = sought.max_time.as_secs_f64();
    let top = match ladder.axis {
        Axis::Concurrency => format!("C={}", ladder.max),
        Axis::Rate => format!("{}/s", ladder.max),
    };
    let open = match &sought.over {
        settings::SearchOver::Rate(o) => Some(o),
        settings::SearchOver::Concurrency(_) => None,
    };
    let pace_s = p
        .calibrated
        .then(|| search_pace((open, cells), buckets, ladder));
    let basis = match pace_s {
        Some(pace) => format!(
            "--max-time, the level under way then finishing; at the probe's pace, every level up to {top} and a refinement below it would take {}; {}",
            about(pace),
            p.basis
        ),
        None => format!("--max-time, the level under way then finishing; {}", p.basis),
    };
    Estimate::AtMost {
        bound_s,
        pace_s: pace_s.filter(|pace| *pace < bound_s),
        basis,
    }
}

/// A sweep: every bucket at every level, every run's cells in its order (the ETA matches a cell
/// by its label).
fn sweep(buckets: &[(&Chosen, Probe)], w: &Sweep, n: usize, p: Probed) -> Estimate {
    let mut cells = Vec::new();
    for (c, probe) in buckets {
        let e2e = probe.e2e_s(c.spec.output_tokens);
        for level in &w.levels {
            let (value, est_s) = match *level {
                Level::Concurrency(conc) => (conc as f64, rounds(n, conc) * e2e),
                Level::Rate(rate) => (rate, open_s(w.open.as_ref(), rate, n, e2e)),
            };
            cells.push(Cell {
                label: format!("{} {}", c.spec.name, level.label()),
                level: value,
                requests: n,
                est_s,
            });
        }
    }
    let grid: Vec<usize> = (0..cells.len()).collect();
    let basis = match w.runs {
        0 | 1 => p.basis,
        r => format!("{r} runs of {} cells; {}", grid.len(), p.basis),
    };
    let cells = (1..=w.runs)
        .flat_map(|r| super::cell::run_order(&grid, r, w.runs))
        .filter_map(|i| cells.get(i).cloned())
        .collect();
    Estimate::Cells {
        cells,
        calibrated: p.calibrated,
        basis,
    }
}

/// Closed-loop rounds of `n` requests, `conc` at a time.
fn rounds(n: usize, conc: usize) -> f64 {
    n.div_ceil(conc.max(1)) as f64
}

/// An open-loop cell: its schedule's span (or the cap's pace, if slower) and the last request.
fn open_s(open: Option<&OpenLoop>, rate: f64, n: usize, e2e: f64) -> f64 {
    let default = OpenLoop::default();
    let cfg = open.unwrap_or(&default);
    let span = cfg
        .arrivals
        .offsets(rate, n)
        .last()
        .map_or(0.0, Duration::as_secs_f64);
    let capped = cfg.max_concurrency.map_or(0.0, |k| rounds(n, k) * e2e);
    span.max(capped) + e2e
}

/// A turn of a conversation: its request and, but for the first turns, the think before it.
fn turn_s(cfg: &settings::Conversations, convs: &[Conversation], p: Probe) -> f64 {
    let turns: Vec<&(String, Option<String>)> = convs
        .iter()
        .flat_map(|c| c.turns.iter().take(cfg.max_turns))
        .collect();
    let outs = turns.iter().map(|(_, r)| {
        r.as_deref()
            .map_or(128, |r| estimate_tokens(r).clamp(16, 1024))
    });
    let mean_out = outs.sum::<u64>() as f64 / turns.len().max(1) as f64;
    let per_conv = turns.len() as f64 / convs.len().max(1) as f64;
    let think = cfg.think_time.as_secs_f64() * (1.0 - 1.0 / per_conv.max(1.0));
    p.ttft_s + (mean_out - 1.0).max(0.0) * p.tpot_s + think
}

/// A search at the probes' pace if no level breaks: every bucket's levels doubling to the top,
/// then the refinement a break at the top would bring (each of its levels costing the top's).
fn search_pace(
    (open, cells): (Option<&OpenLoop>, (usize, usize)),
    buckets: &[(&Chosen, Probe)],
    ladder: Ladder,
) -> f64 {
    // As the search sizes a level (`search.rs`).
    let level_s = |v: f64, e2e: f64| {
        let (requests, warmup) = ladder.requests(cells, v);
        match ladder.axis {
            Axis::Rate => open_s(open, v, requests + warmup, e2e),
            Axis::Concurrency => rounds(requests + warmup, v as usize) * e2e,
        }
    };
    let mut total = 0.0;
    for (c, p) in buckets {
        let e2e = p.e2e_s(c.spec.output_tokens);
        let mut v = ladder.start.min(ladder.max);
        loop {
            total += level_s(v, e2e);
            if v >= ladder.max {
                break;
            }
            v = (v * 2.0).min(ladder.max);
        }
        // Halving the gap from half the top: to one in flight, or to 10 % of the rate.
        let refine = match ladder.axis {
            Axis::Rate => 3.0,
            Axis::Concurrency => (v / 2.0).log2().ceil().max(0.0),
        };
        total += refine * level_s(v, e2e);
    }
    total
}

/// What the probes measured, for the estimate line.
fn probe_basis(got: &[Probe], sent: usize) -> String {
    let ms = |s: f64| format!("{:.0}", s * 1000.0);
    let ttft = got.iter().map(|p| p.ttft_s);
    let (lo, hi) = ttft.fold((f64::MAX, 0.0f64), |(l, h), t| (l.min(t), h.max(t)));
    let mut tpot: Vec<f64> = got.iter().map(|p| p.tpot_s).collect();
    tpot.sort_by(f64::total_cmp);
    let ttft = if ms(lo) == ms(hi) {
        ms(lo)
    } else {
        format!("{}–{}", ms(lo), ms(hi))
    };
    let what = match (sent, got.len()) {
        (1, _) => "a probe request".to_owned(),
        (n, k) if n == k => "a probe request per bucket".to_owned(),
        (n, k) => format!("a probe request per bucket ({k} of {n} answered)"),
    };
    format!(
        "from {what}: TTFT {ttft} ms, TPOT {:.1} ms",
        tpot[tpot.len() / 2] * 1000.0
    )
}

/// One request of `tokens` prompt tokens, not recorded; its TTFT and TPOT if it succeeded.
async fn probe(s: &Session, seed: u64, tokens: u64) -> Option<Probe> {
    let load = &s.load;
    let text = text_of_tokens(tokens, seed ^ 0x7072_6f62_6521);
    // Streamed whatever the run's mode (plain's default): its TTFT and TPOT give any request's
    // duration.
    let req = Req {
        fixed: load.fixed,
        ..Req::plain(load.model.clone(), load.api, text, PROBE_TOKENS, "probe")
    };
    let r = s.target.one(&req, Sent::default(), &s.stop).await;
    let ttft = r.ttft_ms.filter(|_| r.outcome == Outcome::Ok)?;
    Some(Probe {
        ttft_s: ttft / 1000.0,
        tpot_s: r.tpot_ms.unwrap_or(0.0) / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(about(44.6), "45 s");
        assert_eq!(about(89.0), "89 s");
        assert_eq!(about(90.0), "2 min");
        assert_eq!(about(31.0 * 60.0), "31 min");
        assert_eq!(about(2.0 * 3600.0 + 5.0 * 60.0), "2 h 05 min");
        assert_eq!(about(-3.0), "0 s");
    }

    #[test]
    fn a_request_lasts_its_ttft_and_a_gap_per_further_token() {
        let p = Probe {
            ttft_s: 0.12,
            tpot_s: 0.028,
        };
        assert!((p.e2e_s(64) - (0.12 + 63.0 * 0.028)).abs() < 1e-9);
        assert_eq!(p.e2e_s(1), 0.12);
        assert_eq!(rounds(35, 8), 5.0);
        assert_eq!(rounds(35, 1), 35.0);
    }

    #[test]
    fn the_line_says_what_it_rests_on() {
        let cells = vec![
            Cell {
                label: "long-short C=1".into(),
                level: 1.0,
                requests: 35,
                est_s: 600.0,
            },
            Cell {
                label: "long-short C=2".into(),
                level: 2.0,
                requests: 35,
                est_s: 1260.0,
            },
        ];
        let basis = probe_basis(
            &[
                Probe {
                    ttft_s: 0.075,
                    tpot_s: 0.028,
                },
                Probe {
                    ttft_s: 0.12,
                    tpot_s: 0.029,
                },
            ],
            2,
        );
        assert_eq!(
            basis,
            "from a probe request per bucket: TTFT 75–120 ms, TPOT 29.0 ms"
        );
        let plan = Estimate::Cells {
            cells: cells.clone(),
            calibrated: true,
            basis,
        };
        assert_eq!(
            plan.line(),
            "estimate: about 31 min (2 cells, 70 requests with warm-up; from a probe request per bucket: TTFT 75–120 ms, TPOT 29.0 ms)"
        );
        let none = Estimate::Cells {
            cells,
            calibrated: false,
            basis: "the probe requests failed".into(),
        };
        assert!(none.line().starts_with("estimate: none yet"));
    }
}
