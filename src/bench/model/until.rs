//! A search's criterion (`--until`): what breaks a level — a named SLO of the report, errors,
//! or a TTFT p95 bound — parsed from the flag and judged on a level's records.

use serde::Serialize;

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
