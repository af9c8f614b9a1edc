//! The admission stage: the concurrency limit. A request holds a permit (`state::Slot`) for its
//! whole life; none left, it is answered 503 at once (load shedding, never queued).

use std::convert::Infallible;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use http::Response;
use tower::Service;

use super::error::ProxyError;
use super::exchange::ProxyBody;
use super::layer::{always_ready, now, Respond};
use super::routing::Routed;
use super::state::Slot;

/// The concurrency limit: a permit per request for its whole life; none left, 503 at once.
#[derive(Clone)]
pub struct Admission<S> {
    /// Requests admitted, over every generation (`Shared::admitted`).
    admitted: Arc<AtomicUsize>,
    /// `limits.max_concurrent`.
    max: usize,
    inner: S,
}

impl<S> Admission<S> {
    pub fn new(admitted: Arc<AtomicUsize>, max: usize, inner: S) -> Admission<S> {
        Admission {
            admitted,
            max,
            inner,
        }
    }
}

impl<S> Service<Routed> for Admission<S>
where
    S: Service<Routed, Response = Response<ProxyBody>, Error = Infallible>,
{
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Respond<S::Future>;
    always_ready!();

    fn call(&mut self, mut r: Routed) -> Self::Future {
        match Slot::take(&self.admitted, self.max) {
            Some(slot) => {
                r.ex.hold(slot);
                Respond::Inner {
                    future: self.inner.call(r),
                }
            }
            None => now(r.ex.reject(ProxyError::Overloaded(self.max))),
        }
    }
}
