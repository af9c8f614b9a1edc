//! The readings of a comparison: a verdict line per metric over the cells, the SLO verdicts that
//! changed, and what differs between the runs besides the engine (named, never hidden).

use std::collections::BTreeSet;

use super::boot::{unit, Diff, METRICS};
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

/// One line per metric over the cells (pooled rows aside). When most cells' intervals exclude 0
/// on one side: the cells' median change, the medians of their intervals' ends, and in how many
/// cells; when none does, "unchanged within ±X" (X: the farthest interval end); else the cells
/// that moved, each named.
pub fn verdicts(cells: &[CellDiff]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for (m, metric) in METRICS.iter().enumerate() {
        let read: Vec<(f64, [f64; 2], &str, &str)> = cells
            .iter()
            .filter(|c| !c.pooled)
            .filter_map(|c| {
                let (v, ci, u) = c.metrics.get(m).and_then(reading)?;
                Some((v, ci, u, c.cell.as_str()))
            })
            .collect();
        if read.is_empty() {
            continue;
        }
        let u = read[0].2;
        let higher = read.iter().filter(|r| r.1[0] > 0.0).count();
        let lower = read.iter().filter(|r| r.1[1] < 0.0).count();
        let n = read.len();
        let line = if higher == 0 && lower == 0 {
            let within = read
                .iter()
                .flat_map(|r| r.1)
                .fold(0.0_f64, |a, x| a.max(x.abs()));
            format!("{metric} unchanged within ±{within:.1} {u} (no cell's interval excludes 0; {n} cells)")
        } else if 2 * higher.max(lower) > n {
            let med = median(read.iter().map(|r| r.0).collect());
            let lo = median(read.iter().map(|r| r.1[0]).collect());
            let hi = median(read.iter().map(|r| r.1[1]).collect());
            let (word, k, other, ow) = if lower >= higher {
                ("lower", lower, higher, "higher")
            } else {
                ("higher", higher, lower, "lower")
            };
            let mut s =
                format!("{metric} {med:+.1} {u} [{lo:+.1}, {hi:+.1}] {word} in {k} of {n} cells");
            if other > 0 {
                s += &format!(", {ow} in {other}");
            }
            s
        } else {
            // Most cells unchanged: name the ones that moved.
            let moved: Vec<String> = read
                .iter()
                .filter(|r| r.1[0] > 0.0 || r.1[1] < 0.0)
                .map(|r| format!("{} {:+.1} {u} [{:+.1}, {:+.1}]", r.3, r.0, r.1[0], r.1[1]))
                .collect();
            format!(
                "{metric} unchanged in {} of {n} cells; moved in {}",
                n - moved.len(),
                moved.join("; ")
            )
        };
        out.push(Verdict {
            metric,
            higher,
            lower,
            cells: n,
            line,
        });
    }
    out
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

/// Cells in one run only, different models, different load shapes.
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
        }
        (Some(_), None) => out.push("BASE is a bench run (run.json), NEW is not".to_owned()),
        (None, Some(_)) => out.push("NEW is a bench run (run.json), BASE is not".to_owned()),
        (None, None) => {}
    }
    out
}
