//! HTTP/1.1 framing under attack, differentially: each smuggling probe goes to a fresh proxy in
//! front of an upstream that keeps the raw bytes it received. What tokentap recorded must be
//! exactly what reached the upstream — as many well-formed requests as records, in order, each
//! with the recorded path and a body of the recorded `request_bytes`, and nothing else on the
//! wire — or nothing reached it and the client got 400. Also: bodies too slow (408 at
//! `timeouts.body_read_ms`) and too big (413), each with its record and bounded memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;
use tokentap::meter::Outcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as a strict reader sees it: a head with at most one `Content-Length`, no
/// `Transfer-Encoding`, and that many body bytes. `Ok(None)`: incomplete.
fn strict_request(b: &[u8]) -> Result<Option<(String, Vec<u8>, usize)>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let head = match req.parse(b) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("bad head: {e}")),
    };
    let mut len = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err("transfer-encoding upstream".into());
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            if len.is_some() {
                return Err("two content-lengths upstream".into());
            }
            let v = std::str::from_utf8(h.value).map_err(|e| e.to_string())?;
            if v.is_empty() || !v.bytes().all(|c| c.is_ascii_digit()) {
                return Err(format!("content-length {v:?}"));
            }
            len = Some(v.parse::<usize>().map_err(|e| e.to_string())?);
        }
    }
    let n = len.unwrap_or(0);
    if b.len() < head + n {
        return Ok(None);
    }
    let path = req.path.unwrap_or("").to_owned();
    Ok(Some((path, b[head..head + n].to_vec(), head + n)))
}

/// An upstream that keeps every byte each connection sent and answers each strict request
/// with `{}`.
async fn raw_upstream() -> (std::net::SocketAddr, Arc<Mutex<Vec<Vec<u8>>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let wires = Arc::new(Mutex::new(Vec::new()));
    let w = wires.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let w = w.clone();
            tokio::spawn(async move {
                let i = {
                    let mut w = w.lock().unwrap();
                    w.push(Vec::new());
                    w.len() - 1
                };
                let (mut pending, mut buf) = (Vec::new(), vec![0u8; 16 * 1024]);
                loop {
                    let n = match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    w.lock().unwrap()[i].extend_from_slice(&buf[..n]);
                    pending.extend_from_slice(&buf[..n]);
                    while let Ok(Some((_, _, used))) = strict_request(&pending) {
                        pending.drain(..used);
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, wires)
}

/// What one probe did: the client's status lines, and per request reaching the upstream its
/// (path, body length) beside the record's (endpoint, request_bytes).
#[derive(Debug)]
struct Probe {
    statuses: Vec<String>,
    upstream: Vec<(String, usize)>,
    recorded: Vec<(String, u64, u16)>,
}

async fn probe(head_and_body: String) -> Probe {
    let (addr, wires) = raw_upstream().await;
    let px = proxy(&format!("http://{addr}"), "").await;
    let mut s = TcpStream::connect(px.addr).await.unwrap();
    let smuggled = "GET /v1/smuggled HTTP/1.1\r\nhost: x\r\n\r\n";
    s.write_all(format!("{head_and_body}{smuggled}").as_bytes())
        .await
        .unwrap();
    let mut resp = Vec::new();
    let _ = tokio::time::timeout(MS(1500), s.read_to_end(&mut resp)).await;
    drop(s);
    // Status lines (a response's body runs straight into the next one's status line).
    let text = String::from_utf8_lossy(&resp);
    let statuses = text
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| text[i..].lines().next().unwrap_or("").to_owned())
        .collect();
    // Every record is in once /stats stops counting.
    tokio::time::sleep(MS(200)).await;
    let (_, st) = px.admin_get("/stats").await;
    let j: serde_json::Value = serde_json::from_str(&st).unwrap();
    let total = j["records"]["total"].as_u64().unwrap() as usize;
    let recorded = if total == 0 {
        Vec::new()
    } else {
        px.records(total).await
    };
    let mut upstream = Vec::new();
    for wire in wires.lock().unwrap().iter() {
        let mut rest = &wire[..];
        while !rest.is_empty() {
            match strict_request(rest) {
                Ok(Some((path, body, used))) => {
                    upstream.push((path, body.len()));
                    rest = &rest[used..];
                }
                Ok(None) => panic!(
                    "a partial request upstream: {:?}",
                    String::from_utf8_lossy(rest)
                ),
                Err(e) => panic!("{e}: {:?}", String::from_utf8_lossy(rest)),
            }
        }
    }
    Probe {
        statuses,
        upstream,
        recorded: recorded
            .iter()
            .map(|r| (r.endpoint.clone(), r.request_bytes, r.status))
            .collect(),
    }
}

const CHUNKED_ABCD: &str = "4\r\nabcd\r\n0\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_tokentap_records_is_what_the_upstream_reads() {
    let _alone = crate::alone().await;
    let post = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n";
    let probes: Vec<(&str, String)> = vec![
        ("CL + TE", format!("{post}content-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n")),
        ("TE + CL", format!("{post}transfer-encoding: chunked\r\ncontent-length: 30\r\n\r\n{CHUNKED_ABCD}")),
        ("CL twice, differing", format!("{post}content-length: 4\r\ncontent-length: 40\r\n\r\nabcd")),
        ("CL twice, equal", format!("{post}content-length: 4\r\ncontent-length: 4\r\n\r\nabcd")),
        ("CL list `4, 4`", format!("{post}content-length: 4, 4\r\n\r\nabcd")),
        ("CL `+4`", format!("{post}content-length: +4\r\n\r\nabcd")),
        ("obs-fold TE", format!("{post}transfer-encoding:\r\n chunked\r\n\r\n{CHUNKED_ABCD}")),
        ("obs-fold other header", format!("{post}x-a: b\r\n c\r\ncontent-length: 4\r\n\r\nabcd")),
        ("obs-fold line before TE", format!("{post} transfer-encoding: chunked\r\n\r\n{CHUNKED_ABCD}")),
        ("TE `chunked, identity`", format!("{post}transfer-encoding: chunked, identity\r\n\r\n{CHUNKED_ABCD}")),
        ("TE `identity, chunked`", format!("{post}transfer-encoding: identity, chunked\r\n\r\n{CHUNKED_ABCD}")),
        ("TE `xchunked`", format!("{post}transfer-encoding: xchunked\r\n\r\n{CHUNKED_ABCD}")),
        ("TE `  chunked` (two spaces)", format!("{post}transfer-encoding:  chunked\r\n\r\n{CHUNKED_ABCD}")),
        ("TE `\\tchunked`", format!("{post}transfer-encoding:\tchunked\r\n\r\n{CHUNKED_ABCD}")),
        ("TE `chunked ` (trailing space)", format!("{post}transfer-encoding: chunked \r\n\r\n{CHUNKED_ABCD}")),
        ("TE `\\x0bchunked`", format!("{post}transfer-encoding: \x0bchunked\r\n\r\n{CHUNKED_ABCD}")),
        ("`transfer-encoding :` (space before colon)", format!("{post}transfer-encoding : chunked\r\n\r\n{CHUNKED_ABCD}")),
        ("TE chunked twice", format!("{post}transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n{CHUNKED_ABCD}")),
        ("TE `chunked, chunked`", format!("{post}transfer-encoding: chunked, chunked\r\n\r\n{CHUNKED_ABCD}")),
        ("`Transfer-Encoding: CHUNKED`", format!("{post}Transfer-Encoding: CHUNKED\r\n\r\n{CHUNKED_ABCD}")),
        ("chunk size overflow", format!("{post}transfer-encoding: chunked\r\n\r\n1000000000000000a\r\nabcd\r\n0\r\n\r\n")),
        ("chunk size bare LF", format!("{post}transfer-encoding: chunked\r\n\r\n4\nabcd\r\n0\r\n\r\n")),
    ];
    let runs = probes.iter().map(|(_, p)| probe(p.clone()));
    let results = futures_join(runs).await;
    let mut table = String::new();
    for ((name, _), r) in probes.iter().zip(&results) {
        // Pairwise: each forwarded record is one request upstream with its path and its body's
        // length; any other record is tokentap's own 400 (a body that broke its framing).
        let forwarded: Vec<(String, usize)> = r
            .recorded
            .iter()
            .filter(|(_, _, s)| *s == 200)
            .map(|(p, n, _)| (p.clone(), *n as usize))
            .collect();
        assert_eq!(r.upstream, forwarded, "{name}: {r:?}");
        assert!(
            r.recorded.iter().all(|(_, _, s)| *s == 200 || *s == 400),
            "{name}: {r:?}"
        );
        let ok = r.statuses.iter().filter(|s| s.contains(" 200 ")).count();
        assert_eq!(ok, r.upstream.len(), "{name}: {r:?}");
        if r.upstream.is_empty() {
            assert_eq!(
                r.statuses.first().map(String::as_str),
                Some("HTTP/1.1 400 Bad Request"),
                "{name}: {r:?}"
            );
        }
        let what = match &r.upstream[..] {
            [] if r.recorded.is_empty() => "400 (hyper), nothing upstream, no record".to_owned(),
            [] => "400 (tokentap), nothing upstream, one record".to_owned(),
            reqs => reqs
                .iter()
                .map(|(p, n)| format!("{p} ({n} B)"))
                .collect::<Vec<_>>()
                .join(" then "),
        };
        table.push_str(&format!("| {name} | {what} |\n"));
    }
    eprintln!("{table}");
    // The classic desyncs are refused, and nothing ever read `GET /v1/smuggled` out of a body.
    for (name, r) in probes.iter().zip(&results) {
        if name.0.starts_with("CL twice, differing") || name.0.contains("xchunked") {
            assert!(r.upstream.is_empty(), "{}: {r:?}", name.0);
        }
    }
}

/// Run futures side by side (probes are independent: each has its own proxy and upstream).
async fn futures_join<F: std::future::Future + Send + 'static>(
    fs: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send,
{
    let tasks: Vec<_> = fs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// Slowloris on a body: a declared body dribbled a byte every 100 ms gets 408 at
/// `timeouts.body_read_ms`, with its record; nothing reaches the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dribbled_body_gets_408_at_body_read_ms() {
    let _alone = crate::alone().await;
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let px = proxy(&up.url(), "[timeouts]\nbody_read_ms = 500\n").await;
    let mut s = TcpStream::connect(px.addr).await.unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n")
        .await
        .unwrap();
    let t = tokio::time::Instant::now();
    let mut resp = Vec::new();
    for _ in 0..50 {
        if s.write_all(b"x").await.is_err() {
            break;
        }
        let mut buf = [0u8; 1024];
        if let Ok(Ok(n)) = tokio::time::timeout(MS(100), s.read(&mut buf)).await {
            resp.extend_from_slice(&buf[..n]);
            if n == 0 || resp.len() > 12 {
                break;
            }
        }
    }
    let cut = t.elapsed();
    assert!(
        resp.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    assert!(cut < Duration::from_secs(4), "cut after {cut:?}");
    let recs = px.records(1).await;
    assert_eq!((recs[0].status, recs[0].outcome), (408, Outcome::Rejected));
    assert!(up.requests().is_empty());
    eprintln!("h1 body dribbled at 10 B/s: 408 after {cut:?} (body_read_ms = 500)");
    let got = px.chat().await;
    assert_eq!(got.status, 200);
}

/// Bodies over `limits.max_request_bytes`: a declared one is refused before a byte of it is
/// read, a chunked one when it crosses the limit; 413 and a record each, memory bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_get_413_with_a_record_in_bounded_memory() {
    let _alone = crate::alone().await;
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let px = proxy(&up.url(), "[limits]\nmax_request_bytes = 1048576\n").await;
    let rss = rss_kb(None);
    let mut s = TcpStream::connect(px.addr).await.unwrap();
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 10000000000\r\n\r\n",
    )
    .await
    .unwrap();
    let head = read_until(&mut s, "\r\n\r\n").await;
    assert!(
        head.starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    // 64 MiB chunked: refused once past 1 MiB; the writer is stopped by the closed connection.
    let mut s = TcpStream::connect(px.addr).await.unwrap();
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await
    .unwrap();
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        let chunk = format!("10000\r\n{}\r\n", "a".repeat(0x10000));
        let mut sent = 0usize;
        while sent < 1024 {
            if w.write_all(chunk.as_bytes()).await.is_err() {
                break;
            }
            sent += 1;
        }
        sent * 0x10000
    });
    let mut resp = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), r.read_to_end(&mut resp)).await;
    let sent = tokio::time::timeout(Duration::from_secs(10), writer).await;
    assert!(
        resp.starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&resp[..resp.len().min(80)])
    );
    let recs = px.records(2).await;
    assert!(
        recs.iter()
            .all(|r| r.status == 413 && r.outcome == Outcome::Rejected),
        "{recs:?}"
    );
    assert!(up.requests().is_empty());
    let grew = rss_kb(None).saturating_sub(rss);
    eprintln!("oversized bodies: 10 GB declared → 413 at once; chunked → 413 after ~1 MiB (the client managed {sent:?} bytes); RSS +{grew} kB");
    assert!(grew < 24 * 1024, "RSS +{grew} kB");
    let got = px.chat().await;
    assert_eq!(got.status, 200);
}
