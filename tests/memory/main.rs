//! Integration tests whose bounds read the process's memory (RSS): hostile inputs, HTTP/2 floods
//! and smuggling probes, each held to a memory bound. A binary of their own, since in the suite
//! the other tests' allocations would count as theirs. Run one with `cargo test --test memory
//! MODULE::`.
// Tests time what they drive on their own process clock: the one-door rules are for the
// record's path.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod hostile;
mod hostile_h2;
mod smuggling;

/// One test at a time: each bound reads the whole process's RSS, so a test running beside it
/// would count as its own (the 1,424-stream test alone adds 5–10 MB, under load more).
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Holds the binary to this test until the guard drops.
async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    ALONE.lock().await
}
