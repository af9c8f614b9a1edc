//! The report as Markdown: the answers as a list, then each section under its heading.

use super::grid::md_table;
use super::sections::note;
use super::toc::{sections, After, Body, TIME_CHARTS_ELSEWHERE};
use crate::report::model::Report;

pub(super) fn md(r: &Report) -> String {
    let mut s = format!(
        "# tokentap report\n\n{} records ({}). {}\n\n",
        r.records,
        r.scope(),
        r.judged
    );
    for a in &r.answers {
        s += &format!("- **{}** {}\n", a.question, a.answer);
    }
    if let Some(note) = note(&r.cells) {
        s += &format!("\n{note}\n");
    }
    for sec in sections(r) {
        s += &format!("\n## {}\n\n", sec.title);
        if let Some(n) = sec.note {
            s += &format!("{n}\n\n");
        }
        match &sec.body {
            Body::Table(t) => s += &md_table(&t.head, &t.rows),
            Body::TimeCharts => s += &format!("{TIME_CHARTS_ELSEWHERE}\n"),
        }
        match sec.after {
            After::Nothing => {}
            After::List(lines) => {
                s.push('\n');
                lines.iter().for_each(|l| s += &format!("- {l}\n"));
            }
            After::Para(p) => s += &format!("\n{p}\n"),
        }
    }
    s
}
