//! The loads a run sends, one stage each, every one handed the settings it reads and the
//! session's means (the client, the progress lines, the stop flag): the sweep and one cell
//! (`sweep.rs`) over the closed loop (`closed.rs`, its workers polled by `join.rs`) and the open loop (`open.rs`), the saturation
//! search (`search.rs`), the replay (`replay.rs`) and the conversations (`turns.rs`).

pub(crate) mod closed;
mod join;
pub(crate) mod open;
pub mod replay;
pub(crate) mod search;
pub(crate) mod sweep;
pub(crate) mod turns;
