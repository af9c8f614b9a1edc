//! The time charts (`bench --timeslice`): per cell, over the seconds since it began, TTFT p95
//! beside the engine's KV-cache usage and its waiting requests — a queue or a full cache shows
//! in the same windows as the latency it causes. One line per cell in each chart.

use crate::report::model::{Report, Slice};
use crate::report::view::svg::{self, Chart, Key, Series, Style, COLORS};

/// The three charts, or none when no cell has windows.
pub fn charts(r: &Report) -> Vec<String> {
    let cells: Vec<_> = r
        .cells
        .iter()
        .filter(|c| !c.timeslices.is_empty())
        .collect();
    let Some(longest) = cells.iter().map(|c| c.timeslices.len()).max() else {
        return Vec::new();
    };
    // x: each window's start, seconds since its cell's first window began.
    let step = cells
        .iter()
        .find_map(|c| c.timeslices.first().map(|s| s.to_ms - s.from_ms))
        .unwrap_or(1000.0);
    let xs: Vec<String> = (0..longest)
        .map(|i| trim(i as f64 * step / 1000.0))
        .collect();
    let style = |i: usize| Style {
        color: COLORS[i % COLORS.len()],
        dash: (i / COLORS.len()) % 4,
    };
    let name = |c: &crate::report::Cell| {
        let who = match &c.arm {
            Some(a) => format!("{} [{a}]", c.bucket),
            None => c.bucket.clone(),
        };
        format!("{who} {}", crate::report::words::at(c))
    };
    let chart = |title: &str, y: &str, f: &dyn Fn(&Slice) -> Option<f64>| {
        let series: Vec<Series> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| Series {
                name: name(c),
                style: style(i),
                ys: (0..longest)
                    .map(|k| c.timeslices.get(k).and_then(f))
                    .collect(),
                ci: Vec::new(),
            })
            .collect();
        let legend = cells
            .iter()
            .enumerate()
            .map(|(i, c)| Key {
                label: name(c),
                style: style(i),
                line: true,
            })
            .collect();
        svg::lines(Chart {
            title: title.into(),
            y_label: y.into(),
            x_label: "seconds into the cell".into(),
            xs: xs.clone(),
            series,
            legend,
            ..Chart::default()
        })
    };
    vec![
        chart("TTFT p95 over time", "TTFT p95 (ms)", &|s| s.ttft_ms_p95),
        chart("KV-cache usage over time", "KV cache used (%)", &|s| {
            s.kv_cache_usage.map(|k| k * 100.0)
        }),
        chart("Waiting requests over time", "waiting (mean)", &|s| {
            s.waiting
        }),
    ]
}

fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_owned)
}
