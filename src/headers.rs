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

/// Whether a client request header goes on to the upstream (checked while the upstream head is
/// written, one pass). Hop-by-hop headers stay behind; so do `Host` (the client set it for us;
/// the upstream's comes from the config — routes cannot set it), `Content-Length` (set again from
/// the body actually sent) and `Expect` (the body was read whole before forwarding).
pub fn forwarded(name: &HeaderName) -> bool {
    !(is_hop_by_hop(name)
        || name == header::HOST
        || name == header::CONTENT_LENGTH
        || name == header::EXPECT)
}

/// Prepare upstream response headers for the client: only hop-by-hop headers go; framing is the
/// client connection's own (hyper sets it for HTTP/1.1; HTTP/2 forbids these headers).
pub fn response_headers(h: &mut HeaderMap) {
    for name in &HOP_BY_HOP {
        h.remove(name);
    }
    h.remove(header::UPGRADE);
}
