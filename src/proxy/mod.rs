//! The proxy service: per request, admit → read the body (bounded) → pick the route → forward
//! over the route's pooled client → hand back the upstream's response with a metered body.
//!
//! Never mutates forwarded bytes, except the fields a route's config rewrites (the `model`
//! string, the headers in `set_headers`). The response body is owned by the client's response:
//! when the client goes away the upstream request is dropped at once.

pub mod client;
pub mod error;
pub mod h1;
pub mod headers;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::config::Config;
use crate::config::Mode;
use crate::keys;
use crate::meter::body::{BodyError, End, Finalizer, Inflight, MeteredBody};
use crate::meter::{Ctx, Experiment, Meter, Stamp};
use crate::openai;
use crate::route::RouteTable;
use crate::sink::Sink;
use client::{UpstreamBody, UpstreamClient};
pub use error::ProxyError;

/// Everything requests share.
pub struct State {
    pub config: Arc<Config>,
    pub sink: Arc<Sink>,
    pub routes: RouteTable,
    pub clients: Vec<UpstreamClient>,
    pub limit: Arc<Semaphore>,
    /// Shadow copies in flight (experiment mirror/paired).
    pub shadow: Arc<Semaphore>,
    /// Arm choice and pair ids (seeded).
    pub rng: std::sync::Mutex<fastrand::Rng>,
}

impl State {
    /// Index of the pseudo-route that records requests no route matched.
    pub fn unrouted(&self) -> usize {
        self.config.routes.len()
    }
}

pin_project_lite::pin_project! {
    /// The body of every response the proxy returns.
    #[project = ProxyBodyProj]
    pub enum ProxyBody {
        Metered { #[pin] body: MeteredBody<UpstreamBody> },
        Local { #[pin] body: Full<Bytes> },
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.project() {
            ProxyBodyProj::Metered { body } => body.poll_frame(cx),
            ProxyBodyProj::Local { body } => match body.poll_frame(cx) {
                Poll::Ready(Some(Ok(f))) => Poll::Ready(Some(Ok(f))),
                Poll::Ready(Some(Err(never))) => match never {},
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Metered { body } => body.is_end_stream(),
            ProxyBody::Local { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Metered { body } => body.size_hint(),
            ProxyBody::Local { body } => body.size_hint(),
        }
    }
}

/// A response tokentap makes itself; its record is finished here.
fn local_error(mut fin: Finalizer, err: ProxyError) -> Response<ProxyBody> {
    let resp = err.to_response();
    if let Some(inf) = fin.get_mut() {
        inf.ctx.status = resp.status().as_u16();
    }
    fin.finish(End::Outcome(err.outcome(), err.record_text()));
    resp.map(|body| ProxyBody::Local { body })
}

/// Root cause text of an error chain, for diagnostics (never contains request data).
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = err;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// The client's request as received (hop-by-hop and route headers already removed).
struct UpstreamRequest {
    method: http::Method,
    /// Path (prefix stripped) and query to send upstream.
    upstream_pq: String,
    headers: http::HeaderMap,
}

pub async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<ProxyBody> {
    let t0 = Instant::now();
    let stamp = Stamp::now();
    let (mut parts, body) = req.into_parts();
    let cfg = &state.config;
    let exp = &cfg.experiment;

    // NB: the route header is removed whatever happens next: it never reaches an upstream.
    let forced = parts.headers.remove(&exp.route_header);
    let picked = state.routes.pick(parts.uri.path());
    let mut route_idx = picked.map(|(i, _)| i).unwrap_or_else(|| state.unrouted());
    let upstream_path = picked.map(|(_, p)| p.to_owned());
    // The key's fingerprint is made now only when an experiment decides by it; otherwise with
    // the record, off the request's path.
    let mut key = keys::client_key(&parts.headers);
    let in_experiment = picked.is_some() && exp.mode != Mode::Off && exp.arms.contains(&route_idx);
    let key_id = if forced.is_some() || in_experiment {
        key.take().map(|k| state.sink.keys.id_of(k.expose()))
    } else {
        None
    };

    // Experiment: which arm serves this request, and whether a copy goes to the other one.
    let mut experiment = None;
    let mut copy_to = None;
    let mut refuse = None;
    let direct_ok = key_id.as_ref().is_some_and(|k| exp.direct_keys.contains(k));
    if let (Some(v), true) = (forced.as_ref(), exp.allow_forcing && picked.is_some()) {
        let name = v.to_str().unwrap_or("");
        match exp
            .arms
            .iter()
            .copied()
            .find(|&i| cfg.routes[i].name == name)
        {
            None => {
                refuse = Some(ProxyError::BadRequest(
                    "the route header names no experiment arm",
                ))
            }
            Some(i) if i != exp.gateway && !direct_ok => refuse = Some(ProxyError::ForcedDirect),
            Some(i) => {
                route_idx = i;
                experiment = Some(Experiment {
                    arm: cfg.routes[i].name.clone(),
                    pair_id: None,
                });
            }
        }
    } else if in_experiment {
        let rng = state
            .rng
            .lock()
            .map(|mut r| (r.f64(), r.u64(..)))
            .unwrap_or((0.5, 0));
        match exp.mode {
            Mode::Split => {
                let w = exp.weights[0] / (exp.weights[0] + exp.weights[1]);
                let arm = if rng.0 < w { exp.arms[0] } else { exp.arms[1] };
                // NB: the direct arm is never a way around the gateway's authentication.
                route_idx = if arm != exp.gateway && !direct_ok {
                    exp.gateway
                } else {
                    arm
                };
                experiment = Some(Experiment {
                    arm: cfg.routes[route_idx].name.clone(),
                    pair_id: None,
                });
            }
            Mode::Mirror | Mode::Paired => {
                route_idx = exp.primary;
                let pair = (rng.0 < exp.sample).then(|| format!("{:016x}", rng.1));
                if let Some(pair) = &pair {
                    let other = if exp.arms[0] == exp.primary {
                        exp.arms[1]
                    } else {
                        exp.arms[0]
                    };
                    copy_to = Some((other, pair.clone()));
                }
                experiment = Some(Experiment {
                    arm: cfg.routes[route_idx].name.clone(),
                    pair_id: pair,
                });
            }
            Mode::Off => {}
        }
    }

    let in_flight = state.sink.admit(route_idx);
    let permit = state.limit.clone().try_acquire_owned().ok();
    let have_permit = permit.is_some();
    let ctx = Ctx {
        stamp,
        route: route_idx,
        experiment,
        method: parts.method.as_str().to_owned(),
        endpoint: parts.uri.path().chars().take(256).collect(),
        model: None,
        upstream_model: None,
        key_id,
        key,
        stream: false,
        max_tokens: None,
        request_bytes: 0,
        in_flight,
        status: 0,
        gateway_overhead_ms: None,
        bucket: None,
        concurrency: None,
    };
    let mut fin = Finalizer::new(Inflight {
        ctx,
        meter: Meter::new(t0),
        sink: state.sink.clone(),
        permit,
        after: None,
    });
    if !have_permit {
        return local_error(fin, ProxyError::Overloaded(cfg.limits.max_concurrent));
    }
    let Some(upstream_path) = upstream_path else {
        return local_error(fin, ProxyError::NoRoute);
    };
    if let Some(e) = refuse {
        return local_error(fin, e);
    }

    // Read the body, bounded: it is needed whole to learn model/stream/max_tokens.
    let max = cfg.limits.max_request_bytes;
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return local_error(fin, ProxyError::BodyTooLarge(max));
    }
    let collected = if body.is_end_stream() {
        Ok(Bytes::new())
    } else {
        Limited::new(body, max)
            .collect()
            .await
            .map(|c| c.to_bytes())
    };
    let body_bytes = match collected {
        Ok(b) => b,
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return local_error(fin, ProxyError::BodyTooLarge(max));
        }
        Err(_) => {
            // The client stopped sending (went away or broke framing): nothing to forward.
            if let Some(inf) = fin.get_mut() {
                inf.ctx.status = ProxyError::BodyRead.status().as_u16();
            }
            fin.finish(End::Outcome(
                crate::meter::Outcome::ClientCancelled,
                "request body not received".into(),
            ));
            return ProxyError::BodyRead
                .to_response()
                .map(|body| ProxyBody::Local { body });
        }
    };
    let mut upstream_pq = upstream_path;
    if let Some(q) = parts.uri.query() {
        upstream_pq.push('?');
        upstream_pq.push_str(q);
    }
    let req = UpstreamRequest {
        method: parts.method,
        upstream_pq,
        headers: parts.headers,
    };

    // The copy: mirror sends it once the primary answered with success, paired once the
    // primary's response ended well. NB: the direct arm never sees a request the gateway refused.
    let salt = |pair: &str, arm: usize| {
        exp.cache_salt
            .then(|| format!("{pair}-{}", cfg.routes[arm].name))
    };
    let mut mirror = None;
    let mut primary_salt = None;
    if let Some((arm, pair)) = copy_to {
        primary_salt = salt(&pair, route_idx);
        let plan = CopyPlan {
            salt: salt(&pair, arm),
            arm,
            pair,
            method: req.method.clone(),
            upstream_pq: req.upstream_pq.clone(),
            headers: req.headers.clone(),
            body: body_bytes.clone(),
        };
        if exp.mode == Mode::Paired {
            if let Some(inf) = fin.get_mut() {
                let st = state.clone();
                inf.after = Some(Box::new(
                    move |status: u16, outcome: crate::meter::Outcome| {
                        if outcome == crate::meter::Outcome::Ok && (200..400).contains(&status) {
                            spawn_copy(st, plan);
                        }
                    },
                ));
            }
        } else {
            mirror = Some(plan);
        }
    }
    forward(
        &state,
        route_idx,
        req,
        body_bytes,
        fin,
        t0,
        primary_salt,
        mirror,
    )
    .await
}

/// What the request body says (model, stream, max_tokens), into the record.
fn note_request(ctx: &mut Ctx, info: openai::RequestInfo) {
    ctx.stream = info.stream;
    ctx.max_tokens = info.max_tokens;
    ctx.model = info.model;
}

/// What a copy needs: the client's request as received, and its pair.
struct CopyPlan {
    salt: Option<String>,
    arm: usize,
    pair: String,
    method: http::Method,
    upstream_pq: String,
    headers: http::HeaderMap,
    body: Bytes,
}

/// Send one request to a route and hand back its metered response. The request's record is
/// finished by the returned body (or here, for a response tokentap makes itself).
#[allow(clippy::too_many_arguments)]
async fn forward(
    state: &Arc<State>,
    route_idx: usize,
    req: UpstreamRequest,
    mut body_bytes: Bytes,
    mut fin: Finalizer,
    t0: Instant,
    salt: Option<String>,
    mirror: Option<CopyPlan>,
) -> Response<ProxyBody> {
    let cfg = &state.config;
    let route = &cfg.routes[route_idx];
    // Upstream target: the route's base path, then the request's path (the route's scheme and
    // authority are the client's).
    let target = format!("{}{}", route.base_path, req.upstream_pq);
    if target.parse::<http::uri::PathAndQuery>().is_err() {
        return local_error(fin, ProxyError::BadRequest("invalid request path"));
    }
    if let Some(inf) = fin.get_mut() {
        inf.meter.timeline.body_read = Some(Instant::now());
        inf.ctx.request_bytes = body_bytes.len() as u64;
    }
    // The body is read before it is sent only when it is to be changed; otherwise while the
    // upstream works on it.
    let mut peek_later = route.model_map.is_empty() && salt.is_none();
    if let (false, Some(inf)) = (peek_later, fin.get_mut()) {
        let info = openai::peek_request(&body_bytes);
        if let Some(m) = &info.model {
            if let Some(mapped) = route.model_map.get(m) {
                if let Some(rewritten) = openai::rewrite_model(&body_bytes, mapped) {
                    body_bytes = Bytes::from(rewritten);
                    inf.ctx.upstream_model = Some(mapped.clone());
                }
            }
        }
        if let Some(salt) = &salt {
            if let Some(salted) = openai::insert_field(&body_bytes, "cache_salt", salt) {
                body_bytes = Bytes::from(salted);
            }
        }
        note_request(&mut inf.ctx, info);
    }
    let mut headers = req.headers;
    for (name, value) in &route.set_headers {
        headers.insert(name.clone(), value.expose().clone());
    }

    let total = cfg.timeouts.total;
    let deadline = (!total.is_zero()).then(|| t0 + total);
    let mut wait = cfg.timeouts.first_byte;
    if let Some(d) = deadline {
        wait = wait.min(d.saturating_duration_since(Instant::now()));
    }
    let upstream_name = route.name.clone();
    let mut send =
        std::pin::pin!(state.clients[route_idx].send(&req.method, &target, &headers, &body_bytes));
    let sent = tokio::time::timeout(
        wait,
        std::future::poll_fn(|cx| {
            let r = send.as_mut().poll(cx);
            if r.is_pending() && peek_later {
                peek_later = false;
                if let Some(inf) = fin.get_mut() {
                    note_request(&mut inf.ctx, openai::peek_request(&body_bytes));
                }
            }
            r
        }),
    )
    .await;
    if let (true, Some(inf)) = (peek_later, fin.get_mut()) {
        note_request(&mut inf.ctx, openai::peek_request(&body_bytes));
    }
    let resp = match sent {
        Err(_) => {
            return local_error(fin, ProxyError::Timeout(upstream_name, wait.as_millis()));
        }
        Ok(Err(e)) => {
            let err = if e.is_timeout() {
                ProxyError::Timeout(upstream_name, cfg.timeouts.connect.as_millis())
            } else if e.is_connect() {
                ProxyError::Connect(upstream_name, root_cause(&e))
            } else {
                ProxyError::Upstream(upstream_name, root_cause(&e))
            };
            return local_error(fin, err);
        }
        Ok(Ok(resp)) => resp,
    };

    let (mut rparts, rbody) = resp.into_parts();
    if let Some(plan) = mirror {
        if rparts.status.is_success() {
            spawn_copy(state.clone(), plan);
        }
    }
    let Some(mut inflight) = fin.take() else {
        // Unreachable: nothing above finished the request without returning.
        return Response::new(ProxyBody::Local {
            body: Full::new(Bytes::new()),
        });
    };
    inflight.meter.timeline.headers = Some(Instant::now());
    inflight.ctx.status = rparts.status.as_u16();
    inflight.ctx.gateway_overhead_ms = rparts
        .headers
        .get("x-litellm-overhead-duration-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite());
    inflight.meter.expect_body(
        rparts
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(HeaderValue::as_bytes),
        cfg.limits.max_sse_event_bytes,
        cfg.limits.max_response_json_bytes,
    );
    headers::response_headers(&mut rparts.headers);
    let body = MeteredBody::new(rbody, inflight, cfg.timeouts.idle, deadline);
    Response::from_parts(rparts, ProxyBody::Metered { body })
}

/// Send the shadow copy of a request to the other arm, read its response to the end, measure it,
/// discard it. Bounded: over `max_shadow_in_flight` the copy is skipped and counted, never
/// queued. It runs on its own task: the client's response never waits for it.
fn spawn_copy(state: Arc<State>, plan: CopyPlan) {
    let Ok(permit) = state.shadow.clone().try_acquire_owned() else {
        state
            .sink
            .shadow_skipped
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return;
    };
    tokio::spawn(async move {
        let t0 = Instant::now();
        let stamp = Stamp::now();
        let cfg = &state.config;
        let ctx = Ctx {
            stamp,
            route: plan.arm,
            experiment: Some(Experiment {
                arm: cfg.routes[plan.arm].name.clone(),
                pair_id: Some(plan.pair),
            }),
            method: plan.method.as_str().to_owned(),
            endpoint: plan
                .upstream_pq
                .split('?')
                .next()
                .unwrap_or("")
                .chars()
                .take(256)
                .collect(),
            model: None,
            upstream_model: None,
            key_id: None,
            key: keys::client_key(&plan.headers),
            stream: false,
            max_tokens: None,
            request_bytes: 0,
            in_flight: state.sink.admit(plan.arm),
            status: 0,
            gateway_overhead_ms: None,
            bucket: None,
            concurrency: None,
        };
        let fin = Finalizer::new(Inflight {
            ctx,
            meter: Meter::new(t0),
            sink: state.sink.clone(),
            permit: Some(permit),
            after: None,
        });
        let req = UpstreamRequest {
            method: plan.method,
            upstream_pq: plan.upstream_pq,
            headers: plan.headers,
        };
        let resp = forward(&state, plan.arm, req, plan.body, fin, t0, plan.salt, None).await;
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
    });
}

/// The proxy as hyper's service: one boxed future per request, no adapter in between.
#[derive(Clone)]
pub struct Proxy(pub Arc<State>);

impl hyper::service::Service<Request<Incoming>> for Proxy {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move { Ok(handle(state, req).await) })
    }
}
