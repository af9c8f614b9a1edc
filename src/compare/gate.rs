//! `--fail-on-regression`: thresholds per metric (`ttft_p95:+5%,tpot_p50:+3%,error_rate:+0.5pp`),
//! the cells whose difference lies wholly beyond one, interval and all, and the cells it could
//! not judge. Fail closed: a cell passes only when its interval lies wholly within the
//! threshold; a cell without evidence, or whose interval straddles the threshold, is named and
//! fails the gate with its own status (3), never read as "no regression".

use serde::Serialize;

use super::boot::{higher_is_worse, unit, Diff, METRICS};
use super::evidence::{NotJudged, Why};
use super::{Comparison, Which};

/// How a threshold is measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Relative: NEW ÷ BASE − 1, in per cent.
    Percent,
    /// Absolute, in percentage points (error_rate, goodput).
    Pp,
    /// Absolute, in milliseconds (the latencies).
    Ms,
    /// Absolute, in tokens a second (the throughputs).
    TokS,
}

/// One threshold: a metric may move this far (signed: the direction that fails) and no more.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Threshold {
    pub metric: &'static str,
    pub value: f64,
    pub unit: Unit,
}

impl std::fmt::Display for Threshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let u = match self.unit {
            Unit::Percent => "%",
            Unit::Pp => "pp",
            Unit::Ms => "ms",
            Unit::TokS => "tok/s",
        };
        write!(f, "{}:{:+}{u}", self.metric, self.value)
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("--fail-on-regression: {part:?}: {why}")]
pub struct SpecError {
    pub part: String,
    pub why: String,
}

/// Parse `METRIC:[+|-]NUMBER(%|pp|ms|tok/s)` items separated by commas. Without a sign, the
/// metric's bad direction (up for latencies and errors, down for throughput and goodput).
pub fn parse(spec: &str) -> Result<Vec<Threshold>, SpecError> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim) {
        let bad = |why: String| SpecError {
            part: part.to_owned(),
            why,
        };
        if part.is_empty() {
            return Err(bad(
                "an empty item (two commas, or a comma at an end)".into()
            ));
        }
        let Some((name, amount)) = part.split_once(':') else {
            return Err(bad("not METRIC:AMOUNT (e.g. tpot_p50:+3%)".into()));
        };
        let Some(metric) = METRICS.iter().find(|m| **m == name.trim()) else {
            return Err(bad(format!(
                "unknown metric {:?} (one of {})",
                name.trim(),
                METRICS.join(", ")
            )));
        };
        let amount = amount.trim();
        let (num, u) = if let Some(n) = amount.strip_suffix('%') {
            (n, Unit::Percent)
        } else if let Some(n) = amount.strip_suffix("pp") {
            (n, Unit::Pp)
        } else if let Some(n) = amount.strip_suffix("ms") {
            (n, Unit::Ms)
        } else if let Some(n) = amount.strip_suffix("tok/s") {
            (n, Unit::TokS)
        } else {
            return Err(bad(format!(
                "{amount:?} has no unit: % (relative), pp (rates), ms (latencies) or tok/s"
            )));
        };
        let fits = matches!(
            (u, unit(metric)),
            (Unit::Percent, _) | (Unit::Pp, "share") | (Unit::Ms, "ms") | (Unit::TokS, "tok/s")
        );
        if !fits {
            return Err(bad(format!(
                "{metric} is in {}: use % or {}",
                unit(metric),
                match unit(metric) {
                    "share" => "pp",
                    "ms" => "ms",
                    _ => "tok/s",
                }
            )));
        }
        let num = num.trim();
        let signed = num.starts_with(['+', '-']);
        let value: f64 = num
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| bad(format!("{num:?} is not a number")))?;
        let value = match (signed, higher_is_worse(metric)) {
            (true, _) | (false, true) => value,
            (false, false) => -value,
        };
        out.push(Threshold {
            metric,
            value,
            unit: u,
        });
    }
    Ok(out)
}

/// A difference's interval in the threshold's unit, or why the threshold cannot judge it: the
/// difference is no evidence (`evidence.rs`), or has no interval in that unit (a relative one
/// with BASE at 0).
pub fn interval(t: &Threshold, d: &Diff) -> Result<[f64; 2], NotJudged> {
    match d.not_judged {
        // A relative reading's absence leaves the absolute interval judged.
        Some(nj) if nj.why != Why::ZeroBase => return Err(nj),
        _ => {}
    }
    let ci = match t.unit {
        Unit::Percent => d.rel_ci.map(|c| [c[0] * 100.0, c[1] * 100.0]),
        Unit::Pp => d.abs_ci.map(|c| [c[0] * 100.0, c[1] * 100.0]),
        Unit::Ms | Unit::TokS => d.abs_ci,
    };
    ci.ok_or(NotJudged::new(
        match (t.unit, d.rel) {
            (Unit::Percent, None) if d.abs.is_some() => Why::ZeroBase,
            _ => Why::NoInterval,
        },
        None,
    ))
}

/// Whether a difference's interval lies wholly beyond the threshold, in its direction; the
/// interval in the threshold's unit when it does. `None` too when it cannot be judged.
pub fn breached(t: &Threshold, d: &Diff) -> Option<[f64; 2]> {
    if d.metric != t.metric {
        return None;
    }
    let ci = interval(t, d).ok()?;
    let beyond = if t.value >= 0.0 {
        ci[0] > t.value
    } else {
        ci[1] < t.value
    };
    beyond.then_some(ci)
}

/// Whether an interval lies wholly within the threshold (on the good side of it): the evidence
/// a cell passes on. One that reaches past it, and is not wholly beyond it, straddles it.
pub fn within(t: &Threshold, ci: [f64; 2]) -> bool {
    if t.value >= 0.0 {
        ci[1] <= t.value
    } else {
        ci[0] >= t.value
    }
}

/// About how many values a side would settle an interval that straddles the threshold: its
/// width shrinks as 1/√n, until the side reaching past (or short of) the threshold no longer
/// does. An estimate, stated as one.
fn to_settle(t: &Threshold, d: &Diff, ci: [f64; 2]) -> usize {
    let point = match t.unit {
        Unit::Percent => d.rel.map(|r| r * 100.0),
        Unit::Pp => d.abs.map(|a| a * 100.0),
        Unit::Ms | Unit::TokS => d.abs,
    }
    .unwrap_or((ci[0] + ci[1]) / 2.0);
    // The half of the interval between the point and the threshold, and how far it must go.
    let (reach, room) = if (point - t.value) * t.value.signum() < 0.0 {
        // The point is within: the far end must come back to the threshold.
        let far = if t.value >= 0.0 { ci[1] } else { ci[0] };
        ((far - point).abs(), (t.value - point).abs())
    } else {
        // The point is beyond: the near end must pass the threshold.
        let near = if t.value >= 0.0 { ci[0] } else { ci[1] };
        ((point - near).abs(), (point - t.value).abs())
    };
    let n = d.n[0].min(d.n[1]).max(1) as f64;
    if room <= 0.0 {
        return usize::MAX;
    }
    (n * (reach / room).powi(2)).ceil() as usize
}

/// The gate's word over one comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every cell judged (or the unjudged ones allowed), none beyond a threshold: exit 0.
    Pass,
    /// A judged cell beyond a threshold: exit 1, whatever else.
    Regression,
    /// No regression in the cells judged, but a cell could not be judged (and
    /// `--allow-unjudged` was not given), or there was no cell at all: exit 3.
    NotJudged,
}

/// One threshold: in how many cells it was judged, of how many, and beyond it in how many.
#[derive(Debug, Clone, Serialize)]
pub struct Judged {
    pub threshold: String,
    pub metric: &'static str,
    pub judged: usize,
    pub cells: usize,
    pub beyond: usize,
}

/// A cell and threshold the gate could not judge.
#[derive(Debug, Clone, Serialize)]
pub struct Unjudged {
    pub cell: String,
    pub threshold: String,
    pub metric: &'static str,
    pub why: Why,
    /// Values a side that would judge it, where more values would.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub need: Option<usize>,
    /// `why` in words, with the values each side had.
    pub reason: String,
}

/// `--fail-on-regression` over one comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Gate {
    pub verdict: Outcome,
    pub allow_unjudged: bool,
    pub thresholds: Vec<Judged>,
    pub not_judged: Vec<Unjudged>,
}

/// Judge every cell (pooled rows aside, cells in one run only included) against every
/// threshold: the regressions as lines (`regressions` in the output), and the gate.
pub fn judge(
    c: &Comparison,
    thresholds: &[Threshold],
    allow_unjudged: bool,
) -> (Vec<String>, Gate) {
    let (mut regressions, mut counts, mut not_judged) = (Vec::new(), Vec::new(), Vec::new());
    let cells: Vec<_> = c.cells.iter().filter(|c| !c.pooled).collect();
    let total = cells.len() + c.one_side.len();
    for t in thresholds {
        let mut k = Judged {
            threshold: t.to_string(),
            metric: t.metric,
            judged: 0,
            cells: total,
            beyond: 0,
        };
        let mut unjudged = |cell: &str, nj: NotJudged, reason: String| {
            not_judged.push(Unjudged {
                cell: cell.to_owned(),
                threshold: t.to_string(),
                metric: t.metric,
                why: nj.why,
                need: nj.need,
                reason,
            })
        };
        for cell in &cells {
            let Some(d) = cell.metrics.iter().find(|d| d.metric == t.metric) else {
                unjudged(
                    &cell.cell,
                    NotJudged::new(Why::NoValues, None),
                    "no value".into(),
                );
                continue;
            };
            let runs = d.interval == "runs";
            match interval(t, d).map(|ci| (ci, within(t, ci))) {
                Err(nj) => unjudged(&cell.cell, nj, nj.say(d.metric, d.n, runs)),
                Ok((ci, false)) if breached(t, d).is_none() => {
                    let nj = NotJudged::new(Why::Straddles, Some(to_settle(t, d, ci)));
                    let reason = format!(
                        "[{:+.1}, {:+.1}] against {t}: {}",
                        ci[0],
                        ci[1],
                        nj.say(d.metric, d.n, runs)
                    );
                    unjudged(&cell.cell, nj, reason)
                }
                Ok(_) => {
                    k.judged += 1;
                    if let Some(ci) = breached(t, d) {
                        k.beyond += 1;
                        regressions.push(format!(
                            "{}: {} [{:+.1}, {:+.1}] beyond {t}",
                            cell.cell, d.metric, ci[0], ci[1]
                        ));
                    }
                }
            }
        }
        for o in &c.one_side {
            let why = match o.side {
                Which::Base => Why::BaseOnly,
                Which::New => Why::NewOnly,
            };
            let nj = NotJudged::new(why, None);
            unjudged(&o.cell, nj, nj.say(t.metric, [0, 0], false));
        }
        counts.push(k);
    }
    let verdict = if !regressions.is_empty() {
        Outcome::Regression
    } else if total == 0 || (!not_judged.is_empty() && !allow_unjudged) {
        Outcome::NotJudged
    } else {
        Outcome::Pass
    };
    let gate = Gate {
        verdict,
        allow_unjudged,
        thresholds: counts,
        not_judged,
    };
    (regressions, gate)
}

/// The gate's lines for stderr: each regression, each cell not judged, and each threshold's
/// count of judged cells.
pub fn stderr_lines(c: &Comparison) -> Vec<String> {
    let Some(g) = &c.gate else {
        return Vec::new();
    };
    let runs = format!("{} → {}", c.base, c.new);
    let mut out: Vec<String> = c
        .regressions
        .iter()
        .map(|r| format!("regression: {runs}: {r}"))
        .collect();
    for u in &g.not_judged {
        out.push(format!(
            "not judged: {runs}: {}: {} ({})",
            u.cell, u.metric, u.reason
        ));
    }
    for t in &g.thresholds {
        out.push(format!(
            "{runs}: {} judged in {} of {} cell{}",
            t.threshold,
            t.judged,
            t.cells,
            if t.cells == 1 { "" } else { "s" }
        ));
    }
    if g.thresholds.iter().all(|t| t.cells == 0) {
        out.push(format!("{runs}: no cell to judge in either run"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_issues_example() {
        let t = parse("ttft_p95:+5%,tpot_p50:+3%,error_rate:+0.5pp").unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(
            (t[0].metric, t[0].value, t[0].unit),
            ("ttft_p95", 5.0, Unit::Percent)
        );
        assert_eq!(
            (t[2].metric, t[2].value, t[2].unit),
            ("error_rate", 0.5, Unit::Pp)
        );
        assert_eq!(t[1].to_string(), "tpot_p50:+3%");
        // No sign: the bad direction. A throughput regresses downwards.
        let t = parse("tok_s_per_stream_p50:5%, e2e_p99:250ms, aggregate_tok_s:-20tok/s").unwrap();
        assert_eq!(t[0].value, -5.0);
        assert_eq!((t[1].value, t[1].unit), (250.0, Unit::Ms));
        assert_eq!(t[2].value, -20.0);
    }

    #[test]
    fn a_bad_spec_names_its_bad_part() {
        let e = |s: &str| parse(s).unwrap_err();
        assert_eq!(e("ttft_p95:+5%,tpot_p51:+3%").part, "tpot_p51:+3%");
        assert!(e("tpot_p51:+3%").why.contains("unknown metric"));
        assert!(e("ttft_p95:+5").why.contains("no unit"));
        assert!(e("ttft_p95").why.contains("METRIC:AMOUNT"));
        assert!(e("ttft_p95:+5%,").why.contains("empty"));
        assert!(e("ttft_p95:abc%").why.contains("not a number"));
        assert!(e("ttft_p95:+0.5pp").why.contains("use % or ms"));
        assert!(e("error_rate:+1ms").why.contains("use % or pp"));
        let msg = e("ttft_p95:+5%,x:1%").to_string();
        assert!(msg.starts_with("--fail-on-regression: \"x:1%\""), "{msg}");
    }

    #[test]
    fn a_cell_passes_only_wholly_within_and_a_straddling_one_is_settled_by_more() {
        let t = &parse("ttft_p95:+5%").unwrap()[0];
        assert!(within(t, [-10.0, 5.0]));
        assert!(!within(t, [-10.0, 5.1]), "reaches past +5 %");
        let t = &parse("tok_s_per_stream_p50:5%").unwrap()[0];
        assert!(within(t, [-4.0, 10.0]) && !within(t, [-6.0, 10.0]));
        // A point of 0 % with ±10 % at 20 a side: the +10 % end must come back to +5 %, half its
        // reach, so four times the values.
        let d = Diff {
            metric: "ttft_p95",
            rel: Some(0.0),
            rel_ci: Some([-0.1, 0.1]),
            n: [20, 20],
            ..Diff::default()
        };
        let t = &parse("ttft_p95:+5%").unwrap()[0];
        assert_eq!(to_settle(t, &d, [-10.0, 10.0]), 80);
        // A point of +8 % beyond +5 %, its low end at −2 %: the low end must pass +5 %.
        let d = Diff {
            rel: Some(0.08),
            ..d
        };
        assert_eq!(to_settle(t, &d, [-2.0, 18.0]), 20 * 100 / 9 + 1);
    }

    #[test]
    fn only_an_interval_wholly_beyond_fails() {
        let d = |rel_ci: [f64; 2]| Diff {
            metric: "tpot_p50",
            unit: "ms",
            base: Some(10.0),
            new: Some(11.0),
            abs: Some(1.0),
            abs_ci: Some([0.8, 1.2]),
            rel: Some(0.1),
            rel_ci: Some(rel_ci),
            interval: "bootstrap",
            n: [20, 20],
            ..Diff::default()
        };
        let t = &parse("tpot_p50:+3%").unwrap()[0];
        assert!(breached(t, &d([0.08, 0.12])).is_some());
        assert!(
            breached(t, &d([0.02, 0.12])).is_none(),
            "straddles the threshold"
        );
        assert!(breached(t, &d([-0.12, -0.08])).is_none(), "an improvement");
        let t = &parse("tpot_p50:-3%").unwrap()[0];
        assert!(breached(t, &d([-0.12, -0.08])).is_some());
        let t = &parse("tpot_p50:+0.5ms").unwrap()[0];
        assert_eq!(breached(t, &d([0.0, 0.0])), Some([0.8, 1.2]));
        let t = &parse("ttft_p50:+1%").unwrap()[0];
        assert!(breached(t, &d([0.08, 0.12])).is_none(), "another metric");
        // A difference that is no evidence is never breached, and says why.
        let t = &parse("tpot_p50:+3%").unwrap()[0];
        let few = Diff {
            not_judged: Some(NotJudged::new(Why::TooFew, Some(9))),
            n: [8, 8],
            ..d([0.08, 0.12])
        };
        assert!(breached(t, &few).is_none());
        assert_eq!(interval(t, &few).unwrap_err().why, Why::TooFew);
        // BASE at 0: no relative interval, but an absolute one still judges.
        let zero = Diff {
            rel: None,
            rel_ci: None,
            not_judged: Some(NotJudged::new(Why::ZeroBase, None)),
            ..d([0.0, 0.0])
        };
        assert_eq!(interval(t, &zero).unwrap_err().why, Why::ZeroBase);
        let t = &parse("tpot_p50:+0.5ms").unwrap()[0];
        assert_eq!(interval(t, &zero), Ok([0.8, 1.2]));
    }
}
