//! Whether a bench run measured what it was asked to, and why its requests failed: the run's
//! verdict (`run.json` `verdict`) and exit status, by the rule of docs/report.md "What each
//! verdict needs". A run that measured nothing is not judged (3); a planned cell that served no
//! request, or one above `--max-error-rate`, fails it (1). A search's last level is meant to
//! break: a search fails only when no level served a request.

use std::collections::BTreeMap;

use serde::Serialize;

use super::CellInfo;
use crate::meter::{Outcome, RequestRecord};

/// Requests of a cell that failed one way: the status, the outcome, and the upstream's error
/// `type` and `code` when it sent an OpenAI-style error (never its message, which can echo a
/// key: docs/records.md).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct FailureCount {
    /// The experiment arm of these requests (`--arms`), when the run has arms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arm: Option<String>,
    pub status: u16,
    /// The record's `outcome`.
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    pub requests: usize,
}

impl std::fmt::Display for FailureCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} × ", self.requests)?;
        if self.status > 0 {
            write!(f, "status {} ", self.status)?;
        }
        write!(f, "{}", self.outcome)?;
        match (&self.error_type, &self.error_code) {
            (Some(t), Some(c)) => write!(f, " (type {t}, code {c})"),
            (Some(t), None) => write!(f, " (type {t})"),
            (None, Some(c)) => write!(f, " (code {c})"),
            (None, None) => Ok(()),
        }?;
        match &self.arm {
            Some(a) => write!(f, " on arm {a}"),
            None => Ok(()),
        }
    }
}

/// Served: the stream ended well with a success status.
pub fn served(r: &RequestRecord) -> bool {
    r.outcome == Outcome::Ok && r.status < 400
}

/// `type=…` and `code=…` of the record's error, as the meter writes them (`-` is none).
fn type_and_code(error: Option<&str>) -> (Option<String>, Option<String>) {
    let field = |key: &str| {
        let e = error?;
        let at = e.find(key)? + key.len();
        let v: String = e[at..]
            .chars()
            .take_while(|c| *c != ',' && *c != ';')
            .collect();
        (!v.is_empty() && v != "-").then_some(v)
    };
    (field("type="), field("code="))
}

/// One way a request failed: arm, status, outcome, error type and code.
type Why = (
    Option<String>,
    u16,
    &'static str,
    Option<String>,
    Option<String>,
);

/// Why a cell's requests failed, most frequent first. Requests bench itself cancelled (its
/// stop) are not failures.
pub fn failures(records: &[RequestRecord]) -> Vec<FailureCount> {
    let mut by: BTreeMap<Why, usize> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| !served(r) && r.outcome != Outcome::ClientCancelled)
    {
        let (t, c) = type_and_code(r.error.as_deref());
        let arm = r.experiment.as_ref().map(|e| e.arm.clone());
        *by.entry((arm, r.status, r.outcome.as_str(), t, c))
            .or_default() += 1;
    }
    let mut out: Vec<FailureCount> = by
        .into_iter()
        .map(
            |((arm, status, outcome, error_type, error_code), requests)| FailureCount {
                arm,
                status,
                outcome,
                error_type,
                error_code,
                requests,
            },
        )
        .collect();
    out.sort_by(|a, b| b.requests.cmp(&a.requests).then_with(|| a.cmp(b)));
    out
}

/// One experiment arm's requests in a cell (`--arms`): asked (not cancelled by bench) and
/// served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArmServed {
    pub arm: String,
    pub asked: usize,
    pub served: usize,
}

/// Each arm's asked and served requests, in arm-name order; empty for a run without arms.
pub fn arms_served(records: &[RequestRecord]) -> Vec<ArmServed> {
    let mut by: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.outcome != Outcome::ClientCancelled)
    {
        if let Some(e) = &r.experiment {
            let n = by.entry(e.arm.as_str()).or_default();
            n.0 += 1;
            n.1 += usize::from(served(r));
        }
    }
    by.into_iter()
        .map(|(arm, (asked, served))| ArmServed {
            arm: arm.to_owned(),
            asked,
            served,
        })
        .collect()
}

/// A run's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every planned cell served requests, within `--max-error-rate`.
    Ok,
    /// A planned cell served no request, or failed more than `--max-error-rate` (exit 1).
    Failed,
    /// Nothing was measured, or a planned cell was never measured (exit 3).
    NotJudged,
}

/// `run.json` `verdict`: the status and each reason, a sentence naming its cell.
#[derive(Debug, Clone, Serialize)]
pub struct RunVerdict {
    pub status: Status,
    pub reasons: Vec<String>,
    /// Cells where bench's own lag passed its bound (stall share, reader lag p99), a sentence
    /// each (`stall::warnings`): a warning about the instrument, which never changes the status.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub client_lag: Vec<String>,
}

/// What the rule needs to know of the run besides its cells.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// A saturation search: its breaking level is meant to fail.
    pub search: bool,
    /// `--max-error-rate`: a cell failing a larger share of its requests fails the run.
    pub max_error_rate: Option<f64>,
    /// Planned cells that were never measured, each with why (a bucket without prompts, a run
    /// stopped early).
    pub unmeasured: Vec<String>,
}

/// A cell as the reasons name it: `balanced C=8`, `short-long 4/s`.
pub(crate) fn name(c: &CellInfo) -> String {
    match (&c.open_loop, c.concurrency) {
        (Some(o), _) => format!("{} {}/s", c.bucket, o.offered_rate),
        (None, Some(n)) => format!("{} C={n}", c.bucket),
        (None, None) => c.bucket.clone(),
    }
}

/// The failures in words; refusals as the client's fault (a 4xx other than 429: a bad key, an
/// unknown model, a prompt over the context) are said to be such, since `report` counts them
/// apart from the service's failures.
fn list(f: &[FailureCount]) -> String {
    let all = f
        .iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let client = |f: &&FailureCount| f.status != 429 && (400..500).contains(&f.status);
    match f.iter().filter(client).map(|f| f.requests).sum::<usize>() {
        0 => all,
        n => format!(
            "{all} ({n} refused as the client's fault: a 4xx other than 429, which `tokentap report` counts apart as client errors)"
        ),
    }
}

/// The run's verdict from its cells.
pub fn judge(cells: &[CellInfo], rules: &Rules) -> RunVerdict {
    let mut failed = Vec::new();
    let mut unjudged: Vec<String> = rules.unmeasured.clone();
    let asked = |c: &CellInfo| c.measured - c.cancelled;
    if cells.iter().all(|c| asked(c) == 0) {
        unjudged.push("nothing measured: no request was sent and answered".into());
    }
    if rules.search {
        if cells.iter().any(|c| asked(c) > 0) && cells.iter().all(|c| c.served == 0) {
            let all: Vec<String> = cells
                .iter()
                .filter(|c| !c.failures.is_empty())
                .map(|c| format!("{}: {}", name(c), list(&c.failures)))
                .collect();
            failed.push(format!(
                "no level of the search served a request: {}",
                all.join("; ")
            ));
        }
    } else {
        for c in cells.iter().filter(|c| asked(c) > 0) {
            let n = asked(c);
            let bad = n - c.served;
            if c.served == 0 {
                failed.push(format!(
                    "{}: none of {n} requests served: {}",
                    name(c),
                    list(&c.failures)
                ));
                continue;
            }
            // An arm that served nothing gave no evidence of itself: its row of a board is
            // a failure, whatever the other arms did.
            for a in c.arms.iter().filter(|a| a.asked > 0 && a.served == 0) {
                let mine: Vec<FailureCount> = c
                    .failures
                    .iter()
                    .filter(|f| f.arm.as_deref() == Some(a.arm.as_str()))
                    .cloned()
                    .collect();
                failed.push(format!(
                    "{} arm {}: none of {} requests served: {}",
                    name(c),
                    a.arm,
                    a.asked,
                    list(&mine)
                ));
            }
            if let Some(max) = rules.max_error_rate {
                let rate = bad as f64 / n as f64;
                if rate > max {
                    failed.push(format!(
                        "{}: {bad} of {n} requests failed ({:.1} %), above --max-error-rate {:.1} %: {}",
                        name(c),
                        100.0 * rate,
                        100.0 * max,
                        list(&c.failures)
                    ));
                }
            }
        }
    }
    let status = if !failed.is_empty() {
        Status::Failed
    } else if !unjudged.is_empty() {
        Status::NotJudged
    } else {
        Status::Ok
    };
    failed.extend(unjudged);
    RunVerdict {
        status,
        reasons: failed,
        client_lag: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_type_and_code_are_read_never_the_message() {
        assert_eq!(
            type_and_code(Some("upstream status 404; type=NotFoundError,code=404")),
            (Some("NotFoundError".into()), Some("404".into()))
        );
        assert_eq!(
            type_and_code(Some("type=response.failed,code=-")),
            (Some("response.failed".into()), None)
        );
        assert_eq!(type_and_code(Some("upstream status 502")), (None, None));
        assert_eq!(type_and_code(None), (None, None));
    }
}
