//! A compressed response (`Content-Encoding` gzip, deflate, br, zstd) is forwarded byte for
//! byte and measured from a decoded copy: TTFT, tokens and a clean end, as for a plain stream.
//! A body that decodes past its bound, a corrupt one and a coding tokentap does not decode are
//! said so in the record, never called incomplete, and the client still gets every byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use tokentap_test_support as support;

use bytes::Bytes;
use support::*;
use tokentap::meter::delivery::Verdict;
use tokentap::meter::Outcome;

/// A streaming encoder: each call compresses one piece and flushes it, as a compressing hop
/// that streams does (nginx `gzip on` flushes per upstream read when it streams at all).
trait Flushing {
    fn piece(&mut self, data: &[u8]) -> Vec<u8>;
    fn end(self: Box<Self>) -> Vec<u8>;
}

struct Flate<W: Write>(W, fn(&mut W) -> Vec<u8>, fn(W) -> Vec<u8>);

impl<W: Write> Flushing for Flate<W> {
    fn piece(&mut self, data: &[u8]) -> Vec<u8> {
        self.0.write_all(data).unwrap();
        self.0.flush().unwrap();
        (self.1)(&mut self.0)
    }
    fn end(self: Box<Self>) -> Vec<u8> {
        (self.2)(self.0)
    }
}

/// Brotli without an encoder: uncompressed meta-blocks (RFC 7932 §9.2), a valid stream the
/// decoder reads piece by piece.
struct Brotli {
    started: bool,
}

impl Flushing for Brotli {
    fn piece(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for part in data.chunks(65536) {
            // Bits, least significant first: [WBITS=16: 0], ISLAST 0, MNIBBLES 4 (00),
            // MLEN-1 in 16 bits, ISUNCOMPRESSED 1, then zero padding to the byte.
            let (mut bits, mut n) = (0u64, 0u32);
            if !self.started {
                n += 1;
                self.started = true;
            }
            n += 3; // ISLAST 0, MNIBBLES 00
            bits |= ((part.len() as u64) - 1) << n;
            n += 16;
            bits |= 1 << n;
            n += 1;
            for i in 0..n.div_ceil(8) {
                out.push((bits >> (8 * i)) as u8);
            }
            out.extend_from_slice(part);
        }
        out
    }
    fn end(self: Box<Self>) -> Vec<u8> {
        // ISLAST 1, ISLASTEMPTY 1 (after the WBITS bit if nothing came before).
        vec![if self.started { 0b11 } else { 0b110 }]
    }
}

fn encoder(coding: &str) -> Box<dyn Flushing> {
    use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
    use flate2::Compression;
    let level = Compression::default();
    match coding {
        "gzip" => Box::new(Flate(
            GzEncoder::new(Vec::new(), level),
            |w| std::mem::take(w.get_mut()),
            |w| w.finish().unwrap(),
        )),
        "deflate" => Box::new(Flate(
            ZlibEncoder::new(Vec::new(), level),
            |w| std::mem::take(w.get_mut()),
            |w| w.finish().unwrap(),
        )),
        "deflate-raw" => Box::new(Flate(
            DeflateEncoder::new(Vec::new(), level),
            |w| std::mem::take(w.get_mut()),
            |w| w.finish().unwrap(),
        )),
        "zstd" => Box::new(Flate(
            zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap(),
            |w| std::mem::take(w.get_mut()),
            |w| w.finish().unwrap(),
        )),
        "br" => Box::new(Brotli { started: false }),
        other => panic!("{other}"),
    }
}

/// `script`'s events compressed in `coding`: one compressed piece per event (streamed), or all
/// of them in one piece after the last event's delay (a hop that held the stream).
fn compress(script: Script, coding: &str, held: bool) -> Script {
    let mut enc = encoder(coding);
    let mut chunks = Vec::new();
    if held {
        let total = script.chunks.iter().map(|c| c.0).sum();
        let all: Vec<u8> = script.chunks.iter().flat_map(|c| c.1.to_vec()).collect();
        let mut body = enc.piece(&all);
        body.extend(enc.end());
        chunks.push((total, Bytes::from(body)));
    } else {
        for (d, b) in script.chunks {
            chunks.push((d, Bytes::from(enc.piece(&b))));
        }
        chunks.push((MS(0), Bytes::from(enc.end())));
    }
    let name = if coding == "deflate-raw" {
        "deflate"
    } else {
        coding
    };
    let mut headers = script.headers;
    headers.push(("content-encoding".into(), name.into()));
    Script {
        chunks,
        headers,
        ..script
    }
}

async fn through(script: Script) -> (Got, Vec<u8>, tokentap::meter::RequestRecord, TestProxy) {
    let sent: Vec<u8> = script.chunks.iter().flat_map(|c| c.1.to_vec()).collect();
    let up = Upstream::spawn(move |_| script.clone()).await;
    let px = proxy(&up.url(), "").await;
    let got = send(
        &client(),
        "POST",
        &px.url("/v1/chat/completions"),
        &[("accept-encoding", "gzip, deflate, br, zstd")],
        chat_body("m", true),
    )
    .await
    .unwrap();
    let rec = px.records(1).await.pop().unwrap();
    (got, sent, rec, px)
}

#[tokio::test]
async fn every_coding_is_forwarded_untouched_and_measured_as_a_plain_stream() {
    for coding in ["gzip", "deflate", "deflate-raw", "br", "zstd"] {
        let plain = Script::chat_stream(MS(40), MS(15), 12, true);
        let (got, sent, r, _) = through(compress(plain, coding, false)).await;
        assert_eq!(got.status, 200);
        assert_eq!(
            got.body, sent,
            "{coding}: the client gets the upstream's bytes"
        );
        let name = coding.trim_end_matches("-raw");
        assert_eq!(got.headers["content-encoding"], name);
        assert_eq!(r.outcome, Outcome::Ok, "{coding}: {:?}", r.error);
        assert_eq!(r.content_encoding.as_deref(), Some(name));
        assert_eq!(r.decode_error, None, "{coding}");
        assert_eq!((r.content_events, r.done), (12, Some(true)), "{coding}");
        assert_eq!(r.output_tokens, Some(12));
        let ttft = r.ttft_ms.unwrap();
        assert!((40.0..200.0).contains(&ttft), "{coding}: ttft {ttft}");
        assert!(r.tpot_ms.unwrap() >= 14.0, "{coding}: {:?}", r.tpot_ms);
        assert_eq!(r.response_bytes, sent.len() as u64);
        let d = r.delivery.unwrap();
        // Event by event (a loaded host's TCP may join two writes into one read).
        assert_ne!(d.verdict, Verdict::Buffered, "{coding}: {d:?}");
        assert!(d.content_reads >= 9, "{coding}: {d:?}");
    }
}

#[tokio::test]
async fn a_held_compressed_stream_is_measured_and_called_buffered() {
    // What nginx with `gzip on` for event streams did: the whole stream in one read, late.
    let plain = Script::chat_stream(MS(20), MS(10), 24, true);
    let (got, sent, r, _) = through(compress(plain, "gzip", true)).await;
    assert_eq!(got.body, sent);
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!((r.content_events, r.output_tokens), (24, Some(24)));
    // The first token arrived with the last, after about 20 + 23 × 10 ms.
    assert!(r.ttft_ms.unwrap() >= 240.0, "{:?}", r.ttft_ms);
    assert_eq!(r.itl_p99_ms, Some(0.0));
    let d = r.delivery.unwrap();
    assert_eq!(d.verdict, Verdict::Buffered);
    assert_eq!((d.content_reads, d.first_read_events), (1, 24));
    assert!(d.burst_silence_ms.unwrap() >= 240.0, "{d:?}");
}

#[tokio::test]
async fn a_bomb_a_corrupt_body_and_an_unknown_coding_are_said_never_incomplete() {
    // 8 MiB of spaces gzipped to about 8 KiB: one read decodes past 1 MiB + 100 × its size.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let head = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n";
    enc.write_all(head).unwrap();
    enc.write_all(&vec![b' '; 8 << 20]).unwrap();
    let bomb = enc.finish().unwrap();
    let mut corrupt = encoder("gzip").piece(head);
    corrupt.extend_from_slice(b"\xff\xff\xff\xff not deflate at all");
    let cases = [
        ("gzip", bomb, "decoded over the bound", "bound"),
        ("gzip", corrupt, "corrupt", "corrupt"),
        (
            "gzip, br",
            b"whatever".to_vec(),
            "is not decoded",
            "unsupported",
        ),
    ];
    for (coding, body, says, reason) in cases {
        let script = Script {
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("content-encoding".into(), coding.into()),
            ],
            chunks: vec![(MS(0), Bytes::from(body))],
            ..Script::default()
        };
        let (got, sent, r, px) = through(script).await;
        assert_eq!((got.status, got.body.len()), (200, sent.len()), "{coding}");
        assert_eq!(got.body, sent);
        assert_eq!(r.outcome, Outcome::Ok, "{says}: {:?}", r.error);
        let why = r.decode_error.unwrap_or_default();
        assert!(why.contains(says), "{why}");
        assert_eq!(r.content_encoding.as_deref(), Some(coding));
        assert_eq!(r.response_bytes, sent.len() as u64);
        let (_, text) = px.admin_get("/metrics").await;
        let counted =
            format!(r#"tokentap_decode_stopped_total{{route="default",reason="{reason}"}}"#);
        assert_eq!(metric(&text, &counted), Some(1.0), "{counted}");
    }
}
