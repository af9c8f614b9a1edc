//! The integration tests, one binary: the crate is linked once for all the modules below,
//! where each was a binary of its own that linked it again. Apart from it, for a reason each:
//! `tests/environment/` (tests that set process environment variables, which is not safe beside
//! threads reading theirs), `tests/memory/` (tests whose bounds read the process's RSS, which
//! the suite's other tests would swell) and `tests/kernel_stamps_off.rs` (the kernel's receive
//! stamps off for its whole process). Run one module with `cargo test --test suite MODULE::`.
// Tests and benches time what they drive on their own process clock, and set the environment
// only where they must (tests/environment/): the one-door rules are for the record's path.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod arrivals;
mod bench_progress;
mod bench_runs;
mod bench_sim;
mod bench_whole;
mod cli;
mod compare;
mod compressed;
mod cut_streams;
mod deploy;
mod experiments;
mod fixtures_replay;
mod fleet;
mod fleet_slo;
mod fuzz_replay;
mod kernel_stamps;
mod layout;
mod lifecycle;
mod listen_backlog;
mod load;
mod otlp;
mod reload;
mod report;
mod report_clickhouse;
mod report_live;
mod report_stream;
mod request_ids;
mod saturation;
mod schema;
mod shapes;
mod sim_pace;
mod sse_split;
mod stages;
mod streaming;
mod tap;
mod telemetry;
mod upstream;
mod verdicts;
