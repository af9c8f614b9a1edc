//! HTTP/1.1 framing on the upstream side: the request head, the response head, and an
//! incremental body decoder (content-length, chunked, read-to-close).
//!
//! The decoder takes whatever bytes one or more reads brought and appends the body bytes in them
//! to one output buffer, so a burst of chunks leaves as one frame — the per-chunk work is a
//! size-line parse and a copy, never a wake-up or an allocation.

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

/// Largest response head accepted.
pub const MAX_HEAD: usize = 256 * 1024;
/// Most header fields in a response head.
const MAX_HEADERS: usize = 256;
/// Longest chunk-size line (extensions included) or trailer line.
const MAX_LINE: usize = 8 * 1024;
/// Largest trailer section.
const MAX_TRAILERS: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum H1Error {
    #[error("malformed response head: {0}")]
    Head(httparse::Error),
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("invalid header in the response head")]
    Header,
    #[error("invalid or conflicting content-length")]
    ContentLength,
    #[error("unsupported transfer-encoding")]
    TransferEncoding,
    #[error("malformed chunk size line")]
    ChunkSize,
    #[error("malformed chunk terminator")]
    ChunkEnd,
    #[error("trailer section too large or malformed")]
    Trailers,
}

/// Serialize a request head for the upstream: the client's headers less the hop-by-hop ones
/// (see `headers::forwarded`), `Host` from the route, and a `Content-Length` that is the body's
/// actual length, sent when there is a body or the method carries one.
pub fn request_head(
    method: &Method,
    path_and_query: &str,
    host: &str,
    headers: &HeaderMap,
    body_len: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + headers.len() * 48);
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path_and_query.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    out.extend_from_slice(b"host: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if !crate::headers::forwarded(name) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if body_len > 0 || matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(body_len.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// A parsed response head.
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    /// HTTP/1.1 (`true`) or HTTP/1.0.
    pub http11: bool,
    pub headers: HeaderMap,
    /// Bytes of the input the head took.
    pub len: usize,
}

/// Parse a response head at the start of `buf`; `Ok(None)` means more bytes are needed.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, H1Error> {
    let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut raw);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(H1Error::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(H1Error::Head(e)),
    };
    let status = resp
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or(H1Error::Head(httparse::Error::Status))?;
    let mut headers = HeaderMap::with_capacity(resp.headers.len());
    for h in resp.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| H1Error::Header)?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| H1Error::Header)?;
        headers.append(name, value);
    }
    Ok(Some(Head {
        status,
        http11: resp.version == Some(1),
        headers,
        len,
    }))
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 204, 304) or `Content-Length: 0`.
    Empty,
    Length(u64),
    Chunked,
    /// Until the upstream closes the connection.
    Close,
}

/// Does a comma-separated header list contain `token` (case-insensitive)?
fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.to_str()
            .is_ok_and(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    })
}

/// The body framing of a response to `method`, and whether the connection may be reused after it.
/// A response with both `Transfer-Encoding` and `Content-Length` is read as chunked and the
/// connection is not reused (RFC 9112 §6.3: it may be a smuggling attempt).
pub fn framing(method: &Method, head: &Head) -> Result<(Framing, bool), H1Error> {
    let h = &head.headers;
    let mut reuse = if head.http11 {
        !has_token(h, &header::CONNECTION, "close")
    } else {
        has_token(h, &header::CONNECTION, "keep-alive")
    };
    if *method == Method::HEAD
        || head.status.is_informational()
        || head.status == StatusCode::NO_CONTENT
        || head.status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::Empty, reuse));
    }
    if h.contains_key(header::TRANSFER_ENCODING) {
        if h.contains_key(header::CONTENT_LENGTH) {
            reuse = false;
        }
        // Chunked must be the final coding; anything else is read until close.
        let last = h
            .get_all(header::TRANSFER_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|s| s.split(','))
            .map(str::trim)
            .rfind(|t| !t.is_empty());
        return match last {
            Some(t) if t.eq_ignore_ascii_case("chunked") => Ok((Framing::Chunked, reuse)),
            Some(_) => Ok((Framing::Close, false)),
            None => Err(H1Error::TransferEncoding),
        };
    }
    let mut length: Option<u64> = None;
    for v in h.get_all(header::CONTENT_LENGTH) {
        for part in v.to_str().map_err(|_| H1Error::ContentLength)?.split(',') {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(H1Error::ContentLength);
            }
            let n: u64 = part.parse().map_err(|_| H1Error::ContentLength)?;
            if length.is_some_and(|l| l != n) {
                return Err(H1Error::ContentLength);
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => (Framing::Empty, reuse),
        Some(n) => (Framing::Length(n), reuse),
        None => (Framing::Close, false),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    Size,
    Data(u64),
    DataEnd,
    Trailer,
    Close,
    Done,
}

/// Incremental body decoder.
///
/// NB: the trailers, which few responses have, are boxed: the decoder is held inline by every
/// response body for its life (docs/overhead.md, "Memory per stream").
#[derive(Debug)]
pub struct Decoder {
    state: State,
    trailers: Option<Box<HeaderMap>>,
    trailer_bytes: usize,
}

impl Decoder {
    pub fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Empty => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Size,
            Framing::Close => State::Close,
        };
        Decoder {
            state,
            trailers: None,
            trailer_bytes: 0,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Body bytes still expected, when the framing says.
    pub fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    pub fn has_trailers(&self) -> bool {
        self.trailers.is_some()
    }

    pub fn take_trailers(&mut self) -> Option<HeaderMap> {
        self.trailers.take().map(|t| *t)
    }

    /// The upstream closed the connection: fine only for read-to-close bodies (or after the end).
    pub fn on_eof(&mut self) -> bool {
        match self.state {
            State::Close | State::Done => {
                self.state = State::Done;
                true
            }
            _ => false,
        }
    }

    /// Decode as much of `input` as possible, appending body bytes to `out`. Returns how many
    /// input bytes were consumed; stops at the end of the body (bytes after it are left).
    pub fn decode(&mut self, input: &[u8], out: &mut BytesMut) -> Result<usize, H1Error> {
        let mut pos = 0;
        while pos < input.len() {
            let rest = &input[pos..];
            match self.state {
                State::Done => break,
                State::Close => {
                    out.extend_from_slice(rest);
                    pos = input.len();
                }
                State::Length(n) => {
                    let take = (n.min(rest.len() as u64)) as usize;
                    out.extend_from_slice(&rest[..take]);
                    pos += take;
                    let left = n - take as u64;
                    self.state = if left == 0 {
                        State::Done
                    } else {
                        State::Length(left)
                    };
                }
                State::Data(n) => {
                    let take = (n.min(rest.len() as u64)) as usize;
                    out.extend_from_slice(&rest[..take]);
                    pos += take;
                    let left = n - take as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                }
                State::DataEnd => {
                    // CRLF after the data (a bare LF is tolerated).
                    if rest[0] == b'\n' {
                        pos += 1;
                        self.state = State::Size;
                    } else if rest[0] == b'\r' {
                        if rest.len() < 2 {
                            break;
                        }
                        if rest[1] != b'\n' {
                            return Err(H1Error::ChunkEnd);
                        }
                        pos += 2;
                        self.state = State::Size;
                    } else {
                        return Err(H1Error::ChunkEnd);
                    }
                }
                State::Size => {
                    let Some(nl) = memchr::memchr(b'\n', rest) else {
                        if rest.len() > MAX_LINE {
                            return Err(H1Error::ChunkSize);
                        }
                        break;
                    };
                    // NB: the bound holds however the reads split the line.
                    if nl > MAX_LINE {
                        return Err(H1Error::ChunkSize);
                    }
                    let size = chunk_size(&rest[..nl])?;
                    pos += nl + 1;
                    self.state = if size == 0 {
                        State::Trailer
                    } else {
                        State::Data(size)
                    };
                }
                State::Trailer => {
                    let Some(nl) = memchr::memchr(b'\n', rest) else {
                        if rest.len() > MAX_LINE {
                            return Err(H1Error::Trailers);
                        }
                        break;
                    };
                    if nl > MAX_LINE {
                        return Err(H1Error::Trailers);
                    }
                    let line = rest[..nl].strip_suffix(b"\r").unwrap_or(&rest[..nl]);
                    pos += nl + 1;
                    self.trailer_bytes += nl + 1;
                    if self.trailer_bytes > MAX_TRAILERS {
                        return Err(H1Error::Trailers);
                    }
                    if line.is_empty() {
                        self.state = State::Done;
                    } else {
                        self.trailer(line)?;
                    }
                }
            }
        }
        Ok(pos)
    }

    /// One trailer field. Fields that would change framing or routing are dropped.
    fn trailer(&mut self, line: &[u8]) -> Result<(), H1Error> {
        let colon = memchr::memchr(b':', line).ok_or(H1Error::Trailers)?;
        let name = HeaderName::from_bytes(&line[..colon]).map_err(|_| H1Error::Trailers)?;
        let value = line[colon + 1..].trim_ascii();
        let value = HeaderValue::from_bytes(value).map_err(|_| H1Error::Trailers)?;
        let forbidden = [
            header::CONTENT_LENGTH,
            header::TRANSFER_ENCODING,
            header::HOST,
            header::CONNECTION,
            header::TRAILER,
            header::TE,
        ];
        if !forbidden.contains(&name) {
            self.trailers
                .get_or_insert_with(Box::default)
                .append(name, value);
        }
        Ok(())
    }
}

/// The size in a chunk-size line (without its LF): hex digits, optional whitespace and
/// extensions, optional CR.
fn chunk_size(line: &[u8]) -> Result<u64, H1Error> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if digits == 0 || digits > 15 {
        return Err(H1Error::ChunkSize);
    }
    let tail = line[digits..].trim_ascii_start();
    if !(tail.is_empty() || tail[0] == b';') {
        return Err(H1Error::ChunkSize);
    }
    let mut n = 0u64;
    for &b in &line[..digits] {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => b - b'A' + 10,
        };
        n = n * 16 + u64::from(d);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(framing: Framing, input: &[u8], split: usize) -> (Vec<u8>, Decoder, usize) {
        let mut d = Decoder::new(framing);
        let mut out = BytesMut::new();
        let mut buf = Vec::new();
        let mut used = 0;
        for part in input.chunks(split.max(1)) {
            buf.extend_from_slice(part);
            let n = d.decode(&buf, &mut out).unwrap();
            used += n;
            buf.drain(..n);
        }
        (out.to_vec(), d, used)
    }

    #[test]
    fn chunked_at_every_split() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nx-t: 1\r\n\r\nNEXT";
        for split in 1..wire.len() {
            let (out, mut d, used) = decode_all(Framing::Chunked, wire, split);
            assert_eq!(out, b"hello, world", "split {split}");
            assert!(d.is_done());
            assert_eq!(used, wire.len() - 4, "the next response's bytes are left");
            assert_eq!(d.take_trailers().unwrap()["x-t"], "1");
        }
    }

    #[test]
    fn chunked_errors() {
        for bad in [
            &b"zz\r\n"[..],
            b"5\r\nhelloXX",
            b"12345678901234567\r\n",
            b"5 x\r\n",
        ] {
            let mut d = Decoder::new(Framing::Chunked);
            assert!(d.decode(bad, &mut BytesMut::new()).is_err(), "{bad:?}");
        }
        let mut d = Decoder::new(Framing::Chunked);
        d.decode(b"5\r\nhel", &mut BytesMut::new()).unwrap();
        assert!(!d.on_eof(), "EOF inside a chunk is an error");
    }

    #[test]
    fn length_and_close() {
        let (out, d, used) = decode_all(Framing::Length(5), b"helloEXTRA", 3);
        assert_eq!(
            (out.as_slice(), d.is_done(), used),
            (&b"hello"[..], true, 5)
        );
        let (out, mut d, _) = decode_all(Framing::Close, b"all of it", 2);
        assert_eq!(out, b"all of it");
        assert!(!d.is_done() && d.on_eof() && d.is_done());
    }

    #[test]
    fn heads_and_framing() {
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-le")
            .unwrap()
            .is_none());
        let h = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\nrest")
            .unwrap()
            .unwrap();
        assert_eq!((h.status.as_u16(), h.len), (200, 55));
        assert_eq!(
            framing(&Method::POST, &h).unwrap(),
            (Framing::Chunked, true)
        );
        assert_eq!(framing(&Method::HEAD, &h).unwrap(), (Framing::Empty, true));
        let h = parse_head(
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            framing(&Method::POST, &h).unwrap(),
            (Framing::Chunked, false)
        );
        let h = parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(framing(&Method::POST, &h).is_err());
        let h = parse_head(b"HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            framing(&Method::GET, &h).unwrap(),
            (Framing::Length(3), false)
        );
        let h = parse_head(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(framing(&Method::GET, &h).unwrap(), (Framing::Close, false));
        assert!(parse_head(b"HTTP/1.1 2000 OK\r\n\r\n").is_err());
    }

    #[test]
    fn request_heads() {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer x"));
        // What the client sent for its own hop never reaches the upstream.
        for (n, v) in [
            ("host", "proxy:8080"),
            ("connection", "keep-alive, authorization"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("content-length", "999"),
            ("expect", "100-continue"),
            ("te", "trailers"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic x"),
        ] {
            h.insert(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        let r = request_head(&Method::POST, "/v1/chat", "up:8000", &h, 12);
        assert_eq!(
            std::str::from_utf8(&r).unwrap(),
            "POST /v1/chat HTTP/1.1\r\nhost: up:8000\r\nauthorization: Bearer x\r\ncontent-length: 12\r\n\r\n"
        );
        let r = request_head(&Method::GET, "/v1/models", "up", &HeaderMap::new(), 0);
        assert_eq!(
            std::str::from_utf8(&r).unwrap(),
            "GET /v1/models HTTP/1.1\r\nhost: up\r\n\r\n"
        );
    }
}
