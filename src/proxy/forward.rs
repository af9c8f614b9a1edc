//! The innermost service: read the request body (bounded, within `timeouts.body_read_ms`), send
//! it (`send`), and, for experiment traffic, have its copy sent to the other arm (`copy`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tower::Service;

use super::copy::Copier;
use super::error::ProxyError;
use super::exchange::ProxyBody;
use super::routing::Routed;
use super::send::{send, Outgoing};
use super::state::State;
use crate::meter::Outcome;

#[derive(Clone)]
pub struct Forward {
    /// `limits.max_request_bytes`.
    max_request_bytes: usize,
    /// `timeouts.body_read_ms`.
    body_read: Duration,
    copier: Copier,
}

impl Forward {
    pub fn new(state: &Arc<State>) -> Forward {
        Forward {
            max_request_bytes: state.config.limits.max_request_bytes,
            body_read: state.config.timeouts.body_read,
            copier: Copier::new(state.clone()),
        }
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
        let this = self.clone();
        Box::pin(async move { Ok(this.read_and_forward(r).await) })
    }
}

impl Forward {
    /// Read the body whole (it is needed to learn model/stream/max_tokens), bounded, then send
    /// it, and its copy.
    async fn read_and_forward(self, r: Routed) -> Response<ProxyBody> {
        let Routed {
            mut ex,
            head,
            body,
            upstream_path,
            copy,
            due,
        } = r;
        let body = match self.read(ex.t0(), &head.headers, body).await {
            Ok(b) => b,
            Err(e) => return ex.reject(e),
        };
        let http::request::Parts {
            method,
            uri,
            headers,
            ..
        } = head;
        let mut path_and_query = upstream_path;
        if let Some(q) = uri.query() {
            path_and_query.push('?');
            path_and_query.push_str(q);
        }
        // NB: the URI shares hyper's read buffer with the head: not kept for the wait on the
        // upstream (`send` lets go of the headers and body likewise).
        drop(uri);
        let req = Outgoing {
            method,
            path_and_query,
            headers,
            body,
        };
        // NB: the direct arm never sees a request the gateway refused.
        let Some((arm, pair)) = copy else {
            return send(ex, req, None, due).await;
        };
        let primary_salt = self.copier.salt(&pair, &ex.route().name);
        let plan = self.copier.plan(arm, pair, &req);
        if self.copier.paired() {
            let copier = self.copier.clone();
            ex.after(Box::new(move |v| {
                if v.outcome == Outcome::Ok && (200..400).contains(&v.status) {
                    copier.spawn(plan);
                }
            }));
            return send(ex, req, primary_salt, due).await;
        }
        let resp = send(ex, req, primary_salt, due).await;
        // Mirror: once the upstream answered with success (tokentap's own answers never do).
        if resp.status().is_success() {
            self.copier.spawn(plan);
        }
        resp
    }

    /// The request body, whole, bounded by `limits.max_request_bytes` and read within
    /// `timeouts.body_read_ms` of the request's arrival at `t0`.
    async fn read(
        &self,
        t0: tokio::time::Instant,
        headers: &http::HeaderMap,
        body: hyper::body::Incoming,
    ) -> Result<Bytes, ProxyError> {
        let max = self.max_request_bytes;
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max as u64) {
            return Err(ProxyError::BodyTooLarge(max));
        }
        // NB: a body dribbled slowly (slowloris) would otherwise hold its connection and
        // admission slot forever.
        if body.is_end_stream() {
            return Ok(Bytes::new());
        }
        let read = Limited::new(body, max).collect();
        match tokio::time::timeout_at(t0 + self.body_read, read).await {
            Err(_) => Err(ProxyError::BodyTimeout(self.body_read.as_millis())),
            Ok(Ok(c)) => Ok(c.to_bytes()),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                Err(ProxyError::BodyTooLarge(max))
            }
            // The client stopped sending (went away or broke framing): nothing to forward.
            Ok(Err(_)) => Err(ProxyError::BodyRead),
        }
    }
}
