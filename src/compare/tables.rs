//! What the comparison's formats share: its figures as table cells, its per-cell rows, its
//! readings as lines and as chart points.

use super::boot::Diff;
use super::evidence::Change;
use super::gate::{Gate, Outcome};
use super::verdict::reading;
use super::{CellDiff, Comparison};

/// A figure as the tables print it.
pub(super) fn num(v: Option<f64>, unit: &str) -> String {
    match (v, unit) {
        (None, _) => "-".into(),
        (Some(x), "share") => format!("{:.2} %", x * 100.0),
        (Some(x), _) if x.abs() >= 100.0 => format!("{x:.0}"),
        (Some(x), _) => format!("{x:.2}"),
    }
}

fn ci(c: Option<[f64; 2]>, scale: f64, d: usize) -> String {
    c.map(|c| format!("[{:+.d$}, {:+.d$}]", c[0] * scale, c[1] * scale))
        .unwrap_or_else(|| "-".into())
}

/// Header and rows of the per-cell table: a row per cell and metric.
pub(super) fn rows(c: &Comparison) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let head = vec![
        "cell",
        "n base/new (pairs)",
        "metric",
        "BASE",
        "NEW",
        "NEW − BASE",
        "95 % interval",
        "relative",
        "95 % interval",
        "verdict",
    ];
    let mut rows = Vec::new();
    for cell in &c.cells {
        for (i, d) in cell.metrics.iter().enumerate() {
            if d.base.is_none() && d.new.is_none() {
                continue;
            }
            let (name, n) = match i {
                0 => (cell.cell.clone(), sizes(cell)),
                _ => (String::new(), String::new()),
            };
            rows.push(row(name, n, d));
        }
    }
    (head, rows)
}

fn sizes(c: &CellDiff) -> String {
    match c.pairs {
        Some(p) => format!("{}/{} ({p})", c.n_base, c.n_new),
        None => format!("{}/{}", c.n_base, c.n_new),
    }
}

fn row(name: String, n: String, d: &Diff) -> Vec<String> {
    let share = d.unit == "share";
    let (scale, dec, u) = if share {
        (100.0, 2, " pp")
    } else {
        (1.0, 2, "")
    };
    vec![
        name,
        n,
        d.metric.to_owned(),
        num(d.base, d.unit),
        num(d.new, d.unit),
        d.abs
            .map(|a| format!("{:+.dec$}{u}", a * scale))
            .unwrap_or_else(|| "-".into()),
        ci(d.abs_ci, scale, dec),
        d.rel
            .map(|r| format!("{:+.1} %", r * 100.0))
            .unwrap_or_else(|| "-".into()),
        ci(d.rel_ci, 100.0, 1),
        verdict(d),
    ]
}

/// A difference's verdict as the table says it: the word, and why when it is not judged.
fn verdict(d: &Diff) -> String {
    match (d.verdict, d.not_judged) {
        (Change::Higher, _) => "higher".into(),
        (Change::Lower, _) => "lower".into(),
        (Change::Unchanged, _) => "unchanged".into(),
        (Change::Inconclusive, _) => "inconclusive".into(),
        (Change::NotJudged, Some(nj)) => {
            format!("not judged: {}", nj.brief(d.metric, d.interval == "runs"))
        }
        (Change::NotJudged, None) => "not judged".into(),
    }
}

/// The lines above the table: the runs, the pairing, mismatches, verdicts, SLO changes, gate.
pub(super) fn lines(c: &Comparison) -> Vec<(String, Vec<String>)> {
    let none = || vec!["none".to_owned()];
    let or_none = |v: &Vec<String>| if v.is_empty() { none() } else { v.clone() };
    let mut out = vec![
        (
            "Runs".to_owned(),
            vec![format!("BASE {}", c.base), format!("NEW  {}", c.new)],
        ),
        (
            "Pairing".to_owned(),
            vec![format!(
                "{} — {}: bootstrap 95 %, {} resamples, seed {}",
                c.pairing_note,
                match c.intervals {
                    "runs" => "other intervals",
                    _ => "intervals",
                },
                c.resamples,
                c.seed
            )],
        ),
        ("Mismatches".to_owned(), or_none(&c.mismatches)),
        ("Intervals".to_owned(), vec![c.intervals_note.clone()]),
        (
            format!(
                "Verdicts (relative change, unchanged within ±{} %; error_rate and goodput in percentage points, within ±{} pp: --equivalence)",
                c.equivalence.relative_pct, c.equivalence.rates_pp
            ),
            c.verdicts.iter().map(|v| v.line.clone()).collect(),
        ),
        ("SLO verdict changes".to_owned(), or_none(&c.slo_changes)),
    ];
    if !c.regressions.is_empty() {
        out.push((
            "Regressions (--fail-on-regression)".to_owned(),
            c.regressions.clone(),
        ));
    }
    if let Some(g) = &c.gate {
        out.push(("Gate (--fail-on-regression)".to_owned(), gate_lines(g)));
    }
    out
}

/// The gate's verdict, each threshold's judged cells, and each cell it could not judge.
fn gate_lines(g: &Gate) -> Vec<String> {
    let mut v = vec![match g.verdict {
        Outcome::Regression => "regression (exit 1)".to_owned(),
        Outcome::NotJudged if g.not_judged.is_empty() => format!(
            "not judged (exit {}): no cell to judge in either run",
            crate::cli::NOT_JUDGED
        ),
        Outcome::NotJudged => format!(
            "not judged (exit {}): {} cell and threshold pair(s) could not be judged; --allow-unjudged passes them",
            crate::cli::NOT_JUDGED,
            g.not_judged.len()
        ),
        Outcome::Pass if g.not_judged.is_empty() => "pass: every cell judged".to_owned(),
        Outcome::Pass => format!(
            "pass in the cells judged; {} cell and threshold pair(s) not judged, passed by --allow-unjudged",
            g.not_judged.len()
        ),
    }];
    for t in &g.thresholds {
        v.push(format!(
            "{}: judged in {} of {} cell{}, beyond it in {}",
            t.threshold,
            t.judged,
            t.cells,
            if t.cells == 1 { "" } else { "s" },
            t.beyond
        ));
    }
    for u in &g.not_judged {
        v.push(format!(
            "not judged: {}: {} ({})",
            u.cell, u.threshold, u.reason
        ));
    }
    v
}

/// A cell's reading of one metric for a chart: (value, interval) in per cent or pp.
pub(super) fn forest_point(d: &Diff) -> (Option<f64>, Option<[f64; 2]>) {
    match reading(d) {
        Some((v, c, _)) => (Some(v), Some(c)),
        None => (None, None),
    }
}
