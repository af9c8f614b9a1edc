//! A chart's frame: its size worked out from what it must hold (plot, x labels, legend rows,
//! notes: no blank band), the fitted axis with its ticks, the x labels (flat, grouped under
//! their bucket and arm, or upright when nothing else fits), the thresholds with their labels
//! spread apart in the right margin, the legend and the note. Never draws a data mark.

use std::fmt::Write;

use super::axis::Axis;
use super::place::{flow, spread, text_width, wrap};
use super::{escape, text, Chart, Key, Threshold, DASHES};

/// Left margin (tick labels and the axis name), plot top and plot height.
pub const L: f64 = 64.0;
pub const T: f64 = 30.0;
pub const PH: f64 = 220.0;
/// The width a chart takes when its categories fit.
const W: f64 = 640.0;
const FONT: f64 = 11.0;
const SMALL: f64 = 10.0;
/// Baseline-to-baseline distance of threshold labels: a 10 px line is under 12 px tall.
const THRESHOLD_GAP: f64 = 13.0;
/// The narrowest slot a bar group gets; wider charts rather than crowded ones.
const MIN_SLOT: f64 = 22.0;
const LEGEND_ROW: f64 = 17.0;
const NOTE_ROW: f64 = 13.0;

/// How the x labels are written.
enum XLabels {
    /// Each label centred under its slot.
    Flat,
    /// The labels under their slots, and each run's group name, wrapped, under its run.
    Grouped(Vec<(usize, usize, Vec<String>)>),
    /// Turned upright (group and label together), when neither fits across.
    Upright,
}

pub struct Frame {
    pub axis: Axis,
    /// Plot width, and the width of one x category.
    pub pw: f64,
    pub slot: f64,
    width: f64,
    x_labels: XLabels,
    /// Height of the x labels' band under the plot.
    x_band: f64,
    legend_y: f64,
    legend_at: Vec<(usize, f64)>,
    note_y: f64,
    note: Vec<String>,
    pub height: f64,
}

impl Frame {
    pub fn new(
        c: &Chart,
        axis: Axis,
        drawn: &[&Threshold],
        named: &[&Threshold],
        bars: bool,
    ) -> Frame {
        let r = drawn
            .iter()
            .map(|t| text_width(&t.0, SMALL) + 14.0)
            .fold(16.0, f64::max);
        let n = c.xs.len().max(1);
        let pw = if bars {
            (W - L - r).max(n as f64 * MIN_SLOT)
        } else {
            W - L - r
        };
        let slot = pw / n as f64;
        let width = L + pw + r;
        let fits = |s: &str, px: f64, room: f64| text_width(s, px) <= room - 4.0;
        let runs = runs(&c.groups);
        let (x_labels, x_band) =
            if !c.groups.is_empty() && c.xs.iter().all(|x| fits(x, SMALL, slot)) {
                let wrapped: Vec<(usize, usize, Vec<String>)> = runs
                    .iter()
                    .map(|(a, b)| {
                        (
                            *a,
                            *b,
                            wrap(&c.groups[*a], SMALL, slot * (b - a) as f64 - 4.0),
                        )
                    })
                    .collect();
                let ok = wrapped.iter().all(|(a, b, lines)| {
                    lines.iter().all(|l| fits(l, SMALL, slot * (b - a) as f64))
                });
                let deepest = wrapped.iter().map(|w| w.2.len()).max().unwrap_or(0);
                if ok {
                    (XLabels::Grouped(wrapped), 22.0 + 12.0 * deepest as f64)
                } else {
                    upright(c)
                }
            } else if c.groups.is_empty() && c.xs.iter().all(|x| fits(x, FONT, slot)) {
                (XLabels::Flat, 18.0)
            } else {
                upright(c)
            };
        let x_title = if c.x_label.is_empty() { 0.0 } else { 16.0 };
        let legend_y = T + PH + x_band + x_title + 6.0;
        let widths: Vec<f64> = c
            .legend
            .iter()
            .map(|k| text_width(&k.label, FONT) + if k.line { 32.0 } else { 15.0 })
            .collect();
        let legend_at = flow(&widths, 16.0, width - L - 8.0);
        let rows = legend_at.last().map_or(0, |(row, _)| row + 1);
        let note_y = legend_y + LEGEND_ROW * rows as f64;
        let note = note(c, named, width - L - 8.0);
        let height = note_y + NOTE_ROW * note.len() as f64 + 6.0;
        Frame {
            axis,
            pw,
            slot,
            width,
            x_labels,
            x_band,
            legend_y,
            legend_at,
            note_y,
            note,
            height,
        }
    }

    /// The y pixel of value `v`.
    pub fn y(&self, v: f64) -> f64 {
        T + PH - PH * self.axis.frac(v)
    }

    /// The x pixel of the centre of category `i`.
    pub fn x(&self, i: usize) -> f64 {
        L + self.slot * (i as f64 + 0.5)
    }

    /// The SVG up to the data marks: frame, axis, x labels, thresholds, legend, note.
    pub fn open(&self, c: &Chart, drawn: &[&Threshold]) -> String {
        let (w, h) = (self.width, self.height);
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w:.0} {h:.0}" width="{w:.0}" height="{h:.0}" role="img" aria-label="{t}" style="font-family:sans-serif;font-size:{FONT}px">"#,
            t = escape(&c.title)
        );
        text(
            &mut out,
            L,
            18.0,
            r#"class="title" font-size="13" font-weight="bold""#,
            &c.title,
        );
        let right = L + self.pw;
        for v in self.axis.ticks() {
            let y = self.y(v);
            let stroke = if v == 0.0 { "#888" } else { "#e3e3e3" };
            let class = if v == 0.0 { r#" class="zero""# } else { "" };
            let _ = write!(
                out,
                r#"<line{class} x1="{L}" y1="{y:.1}" x2="{right:.1}" y2="{y:.1}" stroke="{stroke}"/>"#
            );
            text(
                &mut out,
                L - 6.0,
                y + 4.0,
                r#"class="tick" text-anchor="end""#,
                &self.axis.label(v),
            );
        }
        let _ = write!(
            out,
            r#"<rect class="plot" x="{L}" y="{T}" width="{:.1}" height="{PH}" fill="none"/>"#,
            self.pw
        );
        let mid = T + PH / 2.0;
        text(
            &mut out,
            14.0,
            mid,
            &format!(r#"class="unit" transform="rotate(-90 14 {mid:.1})" text-anchor="middle""#),
            &c.y_label,
        );
        self.x_labels(&mut out, c);
        if !c.x_label.is_empty() {
            let y = T + PH + self.x_band + 12.0;
            text(
                &mut out,
                L + self.pw / 2.0,
                y,
                r#"class="xtitle" text-anchor="middle""#,
                &c.x_label,
            );
        }
        self.thresholds(&mut out, drawn);
        self.legend(&mut out, &c.legend);
        for (i, line) in self.note.iter().enumerate() {
            let y = self.note_y + NOTE_ROW * i as f64 + 9.0;
            text(
                &mut out,
                L,
                y,
                &format!(r##"class="note" font-size="{SMALL}" fill="#900""##),
                line,
            );
        }
        out
    }

    fn x_labels(&self, out: &mut String, c: &Chart) {
        let base = T + PH;
        match &self.x_labels {
            XLabels::Flat => {
                for (i, x) in c.xs.iter().enumerate() {
                    let attrs = format!(r#"class="xl" data-x="{i}" text-anchor="middle""#);
                    text(out, self.x(i), base + 15.0, &attrs, x);
                }
            }
            XLabels::Grouped(runs) => {
                for (i, x) in c.xs.iter().enumerate() {
                    let attrs = format!(
                        r#"class="xl" data-x="{i}" text-anchor="middle" font-size="{SMALL}""#
                    );
                    text(out, self.x(i), base + 14.0, &attrs, x);
                }
                for (a, b, lines) in runs {
                    let cx = L + self.slot * (*a + *b) as f64 / 2.0;
                    for (k, line) in lines.iter().enumerate() {
                        let attrs = format!(
                            r#"class="xg" text-anchor="middle" font-size="{SMALL}" fill="{}""#,
                            super::GREY
                        );
                        text(out, cx, base + 28.0 + 12.0 * k as f64, &attrs, line);
                    }
                    if *a > 0 {
                        let x = L + self.slot * *a as f64;
                        let _ = write!(
                            out,
                            r##"<line x1="{x:.1}" y1="{base:.1}" x2="{x:.1}" y2="{:.1}" stroke="#bbb"/>"##,
                            base + self.x_band - 4.0
                        );
                    }
                }
            }
            XLabels::Upright => {
                for (i, x) in c.xs.iter().enumerate() {
                    let label = match c.groups.get(i) {
                        Some(g) => format!("{g} {x}"),
                        None => x.clone(),
                    };
                    let (cx, y) = (self.x(i) + 4.0, base + 6.0);
                    let attrs = format!(
                        r#"class="xl" data-x="{i}" font-size="{SMALL}" text-anchor="end" transform="rotate(-90 {cx:.1} {y:.1})""#
                    );
                    text(out, cx, y, &attrs, &label);
                }
            }
        }
    }

    /// Each threshold dashed across the plot, its label right of it; labels that would touch
    /// are moved apart, with a leader to their line.
    fn thresholds(&self, out: &mut String, drawn: &[&Threshold]) {
        let right = L + self.pw;
        let lines: Vec<f64> = drawn.iter().map(|t| self.y(t.1)).collect();
        let wanted: Vec<f64> = lines.iter().map(|y| y + 3.5).collect();
        let at = spread(&wanted, THRESHOLD_GAP, T + 2.0, T + PH + 3.5);
        for ((t, line), y) in drawn.iter().zip(&lines).zip(at) {
            let _ = write!(
                out,
                r##"<line class="thr-line" x1="{L}" y1="{line:.1}" x2="{right:.1}" y2="{line:.1}" stroke="#900" stroke-dasharray="5,4"/>"##
            );
            if (y - 3.5 - line).abs() > 1.0 {
                let _ = write!(
                    out,
                    r##"<line x1="{right:.1}" y1="{line:.1}" x2="{:.1}" y2="{:.1}" stroke="#900" stroke-width="0.8"/>"##,
                    right + 5.0,
                    y - 3.5
                );
            }
            let attrs = format!(r##"class="thr" fill="#900" font-size="{SMALL}""##);
            text(out, right + 6.0, y, &attrs, &t.0);
        }
    }

    fn legend(&self, out: &mut String, keys: &[Key]) {
        for (k, (row, dx)) in keys.iter().zip(&self.legend_at) {
            let x = L + dx;
            let y = self.legend_y + LEGEND_ROW * *row as f64;
            let color = k.style.color;
            let tx = if k.line {
                let dash = DASHES[k.style.dash % DASHES.len()];
                let _ = write!(
                    out,
                    r#"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>"#,
                    y + 6.0,
                    x + 26.0,
                    y + 6.0
                );
                super::marker::marker(out, k.style, x + 13.0, y + 6.0, "", "");
                x + 32.0
            } else {
                let _ = write!(
                    out,
                    r#"<rect x="{x:.1}" y="{:.1}" width="10" height="10" fill="{color}"/>"#,
                    y + 1.0
                );
                x + 15.0
            };
            text(out, tx, y + 10.0, r#"class="key""#, &k.label);
        }
    }
}

/// Runs of equal consecutive group names: (first, one past the last).
fn runs(groups: &[String]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        match out.last_mut() {
            Some((a, b)) if groups[*a] == *g => *b = i + 1,
            _ => out.push((i, i + 1)),
        }
    }
    out
}

/// Upright labels: the band is as deep as the longest label.
fn upright(c: &Chart) -> (XLabels, f64) {
    let longest =
        c.xs.iter()
            .enumerate()
            .map(|(i, x)| match c.groups.get(i) {
                Some(g) => text_width(&format!("{g} {x}"), SMALL),
                None => text_width(x, SMALL),
            })
            .fold(0.0, f64::max);
    (XLabels::Upright, longest + 12.0)
}

/// The note under a chart: the thresholds off the axis, by which side of the data they are on,
/// wrapped to `width`.
fn note(c: &Chart, off: &[&Threshold], width: f64) -> Vec<String> {
    let (lo, hi) = c.extent().unwrap_or((0.0, 0.0));
    let mut parts = Vec::new();
    let above: Vec<&str> = off
        .iter()
        .filter(|t| t.1 > hi)
        .map(|t| t.0.as_str())
        .collect();
    let below: Vec<&str> = off
        .iter()
        .filter(|t| t.1 < lo)
        .map(|t| t.0.as_str())
        .collect();
    if !above.is_empty() {
        parts.push(format!(
            "Above every value, off this axis: {}.",
            above.join(", ")
        ));
    }
    if !below.is_empty() {
        parts.push(format!(
            "Below every value, off this axis: {}.",
            below.join(", ")
        ));
    }
    wrap(&parts.join(" "), SMALL, width)
}
