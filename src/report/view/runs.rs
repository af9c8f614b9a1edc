//! The report's run-to-run section (`bench --runs N`): per cell and metric, each run's value,
//! then their mean, sd, CV and 95 % t-interval over the runs.

use crate::spread::CellSpread;

pub(super) const TITLE: &str =
    "Run to run (bench --runs N): each run's value, then mean, sd, CV and 95 % t-interval over runs";

/// A cell as the section names it: `long-short C=4 [arm]`.
fn cell_name(c: &CellSpread) -> String {
    let k = &c.key;
    let level = match (k.concurrency, k.request_rate) {
        (_, Some(r)) => format!(" {r}/s"),
        (Some(n), None) => format!(" C={n}"),
        (None, None) => String::new(),
    };
    let arm = k
        .arm
        .as_deref()
        .map(|a| format!(" [{a}]"))
        .unwrap_or_default();
    format!("{}{level}{arm}", k.bucket)
}

/// The section's table; `None` without a repeated sweep.
pub(super) fn table(cells: &[CellSpread]) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    if cells.is_empty() {
        return None;
    }
    let f = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |x| format!("{x:.2}"));
    let mut rows = Vec::new();
    for c in cells {
        for m in &c.metrics {
            let s = &m.spread;
            rows.push(vec![
                cell_name(c),
                format!("{} ({})", m.metric, m.unit),
                m.per_run
                    .iter()
                    .map(|v| f(*v))
                    .collect::<Vec<_>>()
                    .join(" / "),
                f(Some(s.mean)),
                f(s.sd),
                s.cv.map_or_else(|| "-".to_owned(), |c| format!("{:.1} %", c * 100.0)),
                s.ci95
                    .map_or_else(|| "-".to_owned(), |[a, b]| format!("[{a:.2}, {b:.2}]")),
            ]);
        }
    }
    let head = vec![
        "cell",
        "metric",
        "runs",
        "mean",
        "sd",
        "CV",
        "95 % interval",
    ];
    Some((head, rows))
}
