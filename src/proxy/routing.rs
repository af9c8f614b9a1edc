//! The routing stage: path → route, key → experiment arm (`route::arm`), the request's id
//! (`ids`: read, or made), and whom the route serves. The request's [`Exchange`] begins here
//! ([`Opening::begin`], also how the experiment's copy begins), and a refused request ends here,
//! with its record. What it hands on is a [`Routed`] request.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Response};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower::Service;

use super::due::Due;
use super::error::ProxyError;
use super::exchange::{Exchange, ProxyBody};
use super::ids::Made;
use super::layer::{always_ready, now, Respond};
use super::route_header::Arrival;
use super::routes::Route;
use super::state::State;
use crate::keys::{self, Secret};
use crate::meter::{Experiment, Facts, Stamp};
use crate::route::arm::{self, Draw, Refusal};

/// Path → route, key → arm, the request's id; the exchange begins on the chosen route.
#[derive(Clone)]
pub struct Routing<S> {
    state: Arc<State>,
    inner: S,
}

impl<S> Routing<S> {
    pub fn new(state: Arc<State>, inner: S) -> Routing<S> {
        Routing { state, inner }
    }
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
        let (request_id, made_id) = super::ids::client(&state.config.request_id, &mut head.headers);
        let mut o = Opening::new(t0, stamp, &head.method, head.uri.path(), &head.headers);
        o.facts.load = load;
        o.facts.t0_kernel = t0_kernel;
        o.facts.request_id = request_id;
        if state.sink().otlp.is_some() {
            o.facts.trace = Some(Box::new(crate::meter::Trace::from_headers(&head.headers)));
        }
        o.made_id = made_id;
        o.join = join;
        match route(state, o, head, body, forced.as_ref(), peer) {
            Ok(r) => Respond::Inner {
                future: self.inner.call(r),
            },
            Err((ex, err)) => now(ex.reject(err)),
        }
    }
}

/// A routed request: its exchange, what to send upstream, and when its answer is due.
pub struct Routed {
    pub ex: Exchange,
    pub head: Parts,
    pub body: Incoming,
    /// The path to send upstream (the route's prefix stripped).
    pub upstream_path: String,
    /// A copy for the other experiment arm: (route index, pair id).
    pub copy: Option<(usize, String)>,
    /// Never, until the `Deadlines` stage sets them.
    pub due: Due,
}

/// What is known of a request before its exchange begins: when it came, its facts so far, the
/// client's key, and the request id tokentap made for it. Its facts are written here (as it
/// arrives, or as a copy) and then only through its [`Exchange`].
pub struct Opening {
    t0: Instant,
    facts: Facts,
    key: Option<Secret<Vec<u8>>>,
    made_id: Option<Made>,
    /// The `x-tokentap-join` id it came with (taken off), not yet trusted.
    join: Option<u64>,
}

impl Opening {
    /// A request that came at `t0` (`stamp`): its method, path and key.
    pub fn new(t0: Instant, stamp: Stamp, method: &Method, path: &str, h: &HeaderMap) -> Opening {
        Opening {
            t0,
            facts: Facts::new(stamp, method.as_str(), path),
            key: keys::client_key(h),
            made_id: None,
            join: None,
        }
    }

    /// The experiment's copy of a request: its arm and pair, and the primary's request id.
    pub fn copy_of(mut self, experiment: Experiment, request_id: Option<String>) -> Opening {
        self.facts.experiment = Some(Box::new(experiment));
        self.facts.request_id = request_id;
        self
    }

    /// The request's exchange begins on `route` (counted in flight there).
    pub fn begin(self, state: Arc<State>, route: Arc<Route>) -> Exchange {
        let mut ex = Exchange::begin(state, route, self.t0, self.facts, self.key);
        if let Some(m) = self.made_id {
            ex.return_id(m);
        }
        ex
    }
}

/// Route a request: the routed request, or its exchange and why it is refused (no route, an arm
/// that does not exist or may not be forced, a client the route does not serve).
pub fn route(
    state: &Arc<State>,
    o: Opening,
    head: Parts,
    body: Incoming,
    forced: Option<&HeaderValue>,
    peer: Option<IpAddr>,
) -> Result<Routed, (Exchange, ProxyError)> {
    let cfg = &state.config;
    let Some((picked, upstream_path)) = state.routes.pick(head.uri.path()) else {
        let route = state.routes.unrouted().clone();
        return Err((o.begin(state.clone(), route), ProxyError::NoRoute));
    };
    let upstream_path = upstream_path.to_owned();
    let key = o.key.as_ref().map(|k| k.expose().as_slice());
    // The key's fingerprint is made now only when the arm depends on it; otherwise with the
    // record, off the request's path.
    let key_id = arm::needs_key(cfg, picked, forced.is_some())
        .then(|| key.map(|k| state.keys.id_of(k)))
        .flatten();
    let choice = arm::choose(
        cfg,
        picked,
        forced.map(HeaderValue::as_bytes),
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
    let refusal = refusal(state, &route, key, peer);
    let join_id = o.join.filter(|_| trusts_join(state, &route, key, peer));
    // An experiment's copy goes to a route that injects a credential only for the clients it
    // admits.
    let choice = choice.map(|mut c| {
        if c.copy
            .as_ref()
            .is_some_and(|(i, _)| !admitted(state, state.routes.get(*i), key, peer))
        {
            c.copy = None;
        }
        c
    });
    let mut ex = o.begin(state.clone(), route);
    ex.routed(key_id, join_id);
    if let Some(err) = refusal {
        return Err((ex, err));
    }
    let choice = match choice {
        Ok(c) => c,
        Err(Refusal::UnknownArm) => {
            let err = ProxyError::BadRequest("the route header names no experiment arm");
            return Err((ex, err));
        }
        Err(Refusal::ForcedDirect) => return Err((ex, ProxyError::ForcedDirect)),
    };
    ex.in_experiment(choice.experiment);
    Ok(Routed {
        ex,
        head,
        body,
        upstream_path,
        copy: choice.copy,
        due: Due::UNBOUNDED,
    })
}

/// A route that injects a credential serves only the clients it admits.
fn admitted(state: &State, r: &Route, key: Option<&[u8]>, peer: Option<IpAddr>) -> bool {
    r.target
        .as_ref()
        .and_then(|t| t.config.admit.as_ref())
        .is_none_or(|a| {
            let id = key.map(|k| state.keys.id_of(k));
            a.admits(id.as_deref(), peer)
        })
}

/// Whether `route` records the `x-tokentap-join` this client sent: its address is in the
/// route's `join_sources`, its key in `join_keys`, or it is the gateway of a `behind` route.
fn trusts_join(state: &State, route: &Route, key: Option<&[u8]>, peer: Option<IpAddr>) -> bool {
    let Some(c) = route.target.as_ref().map(|t| &t.config) else {
        return false;
    };
    if c.join.trusts_source(peer) {
        return true;
    }
    let gateway = c.behind.as_ref().is_some_and(|b| {
        let fp = key.map(keys::fingerprint);
        b.admits(fp.as_deref(), peer)
    });
    gateway
        || (!c.join.keys.is_empty() && {
            let id = key.map(|k| state.keys.id_of(k));
            c.join.trusts_key(id.as_deref())
        })
}

/// Why `route` does not serve this client, if it does not: it admits only listed clients, or it
/// is behind a gateway and serves the gateway alone.
fn refusal(
    state: &State,
    route: &Route,
    key: Option<&[u8]>,
    peer: Option<IpAddr>,
) -> Option<ProxyError> {
    if !admitted(state, route, key, peer) {
        return Some(ProxyError::NotAdmitted(route.name.clone()));
    }
    let not_the_gateway = route
        .target
        .as_ref()
        .and_then(|t| t.config.behind.as_ref())
        .is_some_and(|b| {
            let fp = key.map(keys::fingerprint);
            !b.admits(fp.as_deref(), peer)
        });
    not_the_gateway.then(|| ProxyError::NotTheGateway(route.name.clone()))
}
