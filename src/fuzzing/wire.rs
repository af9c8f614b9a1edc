//! The upstream client's HTTP/1.1 codec: the response head parser and the body decoder.

use bytes::BytesMut;
use http::Method;

use crate::proxy::h1::{framing, parse_head, Decoder, Framing, MAX_HEAD};

/// A response head: parsed whole or from any shorter prefix, the answer agrees; the framing of
/// a parsed head is decided without a panic and never reuses a connection it cannot trust.
pub fn http_head(data: &[u8]) {
    let whole = parse_head(data);
    if let Ok(Some(head)) = &whole {
        assert!(head.len <= data.len() && head.len > 0);
        // The head alone parses to the same head; a prefix of it is not complete yet.
        let again = parse_head(&data[..head.len]);
        assert!(
            matches!(&again, Ok(Some(h)) if h.status == head.status && h.headers == head.headers && h.len == head.len),
            "{again:?}"
        );
        for cut in [head.len / 2, head.len - 1] {
            let part = parse_head(&data[..cut]);
            assert!(
                matches!(part, Ok(None) | Err(_)),
                "a prefix of {cut} bytes parsed as complete: {part:?}"
            );
        }
        for method in [Method::GET, Method::POST, Method::HEAD] {
            let Ok((f, reuse)) = framing(&method, head) else {
                continue;
            };
            if f == Framing::Close {
                assert!(!reuse, "read-to-close and reused");
            }
            if let Framing::Length(n) = f {
                assert!(n > 0);
            }
            let both = head.headers.contains_key(http::header::TRANSFER_ENCODING)
                && head.headers.contains_key(http::header::CONTENT_LENGTH);
            if both && method != Method::HEAD && f != Framing::Empty {
                assert!(!reuse, "TE and CL together, connection reused");
            }
        }
    }
    if let Ok(None) = whole {
        assert!(data.len() < MAX_HEAD);
    }
}

/// What a decoder made of some input, fed one way or another.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    body: Vec<u8>,
    used: usize,
    done: bool,
    /// The error's text, if decoding failed.
    error: Option<String>,
    trailers: Option<Vec<(String, Vec<u8>)>>,
}

/// Feed `pieces` as reads arrive: what is not consumed stays in the buffer for the next read.
fn decode<'a>(framing: Framing, pieces: impl IntoIterator<Item = &'a [u8]>) -> Decoded {
    let mut d = Decoder::new(framing);
    let mut out = BytesMut::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut used = 0;
    let mut error = None;
    for p in pieces {
        buf.extend_from_slice(p);
        match d.decode(&buf, &mut out) {
            Ok(n) => {
                assert!(n <= buf.len());
                used += n;
                buf.drain(..n);
            }
            Err(e) => {
                // After an error the connection is closed: what earlier reads used is moot.
                error = Some(e.to_string());
                used = 0;
                break;
            }
        }
        if d.is_done() {
            // Bytes after the body belong to the next response: never taken.
            assert_eq!(d.decode(b"more", &mut out).ok(), Some(0));
        }
    }
    let trailers = d.take_trailers().map(|t| {
        t.iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect()
    });
    Decoded {
        body: out.to_vec(),
        used,
        done: d.is_done(),
        error,
        trailers,
    }
}

/// Chunked bodies: the first byte picks where reads split, the rest is the wire. Decoded at
/// once or split into reads, the body, the bytes used, the end and the error are the same; and
/// the rest, chunked by a writer, decodes back to itself.
pub fn http_chunked(data: &[u8]) {
    let Some((&seed, wire)) = data.split_first() else {
        return;
    };
    let whole = decode(Framing::Chunked, [wire]);
    let split = decode(Framing::Chunked, super::pieces(wire, seed));
    assert_eq!(whole, split, "split at {:?}", super::cuts(wire.len(), seed));
    if whole.done {
        assert!(whole.error.is_none());
    }
    // Content-Length framing: exactly n bytes, however they arrive.
    let n = u64::from(seed) * 3;
    let length = decode(Framing::Length(n.max(1)), super::pieces(wire, seed));
    let want = wire.len().min(n.max(1) as usize);
    assert_eq!(length.body, &wire[..want]);
    assert_eq!(length.done, want as u64 == n.max(1));

    // A writer's chunking of `wire` as the payload, with extensions and a trailer.
    let mut enc = Vec::with_capacity(wire.len() * 2 + 64);
    for (i, c) in super::pieces(wire, seed.wrapping_add(1))
        .into_iter()
        .filter(|c| !c.is_empty())
        .enumerate()
    {
        if i % 3 == 1 {
            enc.extend_from_slice(format!("{:X};ext=\"a b\"\r\n", c.len()).as_bytes());
        } else {
            enc.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        }
        enc.extend_from_slice(c);
        enc.extend_from_slice(b"\r\n");
    }
    enc.extend_from_slice(b"0\r\nx-trailer: t\r\n\r\n");
    let back = decode(Framing::Chunked, super::pieces(&enc, seed));
    assert_eq!(back.error, None);
    assert!(back.done && back.used == enc.len());
    assert_eq!(back.body, wire);
    assert_eq!(
        back.trailers,
        Some(vec![("x-trailer".to_owned(), b"t".to_vec())])
    );
}
