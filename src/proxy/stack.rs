//! The request pipeline as a tower stack, outermost first:
//!
//! ```text
//! RouteHeader   tokentap's own headers are taken off (they never reach an upstream); a
//!               received `x-tokentap-join` is kept until the route says whether it trusts it
//! Routing       path → route, key → experiment arm; the request's id (read, or made); the
//!               request's Exchange begins here; a route behind a gateway serves only the
//!               gateway (403)
//! Admission     the concurrency limit: over it, 503 at once (load shedding, never queued)
//! Deadlines     the request's first-byte and total deadlines, from `[timeouts]`
//! Forward       body (bounded) → upstream → the metered response (see `forward`)
//! ```
//!
//! Every layer is always ready, answers every request, and refuses by ending the request's
//! exchange (so a refusal has its record). Only `Forward` is asynchronous: the layers above it
//! return its future, or an answer at once, without a box of their own.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use http::request::Parts;
use http::{HeaderName, HeaderValue, Response};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::{Service, ServiceBuilder};

use super::exchange::{Exchange, ProxyBody};
use super::forward::Forward;
use super::layer::{always_ready, now, Respond};
use super::routed::{self, Admission, Opening, Routed, Timeouts};
use super::state::State;
use crate::keys;
use crate::meter::Stamp;
use crate::rxstamp::Latest;
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
    /// trusts its sender (`routed`).
    pub join: Option<u64>,
    /// `t0` is the kernel's stamp.
    pub t0_kernel: bool,
}

/// Takes tokentap's own headers off the request, whatever happens next: the experiment's route
/// header (kept for routing), bench's tags (kept for the record) and the tap's join header (kept
/// for the route to judge).
#[derive(Clone)]
pub struct RouteHeader<S> {
    /// `experiment.route_header`.
    header: HeaderName,
    inner: S,
}

impl<S: Service<Arrival>> Service<Arrival> for RouteHeader<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    always_ready!();

    fn call(&mut self, mut a: Arrival) -> S::Future {
        // NB: removed whatever happens next: it never reaches an upstream.
        a.forced = a.head.headers.remove(&self.header);
        a.load = LoadTags::take(&mut a.head.headers);
        a.join = a
            .head
            .headers
            .remove(crate::tags::TAP_HEADER)
            .and_then(|v| crate::tags::parse_join(v.as_bytes()));
        self.inner.call(a)
    }
}

/// Path → route, key → arm (`route::arm`), the request's id (`ids`); the exchange begins on the
/// chosen route.
#[derive(Clone)]
pub struct Routing<S> {
    state: Arc<State>,
    inner: S,
}

impl<S> Service<Arrival> for Routing<S>
where
    S: Service<Routed, Response = Response<ProxyBody>, Error = Infallible>,
{
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Respond<S::Future>;
    always_ready!();

    fn call(&mut self, a: Arrival) -> Self::Future {
        let state = &self.state;
        let cfg = &state.config;
        let Arrival {
            t0,
            stamp,
            mut head,
            body,
            forced,
            load,
            peer,
            t0_kernel,
            join,
        } = a;
        let mut facts = Exchange::facts_for(stamp, &head.method, head.uri.path());
        facts.load = load;
        facts.t0_kernel = t0_kernel;
        let (request_id, made_id) = super::ids::client(&cfg.request_id, &mut head.headers);
        facts.request_id = request_id;
        if state.sink().otlp.is_some() {
            facts.trace = Some(crate::meter::Trace::from_headers(&head.headers));
        }
        let key = keys::client_key(&head.headers);
        let opening = Opening {
            t0,
            facts,
            key,
            made_id,
            join,
        };
        match routed::route(state, opening, head, body, forced.as_ref(), peer) {
            Ok(r) => Respond::Inner {
                future: self.inner.call(r),
            },
            Err((ex, err)) => now(ex.reject(err)),
        }
    }
}

/// The whole pipeline over `state`.
pub type Stack = RouteHeader<Routing<Admission<Timeouts<Forward>>>>;

pub fn stack(state: Arc<State>) -> Stack {
    let cfg = &state.config;
    let (header, timeouts) = (cfg.experiment.route_header.clone(), cfg.timeouts);
    let (admitted, max) = (state.shared.admitted.clone(), cfg.limits.max_concurrent);
    ServiceBuilder::new()
        .layer_fn(|inner| RouteHeader {
            header: header.clone(),
            inner,
        })
        .layer_fn(|inner| Routing {
            state: state.clone(),
            inner,
        })
        .layer_fn(|inner| Admission {
            admitted: admitted.clone(),
            max,
            inner,
        })
        .layer_fn(|inner| Timeouts { timeouts, inner })
        .service(Forward::new(&state))
}

/// Where a request takes its stack: the current config generation's (`live::Live`).
pub trait Current: Send + Sync {
    /// The stack a new request goes through.
    fn stack(&self) -> Stack;
}

/// The stack as hyper's service: the request head is stamped here (`t0`), first of all — with
/// the kernel's stamp of the connection's read that completed it, when there is one; then the
/// request takes the current config generation's stack, and keeps it to its end.
#[derive(Clone)]
pub struct Proxy(Arc<dyn Current>, Option<IpAddr>, Option<Arc<Latest>>);

impl Proxy {
    pub fn new(live: Arc<dyn Current>) -> Proxy {
        Proxy(live, None, None)
    }

    /// The service for one connection, from `peer`.
    pub fn for_peer(&self, peer: IpAddr) -> Proxy {
        Proxy(self.0.clone(), Some(peer), None)
    }

    /// Stamp request heads with the kernel's stamp of the connection's last read.
    pub fn stamped_by(mut self, latest: Arc<Latest>) -> Proxy {
        self.2 = Some(latest);
        self
    }
}

impl hyper::service::Service<http::Request<Incoming>> for Proxy {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = <Stack as Service<Arrival>>::Future;

    fn call(&self, req: http::Request<Incoming>) -> Self::Future {
        let arrival = self.2.as_ref().and_then(|l| l.get());
        let t0 = arrival.map_or_else(crate::rxstamp::now, |a| a.at);
        let stamp = Stamp::now();
        let (head, body) = req.into_parts();
        // Every layer is always ready (see the module docs): no poll_ready before call.
        self.0.stack().call(Arrival {
            t0,
            stamp,
            head,
            body,
            forced: None,
            load: LoadTags::default(),
            peer: self.1,
            t0_kernel: arrival.is_some(),
            join: None,
        })
    }
}
