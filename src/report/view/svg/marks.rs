//! A chart's data marks: polylines with a marker per point (the arm's shape, hollow beyond the
//! first, and points of the series of one category set a few pixels apart, so lines that
//! coincide stay visible), bars from zero, and whiskers for 95 % intervals. Every mark carries
//! `class="data"` and its category (`data-x`), which the layout test reads.

use std::fmt::Write;

use super::frame::Frame;
use super::marker::marker;
use super::{escape, Series, DASHES};

/// A vertical whisker from `lo` to `hi` (values) at x, capped.
fn whisker(out: &mut String, f: &Frame, x: f64, ci: [f64; 2], cap: f64, color: &str, i: usize) {
    let (y0, y1) = (f.y(ci[0]), f.y(ci[1]));
    let _ = write!(
        out,
        r#"<path class="data ci" data-x="{i}" d="M{x:.1},{y0:.1}V{y1:.1}M{:.1},{y0:.1}H{:.1}M{:.1},{y1:.1}H{:.1}" fill="none" stroke="{color}" stroke-width="1.4"/>"#,
        x - cap,
        x + cap,
        x - cap,
        x + cap
    );
}

fn value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// The points gathered so far as one polyline (a lone point is its marker alone); emptied.
fn polyline(out: &mut String, run: &mut Vec<String>, color: &str, dash: &str) {
    if run.len() > 1 {
        let _ = write!(
            out,
            r#"<polyline class="data" fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}" points="{}"/>"#,
            run.join(" ")
        );
    }
    run.clear();
}

/// One line per series, broken where a value is missing.
pub fn lines(out: &mut String, f: &Frame, series: &[Series]) {
    let n = series.len().max(1) as f64;
    let dodge = (f.slot * 0.5 / n).min(4.0);
    for (si, s) in series.iter().enumerate() {
        let dx = (si as f64 - (n - 1.0) / 2.0) * dodge;
        let dash = DASHES[s.style.dash % DASHES.len()];
        let color = s.style.color;
        let pt = |i: usize, v: f64| (f.x(i) + dx, f.y(v));
        let mut run: Vec<String> = Vec::new();
        for (i, v) in s.ys.iter().enumerate() {
            match v {
                Some(v) => {
                    let (x, y) = pt(i, *v);
                    run.push(format!("{x:.1},{y:.1}"));
                }
                None => polyline(out, &mut run, color, dash),
            }
        }
        polyline(out, &mut run, color, dash);
        for (i, v) in s.ys.iter().enumerate() {
            let Some(v) = v else { continue };
            let (x, y) = pt(i, *v);
            point(out, f, s, i, (x, y), *v);
        }
    }
}

/// One value's marker at (x, y), with its interval's whisker when it has one.
fn point(out: &mut String, f: &Frame, s: &Series, i: usize, (x, y): (f64, f64), v: f64) {
    if let Some(Some(ci)) = s.ci.get(i) {
        whisker(out, f, x, *ci, 3.0, s.style.color, i);
    }
    let tip = format!("{}: {}", s.name, value(v));
    marker(
        out,
        s.style,
        x,
        y,
        &format!(r#"class="data" data-x="{i}""#),
        &tip,
    );
}

/// Points with their intervals, never joined (a forest plot: each category stands alone).
pub fn points(out: &mut String, f: &Frame, series: &[Series]) {
    let n = series.len().max(1) as f64;
    let dodge = (f.slot * 0.5 / n).min(4.0);
    for (si, s) in series.iter().enumerate() {
        let dx = (si as f64 - (n - 1.0) / 2.0) * dodge;
        for (i, v) in s.ys.iter().enumerate() {
            let Some(v) = v else { continue };
            point(out, f, s, i, (f.x(i) + dx, f.y(*v)), *v);
        }
    }
}

/// Bars from zero, a group per category, a bar per series; whiskers over them.
pub fn bars(out: &mut String, f: &Frame, series: &[Series]) {
    let bw = f.slot * 0.8 / series.len().max(1) as f64;
    let zero = f.y(0.0);
    for (si, s) in series.iter().enumerate() {
        for (i, v) in s.ys.iter().enumerate() {
            let Some(v) = v else { continue };
            let x = f.x(i) - f.slot * 0.4 + bw * si as f64;
            let y = f.y(*v);
            let _ = write!(
                out,
                r#"<rect class="data" data-x="{i}" x="{x:.1}" y="{:.1}" width="{bw:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                y.min(zero),
                (y - zero).abs(),
                s.style.color,
                escape(&s.name),
                value(*v)
            );
            if let Some(Some(ci)) = s.ci.get(i) {
                whisker(out, f, x + bw / 2.0, *ci, (bw * 0.3).min(6.0), "#222", i);
            }
        }
    }
}
