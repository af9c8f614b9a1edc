//! `tokentap report`: request records (bench folders, live proxy logs, rotated files, several
//! replicas) → per bucket × concurrency tables, tail reading, SLO verdicts, provisioning answers,
//! per-key accounting; rendered as a terminal table, Markdown, JSON or one self-contained HTML
//! file with SVG charts. Percentiles come from exact sorted values, so merging files gives the
//! same answer as one file with the same records.

mod acc;
mod answer;
pub mod answers;
pub mod binding;
pub mod board;
mod build;
mod cellacc;
pub mod cli;
pub mod clickhouse;
mod clock;
pub mod engine;
mod fast;
pub(crate) mod fast_check;
pub mod hop;
mod join;
mod json;
mod model;
mod names;
pub mod read;
pub mod row;
mod scan;
pub mod shapes;
pub mod shards;
mod slo;
pub mod sql;
mod sqlparams;
mod sqlterms;
pub mod steady;
pub mod streaming;
pub mod tap;
mod traffic;
pub mod values;
pub(crate) mod view;
mod words;

use crate::meter::RequestRecord;

pub use acc::{Acc, DEFAULT_EXACT_VALUES};
use build::report_of;
pub use build::{compute, compute_all, compute_with_arms, finish};
pub use fast::fields as fast_fields;
pub use model::*;

pub use cli::{cli, Args};
pub use read::load;
pub use slo::{gate, GateVerdict, SloGate};
pub use view::{render, section_titles, Format};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}: no .jsonl records found")]
    Empty(String),
    #[error("{paths}: no readable record{skipped}")]
    NoRecords { paths: String, skipped: String },
    #[error("{file}: {key}: {message}")]
    Slo {
        file: String,
        key: String,
        message: String,
    },
}

/// Concurrency label of a record: bench's level, or the live in-flight count bucketed
/// 1, 2, 3–4, 5–8, 9–16, …
pub fn level(r: &RequestRecord) -> (u64, String) {
    row::level_of(r.concurrency, r.in_flight)
}
