//! Minimal inline SVG charts (no scripts, no fonts to fetch): lines over a categorical x axis,
//! and grouped bars; each draws the thresholds it is judged against as dashed lines.

use std::fmt::Write;

const W: f64 = 640.0;
const H: f64 = 300.0;
const L: f64 = 60.0;
const R: f64 = 140.0;
const T: f64 = 30.0;
const B: f64 = 40.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn frame(out: &mut String, title: &str, y_label: &str, ymax: f64, xs: &[String]) {
    // Many categories: labels are rotated below the axis, in extra room under the plot.
    let rotate = xs.len() > 6;
    let h = if rotate { H + 110.0 } else { H };
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" aria-label="{t}" style="font-family:sans-serif;font-size:11px">"#,
        t = escape(title)
    );
    let _ = write!(
        out,
        r#"<text x="{L}" y="18" font-size="13" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let (pw, ph) = (W - L - R, H - T - B);
    for i in 0..=4 {
        let v = ymax * f64::from(i) / 4.0;
        let y = T + ph - ph * f64::from(i) / 4.0;
        let _ = write!(
            out,
            r##"<line x1="{L}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            L + pw,
            L - 4.0,
            y + 4.0,
            fmt_num(v)
        );
    }
    let mid = T + ph / 2.0;
    let _ = write!(
        out,
        r#"<text x="14" y="{mid:.1}" transform="rotate(-90 14 {mid:.1})" text-anchor="middle">{}</text>"#,
        escape(y_label)
    );
    for (i, x) in xs.iter().enumerate() {
        let cx = L + pw * (i as f64 + 0.5) / xs.len().max(1) as f64;
        let y = T + ph + 14.0;
        if rotate {
            let _ = write!(
                out,
                r#"<text x="{cx:.1}" y="{y:.1}" font-size="9" text-anchor="end" transform="rotate(-55 {cx:.1} {y:.1})">{}</text>"#,
                escape(x)
            );
        } else {
            let _ = write!(
                out,
                r#"<text x="{cx:.1}" y="{y:.1}" text-anchor="middle">{}</text>"#,
                escape(x)
            );
        }
    }
    if !rotate {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">concurrency</text>"#,
            L + pw / 2.0,
            H - 6.0
        );
    }
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * mag {
            return m * mag;
        }
    }
    10.0 * mag
}

/// A threshold line: its label and value (e.g. `interactive 500 ms`, 500).
pub type Threshold = (String, f64);

/// The frame of a chart scaled to its series and the thresholds near them (up to 3× the data:
/// a far one would flatten the data), drawn dashed: the SVG so far and the y maximum.
fn start(
    title: &str,
    y_label: &str,
    xs: &[String],
    series: &[(String, Vec<Option<f64>>)],
    thresholds: &[Threshold],
) -> (String, f64) {
    let data = series
        .iter()
        .flat_map(|s| s.1.iter().flatten())
        .fold(0.0_f64, |a, b| a.max(*b));
    let near: Vec<&Threshold> = thresholds
        .iter()
        .filter(|t| t.1 > 0.0 && (data <= 0.0 || t.1 <= 3.0 * data))
        .collect();
    let ymax = nice_max(near.iter().map(|t| t.1 * 1.05).fold(data, f64::max));
    let mut out = String::new();
    frame(&mut out, title, y_label, ymax, xs);
    let (pw, ph) = (W - L - R, H - T - B);
    for (label, v) in near {
        let y = T + ph - ph * v / ymax;
        let _ = write!(
            out,
            r##"<line x1="{L}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#900" stroke-dasharray="5,4"/><text x="{:.1}" y="{:.1}" fill="#900" text-anchor="end" font-size="10">{}</text>"##,
            L + pw,
            L + pw - 2.0,
            y - 3.0,
            escape(label)
        );
    }
    (out, ymax)
}

/// The legend entry of series `si`, right of the plot.
fn legend(out: &mut String, si: usize, name: &str, color: &str) {
    let ly = T + 14.0 * si as f64;
    let _ = write!(
        out,
        r#"<rect x="{:.1}" y="{ly:.1}" width="10" height="10" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
        W - R + 10.0,
        W - R + 24.0,
        ly + 9.0,
        escape(name)
    );
}

/// One line per series over categorical x values; `None` leaves a gap.
pub fn lines(
    title: &str,
    y_label: &str,
    xs: &[String],
    series: &[(String, Vec<Option<f64>>)],
    thresholds: &[Threshold],
) -> String {
    let (mut out, ymax) = start(title, y_label, xs, series, thresholds);
    let (pw, ph) = (W - L - R, H - T - B);
    for (si, (name, ys)) in series.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        let pts: Vec<(f64, f64)> = ys
            .iter()
            .enumerate()
            .filter_map(|(i, y)| {
                y.map(|y| {
                    (
                        L + pw * (i as f64 + 0.5) / xs.len().max(1) as f64,
                        T + ph - ph * y / ymax,
                    )
                })
            })
            .collect();
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for (x, y) in &pts {
            let _ = write!(
                out,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{color}"/>"#
            );
        }
        legend(&mut out, si, name, color);
    }
    out.push_str("</svg>");
    out
}

/// Grouped bars: for each x, one bar per series.
pub fn bars(
    title: &str,
    y_label: &str,
    xs: &[String],
    series: &[(String, Vec<Option<f64>>)],
    thresholds: &[Threshold],
) -> String {
    let (mut out, ymax) = start(title, y_label, xs, series, thresholds);
    let (pw, ph) = (W - L - R, H - T - B);
    let slot = pw / xs.len().max(1) as f64;
    let bw = slot * 0.8 / series.len().max(1) as f64;
    for (si, (name, ys)) in series.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        for (i, y) in ys.iter().enumerate() {
            if let Some(y) = y {
                let h = ph * y / ymax;
                let x = L + slot * i as f64 + slot * 0.1 + bw * si as f64;
                let _ = write!(
                    out,
                    r#"<rect x="{x:.1}" y="{:.1}" width="{bw:.1}" height="{h:.1}" fill="{color}"><title>{}: {}</title></rect>"#,
                    T + ph - h,
                    escape(name),
                    fmt_num(*y)
                );
            }
        }
        legend(&mut out, si, name, color);
    }
    out.push_str("</svg>");
    out
}
