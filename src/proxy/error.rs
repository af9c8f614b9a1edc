//! The proxy's errors: [`ProxyError`], the responses tokentap makes itself, in OpenAI's error
//! shape `{"error":{"message","type","param":null,"code"}}`; and [`BodyError`], what cuts a
//! proxied response body. Messages are fixed texts plus error kinds — never a header value, a
//! key or a request body. What each means for the record is decided in `ending::verdict`.

use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;

use super::client::UpstreamError;

/// Errors the proxied response body yields to the client connection (which then cuts it).
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("upstream body error: {0}")]
    Upstream(#[from] UpstreamError),
    #[error("upstream sent nothing for {0:?}")]
    Idle(Duration),
    #[error("response exceeded the total time limit")]
    Total,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("request body is larger than the limit of {0} bytes")]
    BodyTooLarge(usize),
    #[error("request body could not be read")]
    BodyRead,
    #[error("request body not received within {0} ms")]
    BodyTimeout(u128),
    #[error("no route for this path")]
    NoRoute,
    #[error("tokentap is at its concurrent request limit ({0}); retry later")]
    Overloaded(usize),
    #[error("the request could not be forwarded: {0}")]
    BadRequest(&'static str),
    #[error("this key may not force the direct arm: it is not in experiment.direct_keys")]
    ForcedDirect,
    #[error("route {0} serves only its gateway: neither this key nor this address is in its behind_keys or behind_sources")]
    NotTheGateway(String),
    #[error("route {0} sends its own credential upstream and admits only listed clients: this key or address is not in its admit_keys or admit_sources")]
    NotAdmitted(String),
    #[error("upstream {0} unreachable: {1}")]
    Connect(String, String),
    #[error("upstream {0} failed before responding: {1}")]
    Upstream(String, String),
    #[error("upstream {0} did not respond within {1} ms")]
    Timeout(String, u128),
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::BodyTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::BodyRead | ProxyError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ProxyError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::ForcedDirect
            | ProxyError::NotTheGateway(_)
            | ProxyError::NotAdmitted(_) => StatusCode::FORBIDDEN,
            ProxyError::Overloaded(_) => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::Connect(..) | ProxyError::Upstream(..) => StatusCode::BAD_GATEWAY,
            ProxyError::Timeout(..) => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The OpenAI-shaped error `type` and `code`.
    pub fn kind(&self) -> (&'static str, &'static str) {
        match self {
            ProxyError::BodyTooLarge(_) => ("invalid_request_error", "request_too_large"),
            ProxyError::BodyRead => ("invalid_request_error", "bad_request_body"),
            ProxyError::BodyTimeout(_) => ("invalid_request_error", "request_body_timeout"),
            ProxyError::BadRequest(_) => ("invalid_request_error", "bad_request"),
            ProxyError::NoRoute => ("invalid_request_error", "no_route"),
            ProxyError::ForcedDirect => ("permission_error", "forced_direct_not_allowed"),
            ProxyError::NotTheGateway(_) => ("permission_error", "not_the_gateway"),
            ProxyError::NotAdmitted(_) => ("permission_error", "not_admitted"),
            ProxyError::Overloaded(_) => ("server_error", "overloaded"),
            ProxyError::Connect(..) => ("upstream_error", "upstream_unreachable"),
            ProxyError::Upstream(..) => ("upstream_error", "upstream_failed"),
            ProxyError::Timeout(..) => ("upstream_error", "upstream_timeout"),
        }
    }

    pub fn to_response(&self) -> Response<Full<Bytes>> {
        let (kind, code) = self.kind();
        let body = serde_json::json!({
            "error": {"message": self.to_string(), "type": kind, "param": null, "code": code}
        });
        let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
        *resp.status_mut() = self.status();
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        if matches!(self, ProxyError::Overloaded(_)) {
            resp.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
        }
        resp
    }
}
