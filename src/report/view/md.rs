//! The report as Markdown: the answers as a list, then each section under its heading.

use super::grid::md_table;
use super::sections::{
    api_rows, binding_rows, bucket_rows, cache_rows, engine_rows, note, open_loop_rows, split_rows,
    steady_rows, turn_rows,
};
use super::tables::{
    cell_rows, hop_rows, hop_title, key_rows, other_rows, prov_rows, readings, slo_rows, tap_rows,
};
use super::{runs, streaming};
use crate::report::model::Report;

pub(super) fn md(r: &Report) -> String {
    let mut s = format!(
        "# tokentap report\n\n{} records ({}). {}\n\n",
        r.records,
        r.sources.as_str(),
        r.judged
    );
    for a in &r.answers {
        s += &format!("- **{}** {}\n", a.question, a.answer);
    }
    if let Some(note) = note(&r.cells) {
        s += &format!("\n{note}\n");
    }
    s += "\n## Per prompt shape (all concurrency levels)\n\n";
    let (h, rows) = bucket_rows(r);
    s += &md_table(&h, &rows);
    s += "\n## Per bucket × concurrency\n\n";
    let (h, rows) = cell_rows(r);
    s += &md_table(&h, &rows);
    if let Some((h, rows)) = open_loop_rows(r) {
        s += "\n## Open-loop cells: offered and achieved arrival rate\n\n";
        s += &md_table(&h, &rows);
    }
    s += "\n## SLO verdicts (p95)\n\n";
    let (h, rows) = slo_rows(r);
    s += &md_table(&h, &rows);
    s += "\n## Provisioning\n\n";
    let (h, rows) = prov_rows(r);
    s += &md_table(&h, &rows);
    s += "\n";
    for line in readings(r) {
        s += &format!("- {line}\n");
    }
    if let (Some((h, rows)), Some(hop)) = (hop_rows(r), &r.gateway_hop) {
        s += &format!("\n## {}\n\n", hop_title(r));
        s += &md_table(&h, &rows);
        s += &format!("\n{}\n", hop.summary);
    }
    if let (Some((h, rows)), Some(t)) = (tap_rows(r), &r.gateway_tap) {
        s += "\n## Gateway tap (ms)\n\n";
        s += &md_table(&h, &rows);
        s += &format!("\n{}\n", t.summary);
    }
    if let Some((h, rows)) = split_rows(r) {
        s += "\n## Where TTFT went (medians, ms)\n\n";
        s += &md_table(&h, &rows);
    }
    if let Some((h, rows)) = engine_rows(r) {
        s += "\n## Engine and GPU per cell (bench's scrapes)\n\n";
        s += &md_table(&h, &rows);
    }
    if let Some((h, rows)) = binding_rows(r) {
        s += "\n## Binding constraint per bucket\n\n";
        s += &md_table(&h, &rows);
    }
    if let Some((h, rows)) = steady_rows(r) {
        s += "\n## Steady state: each cell's plateau beside the whole cell\n\n";
        s += &md_table(&h, &rows);
    }
    s += "\n## Per API shape\n\n";
    let (h, rows) = api_rows(r);
    s += &md_table(&h, &rows);
    if let Some((h, rows)) = streaming::table(&r.streaming) {
        s += &format!("\n## {}\n\n", streaming::TITLE);
        s += &md_table(&h, &rows);
    }
    if let Some((h, rows)) = runs::table(&r.spread) {
        s += &format!("\n## {}\n\n", runs::TITLE);
        s += &md_table(&h, &rows);
    }
    if let Some((h, rows)) = other_rows(r) {
        s += "\n## Not judged: client errors and other traffic\n\n";
        s += &md_table(&h, &rows);
    }
    if let Some((h, rows)) = cache_rows(r) {
        s += "\n## TTFT by prefix-cache hit vs miss\n\n";
        s += &md_table(&h, &rows);
    }
    if let Some((h, rows)) = turn_rows(r) {
        s += "\n## Per conversation turn\n\n";
        s += &md_table(&h, &rows);
    }
    s += "\n## Per key\n\n";
    let (h, rows) = key_rows(r);
    s += &md_table(&h, &rows);
    s
}
