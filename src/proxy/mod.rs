//! The proxy: a tower stack per request (`stack`: route header → routing and arm choice →
//! admission → deadlines → forward, each stage in a file of its own, listed there), one
//! [`Exchange`] per request from routing to its record, the routes as values (`routes`), and
//! the pooled upstream client (`client`, `h1`).
//!
//! A request's way, each step in a module of its own: it arrives (`route_header::Arrival`), is
//! routed (`routing`: its exchange begins), admitted (`admission`), given its `due` times
//! (`deadlines`), its body is read (`forward`), the route's `rewrite`s are applied and it is
//! sent (`send`), with the experiment's `copy` to the other arm.
//!
//! Never mutates forwarded bytes, except the fields a route's config rewrites. The response body
//! is owned by the client's response: when the client goes away the upstream request is dropped
//! at once.
//!
//! - `ending`: the one verdict (status, outcome, error) of every ending;
//! - `ids`: the client's request id (read, or made) and the upstream's;
//! - `timeout`: the response body's idle and total deadlines;
//! - `layer`: what every layer shares (an answer at once or the inner one's);
//! - `state`: a config generation's [`State`], and what outlives it ([`Shared`]);
//! - `live`: the config generation new requests take, swapped by a reload; requests in flight
//!   keep the [`State`] they began on.

mod admission;
pub mod client;
mod copy;
mod deadlines;
mod due;
mod ending;
pub mod error;
mod exchange;
mod forward;
pub mod h1;
mod ids;
mod layer;
pub mod live;
mod rewrite;
mod route_header;
pub mod routes;
mod routing;
mod send;
pub mod stack;
mod state;
mod timeout;

pub use error::{BodyError, ProxyError};
pub use exchange::{Exchange, ProxyBody};
pub use live::Live;
pub use routes::{Route, Routes};
pub use stack::Proxy;
pub use state::{Shared, Slot, State};
