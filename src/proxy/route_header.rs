//! The first stage: a request as it arrives ([`Arrival`]), and [`RouteHeader`], which takes
//! tokentap's own headers off it, whatever happens next: the experiment's route header (kept for
//! routing), bench's tags (kept for the record) and the tap's join header (kept for the route to
//! judge). None of them ever reaches an upstream.

use std::net::IpAddr;

use http::request::Parts;
use http::{HeaderName, HeaderValue};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::Service;

use super::layer::always_ready;
use crate::meter::Stamp;
use crate::tags::LoadTags;

/// A request as it arrives: before it is routed, nothing to record it on yet.
pub struct Arrival {
    pub t0: Instant,
    pub stamp: Stamp,
    pub head: Parts,
    pub body: Incoming,
    /// The route header's value, once `RouteHeader` took it off.
    pub forced: Option<HeaderValue>,
    /// bench's tags (`x-tokentap-*`: bucket, concurrency, rate, turn), taken off likewise.
    pub load: LoadTags,
    /// The client's address (a gateway tap's `behind_sources`).
    pub peer: Option<IpAddr>,
    /// The `x-tokentap-join` id received, taken off likewise; recorded only if the route
    /// trusts its sender (`routing`).
    pub join: Option<u64>,
    /// `t0` is the kernel's stamp.
    pub t0_kernel: bool,
}

/// Takes tokentap's own headers off the request (see the module docs).
#[derive(Clone)]
pub struct RouteHeader<S> {
    /// `experiment.route_header`.
    header: HeaderName,
    inner: S,
}

impl<S> RouteHeader<S> {
    pub fn new(header: HeaderName, inner: S) -> RouteHeader<S> {
        RouteHeader { header, inner }
    }
}

impl<S: Service<Arrival>> Service<Arrival> for RouteHeader<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    always_ready!();

    fn call(&mut self, mut a: Arrival) -> S::Future {
        // NB: removed whatever happens next: it never reaches an upstream.
        a.forced = a.head.headers.remove(&self.header);
        if crate::tags::has_own_headers(&a.head.headers) {
            a.load = LoadTags::take(&mut a.head.headers);
            a.join = a
                .head
                .headers
                .remove(crate::tags::TAP_HEADER)
                .and_then(|v| crate::tags::parse_join(v.as_bytes()));
        }
        self.inner.call(a)
    }
}
