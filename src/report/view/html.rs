//! The HTML report: one self-contained file. It opens with the write-up's questions answered,
//! then the charts (each with the SLO thresholds it is judged against, and the gateway hop by
//! concurrency level, A/B and tap side by side), then the tables.

use std::fmt::Write;

mod charts;
mod time;

use super::grid::html_table;
use super::sections::{
    api_rows, binding_rows, bucket_rows, cache_rows, engine_rows, note, open_loop_rows, split_rows,
    steady_rows, turn_rows,
};
use super::tables::{
    cell_rows, hop_rows, hop_title, key_rows, other_rows, prov_rows, readings, slo_rows, tap_rows,
};
use super::{runs, streaming, svg};
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
        r.sources.as_str(),
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
    s.push_str("<h2>Per prompt shape (all concurrency levels)</h2>");
    let (h, rows) = bucket_rows(r);
    s += &html_table(&h, &rows);
    s.push_str("<h2>Per bucket × concurrency</h2>");
    let (h, rows) = cell_rows(r);
    s += &html_table(&h, &rows);
    if let Some((h, rows)) = open_loop_rows(r) {
        s.push_str("<h2>Open-loop cells: offered and achieved arrival rate</h2>");
        s += &html_table(&h, &rows);
    }
    s.push_str("<h2>SLO verdicts (p95)</h2>");
    let (h, rows) = slo_rows(r);
    s += &html_table(&h, &rows);
    s.push_str("<h2>Provisioning</h2>");
    let (h, rows) = prov_rows(r);
    s += &html_table(&h, &rows);
    s.push_str("<ul>");
    for line in readings(r) {
        let _ = write!(s, "<li>{}</li>", svg::escape(&line));
    }
    s.push_str("</ul>");
    if let (Some((h, rows)), Some(hop)) = (hop_rows(r), &r.gateway_hop) {
        let _ = write!(s, "<h2>{}</h2>", svg::escape(&hop_title(r)));
        s += &html_table(&h, &rows);
        let _ = write!(s, "<p>{}</p>", svg::escape(&hop.summary));
    }
    if let (Some((h, rows)), Some(t)) = (tap_rows(r), &r.gateway_tap) {
        s.push_str("<h2>Gateway tap: the hop on every joined request (ms)</h2>");
        s += &html_table(&h, &rows);
        let _ = write!(s, "<p>{}</p>", svg::escape(&t.summary));
    }
    if let Some((h, rows)) = split_rows(r) {
        s.push_str("<h2>Where TTFT went (medians, ms)</h2>");
        s += &html_table(&h, &rows);
    }
    if let Some((h, rows)) = engine_rows(r) {
        s.push_str("<h2>Engine and GPU per cell (bench's scrapes)</h2>");
        s += &html_table(&h, &rows);
    }
    if let Some((h, rows)) = binding_rows(r) {
        s.push_str("<h2>Binding constraint per bucket</h2>");
        s += &html_table(&h, &rows);
    }
    if let Some((h, rows)) = steady_rows(r) {
        s.push_str("<h2>Steady state: each cell's plateau beside the whole cell</h2><p>The other tables give whole cells.</p>");
        s += &html_table(&h, &rows);
    }
    let over_time = time::charts(r);
    if !over_time.is_empty() {
        s.push_str("<h2>Over time, per cell (bench --timeslice)</h2><div class=\"charts\">");
        for c in &over_time {
            s.push_str(c);
        }
        s.push_str("</div>");
    }
    s.push_str("<h2>Per API shape</h2>");
    let (h, rows) = api_rows(r);
    s += &html_table(&h, &rows);
    if let Some((h, rows)) = streaming::table(&r.streaming) {
        let _ = write!(s, "<h2>{}</h2>", streaming::TITLE);
        s += &html_table(&h, &rows);
    }
    if let Some((h, rows)) = runs::table(&r.spread) {
        let _ = write!(s, "<h2>{}</h2>", svg::escape(runs::TITLE));
        s += &html_table(&h, &rows);
    }
    if let Some((h, rows)) = other_rows(r) {
        s.push_str("<h2>Not judged: client errors and other traffic</h2>");
        s += &html_table(&h, &rows);
    }
    if let Some((h, rows)) = cache_rows(r) {
        s.push_str("<h2>TTFT by prefix-cache hit vs miss</h2>");
        s += &html_table(&h, &rows);
    }
    if let Some((h, rows)) = turn_rows(r) {
        s.push_str("<h2>Per conversation turn</h2>");
        s += &html_table(&h, &rows);
    }
    s.push_str("<h2>Per key</h2>");
    let (h, rows) = key_rows(r);
    s += &html_table(&h, &rows);
    s.push_str("</body></html>\n");
    s
}
