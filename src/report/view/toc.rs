//! The report's sections, in order: one list that every view (text, Markdown, HTML) formats.
//! Each section has one title, whether it is present, and what it holds — a table, a note,
//! what follows the table (readings, a summary). A new section is one entry here; a test holds
//! every view to showing every section present.

use super::sections::{
    api_rows, binding_rows, bucket_rows, cache_rows, engine_rows, open_loop_rows, split_rows,
    steady_rows, turn_rows,
};
use super::tables::{
    cell_rows, hop_rows, hop_title, key_rows, other_rows, prov_rows, readings, slo_rows, tap_rows,
};
use super::{board, runs, streaming};
use crate::report::model::Report;

/// A section's table: its header and rows, as text.
pub(super) struct Table {
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// What a section holds.
pub(super) enum Body {
    Table(Table),
    /// The time charts per cell (`bench --timeslice`): drawn by the HTML view; the others say
    /// where they are.
    TimeCharts,
}

/// What follows a section's table.
pub(super) enum After {
    Nothing,
    /// Lines of a list (the provisioning readings, the gateway board's sentences).
    List(Vec<String>),
    /// A paragraph (a gateway section's summary).
    Para(String),
}

pub(super) struct Section {
    pub title: String,
    /// A line between the title and the table.
    pub note: Option<&'static str>,
    pub body: Body,
    pub after: After,
}

/// What the text and Markdown views say in place of the time charts.
pub(super) const TIME_CHARTS_ELSEWHERE: &str = "Charts of TTFT p95, KV-cache usage and waiting requests over the seconds into each cell: in the HTML report (--format html).";

fn table<H: AsRef<str>>((head, rows): (Vec<H>, Vec<Vec<String>>)) -> Body {
    Body::Table(Table {
        head: head.iter().map(|h| h.as_ref().to_owned()).collect(),
        rows,
    })
}

fn section(title: impl Into<String>, body: Body) -> Section {
    Section {
        title: title.into(),
        note: None,
        body,
        after: After::Nothing,
    }
}

/// The sections the report holds, in order; an absent one (nothing to show) is left out.
pub(super) fn sections(r: &Report) -> Vec<Section> {
    let mut s = vec![
        section(
            "Per prompt shape (all concurrency levels)",
            table(bucket_rows(r)),
        ),
        section("Per bucket × concurrency", table(cell_rows(r))),
    ];
    let opt = |s: &mut Vec<Section>, title: &str, t: Option<(Vec<&str>, Vec<Vec<String>>)>| {
        if let Some(t) = t {
            s.push(section(title, table(t)));
        }
    };
    opt(
        &mut s,
        "Open-loop cells: offered and achieved arrival rate",
        open_loop_rows(r),
    );
    s.push(section("SLO verdicts at p95", table(slo_rows(r))));
    let mut prov = section("Provisioning", table(prov_rows(r)));
    prov.after = After::List(readings(r));
    s.push(prov);
    if let (Some(t), Some(h)) = (hop_rows(r), &r.gateway_hop) {
        let mut hop = section(hop_title(r), table(t));
        hop.after = After::Para(h.summary.clone());
        s.push(hop);
    }
    if let Some(t) = board::table(r) {
        let mut sec = section(board::title(r), table(t));
        if let Some(lines) = board::after(r) {
            sec.after = After::List(lines);
        }
        s.push(sec);
    }
    if let (Some(rows), Some(t)) = (tap_rows(r), &r.gateway_tap) {
        let mut tap = section(
            "Gateway tap: the hop on every joined request (ms)",
            table(rows),
        );
        tap.after = After::Para(t.summary.clone());
        s.push(tap);
    }
    opt(&mut s, "Where TTFT went (medians, ms)", split_rows(r));
    opt(
        &mut s,
        "Engine and GPU per cell (bench's scrapes)",
        engine_rows(r),
    );
    opt(&mut s, "Binding constraint per bucket", binding_rows(r));
    if let Some(t) = steady_rows(r) {
        let mut steady = section(
            "Steady state: each cell's plateau beside the whole cell",
            table(t),
        );
        steady.note = Some("The other tables give each cell's figures as `figures` says: its plateau's when it holds enough, else the whole cell's.");
        s.push(steady);
    }
    if r.cells.iter().any(|c| !c.timeslices.is_empty()) {
        s.push(section(
            "Over time, per cell (bench --timeslice)",
            Body::TimeCharts,
        ));
    }
    s.push(section("Per API shape", table(api_rows(r))));
    opt(&mut s, streaming::TITLE, streaming::table(&r.streaming));
    opt(&mut s, runs::TITLE, runs::table(&r.spread));
    opt(
        &mut s,
        "Not judged: client errors and other traffic",
        other_rows(r),
    );
    opt(&mut s, "TTFT by prefix-cache hit vs miss", cache_rows(r));
    opt(&mut s, "Per conversation turn", turn_rows(r));
    s.push(section("Per key (top by requests)", table(key_rows(r))));
    s
}
