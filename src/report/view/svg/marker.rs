//! A series' marker: its shape and fill by the style's dash, shared by the marks and the legend.

use std::fmt::Write;

use super::{escape, Style, DASHES};

/// The marker of a style at (x, y): a filled circle for the first dash, then a hollow square,
/// triangle and diamond. `attrs` go on the element (class, category); `tip` is its tooltip.
pub fn marker(out: &mut String, s: Style, x: f64, y: f64, attrs: &str, tip: &str) {
    let c = s.color;
    let tip = match tip {
        "" => String::new(),
        t => format!("<title>{}</title>", escape(t)),
    };
    let hollow = format!(r#"fill="none" stroke="{c}" stroke-width="1.6""#);
    let _ = match s.dash % DASHES.len() {
        0 => write!(
            out,
            r#"<circle {attrs} cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{c}">{tip}</circle>"#
        ),
        1 => write!(
            out,
            r#"<rect {attrs} x="{:.1}" y="{:.1}" width="9" height="9" {hollow}>{tip}</rect>"#,
            x - 4.5,
            y - 4.5
        ),
        2 => write!(
            out,
            r#"<path {attrs} d="M{x:.1},{:.1}L{:.1},{:.1}L{:.1},{:.1}Z" {hollow}>{tip}</path>"#,
            y - 5.5,
            x + 5.0,
            y + 3.5,
            x - 5.0,
            y + 3.5
        ),
        _ => write!(
            out,
            r#"<path {attrs} d="M{x:.1},{:.1}L{:.1},{y:.1}L{x:.1},{:.1}L{:.1},{y:.1}Z" {hollow}>{tip}</path>"#,
            y - 5.5,
            x + 5.5,
            y + 5.5,
            x - 5.5
        ),
    };
}
