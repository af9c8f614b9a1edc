//! The readings of a comparison: a verdict per metric over the cells (typed, and as a line), the
//! SLO verdicts that changed, and what differs between the runs besides the engine (named, never
//! hidden). A verdict is given on evidence only: `unchanged` needs every cell within the margin.

use std::collections::BTreeSet;

use serde::Serialize;

use super::boot::{unit, Diff, METRICS};
use super::evidence::{settle, Change, Equivalence, Rests};
use super::side::Side;
use super::{CellDiff, Verdict};

/// How a metric's difference is read: relative (%) for latencies and throughputs, absolute in
/// percentage points for the rates (BASE may be 0). (value, interval) scaled to print.
pub fn reading(d: &Diff) -> Option<(f64, [f64; 2], &'static str)> {
    match unit(d.metric) {
        "share" => Some((
            d.abs? * 100.0,
            d.abs_ci.map(|c| c.map(|x| x * 100.0))?,
            "pp",
        )),
        _ => Some((d.rel? * 100.0, d.rel_ci.map(|c| c.map(|x| x * 100.0))?, "%")),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The verdict of one metric over the cells both runs have (pooled rows aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricChange {
    /// Most cells higher (interval wholly above 0 and not within the margin).
    Higher,
    /// Most cells lower.
    Lower,
    /// Some cells moved, not most of them one way; the line names each.
    Mixed,
    /// Every cell judged, its interval within ± the margin.
    Unchanged,
    /// No cell moved, and not every cell is within the margin (or judged).
    Inconclusive,
    /// No cell could be judged.
    NotJudged,
}

/// The widest interval behind a verdict, in per cent or percentage points.
#[derive(Debug, Clone, Serialize)]
pub struct Widest {
    pub cell: String,
    pub value: f64,
    pub interval: [f64; 2],
}

/// What the values behind an estimate count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Of {
    Requests,
    Runs,
}

/// About how many values a side (requests a cell, or runs) would settle an inconclusive
/// metric: an estimate (`evidence::settle`), not a promise.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Settle {
    pub n: usize,
    pub of: Of,
}

/// One judged cell: its name, reading, verdict and difference.
struct Read<'a> {
    cell: &'a str,
    value: f64,
    ci: [f64; 2],
    change: Change,
    diff: &'a Diff,
}

/// One line per metric over the cells both runs have (pooled rows aside), each cell read against
/// the equivalence margin `eq` (`Diff::verdict`). Fail closed: `unchanged` only when every cell
/// was judged and lies within the margin; otherwise, when no cell moved, `inconclusive` with the
/// widest interval and about how many requests would settle it; `not_judged` when no cell could
/// be judged. When most cells moved one way, their median change and interval ends.
pub fn verdicts(cells: &[CellDiff], eq: &Equivalence) -> Vec<Verdict> {
    let mut out = Vec::new();
    for (m, metric) in METRICS.iter().enumerate() {
        let shown: Vec<(&CellDiff, &Diff)> = cells
            .iter()
            .filter(|c| !c.pooled)
            .filter_map(|c| Some((c, c.metrics.get(m)?)))
            .filter(|(_, d)| d.base.is_some() || d.new.is_some())
            .collect();
        if !shown.is_empty() {
            out.push(verdict(metric, &shown, eq));
        }
    }
    out
}

/// The word for a metric from its judged cells' verdicts, over `n` cells compared.
fn word(read: &[Read<'_>], n: usize) -> MetricChange {
    let count = |ch: Change| read.iter().filter(|r| r.change == ch).count();
    let (higher, lower) = (count(Change::Higher), count(Change::Lower));
    if read.is_empty() {
        MetricChange::NotJudged
    } else if 2 * higher.max(lower) > n {
        if lower >= higher {
            MetricChange::Lower
        } else {
            MetricChange::Higher
        }
    } else if higher + lower > 0 {
        MetricChange::Mixed
    } else if count(Change::Unchanged) == n {
        MetricChange::Unchanged
    } else {
        MetricChange::Inconclusive
    }
}

/// One metric's verdict over the cells that show it.
fn verdict(metric: &'static str, shown: &[(&CellDiff, &Diff)], eq: &Equivalence) -> Verdict {
    let u = if unit(metric) == "share" { "pp" } else { "%" };
    let margin = eq.margin(u);
    let (mut read, mut unjudged) = (Vec::new(), Vec::new());
    for (c, d) in shown {
        match (d.verdict, reading(d)) {
            (Change::NotJudged, _) | (_, None) => unjudged.push(*d),
            (change, Some((value, ci, _))) => read.push(Read {
                cell: &c.cell,
                value,
                ci,
                change,
                diff: d,
            }),
        }
    }
    let count = |ch: Change| read.iter().filter(|r| r.change == ch).count();
    let (higher, lower) = (count(Change::Higher), count(Change::Lower));
    let (unchanged, inconclusive) = (count(Change::Unchanged), count(Change::Inconclusive));
    let n = shown.len();
    let verdict = word(&read, n);
    let widest_of = |ch: Option<Change>| {
        read.iter()
            .filter(|r| ch.is_none_or(|c| r.change == c))
            .max_by(|a, b| (a.ci[1] - a.ci[0]).total_cmp(&(b.ci[1] - b.ci[0])))
            .map(|r| Widest {
                cell: r.cell.to_owned(),
                value: r.value,
                interval: r.ci,
            })
    };
    let widest = match verdict {
        MetricChange::Unchanged => widest_of(None),
        _ => widest_of(Some(Change::Inconclusive)),
    };
    let hardest = read
        .iter()
        .filter(|r| r.change == Change::Inconclusive)
        .map(|r| {
            let of = match r.diff.interval {
                "runs" => Of::Runs,
                _ => Of::Requests,
            };
            let rests = Rests {
                metric: r.diff.metric,
                n: r.diff.n,
                rule_of_three: r.diff.rule_of_three,
            };
            let n = settle(rests, r.value, r.ci, margin);
            (Settle { n, of }, r.diff.rule_of_three)
        })
        .max_by_key(|s| s.0.n);
    let settle = hardest.map(|h| h.0);
    let ctx = Line {
        metric,
        u,
        margin,
        n,
        read: &read,
        unjudged: &unjudged,
        widest: widest.as_ref(),
        settle,
        by_rule_of_three: hardest.is_some_and(|h| h.1),
    };
    Verdict {
        metric,
        higher,
        lower,
        cells: read.len(),
        line: ctx.line(verdict),
        verdict,
        compared: n,
        unchanged,
        inconclusive,
        not_judged: unjudged.len(),
        margin,
        margin_unit: u,
        widest,
        settle,
    }
}

/// What a verdict's line is made of.
struct Line<'a> {
    metric: &'static str,
    u: &'static str,
    margin: f64,
    n: usize,
    read: &'a [Read<'a>],
    unjudged: &'a [&'a Diff],
    widest: Option<&'a Widest>,
    settle: Option<Settle>,
    /// The settling estimate's cell is a rate the rule of three widened (its bound narrows as
    /// 1/n, not 1/√n).
    by_rule_of_three: bool,
}

/// `1 cell`, `3 cells`.
fn cells(n: usize) -> String {
    match n {
        1 => "1 cell".to_owned(),
        _ => format!("{n} cells"),
    }
}

impl Line<'_> {
    fn line(&self, verdict: MetricChange) -> String {
        let (metric, u, m, n) = (self.metric, self.u, self.margin, self.n);
        let count = |ch: Change| self.read.iter().filter(|r| r.change == ch).count();
        match verdict {
            MetricChange::NotJudged => match n {
                1 => format!("{metric} not judged in its one cell ({})", self.why()),
                _ => format!("{metric} not judged in any of {n} cells ({})", self.why()),
            },
            MetricChange::Higher | MetricChange::Lower => {
                let med = median(self.read.iter().map(|r| r.value).collect());
                let lo = median(self.read.iter().map(|r| r.ci[0]).collect());
                let hi = median(self.read.iter().map(|r| r.ci[1]).collect());
                let (word, k, ow, other) = match verdict {
                    MetricChange::Lower => (
                        "lower",
                        count(Change::Lower),
                        "higher",
                        count(Change::Higher),
                    ),
                    _ => (
                        "higher",
                        count(Change::Higher),
                        "lower",
                        count(Change::Lower),
                    ),
                };
                let mut s = format!(
                    "{metric} {med:+.1} {u} [{lo:+.1}, {hi:+.1}] {word} in {k} of {}",
                    cells(n)
                );
                if other > 0 {
                    s += &format!(", {ow} in {other}");
                }
                s + &self.rest(false)
            }
            MetricChange::Mixed => {
                let moved: Vec<String> = self
                    .read
                    .iter()
                    .filter(|r| matches!(r.change, Change::Higher | Change::Lower))
                    .map(|r| {
                        format!(
                            "{} {:+.1} {u} [{:+.1}, {:+.1}]",
                            r.cell, r.value, r.ci[0], r.ci[1]
                        )
                    })
                    .collect();
                format!(
                    "{metric} moved in {} of {}: {}{}",
                    moved.len(),
                    cells(n),
                    moved.join("; "),
                    self.rest(true)
                )
            }
            MetricChange::Unchanged => format!(
                "{metric} unchanged: every cell's interval within ±{m} {u} ({}{})",
                cells(n),
                self.widest
                    .map(|w| format!(
                        "; widest {} [{:+.1}, {:+.1}]",
                        w.cell, w.interval[0], w.interval[1]
                    ))
                    .unwrap_or_default()
            ),
            MetricChange::Inconclusive => {
                let k = count(Change::Inconclusive);
                let mut s = format!("{metric} inconclusive: ");
                s += &match k {
                    0 => format!("unchanged in {} of {}", count(Change::Unchanged), cells(n)),
                    _ => format!(
                        "no cell moved, but the interval of {k} of {} reaches past ±{m} {u}{}",
                        cells(n),
                        self.settled()
                    ),
                };
                if !self.unjudged.is_empty() {
                    s += &format!("; not judged in {} ({})", self.unjudged.len(), self.why());
                }
                s
            }
        }
    }

    /// `; unchanged in 3, inconclusive in 1 (widest …), not judged in 2 (…)`, the parts there are.
    fn rest(&self, unchanged: bool) -> String {
        let count = |ch: Change| self.read.iter().filter(|r| r.change == ch).count();
        let mut parts = Vec::new();
        if unchanged && count(Change::Unchanged) > 0 {
            parts.push(format!("unchanged in {}", count(Change::Unchanged)));
        }
        if count(Change::Inconclusive) > 0 {
            parts.push(format!(
                "inconclusive in {}{}",
                count(Change::Inconclusive),
                self.settled()
            ));
        }
        if !self.unjudged.is_empty() {
            parts.push(format!(
                "not judged in {} ({})",
                self.unjudged.len(),
                self.why()
            ));
        }
        match parts.is_empty() {
            true => String::new(),
            false => format!("; {}", parts.join(", ")),
        }
    }

    /// ` (widest X +1.0 % [-40.2, +105.5]; about N requests a cell would settle it, …)`.
    fn settled(&self) -> String {
        let Some(w) = self.widest else {
            return String::new();
        };
        let u = self.u;
        let mut s = format!(
            " (widest {} {:+.1} {u} [{:+.1}, {:+.1}]",
            w.cell, w.value, w.interval[0], w.interval[1]
        );
        if let Some(t) = self.settle {
            let of = match t.of {
                Of::Requests => "requests a cell",
                Of::Runs => "runs a side",
            };
            let n = match t.n {
                usize::MAX => "no number of".to_owned(),
                n => format!("about {n}"),
            };
            let how = match self.by_rule_of_three {
                true => "the rule of three's bound narrows as 1/n",
                false => "an interval narrows as 1/√n",
            };
            s += &format!("; {n} {of} would settle it, an estimate: {how}");
        }
        s + ")"
    }

    /// Why the cells not judged were not, each reason once.
    fn why(&self) -> String {
        let mut seen: Vec<String> = Vec::new();
        for d in self.unjudged {
            let w = match d.not_judged {
                Some(nj) => nj.brief(d.metric, d.interval == "runs"),
                None => "no reading".to_owned(),
            };
            if !seen.contains(&w) {
                seen.push(w);
            }
        }
        seen.join("; ")
    }
}

/// Each SLO whose verdict differs between the runs, per cell.
pub fn slo_changes(cells: &[CellDiff]) -> Vec<String> {
    let word = |met: bool| if met { "met" } else { "MISS" };
    let mut out = Vec::new();
    for c in cells {
        for (name, (b, n)) in &c.slo {
            if b != n {
                out.push(format!("{}: {name} {} → {}", c.cell, word(*b), word(*n)));
            }
        }
    }
    out
}

/// run.json fields that make two runs different loads (the prompt set is the pairing's).
const LOAD_FIELDS: [&str; 6] = [
    "requests_per_cell",
    "warmup_per_cell",
    "fixed_output",
    "concurrency",
    "load",
    "seed",
];

/// Prefix-cache hit rates this far apart (a share) make two runs different engines' states.
const PREFIX_HIT_GAP: f64 = 0.10;

/// A run's prefix-cache hit rate: the mean over its cells' scrapes (`run.json`), when scraped.
fn prefix_hits(run: &serde_json::Value) -> Option<f64> {
    let rates: Vec<f64> = run
        .get("cells")?
        .as_array()?
        .iter()
        .filter_map(|c| c["scrape"]["telemetry"]["prefix_cache_hit_rate"].as_f64())
        .collect();
    (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64)
}

/// Cells in one run only, different models, different load shapes, a prefix cache warm in one
/// run and cold in the other.
pub fn mismatches(base: &Side, new: &Side) -> Vec<String> {
    let mut out = Vec::new();
    let keys = |s: &Side| -> BTreeSet<String> {
        s.cells
            .iter()
            .filter(|c| !c.key.pooled())
            .map(|c| c.key.name())
            .collect()
    };
    let (kb, kn) = (keys(base), keys(new));
    let only = |a: &BTreeSet<String>, b: &BTreeSet<String>| {
        a.difference(b).cloned().collect::<Vec<_>>().join(", ")
    };
    if !kb.is_subset(&kn) {
        out.push(format!("cells in BASE only: {}", only(&kb, &kn)));
    }
    if !kn.is_subset(&kb) {
        out.push(format!("cells in NEW only: {}", only(&kn, &kb)));
    }
    if base.models != new.models {
        let names = |s: &Side| s.models.iter().cloned().collect::<Vec<_>>().join(", ");
        out.push(format!(
            "models differ: BASE {}, NEW {}",
            names(base),
            names(new)
        ));
    }
    match (&base.run, &new.run) {
        (Some(b), Some(n)) => {
            for f in LOAD_FIELDS {
                if b.get(f) != n.get(f) {
                    let v = |x: &serde_json::Value| {
                        x.get(f).map_or("absent".to_owned(), |v| v.to_string())
                    };
                    out.push(format!("load differs: {f} {} → {}", v(b), v(n)));
                }
            }
            // Streamed or whole answers: a run.json from before the key was streamed.
            let stream = |x: &serde_json::Value| x.get("stream").and_then(|v| v.as_bool());
            let (sb, sn) = (stream(b).unwrap_or(true), stream(n).unwrap_or(true));
            if sb != sn {
                out.push(format!("load differs: stream {sb} → {sn} (a non-streamed run has no TTFT, TPOT or ITL)"));
            }
            let outs = |x: &serde_json::Value| -> Vec<(String, String)> {
                x.get("buckets")
                    .and_then(|b| b.as_array())
                    .map(|a| {
                        a.iter()
                            .map(|b| (b["name"].to_string(), b["output_tokens"].to_string()))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            if outs(b) != outs(n) {
                out.push("load differs: the buckets' output tokens".to_owned());
            }
            if let (Some(hb), Some(hn)) = (prefix_hits(b), prefix_hits(n)) {
                if (hb - hn).abs() >= PREFIX_HIT_GAP {
                    out.push(format!(
                        "the engine's prefix cache differs: hit rate BASE {:.0} %, NEW {:.0} % (run.json's scrapes): a warm cache lowers TTFT, so a change of TTFT may be the cache's",
                        100.0 * hb,
                        100.0 * hn
                    ));
                }
            }
        }
        (Some(_), None) => out.push("BASE is a bench run (run.json), NEW is not".to_owned()),
        (None, Some(_)) => out.push("NEW is a bench run (run.json), BASE is not".to_owned()),
        (None, None) => {}
    }
    out
}
