//! The innermost service: read the request body (bounded), apply the route's rewrites, send it
//! over the route's pooled client within the first-byte deadline, and hand back the upstream's
//! response with a metered body. Also the experiment's copy: the same request to the other arm,
//! read to its end, measured, discarded.
//!
//! Never mutates forwarded bytes, except the fields a route's config rewrites (the `model`
//! string, the headers in `set_headers`, the experiment's `cache_salt`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;
use tower::Service;

use super::exchange::Exchange;
use super::routes::{Route, Tap};
use super::stack::{Deadlines, Routed};
use super::{ProxyBody, ProxyError, Slot, State};
use crate::config::Mode;
use crate::keys;
use crate::meter::{Experiment, Outcome, Stamp};
use crate::openai;

/// What goes upstream: the client's request as received (hop-by-hop and route headers already
/// removed), the route's prefix stripped.
struct Outgoing {
    method: Method,
    /// Path (prefix stripped) and query.
    path_and_query: String,
    headers: HeaderMap,
    body: Bytes,
}

/// What a copy needs: the request and its pair.
struct Copy {
    arm: usize,
    pair: String,
    salt: Option<String>,
    req: Outgoing,
}

#[derive(Clone)]
pub struct Forward {
    state: Arc<State>,
}

impl Forward {
    pub fn new(state: Arc<State>) -> Forward {
        Forward { state }
    }
}

pub type ForwardFuture =
    Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

impl Service<Routed> for Forward {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = ForwardFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, r: Routed) -> ForwardFuture {
        let state = self.state.clone();
        Box::pin(async move { Ok(read_and_forward(state, r).await) })
    }
}

/// Read the body whole (it is needed to learn model/stream/max_tokens), bounded, then forward.
async fn read_and_forward(state: Arc<State>, r: Routed) -> Response<ProxyBody> {
    let Routed {
        ex,
        head,
        body,
        upstream_path,
        copy,
        deadlines,
    } = r;
    let max = state.config.limits.max_request_bytes;
    let declared = head
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return ex.reject(ProxyError::BodyTooLarge(max));
    }
    // NB: the whole body within `timeouts.body_read_ms` of the request's arrival; a body
    // dribbled slowly (slowloris) would otherwise hold its connection and admission slot forever.
    let body_read = state.config.timeouts.body_read;
    let collected = if body.is_end_stream() {
        Ok(Bytes::new())
    } else {
        let read = Limited::new(body, max).collect();
        match tokio::time::timeout_at(ex.t0() + body_read, read).await {
            Ok(c) => c.map(|c| c.to_bytes()),
            Err(_) => return ex.reject(ProxyError::BodyTimeout(body_read.as_millis())),
        }
    };
    let body = match collected {
        Ok(b) => b,
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return ex.reject(ProxyError::BodyTooLarge(max));
        }
        // The client stopped sending (went away or broke framing): nothing to forward.
        Err(_) => return ex.reject(ProxyError::BodyRead),
    };
    let mut path_and_query = upstream_path;
    if let Some(q) = head.uri.query() {
        path_and_query.push('?');
        path_and_query.push_str(q);
    }
    let req = Outgoing {
        method: head.method,
        path_and_query,
        headers: head.headers,
        body,
    };
    // The copy: mirror sends it once the primary answered with success, paired once the
    // primary's response ended well. NB: the direct arm never sees a request the gateway refused.
    let exp = &state.config.experiment;
    let salt = |pair: &str, arm: &str| exp.cache_salt.then(|| format!("{pair}-{arm}"));
    let Some((arm, pair)) = copy else {
        return forward(ex, req, None, None, deadlines).await;
    };
    let primary_salt = salt(&pair, &ex.route().name);
    let plan = Copy {
        salt: salt(&pair, &state.routes.get(arm).name),
        arm,
        pair,
        req: Outgoing {
            method: req.method.clone(),
            path_and_query: req.path_and_query.clone(),
            headers: req.headers.clone(),
            body: req.body.clone(),
        },
    };
    let mut ex = ex;
    if exp.mode == Mode::Paired {
        let st = state.clone();
        ex.after(Box::new(move |v| {
            if v.outcome == Outcome::Ok && (200..400).contains(&v.status) {
                spawn_copy(st, plan);
            }
        }));
        forward(ex, req, primary_salt, None, deadlines).await
    } else {
        forward(ex, req, primary_salt, Some(plan), deadlines).await
    }
}

/// Root cause text of an error chain, for diagnostics (never contains request data).
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = err;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Send one request to the exchange's route and hand back its metered response (or the
/// exchange's refusal).
async fn forward(
    mut ex: Exchange,
    req: Outgoing,
    salt: Option<String>,
    mirror: Option<Copy>,
    deadlines: Deadlines,
) -> Response<ProxyBody> {
    let route = ex.route().clone();
    let Some(target) = &route.target else {
        return ex.reject(ProxyError::NoRoute);
    };
    let rc = &target.config;
    // Upstream target: the route's base path, then the request's path (the route's scheme and
    // authority are the client's).
    let path = format!("{}{}", rc.base_path, req.path_and_query);
    if path.parse::<http::uri::PathAndQuery>().is_err() {
        return ex.reject(ProxyError::BadRequest("invalid request path"));
    }
    let mut body = req.body;
    ex.body_read(body.len());
    // The body is read before it is sent only when it is to be changed; otherwise while the
    // upstream works on it.
    let mut peek_later = rc.model_map.is_empty() && salt.is_none();
    if !peek_later {
        let info = openai::peek_request(&body);
        if let Some(mapped) = info.model.as_ref().and_then(|m| rc.model_map.get(m)) {
            if let Some(rewritten) = openai::rewrite_model(&body, mapped) {
                body = Bytes::from(rewritten);
                ex.facts().upstream_model = Some(mapped.clone());
            }
        }
        if let Some(salted) = salt
            .as_ref()
            .and_then(|s| openai::insert_field(&body, "cache_salt", s))
        {
            body = Bytes::from(salted);
        }
        note_request(&mut ex, info);
    }
    let mut headers = req.headers;
    for (name, value) in &rc.set_headers {
        headers.insert(name.clone(), value.expose().clone());
    }
    tap(&mut ex, &route, &mut headers, &body);
    // Opt-in: the upstream continues tokentap's span (otherwise the client's `traceparent`, if
    // any, goes upstream as it came).
    if ex
        .state()
        .config
        .otlp
        .as_ref()
        .is_some_and(|o| o.forward_traceparent)
    {
        if let Some(tp) = ex
            .facts()
            .trace
            .as_ref()
            .filter(|t| t.sampled())
            .map(|t| t.traceparent())
        {
            if let Ok(v) = HeaderValue::try_from(tp) {
                headers.insert(HeaderName::from_static("traceparent"), v);
            }
        }
    }
    let wait = deadlines.head_wait();
    let mut send = std::pin::pin!(target.client.send(&req.method, &path, &headers, &body));
    let sent = tokio::time::timeout(
        wait,
        std::future::poll_fn(|cx| {
            let r = send.as_mut().poll(cx);
            if r.is_pending() && peek_later {
                peek_later = false;
                note_request(&mut ex, openai::peek_request(&body));
            }
            r
        }),
    )
    .await;
    if peek_later {
        note_request(&mut ex, openai::peek_request(&body));
    }
    let name = route.name.clone();
    let resp = match sent {
        Err(_) => return ex.reject(ProxyError::Timeout(name, wait.as_millis())),
        Ok(Err(e)) => {
            let timeouts = ex.state().config.timeouts;
            let err = if e.is_timeout() {
                ProxyError::Timeout(name, timeouts.connect.as_millis())
            } else if e.is_connect() {
                ProxyError::Connect(name, root_cause(&e))
            } else {
                ProxyError::Upstream(name, root_cause(&e))
            };
            return ex.reject(err);
        }
        Ok(Ok((resp, at))) => {
            ex.sent(at);
            resp
        }
    };
    if let Some(plan) = mirror {
        if resp.status().is_success() {
            spawn_copy(ex.state().clone(), plan);
        }
    }
    ex.respond(resp, deadlines.total)
}

/// A gateway tap: the outer side waits for its inner side and tells the gateway its id (in
/// `x-tokentap-join`, which a gateway may forward); the inner side takes that header off and
/// joins by it, or by the body's fingerprint.
fn tap(ex: &mut Exchange, route: &Route, headers: &mut HeaderMap, body: &[u8]) {
    const HEADER: &str = crate::tags::TAP_HEADER;
    match &route.tap {
        None => {}
        Some(Tap::Outer(joiner)) => {
            ex.tap_outer(joiner, openai::fingerprint(body));
            if let Ok(v) = HeaderValue::from_str(&crate::tap::token(ex.id())) {
                headers.insert(HEADER, v);
            }
        }
        Some(Tap::Inner(joiner)) => {
            let token = headers
                .remove(HEADER)
                .and_then(|v| crate::tap::parse_token(v.as_bytes()));
            let fp = if token.is_none() {
                openai::fingerprint(body)
            } else {
                None
            };
            ex.tap_inner(joiner, token, fp);
        }
    }
}

/// What the request body says (model, stream, max_tokens), into the record.
fn note_request(ex: &mut Exchange, info: openai::RequestInfo) {
    let f = ex.facts();
    f.stream = info.stream;
    f.max_tokens = info.max_tokens;
    f.model = info.model;
}

/// Send the shadow copy of a request to the other arm, read its response to the end, measure it,
/// discard it. Bounded: over `max_shadow_in_flight` the copy is skipped and counted, never
/// queued. It runs on its own task: the client's response never waits for it.
fn spawn_copy(state: Arc<State>, plan: Copy) {
    let max = state.config.experiment.max_shadow_in_flight;
    let Some(slot) = Slot::take(&state.shared.shadows, max) else {
        state.shared.shadow_skipped.fetch_add(1, Ordering::Relaxed);
        return;
    };
    tokio::spawn(async move {
        let t0 = Instant::now();
        let route = state.routes.get(plan.arm).clone();
        let endpoint = plan.req.path_and_query.split('?').next().unwrap_or("");
        let mut facts = Exchange::facts_for(Stamp::now(), &plan.req.method, endpoint);
        facts.experiment = Some(Experiment {
            arm: route.name.clone(),
            pair_id: Some(plan.pair),
        });
        // The copy carries the primary's request id (the client's, or the one made for it).
        facts.request_id = super::ids::read(&plan.req.headers, &state.config.request_id.headers);
        let key = keys::client_key(&plan.req.headers);
        let deadlines = Deadlines::new(t0, &state.config.timeouts);
        let mut ex = Exchange::begin(state, route, t0, facts, key);
        ex.hold(slot);
        let resp = forward(ex, plan.req, plan.salt, None, deadlines).await;
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
    });
}
