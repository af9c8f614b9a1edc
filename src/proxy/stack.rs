//! The request pipeline as a tower stack, outermost first:
//!
//! ```text
//! RouteHeader   tokentap's own headers are taken off (they never reach an upstream)
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
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::request::Parts;
use http::{HeaderValue, Response};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceBuilder};

use super::exchange::Exchange;
use super::forward::Forward;
use super::{Live, ProxyBody, ProxyError, Slot, State};
use crate::keys;
use crate::meter::Stamp;
use crate::route::arm::{self, Draw, Refusal};
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
}

/// A routed request: its exchange, what to send upstream, and its deadlines.
pub struct Routed {
    pub ex: Exchange,
    pub head: Parts,
    pub body: Incoming,
    /// The path to send upstream (the route's prefix stripped).
    pub upstream_path: String,
    /// A copy for the other experiment arm: (route index, pair id).
    pub copy: Option<(usize, String)>,
    pub deadlines: Deadlines,
}

/// When a request must have its response head, and be over.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// How long the upstream may take to send its response head once asked.
    pub first_byte: Duration,
    /// `t0 + timeouts.total_ms`, when set.
    pub total: Option<Instant>,
}

impl Deadlines {
    /// No deadline (until the `Timeouts` layer sets them).
    pub const UNBOUNDED: Deadlines = Deadlines {
        first_byte: Duration::MAX,
        total: None,
    };

    pub fn new(t0: Instant, t: &crate::config::Timeouts) -> Deadlines {
        Deadlines {
            first_byte: t.first_byte,
            total: (!t.total.is_zero()).then(|| t0 + t.total),
        }
    }

    /// How long to wait for the response head from now.
    pub fn head_wait(&self) -> Duration {
        match self.total {
            Some(d) => self
                .first_byte
                .min(d.saturating_duration_since(Instant::now())),
            None => self.first_byte,
        }
    }
}

pin_project_lite::pin_project! {
    /// A layer's answer: at once, or the inner service's future.
    #[project = RespondProj]
    pub enum Respond<F> {
        Now { response: Option<Response<ProxyBody>> },
        Inner { #[pin] future: F },
    }
}

impl<F: Future<Output = Result<Response<ProxyBody>, Infallible>>> Future for Respond<F> {
    type Output = Result<Response<ProxyBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            RespondProj::Now { response } => match response.take() {
                Some(r) => Poll::Ready(Ok(r)),
                None => Poll::Pending, // polled after completion: never
            },
            RespondProj::Inner { future } => future.poll(cx),
        }
    }
}

fn now<F>(r: Response<ProxyBody>) -> Respond<F> {
    Respond::Now { response: Some(r) }
}

/// A layer of the stack: its service is made from the shared state and the inner service.
pub struct WithState<T, S> {
    state: Arc<State>,
    make: fn(Arc<State>, S) -> T,
}

impl<T, S> Layer<S> for WithState<T, S> {
    type Service = T;
    fn layer(&self, inner: S) -> T {
        (self.make)(self.state.clone(), inner)
    }
}

fn with_state<T, S>(state: &Arc<State>, make: fn(Arc<State>, S) -> T) -> WithState<T, S> {
    WithState {
        state: state.clone(),
        make,
    }
}

macro_rules! always_ready {
    () => {
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
    };
}

/// Takes tokentap's own headers off the request, whatever happens next: the experiment's route
/// header (kept for routing) and bench's tags (kept for the record).
#[derive(Clone)]
pub struct RouteHeader<S> {
    state: Arc<State>,
    inner: S,
}

impl<S: Service<Arrival>> Service<Arrival> for RouteHeader<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    always_ready!();

    fn call(&mut self, mut a: Arrival) -> S::Future {
        // NB: removed whatever happens next: it never reaches an upstream.
        a.forced = a
            .head
            .headers
            .remove(&self.state.config.experiment.route_header);
        a.load = LoadTags::take(&mut a.head.headers);
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
        } = a;
        let mut facts = Exchange::facts_for(stamp, &head.method, head.uri.path());
        facts.load = load;
        let (request_id, made_id) = super::ids::client(&cfg.request_id, &mut head.headers);
        facts.request_id = request_id;
        if state.sink().otlp.is_some() {
            facts.trace = Some(crate::meter::Trace::from_headers(&head.headers));
        }
        let key = keys::client_key(&head.headers);
        let Some((picked, upstream_path)) = state.routes.pick(head.uri.path()) else {
            let route = state.routes.unrouted().clone();
            let mut ex = Exchange::begin(state.clone(), route, t0, facts, key);
            if let Some(m) = made_id {
                ex.return_id(m);
            }
            return now(ex.reject(ProxyError::NoRoute));
        };
        let upstream_path = upstream_path.to_owned();
        // The key's fingerprint is made now only when the arm depends on it; otherwise with the
        // record, off the request's path.
        let key_id = arm::needs_key(cfg, picked, forced.is_some())
            .then(|| key.as_ref().map(|k| state.keys.id_of(k.expose())))
            .flatten();
        let choice = arm::choose(
            cfg,
            picked,
            forced.as_ref().map(HeaderValue::as_bytes),
            key_id.as_deref(),
            || {
                let (unit, pair) = state
                    .rng
                    .lock()
                    .map(|mut r| (r.f64(), r.u64(..)))
                    .unwrap_or((0.5, 0));
                Draw { unit, pair }
            },
        );
        let route = match &choice {
            Ok(c) => c.route,
            Err(_) => picked,
        };
        let route = state.routes.get(route).clone();
        // A route behind a gateway serves the gateway alone.
        let not_the_gateway = route
            .target
            .as_ref()
            .and_then(|t| t.config.behind.as_ref())
            .is_some_and(|b| {
                let fp = key.as_ref().map(|k| keys::fingerprint(k.expose()));
                !b.admits(fp.as_deref(), peer)
            });
        // A route that injects a credential serves only the clients it admits; an
        // experiment's copy goes to such a route only for them too.
        let admitted = |r: &super::routes::Route| {
            r.target
                .as_ref()
                .and_then(|t| t.config.admit.as_ref())
                .is_none_or(|a| {
                    let id = key.as_ref().map(|k| state.keys.id_of(k.expose()));
                    a.admits(id.as_deref(), peer)
                })
        };
        let not_admitted = !admitted(&route);
        let choice = choice.map(|mut c| {
            if c.copy
                .as_ref()
                .is_some_and(|(i, _)| !admitted(state.routes.get(*i)))
            {
                c.copy = None;
            }
            c
        });
        let mut ex = Exchange::begin(state.clone(), route, t0, facts, key);
        ex.facts().key_id = key_id;
        if let Some(m) = made_id {
            ex.return_id(m);
        }
        if not_admitted {
            let name = ex.route().name.clone();
            return now(ex.reject(ProxyError::NotAdmitted(name)));
        }
        if not_the_gateway {
            let name = ex.route().name.clone();
            return now(ex.reject(ProxyError::NotTheGateway(name)));
        }
        let choice = match choice {
            Ok(c) => c,
            Err(Refusal::UnknownArm) => {
                return now(ex.reject(ProxyError::BadRequest(
                    "the route header names no experiment arm",
                )))
            }
            Err(Refusal::ForcedDirect) => return now(ex.reject(ProxyError::ForcedDirect)),
        };
        ex.facts().experiment = choice.experiment;
        Respond::Inner {
            future: self.inner.call(Routed {
                ex,
                head,
                body,
                upstream_path,
                copy: choice.copy,
                deadlines: Deadlines::UNBOUNDED,
            }),
        }
    }
}

/// The concurrency limit: a permit per request for its whole life; none left, 503 at once.
#[derive(Clone)]
pub struct Admission<S> {
    state: Arc<State>,
    inner: S,
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
        let max = self.state.config.limits.max_concurrent;
        match Slot::take(&self.state.shared.admitted, max) {
            Some(slot) => {
                r.ex.hold(slot);
                Respond::Inner {
                    future: self.inner.call(r),
                }
            }
            None => now(r.ex.reject(ProxyError::Overloaded(max))),
        }
    }
}

/// Sets the request's deadlines from `[timeouts]`; the upstream call and the response body
/// (`timeout::TimeoutBody`) keep them.
#[derive(Clone)]
pub struct Timeouts<S> {
    state: Arc<State>,
    inner: S,
}

impl<S: Service<Routed>> Service<Routed> for Timeouts<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    always_ready!();

    fn call(&mut self, mut r: Routed) -> S::Future {
        r.deadlines = Deadlines::new(r.ex.t0(), &self.state.config.timeouts);
        self.inner.call(r)
    }
}

/// The whole pipeline over `state`.
pub type Stack = RouteHeader<Routing<Admission<Timeouts<Forward>>>>;

pub fn stack(state: Arc<State>) -> Stack {
    ServiceBuilder::new()
        .layer(with_state(&state, |state, inner| RouteHeader {
            state,
            inner,
        }))
        .layer(with_state(&state, |state, inner| Routing { state, inner }))
        .layer(with_state(&state, |state, inner| Admission {
            state,
            inner,
        }))
        .layer(with_state(&state, |state, inner| Timeouts { state, inner }))
        .service(Forward::new(state))
}

/// The stack as hyper's service: the request head is stamped here (`t0`), first of all; then
/// the request takes the current config generation's stack, and keeps it to its end.
#[derive(Clone)]
pub struct Proxy(Arc<Live>, Option<IpAddr>);

impl Proxy {
    pub fn new(live: Arc<Live>) -> Proxy {
        Proxy(live, None)
    }

    /// The service for one connection, from `peer`.
    pub fn for_peer(&self, peer: IpAddr) -> Proxy {
        Proxy(self.0.clone(), Some(peer))
    }
}

impl hyper::service::Service<http::Request<Incoming>> for Proxy {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = <Stack as Service<Arrival>>::Future;

    fn call(&self, req: http::Request<Incoming>) -> Self::Future {
        let t0 = Instant::now();
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
        })
    }
}
