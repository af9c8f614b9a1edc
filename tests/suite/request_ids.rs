//! Request ids over real sockets: the client's `x-request-id` recorded (and forwarded as it
//! came), the upstream's id from its response header or its stream's first chunk, an id made
//! for a request without one (sent upstream, returned to the client, recorded), and ids cut to
//! their bound.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use bytes::Bytes;
use support::*;

async fn chat(px: &TestProxy, headers: &[(&str, &str)]) -> Got {
    let got = send(
        &client(),
        "POST",
        &px.url("/v1/chat/completions"),
        headers,
        chat_body("m", true),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    got
}

/// A chat stream whose upstream names itself in an `x-request-id` response header.
fn with_header(id: &str) -> Script {
    let mut s = Script::chat_stream(MS(1), MS(1), 2, true);
    s.headers.push(("x-request-id".into(), id.into()));
    s
}

#[tokio::test]
async fn a_client_request_id_is_recorded_and_forwarded_unchanged() {
    let up = Upstream::spawn(|_| with_header("vllm-42")).await;
    let px = proxy(&up.url(), "").await;
    let got = chat(&px, &[("X-Request-ID", "abc")]).await;
    let rec = px.records(1).await.remove(0);
    assert_eq!(rec.request_id.as_deref(), Some("abc"));
    assert_eq!(
        up.requests()[0].header("x-request-id").as_deref(),
        Some("abc")
    );
    // The upstream's response header: its id (the stream's chunks carry none).
    assert_eq!(rec.upstream_request_id.as_deref(), Some("vllm-42"));
    assert_eq!(
        got.headers.get("x-request-id").map(|v| v.as_bytes()),
        Some(&b"vllm-42"[..]),
        "the upstream's response headers pass as they came"
    );
    // Generation is off by default: a request without an id has none, and gets none back.
    let up2 = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 2, true)).await;
    let px2 = proxy(&up2.url(), "").await;
    let got = chat(&px2, &[]).await;
    let rec = px2.records(1).await.remove(0);
    assert_eq!((rec.request_id, rec.upstream_request_id), (None, None));
    assert!(up2.requests()[0].header("x-request-id").is_none());
    assert!(got.headers.get("x-request-id").is_none());
}

#[tokio::test]
async fn the_upstream_id_comes_from_the_streams_first_chunk_before_its_header() {
    let ev = |j: &str| (MS(1), Bytes::from(format!("data: {j}\n\n")));
    let up = Upstream::spawn(move |_| Script {
        headers: vec![
            ("content-type".into(), "text/event-stream".into()),
            ("x-request-id".into(), "header-id".into()),
        ],
        chunks: vec![
            ev(r#"{"id":"chatcmpl-7","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#),
            ev(r#"{"id":"chatcmpl-7","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}"#),
            (MS(1), Bytes::from_static(b"data: [DONE]\n\n")),
        ],
        ..Script::default()
    })
    .await;
    let px = proxy(&up.url(), "").await;
    chat(&px, &[("x-request-id", "client-1")]).await;
    let rec = px.records(1).await.remove(0);
    assert_eq!(rec.request_id.as_deref(), Some("client-1"));
    assert_eq!(rec.upstream_request_id.as_deref(), Some("chatcmpl-7"));
}

#[tokio::test]
async fn an_id_made_for_a_request_goes_upstream_back_to_the_client_and_into_its_record() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 2, true)).await;
    let px = proxy(
        &up.url(),
        "[request_id]\nheaders = [\"x-correlation-id\", \"x-request-id\"]\ngenerate = true\n",
    )
    .await;
    let got = chat(&px, &[]).await;
    let made = got
        .headers
        .get("x-correlation-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .expect("the made id is returned to the client");
    assert_eq!(made.len(), 32, "{made}");
    assert_eq!(
        up.requests()[0].header("x-correlation-id").as_deref(),
        Some(made.as_str())
    );
    // A client's own id, in any listed header, is kept: none is made.
    let got = chat(&px, &[("x-request-id", "mine")]).await;
    assert!(got.headers.get("x-correlation-id").is_none());
    assert!(up.requests()[1].header("x-correlation-id").is_none());
    let recs = px.records(2).await;
    assert_eq!(recs[0].request_id.as_deref(), Some(made.as_str()));
    assert_eq!(recs[1].request_id.as_deref(), Some("mine"));
}

#[tokio::test]
async fn a_refusal_returns_the_made_id_too() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(1), MS(1), 2, true)).await;
    let px = proxy(
        &up.url(),
        "[limits]\nmax_request_bytes = 16\n[request_id]\ngenerate = true\n",
    )
    .await;
    let got = send(
        &client(),
        "POST",
        &px.url("/v1/chat/completions"),
        &[],
        chat_body("m", true),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 413);
    let made = got
        .headers
        .get("x-request-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let rec = px.records(1).await.remove(0);
    assert!(made.is_some());
    assert_eq!(rec.request_id, made);
    assert!(up.requests().is_empty());
}

#[tokio::test]
async fn ids_are_cut_to_128_bytes_in_the_record_only() {
    let long = "r".repeat(200);
    let up_long = "u".repeat(200);
    let up = {
        let up_long = up_long.clone();
        Upstream::spawn(move |_| with_header(&up_long)).await
    };
    let px = proxy(&up.url(), "").await;
    let got = chat(&px, &[("x-request-id", &long)]).await;
    let rec = px.records(1).await.remove(0);
    assert_eq!(rec.request_id.as_deref(), Some(&long[..128]));
    assert_eq!(rec.upstream_request_id.as_deref(), Some(&up_long[..128]));
    // What is forwarded is not cut.
    assert_eq!(up.requests()[0].header("x-request-id"), Some(long));
    assert_eq!(got.headers.get("x-request-id").map(|v| v.len()), Some(200));
    // A quote or a backslash in an id is escaped in the log (the line reads back).
    chat(&px, &[("x-request-id", r#"a"b\c"#)]).await;
    let rec = px.records(2).await.remove(1);
    assert_eq!(rec.request_id.as_deref(), Some(r#"a"b\c"#));
    let line = std::fs::read_to_string(&px.log).unwrap();
    assert!(line.contains(r#""request_id":"a\"b\\c""#), "{line}");
}
