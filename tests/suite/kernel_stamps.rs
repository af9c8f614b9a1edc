//! The kernel's receive stamps: a request's instants are when its bytes arrived, not when a
//! busy proxy got to read them. Over real sockets: the upstream on its own runtime (so it keeps
//! its schedule), the proxy and the client on the test's one thread, which the test blocks.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::time::Duration;

use bytes::Bytes;
use support::*;
use tokentap::meter::{Clock, RequestRecord};

/// A chat stream: the role at once, the first token after 50 ms, the second `then` later: long
/// after the test's block is over (so the read that follows the block ends with the first
/// token's segment), or within it.
fn script(then: Duration) -> Script {
    let ev = |j: &str| Bytes::from(format!("data: {j}\n\n"));
    let token = |t: &str| {
        ev(&format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"{t}"}}}}]}}"#
        ))
    };
    Script {
        chunks: vec![
            (
                Duration::ZERO,
                ev(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#),
            ),
            (MS(50), token("a")),
            (then, token("b")),
            (Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")),
        ],
        ..Script::default()
    }
}

/// An upstream on a runtime of its own: it writes on schedule while the test's thread is held.
async fn upstream_apart(then: Duration) -> (Upstream, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let up = rt
        .spawn(Upstream::spawn(move |_| script(then)))
        .await
        .unwrap();
    (up, rt)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// An idle host: every instant is the kernel's, the lag is small, and TTFT is when the upstream
/// wrote the first token (from the proxy's request, so bounded below by the write's offset).
#[tokio::test]
async fn records_say_the_kernel_stamped_them() {
    // On by default on Linux; said again so the test does not hang on the environment.
    tokentap::rxstamp::enable();
    let up = Upstream::spawn(|_| Script::chat_stream(MS(40), MS(10), 5, true)).await;
    let px = proxy(&up.url(), "").await;
    assert_eq!(px.chat().await.status, 200);
    let r = &px.records(1).await[0];
    assert_eq!(r.clock, Clock::Kernel, "{r:?}");
    let lag = r.stamp_lag_ms.expect("a stream's first token has its lag");
    assert!((0.0..100.0).contains(&lag), "lag {lag}");
    let sent: Vec<f64> = up.sent.lock().unwrap()[0].iter().map(|d| ms(*d)).collect();
    let ttft = r.ttft_ms.unwrap();
    assert!(
        ttft >= sent[1] - 1.0 && ttft < sent[1] + 15.0,
        "ttft {ttft} sent {sent:?}"
    );
    assert!(r.e2e_ms >= ttft && r.itl_max_ms.unwrap() < 100.0, "{r:?}");
    let (_, text) = px.admin_get("/metrics").await;
    assert_eq!(
        metric(&text, "tokentap_stamp_lag_seconds_count{route=\"default\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(metric(&text, "tokentap_clock_fallbacks_total"), None);
}

/// The proxy's only thread is held for 300 ms while the upstream writes the first token: the
/// kernel's stamp keeps TTFT at the write, and `stamp_lag_ms` shows the delay.
#[tokio::test]
async fn a_held_proxy_still_stamps_the_first_token_when_it_arrived() {
    // On by default on Linux; said again so the test does not hang on the environment.
    tokentap::rxstamp::enable();
    let (up, rt) = upstream_apart(MS(700)).await;
    let (r, sent) = held_for(&up, MS(300)).await;
    assert!(
        sent[1] < 250.0,
        "the upstream wrote the token during the hold: {sent:?}"
    );
    assert_eq!(r.clock, Clock::Kernel, "{r:?}");
    let ttft = r.ttft_ms.unwrap();
    // The process's clock would say at least the hold (300 ms); the token was written at
    // sent[1] (about 50 ms) after the upstream read the request.
    assert!(
        ttft >= sent[1] - 1.0 && ttft < sent[1] + 60.0,
        "ttft {ttft} sent {sent:?}"
    );
    let lag = r.stamp_lag_ms.unwrap();
    assert!(lag > 150.0 && lag < 2000.0, "lag {lag}");
    assert_eq!(r.delivery.as_ref().unwrap().first_read_events, 1, "{r:?}");
    rt.shutdown_background();
}

/// A request head that arrives while the proxy's only thread is held: `ts` is when it arrived
/// (the wall time of t0, the kernel's stamp), not when the proxy got to it, so `ts + e2e_ms` is
/// when the last byte left, never after the client had it.
#[tokio::test]
async fn a_held_proxy_dates_the_record_when_the_head_arrived() {
    use std::io::{Read, Write};
    use std::time::SystemTime;
    // On by default on Linux; said again so the test does not hang on the environment.
    tokentap::rxstamp::enable();
    let (up, rt) = upstream_apart(MS(20)).await;
    let px = proxy(&up.url(), "").await;
    let addr = px.addr;
    let before = SystemTime::now();
    // A client of its own thread: it sends while the test's (and the proxy's) thread is held.
    let client = std::thread::spawn(move || {
        std::thread::sleep(MS(30));
        let body = chat_body("m", true);
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(&body).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        (
            SystemTime::now(),
            String::from_utf8_lossy(&got).into_owned(),
        )
    });
    std::thread::sleep(MS(300));
    let (ended, got) = tokio::task::spawn_blocking(move || client.join().unwrap())
        .await
        .unwrap();
    assert!(
        got.starts_with("HTTP/1.1 200") && got.contains("[DONE]"),
        "{got}"
    );
    let r = px.records(1).await.remove(0);
    assert_eq!(r.clock, Clock::Kernel, "{r:?}");
    let ts = humantime::parse_rfc3339(&r.ts).unwrap();
    let arrived = ms(ts.duration_since(before).unwrap());
    // Sent about 30 ms in; the proxy read it after the 300 ms hold.
    assert!(
        (25.0..200.0).contains(&arrived),
        "ts is {arrived} ms after the client set out"
    );
    let end = ts + Duration::from_secs_f64(r.e2e_ms / 1000.0);
    assert!(
        end <= ended + MS(1),
        "the record ends {:?} after the client had the end",
        end.duration_since(ended).unwrap_or_default()
    );
    rt.shutdown_background();
}

/// A request through a proxy whose only thread is held for `hold` from when the upstream has
/// the request; its record and when the upstream wrote each chunk (ms).
async fn held_for(up: &Upstream, hold: Duration) -> (RequestRecord, Vec<f64>) {
    let px = proxy(&up.url(), "").await;
    let url = px.url("/v1/chat/completions");
    let client =
        tokio::spawn(async move { send(&client(), "POST", &url, &[], chat_body("m", true)).await });
    while up.requests().is_empty() {
        tokio::time::sleep(MS(1)).await;
    }
    std::thread::sleep(hold);
    let got = client.await.unwrap().unwrap();
    assert_eq!(got.status, 200);
    let r = px.records(1).await.remove(0);
    let sent: Vec<f64> = up.sent.lock().unwrap()[0].iter().map(|d| ms(*d)).collect();
    (r, sent)
}

/// The limit of any receive stamp: when the next token arrives before the proxy reads the first,
/// Linux merges the two segments in the socket's receive queue, and the merged buffer keeps the
/// newer segment's stamp. No read, however short, gets the first one's back. The record says so:
/// its first read carried two content events, so its TTFT is an upper bound (the second token's
/// arrival), still far nearer than the process's clock (the end of the hold).
#[tokio::test]
async fn a_first_token_read_with_the_next_is_flagged() {
    tokentap::rxstamp::enable();
    let (up, rt) = upstream_apart(MS(40)).await;
    let (r, sent) = held_for(&up, MS(300)).await;
    assert!(
        sent[2] < 250.0,
        "both tokens came during the hold: {sent:?}"
    );
    assert_eq!(r.clock, Clock::Kernel, "{r:?}");
    assert_eq!(r.delivery.as_ref().unwrap().first_read_events, 2, "{r:?}");
    let ttft = r.ttft_ms.unwrap();
    assert!(
        ttft >= sent[1] - 1.0 && ttft < sent[2] + 60.0,
        "ttft {ttft} sent {sent:?}"
    );
    rt.shutdown_background();
}
