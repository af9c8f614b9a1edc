//! The comparison as one self-contained HTML file: the readings, then BASE (dashed) and NEW
//! (solid) on the same charts, a forest plot of each main metric's per-cell differences with
//! their intervals, and the per-cell table. The charts are the report's (`report::svg`): each
//! bucket one colour, axes labelled with their units, the legend below.

use std::fmt::Write;

use super::tables::{forest_point, lines, rows};
use super::{CellDiff, Comparison};
use crate::report::view::grid::html_table;
use crate::report::view::svg::{self, Chart, Key, Series, Style, COLORS, GREY};

/// The metrics drawn: BASE and NEW side by side, and as differences.
const DRAWN: [(&str, &str); 4] = [
    ("ttft_p95", "TTFT p95"),
    ("tpot_p50", "TPOT p50"),
    ("e2e_p95", "E2E p95"),
    ("tok_s_per_stream_p50", "per-stream tok/s p50"),
];
const FOREST: [(&str, &str); 6] = [
    ("ttft_p50", "TTFT p50"),
    ("ttft_p95", "TTFT p95"),
    ("tpot_p50", "TPOT p50"),
    ("e2e_p95", "E2E p95"),
    ("aggregate_tok_s", "aggregate tok/s"),
    ("error_rate", "error rate"),
];

/// The cells charted (pooled rows aside), their groups (shape, bucket, arm) and colours.
struct Layout<'a> {
    cells: Vec<&'a CellDiff>,
    groups: Vec<String>,
}

impl<'a> Layout<'a> {
    fn of(c: &'a Comparison) -> Layout<'a> {
        let cells: Vec<&CellDiff> = c.cells.iter().filter(|c| !c.pooled).collect();
        let mut groups: Vec<String> = cells.iter().map(|c| group(c)).collect();
        groups.dedup();
        Layout { cells, groups }
    }

    fn color(&self, g: &str) -> &'static str {
        let i = self.groups.iter().position(|x| x == g).unwrap_or(0);
        COLORS[i % COLORS.len()]
    }

    fn xs(&self) -> Vec<String> {
        self.cells.iter().map(|c| c.level.clone()).collect()
    }

    fn under(&self) -> Vec<String> {
        self.cells.iter().map(|c| group(c)).collect()
    }

    /// One series per group, values only at its own cells (a line never joins two buckets).
    fn series(
        &self,
        name: &str,
        dash: usize,
        f: impl Fn(&CellDiff) -> (Option<f64>, Option<[f64; 2]>),
    ) -> Vec<Series> {
        self.groups
            .iter()
            .map(|g| {
                let (ys, ci) = self
                    .cells
                    .iter()
                    .map(|c| if &group(c) == g { f(c) } else { (None, None) })
                    .unzip();
                Series {
                    name: format!("{name} {g}"),
                    style: Style {
                        color: self.color(g),
                        dash,
                    },
                    ys,
                    ci,
                }
            })
            .collect()
    }

    fn legend(&self, sides: bool) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .groups
            .iter()
            .map(|g| Key {
                label: g.clone(),
                style: Style {
                    color: self.color(g),
                    dash: 0,
                },
                line: false,
            })
            .collect();
        if sides {
            for (label, dash) in [("BASE (dashed)", 1), ("NEW (solid)", 0)] {
                keys.push(Key {
                    label: label.into(),
                    style: Style { color: GREY, dash },
                    line: true,
                });
            }
        }
        keys
    }
}

fn group(c: &CellDiff) -> String {
    match &c.arm {
        Some(a) => format!("{} {} [{a}]", c.api, c.bucket),
        None => format!("{} {}", c.api, c.bucket),
    }
}

fn metric<'a>(c: &'a CellDiff, m: &str) -> Option<&'a super::boot::Diff> {
    c.metrics.iter().find(|d| d.metric == m)
}

fn charts(c: &Comparison) -> Vec<String> {
    let l = Layout::of(c);
    let mut out = Vec::new();
    let x_label = "level (concurrency or rate), under API shape and bucket".to_owned();
    for (m, title) in DRAWN {
        let unit = super::boot::unit(m);
        let mut series = l.series("BASE", 1, |cell| {
            (metric(cell, m).and_then(|d| d.base), None)
        });
        series.extend(l.series("NEW", 0, |cell| (metric(cell, m).and_then(|d| d.new), None)));
        out.push(svg::lines(Chart {
            title: format!("{title}: BASE dashed, NEW solid"),
            y_label: unit.into(),
            x_label: x_label.clone(),
            xs: l.xs(),
            groups: l.under(),
            series,
            thresholds: Vec::new(),
            legend: l.legend(true),
        }));
    }
    for (m, title) in FOREST {
        let pp = super::boot::unit(m) == "share";
        out.push(svg::points(Chart {
            title: format!("{title}: NEW − BASE per cell, 95 % interval"),
            y_label: if pp { "percentage points" } else { "% of BASE" }.into(),
            x_label: x_label.clone(),
            xs: l.xs(),
            groups: l.under(),
            series: l.series("NEW − BASE", 0, |cell| {
                metric(cell, m).map_or((None, None), forest_point)
            }),
            thresholds: vec![("no change".into(), 0.0)],
            legend: l.legend(false),
        }));
    }
    out
}

pub fn html(all: &[Comparison]) -> String {
    let mut s = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tokentap compare</title><style>\
         body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 20px}\
         td,th{border:1px solid #ccc;padding:3px 7px;font-size:12px;text-align:right}th{background:#f3f3f3}\
         .charts{display:flex;flex-wrap:wrap;align-items:flex-start;gap:16px 24px}</style></head><body>",
    );
    for c in all {
        let _ = write!(
            s,
            "<h1>tokentap compare: {} → {}</h1>",
            svg::escape(&c.base),
            svg::escape(&c.new)
        );
        for (title, ls) in lines(c) {
            let _ = write!(s, "<h2>{}</h2><ul>", svg::escape(&title));
            for l in ls {
                let _ = write!(s, "<li>{}</li>", svg::escape(&l));
            }
            s.push_str("</ul>");
        }
        s.push_str("<div class=\"charts\">");
        for chart in charts(c) {
            s.push_str(&chart);
        }
        s.push_str("</div><h2>Per cell: NEW − BASE</h2>");
        let (h, r) = rows(c);
        s += &html_table(&h, &r);
    }
    s.push_str("</body></html>\n");
    s
}
