//! The saturation search (`--until`): the write-up's "push past C=8 until something breaks".
//! Per bucket, levels (concurrency, or arrival rate with `--request-rate`) double from the first
//! one until a level breaks the criterion or errors appear (an error rate of 1 % or more), then
//! the gap between the last good level and the first bad one is halved until it is one
//! request in flight (or 10 % of the rate). Bounded by `--max-level` and `--max-time`; Ctrl-C
//! keeps what was measured. Every level measured is a cell of the run, so `tokentap report`
//! reads the same cells; the ceiling is the report's: the highest level meeting the criterion
//! with every lower level measured meeting it too.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde::Serialize;
use tokio::time::Instant;

use super::sweep::measure;
use crate::bench::cell::{Level, Out};
use crate::bench::dataset::Chosen;
use crate::bench::model::settings::SearchOver;
use crate::bench::model::until::{Judged, Until};
use crate::bench::session::Session;

#[derive(Debug, Clone, Serialize)]
pub struct LevelResult {
    pub level: f64,
    #[serde(flatten)]
    pub judged: Judged,
}

/// `saturation.<bucket>` in `run.json`.
#[derive(Debug, Clone, Serialize)]
pub struct SaturationInfo {
    /// `concurrency` or `request_rate`.
    pub axis: &'static str,
    pub criterion: String,
    /// The highest level meeting the criterion with every lower level measured meeting it.
    pub ceiling: Option<f64>,
    /// The lowest level measured that broke it.
    pub first_bad: Option<f64>,
    /// The first level whose TTFT p95 exceeds `knee_factor` × the lowest level's.
    pub knee: Option<f64>,
    /// Why the search stopped: `refined` (the gap is closed), `max_level`, `max_time`,
    /// `interrupted`, or `first_level` (even the first level broke it).
    pub stopped: &'static str,
    /// Every level measured, in level order.
    pub levels: Vec<LevelResult>,
}

impl SaturationInfo {
    /// The stdout line.
    pub fn line(&self, bucket: &str) -> String {
        let unit = |v: f64| match self.axis {
            "request_rate" => format!("{v}/s"),
            _ => format!("C={v}"),
        };
        let tried: Vec<String> = self
            .levels
            .iter()
            .map(|l| {
                format!(
                    "{} {}{}",
                    unit(l.level),
                    l.judged
                        .ttft_p95_ms
                        .map_or_else(|| "-".into(), |p| format!("{p:.0} ms")),
                    if l.judged.met { "" } else { " ✗" }
                )
            })
            .collect();
        format!(
            "saturation {bucket} ({}): ceiling {}, knee {}, first bad {}; stopped: {}. TTFT p95 by level: {}",
            self.criterion,
            self.ceiling.map_or_else(|| "none".into(), unit),
            self.knee.map_or_else(|| "not reached".into(), unit),
            self.first_bad.map_or_else(|| "none".into(), unit),
            self.stopped,
            tried.join(", ")
        )
    }
}

/// What a search steps along: the axis, the first level and the highest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ladder {
    pub axis: Axis,
    pub start: f64,
    pub max: f64,
}

/// A search's levels are concurrencies, or arrival rates with `--request-rate`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Axis {
    Concurrency,
    Rate,
}

impl Ladder {
    /// From the lowest `--concurrency` (or `--request-rate`) up to `--max-level` (default 256
    /// in flight, or 1000 req/s).
    pub fn of(search: &crate::bench::model::settings::Search) -> Ladder {
        let rates = match &search.over {
            SearchOver::Rate(o) => o.rates.iter().copied().reduce(f64::min),
            SearchOver::Concurrency(_) => None,
        };
        match (rates, &search.over) {
            (Some(start), _) => Ladder {
                axis: Axis::Rate,
                start,
                max: search.max_level.unwrap_or(1000.0),
            },
            (None, over) => Ladder {
                axis: Axis::Concurrency,
                start: match over {
                    SearchOver::Concurrency(c) => c.iter().copied().min().unwrap_or(1) as f64,
                    SearchOver::Rate(_) => 1.0,
                },
                max: search.max_level.unwrap_or(256.0),
            },
        }
    }

    /// The cell of level `v`.
    pub fn level(self, v: f64) -> Level {
        match self.axis {
            Axis::Rate => Level::Rate(v),
            Axis::Concurrency => Level::Concurrency(v as usize),
        }
    }

    /// Measured and warm-up requests at level `v`: enough for the level to be reached and held
    /// — twice the level in flight (two seconds' worth of a rate), after as many warm-up
    /// requests as fill it.
    pub fn requests(self, (requests, warmup): (usize, usize), v: f64) -> (usize, usize) {
        match self.axis {
            Axis::Rate => (requests.max((2.0 * v).ceil() as usize), warmup),
            Axis::Concurrency => (requests.max(2 * v as usize), warmup.max(v as usize)),
        }
    }

    /// The level between the last good and the first bad one, until the gap is one request in
    /// flight (or 10 % of the rate).
    fn between(self, good: f64, bad: f64) -> Option<f64> {
        let mid = match self.axis {
            Axis::Rate if bad - good > 0.1 * good => Some(good + (bad - good) / 2.0),
            Axis::Concurrency if bad - good > 1.0 => Some(((good + bad) / 2.0).floor()),
            _ => None,
        };
        mid.filter(|m| *m > good && *m < bad)
    }

    /// `saturation.<bucket>.axis` in `run.json`.
    fn name(self) -> &'static str {
        match self.axis {
            Axis::Rate => "request_rate",
            Axis::Concurrency => "concurrency",
        }
    }
}

/// Search every bucket's levels, bounded by `--max-time` from now; every cell measured is kept
/// in `out`.
pub(crate) async fn buckets(
    s: &Session,
    chosen: &[&Chosen],
    (search, ladder): (&crate::bench::model::settings::Search, Ladder),
    cells: (usize, usize),
    out: &mut Out,
) -> BTreeMap<String, SaturationInfo> {
    let deadline = Instant::now() + search.max_time;
    let mut found = BTreeMap::new();
    for c in chosen {
        let info = bucket(s, c, (search, ladder), (deadline, cells), out).await;
        s.progress.line(&info.line(c.spec.name));
        found.insert(c.spec.name.to_owned(), info);
    }
    found
}

/// Search one bucket's levels: doubling until one breaks, then halving the gap.
async fn bucket(
    s: &Session,
    c: &Chosen,
    (search, ladder): (&crate::bench::model::settings::Search, Ladder),
    (deadline, cells): (Instant, (usize, usize)),
    out: &mut Out,
) -> SaturationInfo {
    let until = &search.until;
    let open = match &search.over {
        SearchOver::Rate(o) => Some(o),
        SearchOver::Concurrency(_) => None,
    };
    let mut levels: Vec<LevelResult> = Vec::new();
    let (mut good, mut bad): (Option<f64>, Option<f64>) = (None, None);
    let mut stopped = "refined";
    let mut next = Some(ladder.start.min(ladder.max));
    while let Some(v) = next {
        if s.stop.load(Ordering::Relaxed) {
            stopped = "interrupted";
            break;
        }
        if Instant::now() >= deadline {
            stopped = "max_time";
            break;
        }
        let n = ladder.requests(cells, v);
        let whole = crate::bench::shard::Fleet::default();
        let range = measure(s, c, (ladder.level(v), open), (n, &whole), out).await;
        // A level cut short by the stop is not judged: its records are kept, and the search
        // says it was interrupted, whatever level it had reached.
        if s.stop.load(Ordering::Relaxed) {
            stopped = "interrupted";
            break;
        }
        let judged = until.judge(&out.records[range]);
        if judged.met {
            good = Some(v);
        } else {
            bad = Some(v);
        }
        levels.push(LevelResult { level: v, judged });
        next = match (good, bad) {
            (_, None) if v >= ladder.max => {
                stopped = "max_level";
                None
            }
            (_, None) => Some((v * 2.0).min(ladder.max)),
            (None, Some(_)) => {
                stopped = "first_level";
                None
            }
            (Some(g), Some(b)) => ladder.between(g, b),
        };
    }
    found(levels, until, ladder, search.knee_factor, stopped)
}

/// What the levels measured say: the ceiling (every level up to it met the criterion, as the
/// report reads it), the knee and the first bad level.
fn found(
    mut levels: Vec<LevelResult>,
    until: &Until,
    ladder: Ladder,
    knee_factor: f64,
    stopped: &'static str,
) -> SaturationInfo {
    levels.sort_by(|a, b| a.level.total_cmp(&b.level));
    let mut ceiling = None;
    for l in &levels {
        if l.judged.met {
            ceiling = Some(l.level);
        } else {
            break;
        }
    }
    let base = levels.first().and_then(|l| l.judged.ttft_p95_ms);
    let knee = base.and_then(|b| {
        levels
            .iter()
            .find(|l| l.judged.ttft_p95_ms.is_some_and(|p| p > knee_factor * b))
            .map(|l| l.level)
    });
    SaturationInfo {
        axis: ladder.name(),
        criterion: until.to_string(),
        ceiling,
        first_bad: levels.iter().find(|l| !l.judged.met).map(|l| l.level),
        knee,
        stopped,
        levels,
    }
}
