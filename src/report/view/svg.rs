//! Inline SVG charts (no scripts, no fonts to fetch) a reader takes in at a glance: lines over a
//! categorical x axis, and grouped bars. The value axis is fitted to the data (`axis`); each
//! series has its bucket's colour and its arm's dash and marker; intervals are whiskers; the
//! thresholds within reach of the data are dashed lines labelled beside the plot where no label
//! touches another (`place`), the others named in a note under the chart; the legend is below
//! the plot. Draws what `html` hands it; never computes a figure.

mod axis;
mod frame;
mod marker;
mod marks;
mod place;

use std::fmt::Write;

use axis::Axis;
use frame::Frame;

/// Series colours, one per bucket.
pub const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
/// Percentiles of one cell, light to dark (apart from the buckets' colours).
pub const PCT_COLORS: [&str; 3] = ["#9ecae1", "#4292c6", "#08306b"];
/// A legend key that stands for a dash alone (an arm, in every bucket's colour).
pub const GREY: &str = "#555";
/// Dashes, one per arm; the dash also picks the marker (`marks::marker`).
const DASHES: [&str; 4] = ["", "7,4", "2,3", "9,3,2,3"];

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A threshold line: its label and value (e.g. `interactive 500 ms`, 500).
pub type Threshold = (String, f64);

/// How a series looks: its colour, and its dash (which picks its marker too).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Style {
    pub color: &'static str,
    pub dash: usize,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub style: Style,
    /// One value per x category; `None` leaves a gap.
    pub ys: Vec<Option<f64>>,
    /// 95 % intervals per x category, drawn as whiskers; empty when the series has none.
    pub ci: Vec<Option<[f64; 2]>>,
}

/// A legend entry: a filled box (a colour) or, when `line`, a line sample with its marker.
#[derive(Debug, Clone)]
pub struct Key {
    pub label: String,
    pub style: Style,
    pub line: bool,
}

impl Key {
    /// Whether the key stands for the series: the same colour (a grey key stands for every
    /// colour) and, for a line sample, the same dash.
    fn covers(&self, s: &Series) -> bool {
        (self.style.color == GREY || self.style.color == s.style.color)
            && (!self.line || self.style.dash == s.style.dash)
    }
}

#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub title: String,
    pub y_label: String,
    pub x_label: String,
    /// The categories along x.
    pub xs: Vec<String>,
    /// When not empty, one per category: the name of its group, written once under each run
    /// of categories that share it (a cell's bucket and arm under its levels).
    pub groups: Vec<String>,
    pub series: Vec<Series>,
    pub thresholds: Vec<Threshold>,
    pub legend: Vec<Key>,
}

impl Chart {
    /// Without what has no data: series with no value, categories no series has a value at
    /// (no empty bar groups), and keys that stand for no series left.
    pub fn pruned(mut self) -> Chart {
        self.series.retain(|s| s.ys.iter().any(Option::is_some));
        let keep: Vec<bool> = (0..self.xs.len())
            .map(|i| {
                self.series
                    .iter()
                    .any(|s| s.ys.get(i).copied().flatten().is_some())
            })
            .collect();
        keep_where(&mut self.xs, &keep);
        keep_where(&mut self.groups, &keep);
        for s in &mut self.series {
            keep_where(&mut s.ys, &keep);
            keep_where(&mut s.ci, &keep);
        }
        let series = &self.series;
        self.legend.retain(|k| series.iter().any(|s| k.covers(s)));
        self
    }

    /// The values the axis must hold: every point and every interval's ends.
    fn extent(&self) -> Option<(f64, f64)> {
        let vals = self.series.iter().flat_map(|s| {
            s.ys.iter()
                .flatten()
                .copied()
                .chain(s.ci.iter().flatten().flat_map(|c| c.iter().copied()))
        });
        vals.filter(|v| v.is_finite())
            .fold(None, |acc, v| match acc {
                None => Some((v, v)),
                Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
            })
    }

    /// The axis, the thresholds drawn on it and those only named: a threshold above the data
    /// by at most half the data's height again (1.5 × its maximum) stretches the axis to show
    /// it; one further away would flatten the data, so it is named under the chart instead.
    fn fit(&self) -> (Axis, Vec<&Threshold>, Vec<&Threshold>) {
        let (lo, hi) = self.extent().unwrap_or((0.0, 0.0));
        let reach = self
            .thresholds
            .iter()
            .map(|t| t.1)
            .filter(|t| *t > hi && hi > 0.0 && *t <= 1.5 * hi)
            .fold(hi, f64::max);
        let axis = Axis::fit(lo, reach);
        let (drawn, named) = self
            .thresholds
            .iter()
            .filter(|t| t.1.is_finite())
            .partition(|t| (axis.min..=axis.max).contains(&t.1));
        (axis, drawn, named)
    }
}

/// One line per series over categorical x values; `None` leaves a gap.
pub fn lines(c: Chart) -> String {
    let c = c.pruned();
    let (axis, drawn, named) = c.fit();
    let f = Frame::new(&c, axis, &drawn, &named, false);
    let mut out = f.open(&c, &drawn);
    marks::lines(&mut out, &f, &c.series);
    out.push_str("</svg>");
    out
}

/// Points with 95 % interval whiskers over categorical x values, unjoined (a forest plot).
pub fn points(c: Chart) -> String {
    let c = c.pruned();
    let (axis, drawn, named) = c.fit();
    let f = Frame::new(&c, axis, &drawn, &named, false);
    let mut out = f.open(&c, &drawn);
    marks::points(&mut out, &f, &c.series);
    out.push_str("</svg>");
    out
}

/// Grouped bars: for each x, one bar per series, from zero.
pub fn bars(c: Chart) -> String {
    let c = c.pruned();
    let (axis, drawn, named) = c.fit();
    let f = Frame::new(&c, axis, &drawn, &named, true);
    let mut out = f.open(&c, &drawn);
    marks::bars(&mut out, &f, &c.series);
    out.push_str("</svg>");
    out
}

/// The items of `v` whose `keep` is true (`v` untouched when it is not one per category).
fn keep_where<T>(v: &mut Vec<T>, keep: &[bool]) {
    if v.len() == keep.len() {
        let mut k = keep.iter();
        v.retain(|_| k.next().copied().unwrap_or(false));
    }
}

/// `<text>` at (x, y), escaped, with extra attributes.
fn text(out: &mut String, x: f64, y: f64, attrs: &str, s: &str) {
    let _ = write!(
        out,
        r#"<text x="{x:.1}" y="{y:.1}" {attrs}>{}</text>"#,
        escape(s)
    );
}

#[cfg(test)]
mod tests;
