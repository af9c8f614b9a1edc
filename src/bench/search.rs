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

use super::cell::{Level, Out};
use super::dataset::Chosen;
use super::session::Session;
use super::sweep::measure;
use crate::meter::RequestRecord;
use crate::report::Slos;
use crate::stats::{pct, sorted};

/// What breaks a level.
#[derive(Debug, Clone, PartialEq)]
pub enum Until {
    /// A named SLO of the report (`slo:interactive`): TTFT p95 at most its threshold, or the
    /// slowest 5 % of streams at least its tok/s.
    Slo {
        name: &'static str,
        kind: crate::report::SloKind,
        threshold: f64,
    },
    /// Errors alone (`errors`).
    Errors,
    /// TTFT p95 at most this many milliseconds (`ttft_p95_ms:N`).
    TtftP95(f64),
}

impl Until {
    /// `slo:NAME`, `errors` or `ttft_p95_ms:N`; SLO names and thresholds from `slos`.
    pub fn parse(s: &str, slos: &Slos) -> Result<Until, String> {
        let s = s.trim();
        if s == "errors" {
            return Ok(Until::Errors);
        }
        if let Some(n) = s.strip_prefix("ttft_p95_ms:") {
            return match n.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(Until::TtftP95(v)),
                _ => Err(format!("--until {s}: {n:?} is not a positive number of ms")),
            };
        }
        if let Some(name) = s.strip_prefix("slo:") {
            let list = slos.list();
            return list
                .iter()
                .find(|(n, ..)| *n == name)
                .map(|(name, kind, threshold)| Until::Slo {
                    name,
                    kind: *kind,
                    threshold: *threshold,
                })
                .ok_or_else(|| {
                    let names: Vec<&str> = list.iter().map(|s| s.0).collect();
                    format!("--until {s}: no SLO {name:?} (one of {})", names.join(", "))
                });
        }
        Err(format!(
            "--until {s:?}: expected slo:NAME (e.g. slo:interactive), errors, or ttft_p95_ms:N"
        ))
    }

    /// Whether a cell of records meets it, with what was measured.
    pub fn judge(&self, records: &[RequestRecord]) -> Judged {
        let n = records.len();
        let errors = records
            .iter()
            .filter(|r| {
                !matches!(
                    r.outcome,
                    crate::meter::Outcome::Ok | crate::meter::Outcome::ClientCancelled
                )
            })
            .count();
        let ok = || {
            records
                .iter()
                .filter(|r| r.outcome == crate::meter::Outcome::Ok)
        };
        let ttft = sorted(ok().filter_map(|r| r.ttft_ms));
        let tpot = sorted(ok().filter_map(|r| r.tpot_ms));
        let ttft_p95 = pct(&ttft, 0.95);
        // The slowest 5 % of streams, as the report reads it: 1000 ÷ TPOT p95.
        let tok_s_p5 = pct(&tpot, 0.95).filter(|t| *t > 0.0).map(|t| 1000.0 / t);
        let error_rate = errors as f64 / n.max(1) as f64;
        let slo = match self {
            Until::Errors => true,
            Until::TtftP95(max) => ttft_p95.is_some_and(|p| p <= *max),
            Until::Slo {
                kind, threshold, ..
            } => match *kind {
                crate::report::SloKind::Ttft => ttft_p95.is_some_and(|p| p <= *threshold),
                _ => tok_s_p5.is_some_and(|t| t >= *threshold),
            },
        };
        Judged {
            requests: n,
            errors,
            error_rate,
            ttft_p95_ms: ttft_p95,
            tok_s_p5,
            met: n > 0 && slo && error_rate < 0.01,
        }
    }
}

impl std::fmt::Display for Until {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Until::Slo { name, .. } => write!(f, "slo:{name}"),
            Until::Errors => f.write_str("errors"),
            Until::TtftP95(v) => write!(f, "ttft_p95_ms:{v}"),
        }
    }
}

/// One level measured.
#[derive(Debug, Clone, Serialize)]
pub struct Judged {
    pub requests: usize,
    pub errors: usize,
    pub error_rate: f64,
    pub ttft_p95_ms: Option<f64>,
    /// Per-stream tok/s of the slowest 5 % of streams.
    pub tok_s_p5: Option<f64>,
    /// Meets the criterion, with an error rate under 1 %.
    pub met: bool,
}

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
    pub fn of(cfg: &super::BenchConfig) -> Ladder {
        match cfg.request_rates.iter().copied().reduce(f64::min) {
            Some(start) => Ladder {
                axis: Axis::Rate,
                start,
                max: cfg.max_level.unwrap_or(1000.0),
            },
            None => Ladder {
                axis: Axis::Concurrency,
                start: cfg.concurrency.iter().copied().min().unwrap_or(1) as f64,
                max: cfg.max_level.unwrap_or(256.0),
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
    pub fn requests(self, cfg: &super::BenchConfig, v: f64) -> (usize, usize) {
        match self.axis {
            Axis::Rate => (cfg.requests.max((2.0 * v).ceil() as usize), cfg.warmup),
            Axis::Concurrency => (cfg.requests.max(2 * v as usize), cfg.warmup.max(v as usize)),
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
    s: &Session<'_>,
    chosen: &[&Chosen],
    until: &Until,
    ladder: Ladder,
    out: &mut Out,
) -> BTreeMap<String, SaturationInfo> {
    let deadline = Instant::now() + s.cfg.max_time;
    let mut found = BTreeMap::new();
    for c in chosen {
        let info = bucket(s, c, (until, ladder), deadline, out).await;
        s.progress.line(&info.line(c.spec.name));
        found.insert(c.spec.name.to_owned(), info);
    }
    found
}

/// Search one bucket's levels: doubling until one breaks, then halving the gap.
async fn bucket(
    s: &Session<'_>,
    c: &Chosen,
    (until, ladder): (&Until, Ladder),
    deadline: Instant,
    out: &mut Out,
) -> SaturationInfo {
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
        let n = ladder.requests(s.cfg, v);
        let range = measure(s, c, ladder.level(v), n, out).await;
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
    found(levels, until, ladder, s.cfg.slos.knee_factor, stopped)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criteria_parse_and_name_what_is_wrong() {
        let s = Slos::default();
        assert_eq!(Until::parse("errors", &s), Ok(Until::Errors));
        assert_eq!(
            Until::parse("ttft_p95_ms:250", &s),
            Ok(Until::TtftP95(250.0))
        );
        assert!(matches!(
            Until::parse("slo:interactive", &s),
            Ok(Until::Slo { threshold, .. }) if threshold == s.ttft_interactive_ms
        ));
        let e = Until::parse("slo:fast", &s).unwrap_err();
        assert!(e.contains("interactive"), "{e}");
        assert!(Until::parse("ttft_p95_ms:-1", &s).is_err());
        assert!(Until::parse("forever", &s).is_err());
        assert_eq!(
            Until::parse("slo:reading_speed", &s).map(|u| u.to_string()),
            Ok("slo:reading_speed".into())
        );
    }
}
