//! The request pipeline as a tower stack, outermost first; each stage is one type, its
//! `Service` and what it alone uses, in the file named:
//!
//! ```text
//! RouteHeader   route_header.rs  tokentap's own headers are taken off (they never reach an
//!                                upstream); a received `x-tokentap-join` is kept until the
//!                                route says whether it trusts it
//! Routing       routing.rs       path → route, key → experiment arm; the request's id (read,
//!                                or made); the request's Exchange begins here; a route behind
//!                                a gateway serves only the gateway (403)
//! Admission     admission.rs     the concurrency limit: over it, 503 at once (load shedding,
//!                                never queued)
//! Deadlines     deadlines.rs     when the request's response head and its end are due, from
//!                                `[timeouts]`
//! Forward       forward.rs       body (bounded) → upstream → the metered response
//! ```
//!
//! Every layer is always ready, answers every request, and refuses by ending the request's
//! exchange (so a refusal has its record). Only `Forward` is asynchronous: the layers above it
//! return its future, or an answer at once, without a box of their own. This file only puts
//! them together, and hands the stack to hyper ([`Proxy`]).

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use http::Response;
use hyper::body::Incoming;
use tower::{Service, ServiceBuilder};

use super::admission::Admission;
use super::deadlines::Deadlines;
use super::exchange::ProxyBody;
use super::forward::Forward;
use super::route_header::{Arrival, RouteHeader};
use super::routing::Routing;
use super::state::State;
use crate::meter::Stamp;
use crate::rxstamp::Latest;
use crate::tags::LoadTags;

/// The whole pipeline over `state`.
pub type Stack = RouteHeader<Routing<Admission<Deadlines<Forward>>>>;

pub fn stack(state: Arc<State>) -> Stack {
    let cfg = &state.config;
    let (header, timeouts) = (cfg.experiment.route_header.clone(), cfg.timeouts);
    let (admitted, max) = (state.shared.admitted.clone(), cfg.limits.max_concurrent);
    ServiceBuilder::new()
        .layer_fn(|inner| RouteHeader::new(header.clone(), inner))
        .layer_fn(|inner| Routing::new(state.clone(), inner))
        .layer_fn(|inner| Admission::new(admitted.clone(), max, inner))
        .layer_fn(|inner| Deadlines::new(timeouts, inner))
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
        let stamp = Stamp::of(t0);
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
