//! Generated request records as JSONL on stdout (the report's test data, seed 7):
//! `records N [live|everything]`.
#![allow(clippy::unwrap_used)]

use std::io::Write;

use tokentap_test_support::records::{jsonl, Mix};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args.first().and_then(|n| n.parse().ok()).unwrap_or(6000);
    let mix = match args.get(1).map(String::as_str) {
        Some("live") => Mix::Live,
        _ => Mix::Everything,
    };
    std::io::stdout()
        .write_all(jsonl(0, n, 7, mix).as_bytes())
        .unwrap();
}
