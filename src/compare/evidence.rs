//! What a difference must rest on before a verdict or the gate may use it, and how a judged
//! difference reads against the equivalence margin. Fail closed: a difference without enough
//! values, with an interval its requests could not vary, or in one run only is `not_judged`,
//! says why and what would judge it, and is never read as "unchanged".

use serde::Serialize;

/// Values a side every interval needs (`stats::MIN_INTERVAL_VALUES`, the one rule).
pub const MIN_VALUES: usize = crate::stats::MIN_INTERVAL_VALUES;

/// An interval narrower than this (0.1 % relative, 0.1 pp for a rate) shows no variation.
pub const FLAT: f64 = 0.001;

/// The rule of three: with no event in n trials, the 95 % upper bound of its share is 3 ÷ n.
pub const RULE_OF_THREE: f64 = 3.0;

/// Why a difference is not judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// The cell is in BASE only.
    BaseOnly,
    /// The cell is in NEW only.
    NewOnly,
    /// A side has no value of the metric (nothing served, nothing streamed, no aggregate).
    NoValues,
    /// Fewer values a side (a run, for run-level intervals) than the percentile needs.
    TooFew,
    /// The requests did not vary (a zero-width interval), and are too few for what they did not
    /// show to stay out of the percentile's tail (the rule of three).
    NoVariation,
    /// A relative change with BASE at 0.
    ZeroBase,
    /// No interval: too few resamples had a value, or the runs gave none.
    NoInterval,
    /// The interval reaches past a gate's threshold on one side and short of it on the other:
    /// it can rule out neither a regression beyond the threshold nor one within it.
    Straddles,
}

/// A difference that is not evidence: why, and the values a side that would judge it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NotJudged {
    pub why: Why,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub need: Option<usize>,
}

impl NotJudged {
    pub fn new(why: Why, need: Option<usize>) -> NotJudged {
        NotJudged { why, need }
    }

    /// In words, with the values each side had (`of`: "values", or "runs").
    pub fn say(&self, metric: &str, n: [usize; 2], runs: bool) -> String {
        let need = self.need.unwrap_or(0);
        let per = if runs {
            "values a run"
        } else {
            "values a side"
        };
        match self.why {
            Why::BaseOnly => "the cell is in BASE only".to_owned(),
            Why::NewOnly => "the cell is in NEW only".to_owned(),
            Why::NoValues => format!("no value on a side: BASE {}, NEW {}", n[0], n[1]),
            Why::TooFew => format!(
                "{} needs {need} {per}: BASE {}, NEW {}",
                pctl(metric),
                n[0],
                n[1]
            ),
            Why::NoVariation => format!(
                "a zero-width interval: the {} did not vary, and {} needs {need} a side for that, the rule of three: BASE {}, NEW {}",
                if runs { "runs" } else { "requests" },
                pctl(metric),
                n[0],
                n[1]
            ),
            Why::ZeroBase => "BASE is 0: no relative change".to_owned(),
            Why::NoInterval => "no interval".to_owned(),
            Why::Straddles => format!(
                "its interval reaches past the threshold: it rules out neither a regression beyond it nor one within it; about {need} {per} would settle it: BASE {}, NEW {}",
                n[0], n[1]
            ),
        }
    }

    /// In words, without the counts: the same for every cell it holds for.
    pub fn brief(&self, metric: &str, runs: bool) -> String {
        let need = self.need.unwrap_or(0);
        match self.why {
            Why::TooFew => format!(
                "{} needs {need} values a {}",
                pctl(metric),
                if runs { "run" } else { "side" }
            ),
            Why::NoVariation => format!(
                "zero-width, and {} needs {need} values a side for that, the rule of three",
                pctl(metric)
            ),
            Why::NoValues => "no value on a side".to_owned(),
            _ => self.say(metric, [0, 0], runs),
        }
    }
}

/// `p95`, `p50`, or the metric's name when it is no percentile.
fn pctl(metric: &str) -> &str {
    match metric.rsplit_once('_') {
        Some((_, p)) if p.starts_with('p') => p,
        _ => metric,
    }
}

/// The percentile a metric reads; 0.5 for those that are no percentile (a rate, an aggregate).
pub fn quantile(metric: &str) -> f64 {
    if metric.ends_with("_p95") {
        0.95
    } else if metric.ends_with("_p99") {
        0.99
    } else {
        0.5
    }
}

/// Values a side an interval needs: [`MIN_VALUES`], and at least one value beyond the
/// percentile (`stats::interval_needs`, which the report's gateway board applies too): p95 20,
/// p99 100.
pub fn needed(q: f64) -> usize {
    crate::stats::interval_needs(q)
}

/// Values a side a zero-width interval needs: requests that all agree may still hide a share up
/// to 3 ÷ n that differs (the rule of three), which must stay below the share beyond the
/// percentile: p50 6, p95 60, p99 300.
pub fn needed_flat(q: f64) -> usize {
    (RULE_OF_THREE / (1.0 - q) - 1e-9).ceil() as usize
}

/// The verdict of one cell's difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// The interval lies wholly above 0 (by more than 0.1 %) and not within the margin.
    Higher,
    /// Wholly below 0 and not within the margin.
    Lower,
    /// Wholly within ± the margin.
    Unchanged,
    /// Across 0 and beyond the margin: this many requests cannot tell.
    Inconclusive,
    /// No evidence (see the difference's `not_judged`).
    #[default]
    NotJudged,
}

/// The equivalence margin: a change whose interval lies within it is `unchanged`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Equivalence {
    /// Relative, in per cent, for latencies and throughputs.
    pub relative_pct: f64,
    /// Absolute, in percentage points, for error_rate and goodput.
    pub rates_pp: f64,
}

impl Default for Equivalence {
    fn default() -> Self {
        Equivalence {
            relative_pct: 5.0,
            rates_pp: 1.0,
        }
    }
}

impl Equivalence {
    /// The margin in a reading's unit (`%` or `pp`).
    pub fn margin(&self, unit: &str) -> f64 {
        if unit == "pp" {
            self.rates_pp
        } else {
            self.relative_pct
        }
    }

    /// `--equivalence`: `5%`, `1pp`, or both, comma-separated; what is not given keeps its default.
    pub fn parse(spec: &str) -> Result<Equivalence, String> {
        let mut e = Equivalence::default();
        for part in spec.split(',').map(str::trim) {
            let (num, pp) = match (part.strip_suffix('%'), part.strip_suffix("pp")) {
                (Some(n), _) => (n, false),
                (_, Some(n)) => (n, true),
                _ => {
                    return Err(format!(
                        "--equivalence: {part:?}: a margin in % (latencies, throughputs) or pp (error_rate, goodput), e.g. 5%,1pp"
                    ))
                }
            };
            let v: f64 = num
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0)
                .ok_or_else(|| format!("--equivalence: {part:?}: not a number above 0"))?;
            if pp {
                e.rates_pp = v;
            } else {
                e.relative_pct = v;
            }
        }
        Ok(e)
    }
}

/// A difference read against the margin: its verdict. `evidence`: whether the difference is
/// evidence (no `not_judged`); `reading` is (value, interval, unit) in per cent or percentage
/// points.
pub fn change(evidence: bool, reading: Option<(f64, [f64; 2], &str)>, eq: &Equivalence) -> Change {
    let Some((_, ci, u)) = reading.filter(|_| evidence) else {
        return Change::NotJudged;
    };
    let m = eq.margin(u);
    // An end within the resolution of 0 touches it (`FLAT`, here in per cent or pp): a cell
    // whose requests bunch the same on both sides gives ends like −0.004 %, which are not a
    // move.
    let touch = FLAT * 100.0;
    if ci[0] >= -m && ci[1] <= m {
        Change::Unchanged
    } else if ci[0] > touch {
        Change::Higher
    } else if ci[1] < -touch {
        Change::Lower
    } else {
        Change::Inconclusive
    }
}

/// What a difference rests on, for [`settle`].
#[derive(Debug, Clone, Copy)]
pub struct Rests<'a> {
    pub metric: &'a str,
    /// Values a side (runs, for a run-level interval).
    pub n: [usize; 2],
    /// Its interval was widened by the rule of three (it narrows as 1/n).
    pub rule_of_three: bool,
}

/// About how many values a side (runs, for run-level intervals) would settle an inconclusive
/// difference: its interval taken to narrow around the same value as 1/√n (as 1/n where the
/// rule of three widened it), each end keeping its distance's share, until it lies within the
/// margin or wholly off 0. At least one more than it has, and what its percentile needs.
/// `usize::MAX` when no narrowing would. `n`: the values each side has.
pub fn settle(d: Rests<'_>, value: f64, ci: [f64; 2], margin: f64) -> usize {
    let n = d.n[0].min(d.n[1]).max(1);
    let touch = FLAT * 100.0;
    let (up, down) = ((ci[1] - value).max(0.0), (value - ci[0]).max(0.0));
    let scale = |room: f64, reach: f64| match reach > 0.0 {
        true => room / reach,
        false => f64::INFINITY,
    };
    // The largest share of today's width that settles it: off 0, or within the margin.
    let mut s = 0.0_f64;
    if value > touch {
        s = s.max(scale(value - touch, down));
    }
    if value < -touch {
        s = s.max(scale(-value - touch, up));
    }
    if value.abs() < margin {
        s = s.max(scale(margin - value, up).min(scale(margin + value, down)));
    }
    if s <= 0.0 {
        return usize::MAX;
    }
    let power = if d.rule_of_three { 1 } else { 2 };
    let need = (n as f64 * s.recip().powi(power)).ceil();
    match need.is_finite() {
        true => (need as usize).max(n + 1).max(needed(quantile(d.metric))),
        false => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_each_percentile_needs() {
        assert_eq!(needed(0.5), 9);
        assert_eq!(needed(0.95), 20);
        assert_eq!(needed(0.99), 100);
        assert_eq!(needed_flat(0.5), 6);
        assert_eq!(needed_flat(0.95), 60);
        assert_eq!(needed_flat(0.99), 300);
        // The median's distribution-free interval x(2)…x(n−1) covers 95 % from 9 values.
        let cover = |n: i32| 1.0 - 2.0 * f64::from(n + 1) / 2f64.powi(n);
        assert!(cover(8) < 0.95 && cover(9) >= 0.95);
        assert_eq!(quantile("ttft_p95"), 0.95);
        assert_eq!(quantile("error_rate"), 0.5);
    }

    #[test]
    fn the_margin_parses_and_a_bad_one_is_named() {
        assert_eq!(
            Equivalence::parse("5%,1pp").unwrap(),
            Equivalence::default()
        );
        let e = Equivalence::parse("2.5%").unwrap();
        assert_eq!((e.relative_pct, e.rates_pp), (2.5, 1.0));
        assert_eq!(Equivalence::parse(" 0.5pp ").unwrap().rates_pp, 0.5);
        assert!(Equivalence::parse("5").unwrap_err().contains("\"5\""));
        assert!(Equivalence::parse("-1%").unwrap_err().contains("above 0"));
        assert!(Equivalence::parse("5%,").is_err());
    }

    fn diff(n: usize) -> Rests<'static> {
        Rests {
            metric: "ttft_p50",
            n: [n, n],
            rule_of_three: false,
        }
    }

    #[test]
    fn a_difference_reads_against_the_margin() {
        let eq = Equivalence::default();
        let read = |v: f64, lo: f64, hi: f64| change(true, Some((v, [lo, hi], "%")), &eq);
        assert_eq!(read(0.5, -3.0, 4.9), Change::Unchanged);
        assert_eq!(
            read(0.2, 0.1, 0.3),
            Change::Unchanged,
            "moved, but by nothing"
        );
        assert_eq!(read(8.0, 2.0, 12.0), Change::Higher);
        assert_eq!(read(-8.0, -12.0, -1.0), Change::Lower);
        assert_eq!(read(1.0, -40.0, 105.5), Change::Inconclusive);
        // Bunched requests: an end a few thousandths of a per cent off 0 is no move.
        assert_eq!(read(-24.0, -24.0, -0.004), Change::Inconclusive);
        assert_eq!(read(-24.0, -24.0, -0.2), Change::Lower);
        assert_eq!(change(true, None, &eq), Change::NotJudged);
        assert_eq!(
            change(false, Some((0.0, [-1.0, 1.0], "%")), &eq),
            Change::NotJudged,
            "no evidence, whatever the interval"
        );
        // ±105.5 % from 10 requests: to ±5 % takes 10 × (211 ÷ 10)² ≈ 4,452 requests.
        assert_eq!(settle(diff(10), 0.0, [-105.5, 105.5], 5.0), 4453);
        // An interval off centre: settled by lying wholly off 0, its low end 6 below the value
        // narrowed to 3.9: 20 × (6 ÷ 3.9)² = 47.3.
        assert_eq!(settle(diff(20), 4.0, [-2.0, 10.0], 5.0), 48);
        // The value at the end of a lumpy interval: more than it has, at least.
        assert_eq!(settle(diff(10), -24.0, [-24.0, -0.004], 5.0), 11);
        // A rate the rule of three widened narrows as 1/n: no error in 20 a side, ±15 pp, to
        // ±1 pp takes 300.
        let rate = Rests {
            metric: "error_rate",
            rule_of_three: true,
            ..diff(20)
        };
        assert_eq!(settle(rate, 0.0, [-15.0, 15.0], 1.0), 300);
    }
}
