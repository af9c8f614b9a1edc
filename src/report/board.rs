//! The gateway board: every experiment arm against the baseline arm, paired by prompt
//! (`pair_id`, both copies served), per arm and level — added TTFT and inter-event gap at p50
//! and p99 with bootstrap intervals where the pairs allow one, the tap's share of TTFT, how the
//! streams arrived, errors — and per arm the highest level its streams were sustained at and
//! its own resources (`run.json`). Keeps ~130 bytes per record with a pair id; never guesses a
//! baseline.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::model::Axis;
pub use super::model::{
    Added, BoardLevel, BoardRow, DeliveryCounts, LevelValue, PaceFrom, Sustained,
};
use super::row::{level, level_of, Row};
use super::tap::TapRec;
use super::words::{level_at, rate_label};
use crate::meter::delivery::Verdict;
use crate::meter::{Outcome, TapSide};
use crate::stats::{bootstrap, interval_needs, pct, sorted};

/// A level's key: its axis, and its value (a rate in thousandths).
pub type LevelKey = (Axis, u64);

/// What the board keeps of a record with an arm and a pair id.
#[derive(Debug, Clone)]
pub struct BoardRec {
    pub pair_id: Box<str>,
    pub arm: Arc<str>,
    pub level: LevelKey,
    pub outcome: Outcome,
    pub stream: bool,
    pub finish: bool,
    pub delivery: Option<Verdict>,
    pub output_tokens: Option<u64>,
    pub ttft_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    pub itl_max_ms: Option<f64>,
}

/// A record's level: an open loop's rate, a load generator's concurrency, else live traffic's
/// in-flight bin.
pub fn level_key(concurrency: Option<u64>, rate: Option<f64>, in_flight: u64) -> LevelKey {
    match rate.filter(|r| r.is_finite() && *r > 0.0) {
        Some(r) => (Axis::RequestRate, (r * 1000.0).round() as u64),
        None if concurrency.is_some() => (Axis::Concurrency, level(concurrency, 0)),
        None => (Axis::InFlight, level(None, in_flight)),
    }
}

impl BoardRec {
    /// The record's part, when it carries an arm and a pair id; `arm` is its interned name.
    pub fn of(r: &Row<'_>, arm: Arc<str>) -> Option<BoardRec> {
        let pair = r.experiment.as_ref()?.pair_id.as_ref()?;
        Some(BoardRec {
            pair_id: pair.as_str().into(),
            arm,
            level: level_key(r.concurrency, r.request_rate, r.in_flight),
            outcome: r.outcome,
            stream: r.stream,
            finish: r.finish_reason.is_some(),
            delivery: r.delivery.map(|d| d.verdict),
            output_tokens: r.output_tokens,
            ttft_ms: r.ttft_ms,
            itl_p50_ms: r.itl_p50_ms,
            itl_p99_ms: r.itl_p99_ms,
            itl_max_ms: r.itl_max_ms,
        })
    }

    fn ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// Not served: any outcome but `ok` and the client's own cancel.
    fn error(&self) -> bool {
        !matches!(self.outcome, Outcome::Ok | Outcome::ClientCancelled)
    }
}

/// One arm's resources, from `run.json`'s `arm_resources`.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(default)]
pub struct ArmResources {
    pub arm: String,
    pub cpu_s: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    pub error: Option<String>,
}

/// What the board is told besides the records.
#[derive(Debug, Clone, Default)]
pub struct BoardOpts {
    /// `run.json`'s `experiment.baseline`.
    pub run_baseline: Option<String>,
    /// `report --board-baseline`.
    pub flag_baseline: Option<String>,
    /// `report --pace-gap-ms`.
    pub pace_gap_ms: Option<f64>,
    pub resources: Vec<ArmResources>,
}

/// A silence longer than this many paces breaks a sustained stream.
pub const SILENCE_PACES: f64 = 2.0;
/// From this many streams at a level, a share of failures is allowed ([`ALLOWED_ERROR_SHARE`]);
/// below it, none.
pub const ERRORS_ALLOWED_FROM: usize = 1000;
pub const ALLOWED_ERROR_SHARE: f64 = 0.001;

/// Seeds of the board's bootstrap intervals (fixed: the same records give the same report).
const SEED_P50: u64 = 0xb0a2_d050;
const SEED_P99: u64 = 0xb0a2_d099;

/// p50 and p99 of `p50s` and `p99s` (the same values for a plain distribution), each with its
/// interval when its values are enough.
fn added(p50s: Vec<f64>, p99s: Option<Vec<f64>>) -> Added {
    let a = sorted(p50s);
    let b = p99s.map(sorted);
    let b = b.as_ref().unwrap_or(&a);
    let ci = |v: &[f64], q: f64, seed| {
        (v.len() >= interval_needs(q))
            .then(|| bootstrap(v, seed, |s| pct(s, q)))
            .flatten()
    };
    Added {
        n: a.len().max(b.len()),
        p50: pct(&a, 0.5),
        p50_ci95: ci(&a, 0.5, SEED_P50),
        p99: pct(b, 0.99),
        p99_ci95: ci(b, 0.99, SEED_P99),
    }
}

fn label(k: LevelKey) -> String {
    match k {
        (Axis::RequestRate, v) => rate_label(v as f64 / 1000.0),
        (Axis::Concurrency, c) => level_of(Some(c), 0).1,
        (Axis::InFlight, l) => level_of(None, l).1,
    }
}

fn value(k: LevelKey) -> LevelValue {
    match k {
        (Axis::RequestRate, v) => LevelValue::Rate(v as f64 / 1000.0),
        (_, v) => LevelValue::Count(v),
    }
}

#[derive(Default)]
struct Tally {
    requests: usize,
    errors: usize,
    delivery: DeliveryCounts,
}

impl Tally {
    fn add(&mut self, r: &BoardRec) {
        self.requests += 1;
        self.errors += usize::from(r.error());
        match r.delivery {
            Some(Verdict::Streamed) => self.delivery.streamed += 1,
            Some(Verdict::Coalesced) => self.delivery.coalesced += 1,
            Some(Verdict::Buffered) => self.delivery.buffered += 1,
            None => {}
        }
    }
}

/// The board, or why there is none: `None` when fewer than two arms carry pair ids (no
/// section); `Err(reason)` when there are arms but no baseline to judge them against.
pub fn compute(
    recs: &[BoardRec],
    tap: &[TapRec],
    opts: &BoardOpts,
) -> Option<Result<Vec<BoardRow>, String>> {
    let arms: BTreeSet<&str> = recs.iter().map(|r| &*r.arm).collect();
    if arms.len() < 2 {
        return None;
    }
    // The user's flag first: it is how a board is read against another arm than the run's.
    let (baseline, from) = match (&opts.flag_baseline, &opts.run_baseline) {
        (Some(b), _) => (b.as_str(), "--board-baseline"),
        (None, Some(b)) => (b.as_str(), "run.json's experiment.baseline"),
        (None, None) if arms.contains("direct") => ("direct", "the arm named direct"),
        (None, None) => {
            let names: Vec<&str> = arms.iter().copied().collect();
            return Some(Err(format!(
                "not judged: no baseline arm (arms {}; none is named direct: name one with --board-baseline)",
                names.join(", ")
            )));
        }
    };
    if !arms.contains(baseline) {
        return Some(Err(format!(
            "not judged: no baseline arm: {baseline} ({from}) has no record with a pair id"
        )));
    }
    let base: HashMap<&str, &BoardRec> = recs
        .iter()
        .filter(|r| &*r.arm == baseline)
        .map(|r| (&*r.pair_id, r))
        .collect();
    let mut base_tally: BTreeMap<LevelKey, Tally> = BTreeMap::new();
    for r in base.values() {
        base_tally.entry(r.level).or_default().add(r);
    }
    let (pace, pace_from) = pace(recs, baseline, opts.pace_gap_ms);
    let base_recs: Vec<&BoardRec> = recs.iter().filter(|r| &*r.arm == baseline).collect();
    let base_sustained = sustained(&base_recs, None, pace);
    let mut rows: Vec<BoardRow> = arms
        .iter()
        .filter(|a| **a != baseline)
        .map(|arm| {
            let mine: Vec<&BoardRec> = recs.iter().filter(|r| &*r.arm == *arm).collect();
            let res = opts.resources.iter().find(|x| x.arm == *arm);
            let s = sustained(&mine, Some(&base), pace);
            BoardRow {
                arm: (*arm).to_owned(),
                baseline: baseline.to_owned(),
                levels: levels(&mine, &base, &base_tally, arm, tap),
                sustained_streams: s.level,
                sustained_reason: s.reason,
                sustained_label: s.label,
                baseline_sustained_streams: base_sustained.level,
                baseline_sustained_reason: base_sustained.reason.clone(),
                baseline_sustained_label: base_sustained.label.clone(),
                pace_ms: pace,
                pace_from,
                cpu_s: res.and_then(|x| x.cpu_s),
                peak_rss_bytes: res.and_then(|x| x.peak_rss_bytes),
                resource_error: res.and_then(|x| x.error.clone()),
                summary: String::new(),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        let first = |r: &BoardRow| r.levels.first().and_then(|l| l.added_ttft_ms.p50);
        match (first(a), first(b)) {
            (Some(x), Some(y)) => x.total_cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        }
        .then_with(|| a.arm.cmp(&b.arm))
    });
    Some(Ok(rows))
}

/// One arm's levels against the baseline.
fn levels(
    mine: &[&BoardRec],
    base: &HashMap<&str, &BoardRec>,
    base_tally: &BTreeMap<LevelKey, Tally>,
    arm: &str,
    tap: &[TapRec],
) -> Vec<BoardLevel> {
    #[derive(Default)]
    struct Acc {
        tally: Tally,
        pairs: usize,
        ttft: Vec<f64>,
        gap50: Vec<f64>,
        gap99: Vec<f64>,
        tap: Vec<f64>,
    }
    let mut by: BTreeMap<LevelKey, Acc> = BTreeMap::new();
    for r in mine {
        let a = by.entry(r.level).or_default();
        a.tally.add(r);
        let Some(b) = base.get(&*r.pair_id).filter(|b| b.ok() && r.ok()) else {
            continue;
        };
        a.pairs += 1;
        let d = |x: Option<f64>, y: Option<f64>| Some(x? - y?).filter(|v| v.is_finite());
        a.ttft.extend(d(r.ttft_ms, b.ttft_ms));
        a.gap50.extend(d(r.itl_p50_ms, b.itl_p50_ms));
        a.gap99.extend(d(r.itl_p99_ms, b.itl_p99_ms));
    }
    // The tap's outer records of the arm's route; no rate in a tap record: levels of the
    // concurrency and in-flight axes only.
    for t in tap
        .iter()
        .filter(|t| t.tap.side == TapSide::Outer && &*t.route == arm)
    {
        let k = level_key(t.concurrency, None, t.in_flight);
        if let (Some(a), Some(v)) = (by.get_mut(&k), t.tap.ttft_ms) {
            a.tap.push(v);
        }
    }
    by.into_iter()
        .map(|(k, a)| {
            let bt = base_tally.get(&k);
            BoardLevel {
                level: value(k),
                label: label(k),
                axis: k.0,
                pairs: a.pairs,
                added_ttft_ms: added(a.ttft, None),
                added_gap_ms: added(a.gap50, Some(a.gap99)),
                added_ttft_tap_ms: (!a.tap.is_empty()).then(|| added(a.tap, None)),
                requests: a.tally.requests,
                baseline_requests: bt.map_or(0, |t| t.requests),
                delivery: a.tally.delivery,
                baseline_delivery: bt.map_or_else(DeliveryCounts::default, |t| t.delivery),
                errors: a.tally.errors,
                baseline_errors: bt.map_or(0, |t| t.errors),
            }
        })
        .collect()
}

/// The pace: `--pace-gap-ms`, else the baseline's median `itl_p50_ms` over its served records
/// at its lowest level.
fn pace(recs: &[BoardRec], baseline: &str, flag: Option<f64>) -> (Option<f64>, PaceFrom) {
    if let Some(p) = flag.filter(|p| p.is_finite() && *p > 0.0) {
        return (Some(p), PaceFrom::Flag);
    }
    let base = recs.iter().filter(|r| &*r.arm == baseline && r.ok());
    let Some(lowest) = base.clone().map(|r| r.level).min() else {
        return (None, PaceFrom::Unknown);
    };
    let v = sorted(
        base.filter(|r| r.level == lowest)
            .filter_map(|r| r.itl_p50_ms),
    );
    match pct(&v, 0.5).filter(|p| *p > 0.0) {
        Some(p) => (Some(p), PaceFrom::BaselineItl),
        None => (None, PaceFrom::Unknown),
    }
}

/// Why a level's streams were not sustained, if they were not.
fn level_broke(
    streams: &[&&BoardRec],
    base: Option<&HashMap<&str, &BoardRec>>,
    pace: f64,
    finish_recorded: bool,
) -> Option<String> {
    let n = streams.len();
    let failed = streams.iter().filter(|r| !r.ok()).count();
    let allowed = if n < ERRORS_ALLOWED_FROM {
        0
    } else {
        (n as f64 * ALLOWED_ERROR_SHARE).floor() as usize
    };
    if failed > allowed {
        return Some(format!("{failed} of {n} streams not served"));
    }
    let limit = SILENCE_PACES * pace;
    let (mut cut, mut short, mut silent, mut held) = (0, 0, 0, 0);
    let mut longest: f64 = 0.0;
    for r in streams.iter().filter(|r| r.ok()) {
        cut += usize::from(finish_recorded && !r.finish);
        let b = base.and_then(|m| m.get(&*r.pair_id)).filter(|b| b.ok());
        if let (Some(x), Some(y)) = (r.output_tokens, b.and_then(|b| b.output_tokens)) {
            short += usize::from(x != y);
        }
        if let Some(m) = r.itl_max_ms.filter(|m| *m > limit) {
            silent += 1;
            longest = longest.max(m);
        }
        // A stream held and let go in bursts stalled, whatever its gaps read (a stream held
        // whole arrives in one read: its gaps are all near 0). The wait for the first token is
        // not a stall: it is the added TTFT, a column of its own.
        held += usize::from(r.delivery == Some(Verdict::Buffered));
    }
    let mut why = Vec::new();
    if cut > 0 {
        why.push(format!("{cut} of {n} streams without a finish reason"));
    }
    if short > 0 {
        why.push(format!(
            "{short} of {n} streams with another output token count than the baseline's copy"
        ));
    }
    if silent > 0 {
        why.push(format!(
            "{silent} of {n} streams with a gap over {limit:.1} ms"
        ));
    }
    if held > 0 {
        why.push(format!(
            "{held} of {n} streams buffered (held and let go in bursts)"
        ));
    }
    if silent > 0 {
        why.push(format!("longest silence {longest:.1} ms"));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// The highest level, in level order, at which the arm's streams were sustained and every lower
/// level's too; `base`: the baseline's records by pair id (`None`: this is the baseline).
fn sustained(
    mine: &[&BoardRec],
    base: Option<&HashMap<&str, &BoardRec>>,
    pace: Option<f64>,
) -> Sustained {
    let none = |reason: String| Sustained {
        level: None,
        label: None,
        reason: Some(reason),
    };
    let Some(pace) = pace else {
        return none("not judged: no pace (give --pace-gap-ms, or the baseline's served streams need itl_p50_ms at its lowest level)".into());
    };
    let finish_recorded = mine.iter().any(|r| r.finish);
    let mut by: BTreeMap<LevelKey, Vec<&&BoardRec>> = BTreeMap::new();
    for r in mine.iter().filter(|r| r.stream) {
        by.entry(r.level).or_default().push(r);
    }
    if by.is_empty() {
        return none("not judged: no streams".into());
    }
    let mut best: Option<LevelKey> = None;
    for (k, streams) in &by {
        if let Some(why) = level_broke(streams, base, pace, finish_recorded) {
            let at = format!("{}: {why}", level_at(k.0, &label(*k)));
            return match best {
                None => none(at),
                Some(b) => Sustained {
                    level: Some(value(b)),
                    label: Some(label(b)),
                    reason: Some(at),
                },
            };
        }
        best = Some(*k);
    }
    Sustained {
        level: best.map(value),
        label: best.map(label),
        reason: None,
    }
}

#[cfg(test)]
#[path = "board_tests.rs"]
mod tests;
