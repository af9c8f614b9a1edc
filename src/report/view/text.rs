//! The report as a terminal table: the answers, then each section's title and table.

use super::grid::text_table;
use super::sections::note;
use super::toc::{sections, After, Body, TIME_CHARTS_ELSEWHERE};
use crate::report::model::Report;

pub(super) fn text(r: &Report) -> String {
    let mut s = format!(
        "tokentap report — {} records ({})\n{}\n\n",
        r.records,
        r.scope(),
        r.judged
    );
    for a in &r.answers {
        s += &format!("{}\n  {}\n", a.question, a.answer);
    }
    if let Some(note) = note(&r.cells) {
        s += &format!("\n{note}\n");
    }
    for sec in sections(r) {
        s += &format!("\n{}\n", sec.title);
        if let Some(n) = sec.note {
            s += &format!("{n}\n");
        }
        match &sec.body {
            Body::Table(t) => s += &text_table(&t.head, &t.rows),
            Body::TimeCharts => s += &format!("{TIME_CHARTS_ELSEWHERE}\n"),
        }
        match sec.after {
            After::Nothing => {}
            After::List(lines) => lines.iter().for_each(|l| s += &format!("- {l}\n")),
            After::Para(p) => s += &format!("- {p}\n"),
        }
    }
    s
}
