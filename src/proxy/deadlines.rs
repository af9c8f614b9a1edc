//! The deadlines stage: [`Deadlines`] gives a routed request its `due::Due` times from
//! `[timeouts]`: when its response head must have come, and when it must be over. The upstream
//! call (`send`) and the response body (`timeout::TimeoutBody`) keep them.

use tower::Service;

use super::due::Due;
use super::layer::always_ready;
use super::routing::Routed;

/// Sets the request's [`Due`] times from `[timeouts]`.
#[derive(Clone)]
pub struct Deadlines<S> {
    timeouts: crate::config::Timeouts,
    inner: S,
}

impl<S> Deadlines<S> {
    pub fn new(timeouts: crate::config::Timeouts, inner: S) -> Deadlines<S> {
        Deadlines { timeouts, inner }
    }
}

impl<S: Service<Routed>> Service<Routed> for Deadlines<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    always_ready!();

    fn call(&mut self, mut r: Routed) -> S::Future {
        r.due = Due::new(r.ex.t0(), &self.timeouts);
        self.inner.call(r)
    }
}
