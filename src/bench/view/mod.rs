//! What a run shows once it is over: `run.json` assembled from the session's clock, the plan and
//! the cells (`run_json.rs`), and the terminal's table (`summary.rs`). They format what the
//! stages measured; the lines while it runs are `progress.rs`'s.

pub(crate) mod run_json;
pub mod summary;
