//! The proxy service: per request, admit → read the body (bounded) → pick the route → forward
//! over the route's pooled client → hand back the upstream's response with a metered body.
//!
//! Never mutates forwarded bytes, except the fields a route's config rewrites (the `model`
//! string, the headers in `set_headers`). The response body is owned by the client's response:
//! when the client goes away the upstream request is dropped at once.

pub mod client;
pub mod error;
pub mod headers;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::config::Config;
use crate::keys::KeyIdentity;
use crate::meter::body::{BodyError, End, Finalizer, Inflight, MeteredBody};
use crate::meter::{Ctx, Meter};
use crate::openai;
use crate::route::RouteTable;
use crate::sink::Sink;
use client::UpstreamClient;
pub use error::ProxyError;

/// Everything requests share.
pub struct State {
    pub config: Arc<Config>,
    pub sink: Arc<Sink>,
    pub routes: RouteTable,
    pub clients: Vec<UpstreamClient>,
    pub keys: KeyIdentity,
    pub limit: Arc<Semaphore>,
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
        Metered { #[pin] body: MeteredBody<Incoming> },
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

/// Does the chain of `err`'s sources contain an I/O timeout?
fn is_timeout(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        cur = e.source();
    }
    false
}

/// Root cause text of an error chain, for diagnostics (never contains request data).
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = err;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

pub async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<ProxyBody> {
    let t0 = Instant::now();
    let (ts, id) = Sink::stamp();
    let (mut parts, body) = req.into_parts();
    let cfg = &state.config;

    let picked = state.routes.pick(parts.uri.path());
    let route_idx = picked.map(|(i, _)| i).unwrap_or_else(|| state.unrouted());
    let in_flight = state.sink.admit(route_idx);
    let permit = state.limit.clone().try_acquire_owned().ok();
    let have_permit = permit.is_some();
    let ctx = Ctx {
        id,
        ts,
        route: route_idx,
        experiment: None,
        method: parts.method.as_str().to_owned(),
        endpoint: parts.uri.path().chars().take(256).collect(),
        model: None,
        upstream_model: None,
        key_id: state.keys.key_id(&parts.headers),
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
    });
    if !have_permit {
        return local_error(fin, ProxyError::Overloaded(cfg.limits.max_concurrent));
    }
    let Some((_, upstream_path)) = picked else {
        return local_error(fin, ProxyError::NoRoute);
    };
    let route = &cfg.routes[route_idx];

    // Upstream URI: the route's scheme and authority, its base path, then the request's path.
    let mut pq = String::with_capacity(route.base_path.len() + parts.uri.path().len() + 16);
    pq.push_str(&route.base_path);
    pq.push_str(upstream_path);
    if let Some(q) = parts.uri.query() {
        pq.push('?');
        pq.push_str(q);
    }
    let mut uri_parts = route.upstream.clone().into_parts();
    uri_parts.path_and_query = match pq.parse() {
        Ok(p) => Some(p),
        Err(_) => return local_error(fin, ProxyError::BadRequest("invalid request path")),
    };
    let Ok(uri) = Uri::from_parts(uri_parts) else {
        return local_error(fin, ProxyError::BadRequest("invalid request path"));
    };

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
    let mut body_bytes = match Limited::new(body, max).collect().await {
        Ok(c) => c.to_bytes(),
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
    let info = openai::peek_request(&body_bytes);
    if let Some(inf) = fin.get_mut() {
        inf.meter.timeline.body_read = Some(Instant::now());
        inf.ctx.request_bytes = body_bytes.len() as u64;
        inf.ctx.stream = info.stream;
        inf.ctx.max_tokens = info.max_tokens;
        if let Some(m) = &info.model {
            if let Some(mapped) = route.model_map.get(m) {
                if let Some(rewritten) = openai::rewrite_model(&body_bytes, mapped) {
                    body_bytes = Bytes::from(rewritten);
                    inf.ctx.upstream_model = Some(mapped.clone());
                }
            }
        }
        inf.ctx.model = info.model;
    }

    headers::request_headers(&mut parts.headers);
    for (name, value) in &route.set_headers {
        parts.headers.insert(name.clone(), value.expose().clone());
    }
    let mut up_req = Request::new(Full::new(body_bytes));
    *up_req.method_mut() = parts.method;
    *up_req.uri_mut() = uri;
    *up_req.headers_mut() = parts.headers;

    let total = cfg.timeouts.total;
    let deadline = (!total.is_zero()).then(|| t0 + total);
    let mut wait = cfg.timeouts.first_byte;
    if let Some(d) = deadline {
        wait = wait.min(d.saturating_duration_since(Instant::now()));
    }
    let upstream_name = route.name.clone();
    let sent = tokio::time::timeout(wait, state.clients[route_idx].request(up_req)).await;
    let resp = match sent {
        Err(_) => {
            return local_error(fin, ProxyError::Timeout(upstream_name, wait.as_millis()));
        }
        Ok(Err(e)) => {
            let err = if e.is_connect() && is_timeout(&e) {
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

/// The proxy as a `tower::Service`, for hyper's server through `TowerToHyperService`.
#[derive(Clone)]
pub struct Proxy(pub Arc<State>);

impl tower::Service<Request<Incoming>> for Proxy {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move { Ok(handle(state, req).await) })
    }
}
