//! The report as a terminal table: the answers, then each section's title and table.

use super::grid::text_table;
use super::sections::{
    api_rows, binding_rows, bucket_rows, cache_rows, engine_rows, note, open_loop_rows, split_rows,
    steady_rows, turn_rows,
};
use super::tables::{
    cell_rows, hop_rows, hop_title, key_rows, other_rows, prov_rows, readings, slo_rows, tap_rows,
};
use super::{runs, streaming};
use crate::report::model::Report;

pub(super) fn text(r: &Report) -> String {
    let mut s = format!(
        "tokentap report — {} records ({})\n{}\n\n",
        r.records,
        r.sources.as_str(),
        r.judged
    );
    for a in &r.answers {
        s += &format!("{}\n  {}\n", a.question, a.answer);
    }
    if let Some(note) = note(&r.cells) {
        s += &format!("\n{note}\n");
    }
    s += "\nPer prompt shape (all concurrency levels)\n";
    let (h, rows) = bucket_rows(r);
    s += &text_table(&h, &rows);
    s.push('\n');
    let (h, rows) = cell_rows(r);
    s += &text_table(&h, &rows);
    if let Some((h, rows)) = open_loop_rows(r) {
        s += "\nOpen-loop cells: offered and achieved arrival rate\n";
        s += &text_table(&h, &rows);
    }
    s += "\nSLO verdicts at p95\n";
    let (h, rows) = slo_rows(r);
    s += &text_table(&h, &rows);
    s += "\nProvisioning\n";
    let (h, rows) = prov_rows(r);
    s += &text_table(&h, &rows);
    for line in readings(r) {
        s += &format!("- {line}\n");
    }
    if let (Some((h, rows)), Some(hop)) = (hop_rows(r), &r.gateway_hop) {
        s += &format!("\n{}\n", hop_title(r));
        s += &text_table(&h, &rows);
        s += &format!("- {}\n", hop.summary);
    }
    if let (Some((h, rows)), Some(t)) = (tap_rows(r), &r.gateway_tap) {
        s += "\nGateway tap: the hop on every joined request (ms)\n";
        s += &text_table(&h, &rows);
        s += &format!("- {}\n", t.summary);
    }
    if let Some((h, rows)) = split_rows(r) {
        s += "\nWhere TTFT went (medians, ms)\n";
        s += &text_table(&h, &rows);
    }
    if let Some((h, rows)) = engine_rows(r) {
        s += "\nEngine and GPU per cell (bench's scrapes)\n";
        s += &text_table(&h, &rows);
    }
    if let Some((h, rows)) = binding_rows(r) {
        s += "\nBinding constraint per bucket\n";
        s += &text_table(&h, &rows);
    }
    if let Some((h, rows)) = steady_rows(r) {
        s += "\nSteady state: each cell's plateau beside the whole cell\n";
        s += &text_table(&h, &rows);
    }
    s += "\nPer API shape\n";
    let (h, rows) = api_rows(r);
    s += &text_table(&h, &rows);
    if let Some((h, rows)) = streaming::table(&r.streaming) {
        s += &format!("\n{}\n", streaming::TITLE);
        s += &text_table(&h, &rows);
    }
    if let Some((h, rows)) = runs::table(&r.spread) {
        s += &format!("\n{}\n", runs::TITLE);
        s += &text_table(&h, &rows);
    }
    if let Some((h, rows)) = other_rows(r) {
        s += "\nNot judged: client errors and other traffic\n";
        s += &text_table(&h, &rows);
    }
    if let Some((h, rows)) = cache_rows(r) {
        s += "\nTTFT by prefix-cache hit vs miss\n";
        s += &text_table(&h, &rows);
    }
    if let Some((h, rows)) = turn_rows(r) {
        s += "\nPer conversation turn\n";
        s += &text_table(&h, &rows);
    }
    s += "\nPer key (top by requests)\n";
    let (h, rows) = key_rows(r);
    s += &text_table(&h, &rows);
    s
}
