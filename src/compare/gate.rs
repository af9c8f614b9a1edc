//! `--fail-on-regression`: thresholds per metric (`ttft_p95:+5%,tpot_p50:+3%,error_rate:+0.5pp`)
//! and the cells whose difference lies wholly beyond one, interval and all.

use serde::Serialize;

use super::boot::{higher_is_worse, unit, Diff, METRICS};

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

/// Whether a difference's interval lies wholly beyond the threshold, in its direction; the
/// interval in the threshold's unit when it does.
pub fn breached(t: &Threshold, d: &Diff) -> Option<[f64; 2]> {
    if d.metric != t.metric {
        return None;
    }
    let ci = match t.unit {
        Unit::Percent => d.rel_ci.map(|c| [c[0] * 100.0, c[1] * 100.0]),
        Unit::Pp => d.abs_ci.map(|c| [c[0] * 100.0, c[1] * 100.0]),
        Unit::Ms | Unit::TokS => d.abs_ci,
    }?;
    let beyond = if t.value >= 0.0 {
        ci[0] > t.value
    } else {
        ci[1] < t.value
    };
    beyond.then_some(ci)
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
    }
}
