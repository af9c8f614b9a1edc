//! One request sent to its exchange's route: the route's rewrites (`rewrite`), the gateway tap's
//! header, the pooled client's send within the first-byte deadline, and the upstream's response
//! handed back metered (or the exchange's refusal). The primary request and the experiment's
//! copy both go through [`send`].
//!
//! Never mutates forwarded bytes, except the fields a route's config rewrites (the `model`
//! string, the headers in `set_headers`, the experiment's `cache_salt`).

use std::future::Future;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response};

use super::due::Due;
use super::error::ProxyError;
use super::exchange::{Exchange, ProxyBody};
use super::rewrite;
use super::routes::{Route, Tap};
use crate::openai;

/// What goes upstream: the client's request as received (hop-by-hop and route headers already
/// removed), the route's prefix stripped.
pub struct Outgoing {
    pub method: Method,
    /// Path (prefix stripped) and query.
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Send one request to the exchange's route (with `salt` as its `cache_salt`) and hand back its
/// metered response, or the exchange's refusal.
pub async fn send(
    mut ex: Exchange,
    req: Outgoing,
    salt: Option<String>,
    due: Due,
) -> Response<ProxyBody> {
    let route = ex.route().clone();
    let Some(target) = &route.target else {
        return ex.reject(ProxyError::NoRoute);
    };
    let rc = &target.config;
    let Some(path) = rewrite::path(&rc.base_path, &req.path_and_query) else {
        return ex.reject(ProxyError::BadRequest("invalid request path"));
    };
    let mut body = req.body;
    ex.body_read(body.len());
    // The body is read before it is sent only when it is to be changed; otherwise while the
    // upstream works on it.
    let peek_later = !rewrite::changes_body(rc, salt.as_deref());
    if !peek_later {
        let r = rewrite::body(body, &rc.model_map, salt.as_deref());
        body = r.body;
        if let Some(m) = r.upstream_model {
            ex.model_mapped(m);
        }
        ex.request_says(r.info);
    }
    let mut headers = req.headers;
    let traceparent = ex.traceparent();
    rewrite::headers(&mut headers, &rc.set_headers, traceparent);
    tap(&mut ex, &route, &mut headers, &body);
    let wait = due.head_wait();
    let mut send = std::pin::pin!(target.client.send(&req.method, &path, &headers, &body));
    // NB: the request is in its wire form now. The client's head and body (which share hyper's
    // read buffer) are let go before the wait on the upstream: the body is kept only until it
    // is peeked at, once the request is written.
    drop(headers);
    let mut unpeeked = peek_later.then_some(body);
    let sent = tokio::time::timeout(
        wait,
        std::future::poll_fn(|cx| {
            let r = send.as_mut().poll(cx);
            if r.is_pending() {
                if let Some(body) = unpeeked.take() {
                    ex.request_says(openai::peek_request(&body));
                }
            }
            r
        }),
    )
    .await;
    if let Some(body) = unpeeked.take() {
        ex.request_says(openai::peek_request(&body));
    }
    let name = route.name.clone();
    match sent {
        Err(_) => ex.reject(ProxyError::Timeout(name, wait.as_millis())),
        Ok(Err(e)) => {
            let connect = ex.connect_timeout();
            let err = if e.is_timeout() {
                ProxyError::Timeout(name, connect.as_millis())
            } else if e.is_connect() {
                ProxyError::Connect(name, root_cause(&e))
            } else {
                ProxyError::Upstream(name, root_cause(&e))
            };
            ex.reject(err)
        }
        Ok(Ok((resp, at))) => {
            ex.sent(at);
            ex.respond(resp, due.total)
        }
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

/// A gateway tap: the outer side waits for its inner side and tells the gateway its id (in
/// `x-tokentap-join`, which a gateway may forward); the inner side joins by the id it received
/// (taken off every request as it arrived, kept only from a trusted sender: `routing`), or by
/// the body's fingerprint. A route with `join_header` tells the gateway its id too, for a
/// tokentap behind it in another process (the report joins the two logs).
fn tap(ex: &mut Exchange, route: &Route, headers: &mut HeaderMap, body: &[u8]) {
    const HEADER: &str = crate::tags::TAP_HEADER;
    let send_id = route.target.as_ref().is_some_and(|t| t.config.join.header);
    if send_id {
        if let Ok(v) = HeaderValue::from_str(&crate::tap::token(ex.id())) {
            headers.insert(HEADER, v);
            ex.join_sent();
        }
    }
    match &route.tap {
        None => {}
        Some(Tap::Outer(joiner)) => {
            ex.tap_outer(joiner, openai::fingerprint(body));
            if let Ok(v) = HeaderValue::from_str(&crate::tap::token(ex.id())) {
                headers.insert(HEADER, v);
            }
        }
        Some(Tap::Inner(joiner)) => {
            // NB: the header itself was taken off on arrival; it never reaches the engine.
            let token = ex.join_id();
            let fp = if token.is_none() {
                openai::fingerprint(body)
            } else {
                None
            };
            ex.tap_inner(joiner, token, fp);
        }
    }
}
