//! The report's views: a computed [`Report`] rendered as a terminal table, Markdown, JSON
//! (stable schema) or one self-contained HTML file with SVG charts. Views only format; every
//! figure and verdict comes from the model.

mod board;
pub(crate) mod grid;
pub(crate) mod html;
mod md;
mod runs;
mod sections;
mod streaming;
pub(crate) mod svg;
mod tables;
mod text;
mod toc;

use crate::report::model::Report;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Md,
    Json,
    Html,
}

/// The titles of the sections the report holds, in the order every view shows them (the
/// views' one list, `toc.rs`).
pub fn section_titles(r: &Report) -> Vec<String> {
    toc::sections(r).into_iter().map(|s| s.title).collect()
}

pub fn render(r: &Report, f: Format) -> String {
    match f {
        Format::Json => serde_json::to_string_pretty(r).unwrap_or_default() + "\n",
        Format::Table => text::text(r),
        Format::Md => md::md(r),
        Format::Html => html::html(r),
    }
}
