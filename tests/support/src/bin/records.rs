//! Generated request records as JSONL on stdout (the report's test data, seed 7):
//! `records N [live|load|everything] [full|written]`: timings at full double precision (the
//! default, as the golden files have them) or as tokentap writes them.
#![allow(clippy::unwrap_used)]

use std::io::Write;

use tokentap_test_support::records::{record, record_as_written, Mix};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args.first().and_then(|n| n.parse().ok()).unwrap_or(6000);
    let mix = match args.get(1).map(String::as_str) {
        Some("live") => Mix::Live,
        Some("load") => Mix::Load,
        _ => Mix::Everything,
    };
    let make = match args.get(2).map(String::as_str) {
        Some("written") => record_as_written,
        _ => record,
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for i in 0..n {
        serde_json::to_writer(&mut out, &make(i, 7, mix)).unwrap();
        out.write_all(b"\n").unwrap();
    }
    out.flush().unwrap();
}
