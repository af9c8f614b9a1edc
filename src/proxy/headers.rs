//! Header hygiene between client and upstream: hop-by-hop headers removed both ways, nothing else
//! touched. Headers named in `Connection` are NOT removed (as nginx does): a client cannot make
//! the proxy strip `Authorization` or `x-api-key` by listing them there.

use http::header::{self, HeaderMap, HeaderName};

/// Hop-by-hop headers (RFC 9110 §7.6.1 and the de-facto `proxy-connection`, `keep-alive`).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name) || name == header::UPGRADE
}

/// Prepare client request headers for the upstream. `Host` goes (the client set it for us; the
/// upstream's comes from the config), and so does `Content-Length` (set again from the body
/// actually sent). `Expect` goes too: the body was read whole before forwarding.
pub fn request_headers(h: &mut HeaderMap) {
    for name in &HOP_BY_HOP {
        h.remove(name);
    }
    h.remove(header::UPGRADE);
    h.remove(header::HOST);
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::EXPECT);
}

/// Prepare upstream response headers for the client: only hop-by-hop headers go; framing is the
/// client connection's own (hyper sets it for HTTP/1.1; HTTP/2 forbids these headers).
pub fn response_headers(h: &mut HeaderMap) {
    for name in &HOP_BY_HOP {
        h.remove(name);
    }
    h.remove(header::UPGRADE);
}
