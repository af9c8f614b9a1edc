//! Integration tests that set process environment variables (a credential's `${ENV}`, a
//! ClickHouse password): a binary of their own, since setting one is not safe beside threads
//! reading theirs, as the suite's hundreds would. Run one with `cargo test --test environment
//! MODULE::`.
// Tests and benches time what they drive on their own process clock, and set the environment
// only where they must (tests/environment/): the one-door rules are for the record's path.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod clickhouse;
mod outcomes;
mod privilege;
