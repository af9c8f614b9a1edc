//! What a route changes in a request on its way upstream, as pure functions: the path under the
//! route's base path, the `model` string (`model_map`), the experiment's `cache_salt`, the
//! headers in `set_headers`, and tokentap's `traceparent` when the upstream continues its span.
//!
//! Never touches anything else: every other byte goes upstream as the client sent it.

use std::collections::HashMap;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::RouteConfig;
use crate::keys::Secret;
use crate::openai::{self, RequestInfo};

/// The upstream path and query: the route's base path, then the request's (prefix stripped);
/// `None` when that is no valid request path.
pub fn path(base_path: &str, path_and_query: &str) -> Option<String> {
    let path = format!("{base_path}{path_and_query}");
    path.parse::<http::uri::PathAndQuery>()
        .is_ok()
        .then_some(path)
}

/// Whether the body changes on its way: only then is it read before it is sent.
pub fn changes_body(rc: &RouteConfig, salt: Option<&str>) -> bool {
    !rc.model_map.is_empty() || salt.is_some()
}

/// A body after the route's changes.
pub struct Rewritten {
    pub body: Bytes,
    /// The model the upstream was asked for, when `model_map` changed it.
    pub upstream_model: Option<String>,
    /// What the client's body says (model, stream, max_tokens).
    pub info: RequestInfo,
}

/// The body with its `model` mapped (`model_map`) and `cache_salt` inserted (`salt`), each only
/// when the body has such a field to change (or lacks `cache_salt`); otherwise as it came.
pub fn body(body: Bytes, model_map: &HashMap<String, String>, salt: Option<&str>) -> Rewritten {
    let info = openai::peek_request(&body);
    let mut out = Rewritten {
        body,
        upstream_model: None,
        info,
    };
    if let Some(mapped) = out.info.model.as_ref().and_then(|m| model_map.get(m)) {
        if let Some(rewritten) = openai::rewrite_model(&out.body, mapped) {
            out.body = Bytes::from(rewritten);
            out.upstream_model = Some(mapped.clone());
        }
    }
    if let Some(salted) = salt.and_then(|s| openai::insert_field(&out.body, "cache_salt", s)) {
        out.body = Bytes::from(salted);
    }
    out
}

/// The route's `set_headers`, and `traceparent` (tokentap's span, when it is to be continued
/// upstream; otherwise the client's, if any, goes as it came).
pub fn headers(
    headers: &mut HeaderMap,
    set: &[(HeaderName, Secret<HeaderValue>)],
    traceparent: Option<String>,
) {
    for (name, value) in set {
        headers.insert(name.clone(), value.expose().clone());
    }
    if let Some(v) = traceparent.and_then(|tp| HeaderValue::try_from(tp).ok()) {
        headers.insert(HeaderName::from_static("traceparent"), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_route_fields_change() {
        let map = HashMap::from([("a".to_owned(), "b".to_owned())]);
        let raw = Bytes::from_static(br#"{"model":"a","stream":true}"#);
        let r = body(raw.clone(), &map, Some("p-x"));
        assert_eq!(
            &r.body[..],
            br#"{"cache_salt":"p-x","model":"b","stream":true}"#
        );
        assert_eq!(r.upstream_model.as_deref(), Some("b"));
        assert_eq!(r.info.model.as_deref(), Some("a"));
        assert!(r.info.stream);
        let same = body(raw.clone(), &HashMap::new(), None);
        assert_eq!(same.body, raw);
        assert_eq!(same.upstream_model, None);
        assert_eq!(path("/v1", "/chat?x=1").as_deref(), Some("/v1/chat?x=1"));
        assert_eq!(path("", "/a b"), None);
    }
}
