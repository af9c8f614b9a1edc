//! The report's charts as values: which series over which categories, in which colour and dash,
//! judged against which thresholds. Each bucket keeps one colour across every chart and each
//! experiment arm one dash (and marker); differences carry their 95 % intervals. Reads the
//! model's public fields; computes no figure, draws nothing (`svg` does).

use crate::report::model::{Cell, Dist, LevelValue, Report};
use crate::report::view::svg::{
    self, Chart, Key, Series, Style, Threshold, COLORS, GREY, PCT_COLORS,
};
use crate::report::words::{level_at, level_key};

/// The series of a (bucket, arm) in every chart: bucket → colour, arm → dash.
struct Palette {
    buckets: Vec<String>,
    arms: Vec<String>,
}

impl Palette {
    fn of(r: &Report) -> Palette {
        let mut buckets: Vec<String> = r.cells.iter().map(|c| c.bucket.clone()).collect();
        buckets.sort();
        buckets.dedup();
        let mut arms: Vec<String> = r.cells.iter().filter_map(|c| c.arm.clone()).collect();
        arms.sort();
        arms.dedup();
        Palette { buckets, arms }
    }

    fn style(&self, bucket: &str, arm: Option<&str>) -> Style {
        let b = self.buckets.iter().position(|x| x == bucket).unwrap_or(0);
        let dash = arm
            .and_then(|a| self.arms.iter().position(|x| x == a))
            .unwrap_or(0);
        Style {
            color: COLORS[b % COLORS.len()],
            dash,
        }
    }

    /// Buckets as colours and arms as dashes when there are arms; else each bucket's line.
    fn legend(&self) -> Vec<Key> {
        let lines = self.arms.is_empty();
        let mut keys: Vec<Key> = self
            .buckets
            .iter()
            .map(|b| Key {
                label: b.clone(),
                style: self.style(b, None),
                line: lines,
            })
            .collect();
        keys.extend(self.arms.iter().enumerate().map(|(i, a)| Key {
            label: a.clone(),
            style: Style {
                color: GREY,
                dash: i,
            },
            line: true,
        }));
        keys
    }
}

fn name(bucket: &str, arm: Option<&str>) -> String {
    match arm {
        Some(a) => format!("{bucket} [{a}]"),
        None => bucket.to_string(),
    }
}

/// Every chart of the report, as SVG, the gateway's cost first.
pub fn charts(r: &Report) -> Vec<String> {
    let p = Palette::of(r);
    // x axis: the concurrency levels seen (or, for open-loop cells, the rates), in order.
    let axis = |open_loop: bool| {
        let mut levels: Vec<(u64, String)> = r
            .cells
            .iter()
            .filter(|c| c.request_rate.is_some() == open_loop)
            .map(|c| (c.level, c.concurrency.clone()))
            .collect();
        levels.sort();
        levels.dedup();
        levels
    };
    let (levels, rates) = (axis(false), axis(true));
    let mut groups: Vec<(String, Option<String>)> = r
        .cells
        .iter()
        .map(|c| (c.bucket.clone(), c.arm.clone()))
        .collect();
    groups.sort();
    groups.dedup();
    let line_chart = |title: &str,
                      y: &str,
                      x: &str,
                      on: &[(u64, String)],
                      open: bool,
                      f: &dyn Fn(&Cell) -> Option<f64>,
                      thr: &[Threshold]| {
        svg::lines(Chart {
            title: title.into(),
            y_label: y.into(),
            x_label: x.into(),
            xs: on.iter().map(|l| l.1.clone()).collect(),
            series: series_on(r, &p, &groups, on, open, f),
            thresholds: thr.to_vec(),
            legend: p.legend(),
            ..Chart::default()
        })
    };
    let (ttft_slos, tok_slos) = slo_lines(r);
    let mut charts: Vec<String> = hop_chart(r).into_iter().collect();
    charts.extend(board_chart(r));
    let by_level = !levels.is_empty();
    if by_level {
        charts.push(line_chart(
            "TTFT p95 vs concurrency",
            "ms",
            "concurrency",
            &levels,
            false,
            &|c| c.ttft_ms.p95,
            &ttft_slos,
        ));
    }
    if !rates.is_empty() {
        charts.push(line_chart(
            "TTFT p95 vs arrival rate (open loop)",
            "ms",
            "offered arrival rate",
            &rates,
            true,
            &|c| c.ttft_ms.p95,
            &ttft_slos,
        ));
    }
    charts.push(cell_chart(r, &ttft_slos, by_level, !rates.is_empty()));
    if by_level {
        charts.push(line_chart(
            "Per-stream output tok/s (p50) vs concurrency",
            "tok/s",
            "concurrency",
            &levels,
            false,
            &|c| c.tok_s_per_stream.p50,
            &tok_slos,
        ));
        charts.push(line_chart(
            "E2E p50 vs concurrency",
            "s",
            "concurrency",
            &levels,
            false,
            &|c| c.e2e_ms.p50.map(|v| v / 1000.0),
            &[],
        ));
    }
    charts
}

/// One series per (bucket, arm) over `levels`: `f` of the cell at each level.
fn series_on(
    r: &Report,
    p: &Palette,
    groups: &[(String, Option<String>)],
    levels: &[(u64, String)],
    open_loop: bool,
    f: &dyn Fn(&Cell) -> Option<f64>,
) -> Vec<Series> {
    groups
        .iter()
        .map(|(b, a)| Series {
            name: name(b, a.as_deref()),
            style: p.style(b, a.as_deref()),
            ys: levels
                .iter()
                .map(|(_, l)| {
                    r.cells
                        .iter()
                        .find(|c| {
                            &c.bucket == b
                                && &c.arm == a
                                && &c.concurrency == l
                                && c.request_rate.is_some() == open_loop
                        })
                        .and_then(f)
                })
                .collect(),
            ci: Vec::new(),
        })
        .collect()
}

/// The SLO thresholds drawn on the TTFT charts and on the tok/s chart.
fn slo_lines(r: &Report) -> (Vec<Threshold>, Vec<Threshold>) {
    let ms = |name: &str, v: f64| (format!("{name} {v:.0} ms"), v);
    let ttft_slos = vec![
        ms("interactive", r.slos.ttft_interactive_ms),
        ms("strict", r.slos.ttft_strict_ms),
        ms("code completion", r.slos.ttft_code_completion_ms),
        ms("agents", r.slos.ttft_agents_ms),
    ];
    let tok_slos = vec![
        (
            format!("reading {:.0} tok/s", r.slos.reading_tok_s),
            r.slos.reading_tok_s,
        ),
        (
            format!("coding {:.0} tok/s", r.slos.coding_tok_s),
            r.slos.coding_tok_s,
        ),
    ];
    (ttft_slos, tok_slos)
}

/// TTFT p50/p95/p99 of every cell, grouped under its bucket and arm (cells without a TTFT are
/// left out: they are not generations).
fn cell_chart(r: &Report, slos: &[Threshold], levels: bool, rates: bool) -> String {
    let pct = |f: &dyn Fn(&Dist) -> Option<f64>| {
        r.cells.iter().map(|c| f(&c.ttft_ms)).collect::<Vec<_>>()
    };
    let series = [
        ("p50", pct(&|d| d.p50)),
        ("p95", pct(&|d| d.p95)),
        ("p99", pct(&|d| d.p99)),
    ];
    let axis = match (levels, rates) {
        (true, true) => "concurrency or arrival rate",
        (false, true) => "arrival rate",
        _ => "concurrency",
    };
    let under = match r.cells.iter().any(|c| c.arm.is_some()) {
        true => "bucket [arm]",
        false => "bucket",
    };
    svg::bars(Chart {
        title: "TTFT p50 / p95 / p99 per cell".into(),
        y_label: "ms".into(),
        x_label: format!("{axis}, under {under}"),
        xs: r.cells.iter().map(|c| c.concurrency.clone()).collect(),
        groups: r
            .cells
            .iter()
            .map(|c| name(&c.bucket, c.arm.as_deref()))
            .collect(),
        legend: series
            .iter()
            .zip(PCT_COLORS)
            .map(|((label, _), color)| Key {
                label: (*label).to_string(),
                style: Style { color, dash: 0 },
                line: false,
            })
            .collect(),
        series: series
            .into_iter()
            .zip(PCT_COLORS)
            .map(|((label, ys), color)| Series {
                name: label.to_string(),
                style: Style { color, dash: 0 },
                ys,
                ci: Vec::new(),
            })
            .collect(),
        thresholds: slos.to_vec(),
    })
}

/// The gateway board: each gateway's added TTFT p50 by level, with its 95 % interval, one line
/// per gateway.
fn board_chart(r: &Report) -> Option<String> {
    let rows = &r.gateway_board;
    let mut levels: Vec<(crate::report::model::Axis, f64, String)> = rows
        .iter()
        .flat_map(|b| &b.levels)
        .map(|l| {
            let v = match l.level {
                LevelValue::Count(c) => c as f64,
                LevelValue::Rate(x) => x,
            };
            (l.axis, v, level_at(l.axis, &l.label))
        })
        .collect();
    levels.sort_by(|a, b| {
        (a.0, a.1)
            .partial_cmp(&(b.0, b.1))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    levels.dedup_by(|a, b| a.2 == b.2);
    if levels.is_empty() {
        return None;
    }
    let series: Vec<Series> = rows
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let at = |x: &String| b.levels.iter().find(|l| &level_at(l.axis, &l.label) == x);
            Series {
                name: b.arm.clone(),
                style: Style {
                    color: COLORS[i % COLORS.len()],
                    dash: i,
                },
                ys: levels
                    .iter()
                    .map(|(_, _, x)| at(x).and_then(|l| l.added_ttft_ms.p50))
                    .collect(),
                ci: levels
                    .iter()
                    .map(|(_, _, x)| at(x).and_then(|l| l.added_ttft_ms.p50_ci95))
                    .collect(),
            }
        })
        .collect();
    let legend = series
        .iter()
        .map(|s| Key {
            label: format!("{} (whisker: 95 % interval)", s.name),
            style: s.style,
            line: true,
        })
        .collect();
    let baseline = rows.first().map_or("", |b| b.baseline.as_str());
    Some(svg::lines(Chart {
        title: format!("Gateway board: added TTFT p50 against {baseline}, by level"),
        y_label: "ms".into(),
        x_label: "level".into(),
        xs: levels.into_iter().map(|l| l.2).collect(),
        series,
        thresholds: Vec::new(),
        legend,
        ..Chart::default()
    }))
}

/// The gateway's TTFT cost per concurrency level: the A/B's paired median beside the tap's,
/// each with its 95 % interval.
fn hop_chart(r: &Report) -> Option<String> {
    let (hop, tap) = (r.gateway_hop.as_ref(), r.gateway_tap.as_ref());
    let mut levels: Vec<String> = hop
        .map(|h| h.by_concurrency.keys().cloned().collect())
        .unwrap_or_default();
    levels.extend(
        tap.map(|t| t.by_concurrency.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default(),
    );
    levels.sort_by_key(|l| level_key(l));
    levels.dedup();
    if levels.is_empty() {
        return None;
    }
    let ab = Style {
        color: "#6a51a3",
        dash: 0,
    };
    let tapped = Style {
        color: "#e6550d",
        dash: 0,
    };
    let mut series = Vec::new();
    if let Some(h) = hop {
        let at = |l: &String| h.by_concurrency.get(l).map(|s| &s.ttft_ms);
        series.push(Series {
            name: "A/B paired median".into(),
            style: ab,
            ys: levels
                .iter()
                .map(|l| at(l).and_then(|d| d.median))
                .collect(),
            ci: levels.iter().map(|l| at(l).and_then(|d| d.ci95)).collect(),
        });
    }
    if let Some(t) = tap {
        let at = |l: &String| t.by_concurrency.get(l).map(|s| &s.ttft_ms);
        series.push(Series {
            name: "tap median".into(),
            style: tapped,
            ys: levels
                .iter()
                .map(|l| at(l).and_then(|d| d.median))
                .collect(),
            ci: levels.iter().map(|l| at(l).and_then(|d| d.ci95)).collect(),
        });
    }
    let legend = series
        .iter()
        .map(|s| Key {
            label: format!("{} (whisker: 95 % interval)", s.name),
            style: s.style,
            line: false,
        })
        .collect();
    // The write-up budgets ~100 ms for the gateway.
    Some(svg::bars(Chart {
        title: "Gateway TTFT cost by concurrency: A/B vs tap".into(),
        y_label: "ms".into(),
        x_label: "concurrency".into(),
        xs: levels.iter().map(|l| format!("C={l}")).collect(),
        series,
        thresholds: vec![("write-up budget 100 ms".to_string(), 100.0)],
        legend,
        ..Chart::default()
    }))
}
