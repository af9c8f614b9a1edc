//! The HTML report: one self-contained file. It opens with the write-up's questions answered,
//! then the charts (each with the SLO thresholds it is judged against, and the gateway hop by
//! concurrency level, A/B and tap side by side), then the tables.

use std::fmt::Write;

mod charts;
mod time;

use super::grid::html_table;
use super::sections::note;
use super::svg;
use super::toc::{sections, After, Body};
use crate::report::model::Report;

/// The page's head, the answers and the charts.
fn opening(r: &Report) -> String {
    let charts = charts::charts(r);
    let mut s = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tokentap report</title><style>\
         body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 20px}\
         td,th{border:1px solid #ccc;padding:3px 7px;font-size:12px;text-align:right}th{background:#f3f3f3}\
         td.miss{background:#fdd;color:#900;font-weight:bold}.charts{display:flex;flex-wrap:wrap;align-items:flex-start;gap:16px 24px}\
         dl.answers dt{font-weight:bold;margin-top:8px}dl.answers dd{margin:2px 0 0 16px}</style></head><body>",
    );
    let _ = write!(
        s,
        "<h1>tokentap report</h1><p>{} records ({}). {}</p><dl class=\"answers\">",
        r.records,
        r.scope(),
        svg::escape(r.judged)
    );
    for a in &r.answers {
        let _ = write!(
            s,
            "<dt>{}</dt><dd>{}</dd>",
            svg::escape(a.question),
            svg::escape(&a.answer)
        );
    }
    s.push_str("</dl>");
    if let Some(note) = note(&r.cells) {
        let _ = write!(s, "<p>{}</p>", svg::escape(&note));
    }
    s.push_str("<div class=\"charts\">");
    for c in &charts {
        s.push_str(c);
    }
    s.push_str("</div>");
    s
}

pub fn html(r: &Report) -> String {
    let mut s = opening(r);
    for sec in sections(r) {
        let _ = write!(s, "<h2>{}</h2>", svg::escape(&sec.title));
        if let Some(n) = sec.note {
            let _ = write!(s, "<p>{}</p>", svg::escape(n));
        }
        match &sec.body {
            Body::Table(t) => s += &html_table(&t.head, &t.rows),
            Body::TimeCharts => {
                s.push_str("<div class=\"charts\">");
                time::charts(r).iter().for_each(|c| s.push_str(c));
                s.push_str("</div>");
            }
        }
        match sec.after {
            After::Nothing => {}
            After::List(lines) => {
                s.push_str("<ul>");
                for l in lines {
                    let _ = write!(s, "<li>{}</li>", svg::escape(&l));
                }
                s.push_str("</ul>");
            }
            After::Para(p) => {
                let _ = write!(s, "<p>{}</p>", svg::escape(&p));
            }
        }
    }
    s.push_str("</body></html>\n");
    s
}
