//! Where a request goes, as pure functions of the config: [`table`] maps a path to a route (by
//! prefix; upstreams come only from the config, never from the Host header), [`arm`] chooses
//! the experiment arm. Nothing here does I/O; both are unit-tested.

pub mod arm;
pub mod table;

pub use table::RouteTable;
