//! bench's model of a run as asked: `settings.rs` (the shared settings and the load with its
//! own), `until.rs` and `window.rs` (the search's criterion and the replay's slice, as parsed
//! from their flags). It sends nothing and reads no file, and of bench it names only the value
//! types its settings hold (`arrival`, `resources`, `scrape`); what a run gives back is
//! `info.rs`'s (`run.json`'s types).

pub mod settings;
pub mod until;
pub mod window;
