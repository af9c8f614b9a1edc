//! HTTP/2 floods over raw frames (h2c, prior knowledge) against the real proxy: rapid reset,
//! CONTINUATION, SETTINGS and PING floods, streams over the concurrent-stream limit, a body
//! dribbled on a stream. Each test asserts what the server actually does (GOAWAY with
//! ENHANCE_YOUR_CALM, REFUSED_STREAM, 408, or an answer per frame), that every request that got
//! in has exactly one record, that a new connection is served afterwards, and that RSS stays
//! bounded. The figures printed (`--nocapture`) are the ones in docs/security.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::time::Duration;

use support::*;
use tokentap::meter::Outcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 1;
const ACK: u8 = 1;
const END_HEADERS: u8 = 4;
const CANCEL: u32 = 8;
const REFUSED_STREAM: u32 = 7;
const ENHANCE_YOUR_CALM: u32 = 11;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len() as u32;
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The connection preface and an empty SETTINGS frame.
fn preface() -> Vec<u8> {
    let mut v = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    v.extend(frame(SETTINGS, 0, 0, &[]));
    v
}

/// HPACK, no dynamic table, no Huffman: POST http://x/v1/chat/completions, and `extra` headers
/// as literals without indexing.
fn request_block(extra: &[(&str, &str)]) -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST, :scheme http
    let lit = |b: &mut Vec<u8>, index: u8, value: &str| {
        b.push(index);
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
    };
    lit(&mut b, 0x04, "/v1/chat/completions"); // :path
    lit(&mut b, 0x01, "x"); // :authority
    for (k, v) in extra {
        b.push(0x00);
        b.push(k.len() as u8);
        b.extend_from_slice(k.as_bytes());
        b.push(v.len() as u8);
        b.extend_from_slice(v.as_bytes());
    }
    b
}

/// What the server sent on one connection, read until it closed or `limit` passed.
#[derive(Debug, Default)]
struct Seen {
    settings_acks: usize,
    ping_acks: usize,
    headers: usize,
    /// RST_STREAM error codes, in order.
    resets: Vec<u32>,
    /// GOAWAY: (last stream id, error code).
    goaway: Option<(u32, u32)>,
    closed: bool,
}

async fn read_frames(
    mut r: tokio::net::tcp::OwnedReadHalf,
    limit: Duration,
    done: impl Fn(&Seen) -> bool,
) -> Seen {
    let mut seen = Seen::default();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        while buf.len() >= 9 {
            let n = (usize::from(buf[0]) << 16) | (usize::from(buf[1]) << 8) | usize::from(buf[2]);
            if buf.len() < 9 + n {
                break;
            }
            let (kind, flags) = (buf[3], buf[4]);
            let p = &buf[9..9 + n];
            let word = |at: usize| u32::from_be_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
            match kind {
                SETTINGS if flags & ACK != 0 => seen.settings_acks += 1,
                PING if flags & ACK != 0 => seen.ping_acks += 1,
                HEADERS => seen.headers += 1,
                RST_STREAM => seen.resets.push(word(0)),
                GOAWAY => seen.goaway = Some((word(0) & 0x7fff_ffff, word(4))),
                _ => {}
            }
            buf.drain(..9 + n);
        }
        if done(&seen) {
            return seen;
        }
        match tokio::time::timeout_at(deadline, r.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                seen.closed = true;
                return seen;
            }
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => return seen,
        }
    }
}

/// Open a connection, write `bytes` from a task (errors ignored: the server may close first),
/// and read what comes back until the server closes, `done` holds, or `limit` passed.
async fn flood(
    px: &TestProxy,
    bytes: Vec<u8>,
    limit: Duration,
    done: impl Fn(&Seen) -> bool,
) -> Seen {
    let s = TcpStream::connect(px.addr).await.unwrap();
    let (r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        let _ = w.write_all(&bytes).await;
        w
    });
    let seen = read_frames(r, limit, done).await;
    writer.abort();
    seen
}

/// `/stats`: (records written, requests in flight).
async fn stats(px: &TestProxy) -> (u64, u64) {
    let (_, s) = px.admin_get("/stats").await;
    let j: serde_json::Value = serde_json::from_str(&s).unwrap();
    (
        j["records"]["total"].as_u64().unwrap(),
        j["in_flight"]["default"].as_u64().unwrap_or(0),
    )
}

/// A normal request on a new connection is served, and is recorded (one more record).
async fn still_serving(px: &TestProxy, records_before: u64) {
    let got = px.chat().await;
    assert_eq!(got.status, 200);
    assert!(got.body.ends_with(b"data: [DONE]\n\n"));
    let recs = px.records(records_before as usize + 1).await;
    assert_eq!(recs.len() as u64, records_before + 1, "one record for it");
    assert_eq!(recs.last().unwrap().outcome, Outcome::Ok);
}

async fn setup() -> (Upstream, TestProxy) {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 3, true)).await;
    let px = proxy(&up.url(), "").await;
    // Warm the allocator and the pools so the RSS deltas measure the attack.
    let _ = px.chat().await;
    let _ = px.records(1).await;
    (up, px)
}

fn grew_kb(before: u64) -> u64 {
    rss_kb(None).saturating_sub(before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_gets_goaway_enhance_your_calm() {
    let _alone = crate::alone().await;
    let (up, px) = setup().await;
    let rss = rss_kb(None);
    let n = 5_000u32;
    let mut bytes = preface();
    let block = request_block(&[]);
    for i in 0..n {
        let id = 2 * i + 1;
        bytes.extend(frame(HEADERS, END_HEADERS, id, &block));
        bytes.extend(frame(RST_STREAM, 0, id, &CANCEL.to_be_bytes()));
    }
    let seen = flood(&px, bytes, Duration::from_secs(20), |_| false).await;
    let (last, code) = seen.goaway.expect("no GOAWAY");
    assert_eq!(code, ENHANCE_YOUR_CALM, "{seen:?}");
    assert!(seen.closed, "connection left open: {seen:?}");
    assert!(last < 2 * n - 1, "GOAWAY only after every stream: {last}");
    tokio::time::sleep(MS(300)).await;
    let (records, in_flight) = stats(&px).await;
    assert_eq!(in_flight, 0);
    // The streams that became requests were reset before a body: each one record, none upstream.
    let recs = px.records(records as usize).await;
    assert_eq!(recs.len() as u64, records);
    assert!(recs[1..]
        .iter()
        .all(|r| r.outcome == Outcome::ClientCancelled));
    assert!(records - 1 <= u64::from(last.div_ceil(2)));
    assert_eq!(
        up.requests().len(),
        1,
        "only the warm-up reached the upstream"
    );
    let grew = grew_kb(rss);
    eprintln!(
        "rapid reset: {n} streams sent, GOAWAY ENHANCE_YOUR_CALM at stream {last}, {} requests recorded, RSS +{grew} kB",
        records - 1
    );
    assert!(grew < 32 * 1024, "RSS +{grew} kB");
    still_serving(&px, records).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuation_flood_gets_goaway_enhance_your_calm() {
    let _alone = crate::alone().await;
    let (up, px) = setup().await;
    let rss = rss_kb(None);
    let n = 10_000;
    let mut bytes = preface();
    bytes.extend(frame(HEADERS, 0, 1, &request_block(&[])));
    // One literal header `x-a: b` per frame, never END_HEADERS.
    let field = [0x00, 0x03, b'x', b'-', b'a', 0x01, b'b'];
    for _ in 0..n {
        bytes.extend(frame(CONTINUATION, 0, 1, &field));
    }
    let seen = flood(&px, bytes, Duration::from_secs(10), |_| false).await;
    assert_eq!(
        seen.goaway.map(|g| g.1),
        Some(ENHANCE_YOUR_CALM),
        "{seen:?}"
    );
    assert!(seen.closed, "{seen:?}");
    let (records, in_flight) = stats(&px).await;
    assert_eq!(
        (records, in_flight),
        (1, 0),
        "a head never completed is no request"
    );
    assert_eq!(up.requests().len(), 1);
    let grew = grew_kb(rss);
    eprintln!("CONTINUATION flood: {n} frames sent, GOAWAY ENHANCE_YOUR_CALM, RSS +{grew} kB");
    assert!(grew < 16 * 1024, "RSS +{grew} kB");
    still_serving(&px, 1).await;
}

/// SETTINGS and PING floods: h2 answers each frame once and reads the next only after that
/// answer is written (one pending ACK at a time), so a flood costs the attacker a frame per
/// answer and memory stays flat; the connection is not closed (h2 0.4 has no limit on either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_and_ping_floods_are_answered_one_for_one_in_bounded_memory() {
    let _alone = crate::alone().await;
    let (up, px) = setup().await;
    let rss = rss_kb(None);
    let n = 10_000;
    for (name, kind, payload, field) in [
        (
            "SETTINGS",
            SETTINGS,
            vec![0, 2, 0, 0, 0, 0],
            "settings_acks",
        ),
        ("PING", PING, vec![7; 8], "ping_acks"),
    ] {
        let mut bytes = preface();
        for _ in 0..n {
            bytes.extend(frame(kind, 0, 0, &payload));
        }
        // Then a request on the same connection: served after the flood.
        bytes.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &request_block(&[]),
        ));
        // Done once the response's head came (it follows every ACK).
        let seen = flood(&px, bytes, Duration::from_secs(20), |s| s.headers > 0).await;
        let acks = if field == "settings_acks" {
            seen.settings_acks - 1 // our empty preface SETTINGS
        } else {
            seen.ping_acks
        };
        assert_eq!(acks, n, "{name}: {seen:?}");
        assert_eq!(
            seen.headers, 1,
            "{name}: the request after the flood: {seen:?}"
        );
        assert!(seen.goaway.is_none(), "{name}: {seen:?}");
        eprintln!(
            "{name} flood: {n} frames, {acks} ACKs, then a request served on the same connection"
        );
    }
    // The flood never read: the server stops reading once its ACKs fill the socket.
    let s = TcpStream::connect(px.addr).await.unwrap();
    let (_r, mut w) = s.into_split();
    let mut written = 0usize;
    let ping = frame(PING, 0, 0, &[7; 8]);
    let burst: Vec<u8> = ping
        .iter()
        .copied()
        .cycle()
        .take(ping.len() * 1000)
        .collect();
    let _ = w.write_all(&preface()).await;
    let _ = tokio::time::timeout(Duration::from_secs(3), async {
        while written < 1_000_000 {
            if w.write_all(&burst).await.is_err() {
                break;
            }
            written += 1000;
        }
    })
    .await;
    assert!(
        written < 1_000_000,
        "the server read 1,000,000 PINGs it could not answer"
    );
    let grew = grew_kb(rss);
    eprintln!(
        "PING flood, never read: the server stopped reading after about {written} PINGs; RSS +{grew} kB"
    );
    assert!(grew < 16 * 1024, "RSS +{grew} kB");
    drop(w);
    let (records, _) = stats(&px).await;
    assert_eq!(
        records, 3,
        "the warm-up and the two requests after the floods"
    );
    assert_eq!(up.requests().len(), 3);
    still_serving(&px, records).await;
}

/// 1,024 streams may be open at once (`max_concurrent_streams`); each further stream is
/// refused with REFUSED_STREAM, and after 256 such refusals (`max_local_error_reset_streams`)
/// the connection gets GOAWAY ENHANCE_YOUR_CALM. The open streams never sent a body: each is
/// one record when the connection ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_the_limit_are_refused_then_the_connection_is_closed() {
    let _alone = crate::alone().await;
    let (up, px) = setup().await;
    let rss = rss_kb(None);
    let n = 1024 + 400u32;
    let block = request_block(&[]);
    let s = TcpStream::connect(px.addr).await.unwrap();
    let (r, mut w) = s.into_split();
    let reader = tokio::spawn(read_frames(r, Duration::from_secs(30), |_| false));
    // 1,024 streams, each a request waiting for its body; then 400 more.
    let mut first = preface();
    for i in 0..1024 {
        first.extend(frame(HEADERS, END_HEADERS, 2 * i + 1, &block));
    }
    w.write_all(&first).await.unwrap();
    let t = tokio::time::Instant::now();
    while stats(&px).await.1 < 1024 {
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "{:?}",
            stats(&px).await
        );
        tokio::time::sleep(MS(50)).await;
    }
    let mut more = Vec::new();
    for i in 1024..n {
        more.extend(frame(HEADERS, END_HEADERS, 2 * i + 1, &block));
    }
    let _ = w.write_all(&more).await;
    let seen = reader.await.unwrap();
    drop(w);
    let refused = seen.resets.iter().filter(|&&c| c == REFUSED_STREAM).count();
    assert_eq!(refused, 256, "{:?}", &seen.goaway);
    assert_eq!(seen.goaway.map(|g| g.1), Some(ENHANCE_YOUR_CALM));
    assert!(seen.closed);
    let recs = px.records(1 + 1024).await;
    tokio::time::sleep(MS(300)).await;
    let (records, in_flight) = stats(&px).await;
    assert_eq!(in_flight, 0);
    assert_eq!(records, 1 + 1024, "one record per admitted stream");
    assert!(recs[1..]
        .iter()
        .all(|r| r.outcome == Outcome::ClientCancelled));
    assert_eq!(up.requests().len(), 1);
    let grew = grew_kb(rss);
    eprintln!(
        "{n} streams opened: 1024 admitted, {refused} REFUSED_STREAM, then GOAWAY ENHANCE_YOUR_CALM; 1024 records; RSS +{grew} kB"
    );
    assert!(grew < 48 * 1024, "RSS +{grew} kB");
    still_serving(&px, records).await;
}

/// A body dribbled on an h2 stream is cut at `timeouts.body_read_ms`: 408, one record, nothing
/// upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dribbled_h2_body_gets_408_at_body_read_ms() {
    let _alone = crate::alone().await;
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 3, true)).await;
    let px = proxy(&up.url(), "[timeouts]\nbody_read_ms = 500\n").await;
    let s = TcpStream::connect(px.addr).await.unwrap();
    let (r, mut w) = s.into_split();
    let mut head = preface();
    head.extend(frame(
        HEADERS,
        END_HEADERS,
        1,
        &request_block(&[("content-length", "100")]),
    ));
    w.write_all(&head).await.unwrap();
    let reader = tokio::spawn(read_frames(r, Duration::from_secs(10), |s| s.headers > 0));
    let t = tokio::time::Instant::now();
    // One byte every 100 ms, for up to 5 s.
    let dribble = tokio::spawn(async move {
        for _ in 0..50 {
            if w.write_all(&frame(DATA, 0, 1, b"x")).await.is_err() {
                break;
            }
            tokio::time::sleep(MS(100)).await;
        }
        w
    });
    let recs = px.records(1).await;
    let cut = t.elapsed();
    assert_eq!(recs[0].status, 408);
    assert_eq!(recs[0].outcome, Outcome::Rejected);
    assert!(cut < Duration::from_secs(4), "cut after {cut:?}");
    dribble.abort();
    let seen = reader.await.unwrap();
    assert_eq!(seen.headers, 1, "the 408 head: {seen:?}");
    assert!(up.requests().is_empty());
    eprintln!("h2 body dribbled at 10 B/s: 408 after {cut:?} (body_read_ms = 500)");
    still_serving(&px, 1).await;
}
