//! Faults and hostile input over real sockets: mass cancellation, huge and broken upstream
//! events, slow readers, oversized and dribbled heads, request smuggling, h2 rapid reset — the
//! proxy keeps serving, every request is recorded once, no key leaks, memory stays bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use support::*;
use tokentap::meter::Outcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_cancellations_leak_nothing() {
    let _alone = crate::alone().await;
    let up = Upstream::spawn(|_| Script::chat_stream(MS(2), MS(5), 400, false)).await;
    let px = proxy(&up.url(), "").await;
    let round = |n: usize| {
        let addr = px.addr;
        async move {
            let mut tasks = Vec::new();
            for _ in 0..n {
                tasks.push(tokio::spawn(async move {
                    let mut s = raw_chat(addr).await;
                    let mut buf = [0u8; 2048];
                    let mut seen = 0;
                    while seen < 400 {
                        let n = s.read(&mut buf).await.unwrap();
                        assert!(n > 0);
                        seen += n;
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    round(100).await;
    let _ = px.records(100).await;
    let before = rss_kb(None);
    for _ in 0..9 {
        round(100).await;
    }
    let recs = px.records(1000).await;
    assert_eq!(recs.len(), 1000);
    assert!(
        recs.iter().all(|r| r.outcome == Outcome::ClientCancelled),
        "{:?}",
        recs.iter().find(|r| r.outcome != Outcome::ClientCancelled)
    );
    let (_, m) = px.admin_get("/metrics").await;
    assert!(
        m.contains("tokentap_in_flight_requests{route=\"default\"} 0"),
        "in-flight gauge back to 0"
    );
    let after = rss_kb(None);
    assert!(
        after < before + 16 * 1024,
        "RSS grew from {before} kB to {after} kB over 900 cancellations"
    );
}

#[tokio::test]
async fn huge_invalid_and_broken_upstream_events_pass_through_exactly() {
    let _alone = crate::alone().await;
    let mut big = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 10 * 1024 * 1024));
    big.extend_from_slice(b"\"}}]}\n\n");
    let big = Bytes::from(big);
    let weird = Bytes::from_static(b"data: \xff\xfe\xfd not utf8\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}\n\ndata: {broken\n\n: comment\n\ndata: [DONE]\n\n");
    let (b2, w2) = (big.clone(), weird.clone());
    let up = Upstream::spawn(move |r: &Received| {
        let body = if r.request_line().contains("big") {
            b2.clone()
        } else {
            w2.clone()
        };
        // The 10 MB event goes out in 64 KiB writes, the other in one.
        let chunks: Vec<(Duration, Bytes)> = body
            .chunks(64 * 1024)
            .map(|c| (Duration::ZERO, Bytes::copy_from_slice(c)))
            .collect();
        Script {
            chunks,
            ..Script::default()
        }
    })
    .await;
    let px = proxy(&up.url(), "").await;
    let c = client();
    let got = send(&c, "POST", &px.url("/v1/big"), &[], chat_body("m", true))
        .await
        .unwrap();
    assert!(got.body == big[..], "10 MB event altered");
    let got = send(&c, "POST", &px.url("/v1/weird"), &[], chat_body("m", true))
        .await
        .unwrap();
    assert_eq!(got.body, weird[..]);
    let recs = px.records(2).await;
    assert_eq!(recs[0].oversize_events, 1);
    assert_eq!(recs[0].response_bytes, big.len() as u64);
    assert_eq!(recs[1].parse_errors, 3);
    assert_eq!(recs[1].done, Some(true));
    // And counted per route in /metrics.
    let (_, m) = px.admin_get("/metrics").await;
    assert!(
        m.contains("tokentap_sse_parse_errors_total{route=\"default\"} 3"),
        "{m}"
    );
    assert!(
        m.contains("tokentap_sse_oversize_events_total{route=\"default\"} 1"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_back_pressures_the_upstream_and_others_are_unaffected() {
    let _alone = crate::alone().await;
    // The upstream tries to send 8 MB at once.
    let payload = Bytes::from(vec![b'a'; 8 * 1024 * 1024]);
    let p2 = payload.clone();
    let up = Upstream::spawn(move |r: &Received| {
        if r.request_line().contains("slow") {
            let chunks = p2
                .chunks(16 * 1024)
                .map(|c| (Duration::ZERO, Bytes::copy_from_slice(c)))
                .collect();
            Script {
                chunks,
                headers: vec![("content-type".into(), "application/octet-stream".into())],
                ..Script::default()
            }
        } else {
            Script::chat_stream(MS(5), MS(1), 5, true)
        }
    })
    .await;
    let px = proxy(&up.url(), "").await;
    let mut s = TcpStream::connect(px.addr).await.unwrap();
    s.write_all(b"GET /v1/slow HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // Read one byte every 10 ms for a second.
    let mut one = [0u8; 1];
    for _ in 0..100 {
        s.read_exact(&mut one).await.unwrap();
        tokio::time::sleep(MS(10)).await;
    }
    // Others are served normally meanwhile.
    let t = tokio::time::Instant::now();
    let got = px.chat().await;
    assert!(got.body.ends_with(b"data: [DONE]\n\n"));
    assert!(t.elapsed() < MS(500));
    // The upstream is still blocked: most of the 8 MB never left it (socket buffers only).
    let (_, stats) = px.admin_get("/stats").await;
    let j: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(
        j["in_flight"]["default"], 1,
        "the slow stream is still in flight"
    );
    drop(s);
    let recs = px.records(2).await;
    let slow = recs.iter().find(|r| r.endpoint == "/v1/slow").unwrap();
    assert_eq!(slow.outcome, Outcome::ClientCancelled);
    assert!(
        slow.response_bytes < 6 * 1024 * 1024,
        "{} bytes passed: no back-pressure",
        slow.response_bytes
    );
}

#[tokio::test]
async fn oversized_heads_dribbled_heads_and_smuggling_never_reach_the_upstream() {
    let _alone = crate::alone().await;
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let px = proxy(&up.url(), "[timeouts]\nheader_read_ms = 300\n").await;

    // A 400 KB header.
    let mut s = TcpStream::connect(px.addr).await.unwrap();
    let big = format!(
        "GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(400 * 1024)
    );
    let _ = s.write_all(big.as_bytes()).await;
    let mut resp = Vec::new();
    let _ = tokio::time::timeout(MS(2000), s.read_to_end(&mut resp)).await;
    assert!(
        resp.is_empty() || resp.starts_with(b"HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&resp[..resp.len().min(80)])
    );

    // Slowloris: a head dribbled one byte every 100 ms is cut at header_read_ms.
    let mut s = TcpStream::connect(px.addr).await.unwrap();
    let t = tokio::time::Instant::now();
    let mut cut = false;
    for b in
        b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n"
    {
        if s.write_all(&[*b]).await.is_err() {
            cut = true;
            break;
        }
        tokio::time::sleep(MS(100)).await;
        let mut buf = [0u8; 256];
        if let Ok(Ok(n)) = tokio::time::timeout(MS(1), s.read(&mut buf)).await {
            if n == 0 || buf.starts_with(b"HTTP/1.1 408") {
                cut = true;
                break;
            }
        }
    }
    assert!(
        cut && t.elapsed() < MS(2500),
        "slow head not cut ({:?})",
        t.elapsed()
    );

    // Smuggling: Content-Length and Transfer-Encoding together, and a duplicated Content-Length.
    for attempt in [
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /v1/smuggled HTTP/1.1\r\nhost: x\r\n\r\n",
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\ncontent-length: 40\r\n\r\nabcdGET /v1/smuggled HTTP/1.1\r\nhost: x\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(px.addr).await.unwrap();
        s.write_all(attempt.as_bytes()).await.unwrap();
        let mut resp = Vec::new();
        let _ = tokio::time::timeout(MS(2000), s.read_to_end(&mut resp)).await;
    }
    assert!(
        up.requests()
            .iter()
            .all(|r| !r.request_line().contains("smuggled")),
        "a smuggled request reached the upstream"
    );
    // Still serving.
    let got = send(&client(), "GET", &px.url("/v1/models"), &[], vec![])
        .await
        .unwrap();
    assert_eq!(got.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_rapid_reset_is_bounded_and_recorded() {
    let _alone = crate::alone().await;
    let up = Upstream::spawn(|_| Script::chat_stream(MS(50), MS(5), 5, false)).await;
    let px = proxy(&up.url(), "").await;
    let tcp = TcpStream::connect(px.addr).await.unwrap();
    let (mut h2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut opened = 0;
    for _ in 0..500 {
        let Ok(ready) = h2.clone().ready().await else {
            break;
        };
        h2 = ready;
        let req = http::Request::post(px.url("/v1/chat/completions"))
            .body(())
            .unwrap();
        let Ok((resp, mut stream)) = h2.send_request(req, false) else {
            break;
        };
        stream.send_reset(h2::Reason::CANCEL);
        drop(resp);
        opened += 1;
    }
    assert!(opened > 0);
    tokio::time::sleep(MS(500)).await;
    // The proxy is alive and serving; every stream that became a request was recorded once.
    let got = px.chat().await;
    assert_eq!(got.status, 200);
    let (_, stats) = px.admin_get("/stats").await;
    let j: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(j["in_flight"]["default"], 0);
    let total = j["records"]["total"].as_u64().unwrap();
    assert!(
        total <= opened + 1,
        "{total} records for {opened} streams + 1"
    );
    assert!(up.requests().len() as u64 <= total);
}

#[test]
fn the_key_never_appears_in_debug_logs_of_hostile_traffic() {
    let _alone = crate::ALONE.blocking_lock();
    use std::process::{Command, Stdio};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let up = rt.block_on(Upstream::spawn(|_| Script::json(401, r#"{"error":{"message":"Invalid key sk-hostile-secret-42","type":"auth_error","param":null,"code":401}}"#)));
    let dir = scratch("trace");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args([
            "serve",
            "--upstream",
            &up.url(),
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "off",
            "--log",
        ])
        .arg(dir.join("l.jsonl"))
        .env("TOKENTAP_LOG", "trace")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    use std::io::Read;
    let addr = loop {
        let n = err.read(&mut buf).unwrap();
        assert!(n > 0);
        text.extend_from_slice(&buf[..n]);
        let s = String::from_utf8_lossy(&text);
        if let Some(i) = s.find("listen=") {
            if let Some(a) = s[i + 7..].split_whitespace().next() {
                if s[i + 7..].contains(' ') {
                    break a.to_owned();
                }
            }
        }
    };
    let secret = "sk-hostile-secret-42";
    rt.block_on(async {
        let c = client();
        let url = format!("http://{addr}/v1/chat/completions");
        for h in [("authorization", format!("Bearer {secret}")), ("x-api-key", secret.to_owned()), ("api-key", secret.to_owned())] {
            let _ = send(&c, "POST", &url, &[(h.0, &h.1), ("connection", "x-api-key")], chat_body("m", true)).await;
        }
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let _ = s.write_all(format!("POST /v1/x HTTP/1.1\r\nauthorization: Bearer {secret}\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\nzzzz").as_bytes()).await;
        let mut r = Vec::new();
        let _ = tokio::time::timeout(MS(1000), s.read_to_end(&mut r)).await;
        assert!(!String::from_utf8_lossy(&r).contains(secret));
    });
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = err.read_to_end(&mut text);
    let _ = child.wait();
    let all = String::from_utf8_lossy(&text);
    assert!(
        all.contains("TRACE") || all.contains("DEBUG") || all.contains("INFO"),
        "logging was on"
    );
    assert!(!all.contains(secret), "the key appeared in the logs");
    let log = std::fs::read_to_string(dir.join("l.jsonl")).unwrap();
    assert!(
        !log.contains(secret),
        "the key (echoed by the upstream's error message) reached the record"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn request_peek_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = tokentap::openai::peek_request(&bytes);
        let _ = tokentap::openai::rewrite_model(&bytes, "x");
        let _ = tokentap::openai::insert_field(&bytes, "cache_salt", "s");
        let _ = tokentap::openai::inspect_chunk(&bytes);
    }

    #[test]
    fn rewrite_model_changes_only_the_model(
        model in "[a-zA-Z0-9/_.-]{0,20}",
        other in proptest::collection::btree_map("[a-z]{1,6}", any::<i32>(), 0..5),
        nested in "[ -~]{0,16}",
        new_model in "[ -~]{0,20}",
    ) {
        let mut obj = serde_json::Map::new();
        for (k, v) in &other {
            obj.insert(k.clone(), (*v).into());
        }
        obj.insert("messages".into(), serde_json::json!([{"role": "user", "content": nested, "model": "inner"}]));
        obj.insert("model".into(), model.clone().into());
        let body = serde_json::to_vec(&serde_json::Value::Object(obj.clone())).unwrap();
        let out = tokentap::openai::rewrite_model(&body, &new_model).unwrap();
        let mut expect = obj;
        expect.insert("model".into(), new_model.clone().into());
        let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
        prop_assert_eq!(got, serde_json::Value::Object(expect));
        let info = tokentap::openai::peek_request(&body);
        prop_assert_eq!(info.model, Some(model));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The upstream chunked decoder: any body, any chunk sizes (with extensions), any split into
    /// reads → exactly the body, and the bytes after the terminator are left alone.
    #[test]
    fn chunked_decoder_reassembles_any_body(
        body in proptest::collection::vec(any::<u8>(), 0..4096),
        sizes in proptest::collection::vec(1usize..700, 1..20),
        cuts in proptest::collection::vec(1usize..300, 1..40),
        upper in any::<bool>(),
    ) {
        use tokentap::proxy::h1::{Decoder, Framing};
        let mut wire = Vec::new();
        let (mut at, mut k) = (0, 0);
        while at < body.len() {
            let n = sizes[k % sizes.len()].min(body.len() - at);
            let size = if upper { format!("{n:X}") } else { format!("{n:x}") };
            wire.extend_from_slice(size.as_bytes());
            if k % 3 == 1 {
                wire.extend_from_slice(b";ext=\"v\"");
            }
            wire.extend_from_slice(b"\r\n");
            wire.extend_from_slice(&body[at..at + n]);
            wire.extend_from_slice(b"\r\n");
            at += n;
            k += 1;
        }
        wire.extend_from_slice(b"0\r\n\r\nHTTP/1.1 200 OK\r\n");
        let mut d = Decoder::new(Framing::Chunked);
        let mut out = bytes::BytesMut::new();
        let (mut buf, mut pos, mut used, mut c) = (Vec::new(), 0, 0, 0);
        while pos < wire.len() && !d.is_done() {
            let n = cuts[c % cuts.len()].min(wire.len() - pos);
            buf.extend_from_slice(&wire[pos..pos + n]);
            pos += n;
            c += 1;
            let took = d.decode(&buf, &mut out).unwrap();
            used += took;
            buf.drain(..took);
        }
        prop_assert!(d.is_done());
        prop_assert_eq!(&out[..], &body[..]);
        prop_assert_eq!(&wire[used..], &b"HTTP/1.1 200 OK\r\n"[..]);
    }

    /// Arbitrary bytes from an upstream, as a response head or as a chunked body: an answer or
    /// an error, never a panic, and never more output than input.
    #[test]
    fn upstream_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        use tokentap::proxy::h1::{parse_head, Decoder, Framing};
        if let Ok(Some(h)) = parse_head(&bytes) {
            prop_assert!(h.len <= bytes.len());
            let _ = tokentap::proxy::h1::framing(&http::Method::GET, &h);
        }
        for f in [Framing::Chunked, Framing::Length(100), Framing::Close] {
            let mut out = bytes::BytesMut::new();
            if let Ok(n) = Decoder::new(f).decode(&bytes, &mut out) {
                prop_assert!(n <= bytes.len() && out.len() <= n);
            }
        }
    }

    /// The per-stream shape cache agrees with the stateless inspection on a primed stream fed
    /// arbitrary text values (quotes, backslashes, braces included).
    #[test]
    fn shape_cache_agrees_on_any_text(texts in proptest::collection::vec("[ -~]{0,12}", 1..12)) {
        let mut shape = tokentap::openai::Shape::default();
        for t in texts {
            let ev = format!(r#"{{"id":"c","choices":[{{"index":0,"delta":{{"content":"{t}"}}}}],"created":1}}"#);
            let a = tokentap::openai::inspect_chunk_in(&mut shape, ev.as_bytes()).ok();
            let b = tokentap::openai::inspect_chunk(ev.as_bytes()).ok();
            prop_assert_eq!(a, b, "{}", ev);
        }
    }
}

#[test]
fn chunk_view_survives_truncation_at_every_byte() {
    let _alone = crate::ALONE.blocking_lock();
    // Every prefix of real events (and one ending in a lone backslash) parses or errors — no panic.
    let ev = br#"{"choices":[{"index":0,"delta":{"content":" a \"quoted\" \\ word"}}],"id":"x"}"#;
    for cut in 0..=ev.len() {
        let _ = tokentap::openai::inspect_chunk(&ev[..cut]);
    }
    assert!(tokentap::openai::inspect_chunk(br#"{"choices":[{"delta":{"content":"a\"#).is_err());
}
