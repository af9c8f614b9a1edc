//! Without the kernel's receive stamps (`TOKENTAP_KERNEL_STAMPS=0`; on Linux they are on by
//! default), tokentap stamps with its own clock: the record says `clock: "process"`, no fallback is counted (none
//! was asked for), and a held proxy's TTFT includes the hold. Then, the stamps turned on, a
//! request on sockets that were never asked for them (the kept-alive connections of the first)
//! is a fallback: the record says `clock: "process"` and the counter counts it. Its own test
//! binary: the switch is for the whole process.
// Tests and benches time what they drive on their own process clock, and set the environment
// only where they must (tests/environment/): the one-door rules are for the record's path.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::time::Duration;

use bytes::Bytes;
use support::*;
use tokentap::meter::Clock;

#[tokio::test]
async fn without_the_kernels_stamps_the_process_clock_is_used_and_a_fallback_counted_when_asked() {
    std::env::set_var("TOKENTAP_KERNEL_STAMPS", "0");
    assert!(!tokentap::rxstamp::enabled(), "off as asked");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let ev = |j: &str| Bytes::from(format!("data: {j}\n\n"));
    let script = Script {
        chunks: vec![
            (
                Duration::ZERO,
                ev(r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#),
            ),
            (Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")),
        ],
        head_delay: MS(50),
        ..Script::default()
    };
    let up = rt
        .spawn(Upstream::spawn(move |_| script.clone()))
        .await
        .unwrap();
    let px = proxy(&up.url(), "").await;
    let url = px.url("/v1/chat/completions");
    let kept = client();
    let (c, u) = (kept.clone(), url.clone());
    let client = tokio::spawn(async move { send(&c, "POST", &u, &[], chat_body("m", true)).await });
    while up.requests().is_empty() {
        tokio::time::sleep(MS(1)).await;
    }
    std::thread::sleep(MS(300));
    assert_eq!(client.await.unwrap().unwrap().status, 200);
    let r = &px.records(1).await[0];
    assert_eq!(r.clock, Clock::Process, "{r:?}");
    assert_eq!(r.stamp_lag_ms, None);
    // The token was written about 50 ms after the request; the proxy read it after the hold.
    let ttft = r.ttft_ms.unwrap();
    assert!(ttft >= 299.0, "ttft {ttft}");
    let (_, text) = px.admin_get("/metrics").await;
    assert_eq!(
        metric(&text, "tokentap_clock_fallbacks_total{route=\"default\"}"),
        None,
        "{text}"
    );
    assert_eq!(metric(&text, "tokentap_stamp_lag_seconds_count"), None);

    // Stamps asked for from now on; the client's connection and the upstream's pooled one were
    // opened unasked, so the kernel gives their reads no stamp.
    tokentap::rxstamp::enable();
    let got = send(&kept, "POST", &url, &[], chat_body("m", true))
        .await
        .unwrap();
    assert_eq!(got.status, 200);
    let r = &px.records(2).await[1];
    assert_eq!(r.clock, Clock::Process, "{r:?}");
    let (_, text) = px.admin_get("/metrics").await;
    assert_eq!(
        metric(&text, "tokentap_clock_fallbacks_total{route=\"default\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        up.connections.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "one upstream connection, kept"
    );
    drop(px);
    rt.shutdown_background();
}
