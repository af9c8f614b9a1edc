//! A section's table as text (aligned columns), Markdown or HTML: header and rows in, no
//! meaning read.

use std::fmt::Write;

use super::svg::escape;
use crate::report::model::Dist;

/// A figure with `d` decimals, `-` when there is none.
pub(crate) fn n(v: Option<f64>, d: usize) -> String {
    v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| "-".into())
}

pub(crate) fn dist3(d: &Dist) -> String {
    format!("{}/{}/{}", n(d.p50, 0), n(d.p95, 0), n(d.p99, 0))
}

pub(crate) fn text_table<S: AsRef<str>>(head: &[S], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.as_ref().chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = w[i]))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut s = line(head.iter().map(|h| h.as_ref()).collect());
    s.push('\n');
    for r in rows {
        s.push_str(line(r.iter().map(String::as_str).collect()).trim_end());
        s.push('\n');
    }
    s
}

/// A GFM table: a header row, a delimiter row with one `---` per column, a row per row; a `|`
/// inside a cell is escaped.
pub(crate) fn md_table<S: AsRef<str>>(head: &[S], rows: &[Vec<String>]) -> String {
    let esc = |c: &str| c.replace('|', "\\|");
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    let mut s = line(head.iter().map(|h| esc(h.as_ref())).collect());
    s.push_str(&line(vec!["---".to_owned(); head.len()]));
    for r in rows {
        s.push_str(&line(r.iter().map(|c| esc(c)).collect()));
    }
    s
}

pub(crate) fn html_table<S: AsRef<str>>(head: &[S], rows: &[Vec<String>]) -> String {
    let mut s = String::from("<table><thead><tr>");
    for h in head {
        let _ = write!(s, "<th>{}</th>", escape(h.as_ref()));
    }
    s.push_str("</tr></thead><tbody>");
    for r in rows {
        s.push_str("<tr>");
        for c in r {
            let class = if c == "MISS" { " class=\"miss\"" } else { "" };
            let _ = write!(s, "<td{class}>{}</td>", escape(c));
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    s
}
