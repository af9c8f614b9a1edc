//! Every way a request can end yields exactly one record with the right outcome, and the client
//! sees what the upstream sent (or a clean JSON error before any byte was sent).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use bytes::Bytes;
use support::*;
use tokentap::meter::Outcome;

#[tokio::test]
async fn streaming_ok_with_usage_and_exact_timing() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(60), MS(10), 20, true)).await;
    let px = proxy(&up.url(), "").await;
    let got = px.chat().await;
    assert_eq!(got.status, 200);
    let r = &px.records(1).await[0];
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!((r.input_tokens, r.output_tokens), (Some(7), Some(20)));
    // Bounded by when the upstream actually wrote each chunk (scheduled: the first content chunk
    // at 60 ms, then every 10 ms), so a late timer on a busy machine moves both sides together.
    let sent: Vec<f64> = up.sent.lock().unwrap()[0]
        .iter()
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    assert!(sent[1] >= 60.0, "{sent:?}");
    let ttft = r.ttft_ms.unwrap();
    // The upper slack is for a loaded machine, where the upstream's own clock can start late
    // (its task first runs after the request arrived): 19 ms was seen under two busy loops and
    // two builds; quiet, the two agree within 2 ms.
    assert!(
        ttft >= sent[1] - 1.0 && ttft < sent[1] + 40.0,
        "ttft {ttft} sent {sent:?}"
    );
    let tpot = r.tpot_ms.unwrap();
    let sent_tpot = (sent[20] - sent[1]) / 19.0;
    assert!(
        tpot >= 9.5 && (tpot - sent_tpot).abs() < 1.5,
        "tpot {tpot} sent {sent_tpot}"
    );
    assert!(r.first_event_ms.unwrap() < 20.0, "role chunk comes at once");
    assert!(r.upstream_headers_ms.unwrap() < 20.0);
    assert_eq!(r.in_flight, 1);
    assert_eq!(r.model.as_deref(), Some("m"));
    assert_eq!(r.max_tokens, Some(16));
    assert_eq!(r.done, Some(true));
    // The client's clock agrees with the proxy's: first content frame arrives at about TTFT.
    let client_ttft = got.frame_times[1].as_secs_f64() * 1000.0;
    assert!(
        (client_ttft - ttft).abs() < 10.0,
        "client {client_ttft} proxy {ttft}"
    );
}

/// An empty body (`content-length: 0`, as vLLM's `/health` answers) is read whole without a
/// poll: the record says ok, not that the client went away.
#[tokio::test]
async fn an_empty_body_is_ok_not_cancelled() {
    let up = Upstream::spawn(|_| Script::json(200, "")).await;
    let px = proxy(&up.url(), "").await;
    let c = client();
    for _ in 0..2 {
        let got = send(&c, "GET", &px.url("/health"), &[], Vec::new())
            .await
            .unwrap();
        assert_eq!((got.status, got.body.len()), (200, 0));
    }
    let recs = px.records(2).await;
    assert_eq!(recs.len(), 2);
    for r in recs {
        assert_eq!(
            (r.outcome, r.status, r.error.as_deref()),
            (Outcome::Ok, 200, None)
        );
    }
}

#[tokio::test]
async fn non_streaming_has_no_ttft() {
    let body = r#"{"choices":[{"message":{"content":"hello"}}],"usage":{"prompt_tokens":3,"completion_tokens":5}}"#;
    let up = Upstream::spawn(move |_| Script {
        head_delay: MS(30),
        ..Script::json(200, body)
    })
    .await;
    let px = proxy(&up.url(), "").await;
    let got = send(
        &client(),
        "POST",
        &px.url("/v1/chat/completions"),
        &[],
        chat_body("m", false),
    )
    .await
    .unwrap();
    assert_eq!(got.body, body.as_bytes());
    let r = &px.records(1).await[0];
    assert_eq!(r.outcome, Outcome::Ok);
    assert_eq!(r.ttft_ms, None);
    assert_eq!(r.tpot_ms, None);
    assert_eq!((r.input_tokens, r.output_tokens), (Some(3), Some(5)));
    assert!(r.e2e_ms >= 30.0);
}

#[tokio::test]
async fn upstream_error_status_is_passed_through_verbatim() {
    let body = r#"{"error":{"message":"slow down","type":"rate_limit","param":null,"code":429}}"#;
    for status in [429u16, 500, 503] {
        let up = Upstream::spawn(move |_| {
            let mut s = Script::json(status, body);
            s.headers.push(("retry-after".into(), "3".into()));
            s
        })
        .await;
        let px = proxy(&up.url(), "").await;
        let got = px.chat().await;
        assert_eq!(got.status, status);
        assert_eq!(got.body, body.as_bytes());
        assert_eq!(got.headers["retry-after"], "3");
        let r = &px.records(1).await[0];
        assert_eq!(r.outcome, Outcome::UpstreamError);
        assert_eq!(r.status, status);
        let err = r.error.as_deref().unwrap();
        assert!(
            err.contains("rate_limit") && !err.contains("slow down"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn connect_refused_is_502_json() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let px = proxy(&format!("http://127.0.0.1:{port}"), "").await;
    let got = px.chat().await;
    assert_eq!(got.status, 502);
    let j: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(j["error"]["code"], "upstream_unreachable");
    assert_eq!(got.headers["content-type"], "application/json");
    let r = &px.records(1).await[0];
    assert_eq!(r.outcome, Outcome::ConnectError);
    assert_eq!(r.status, 502);
}

#[tokio::test]
async fn first_byte_timeout_is_504() {
    let up = Upstream::spawn(|_| Script {
        head_delay: MS(2000),
        ..Script::chat_stream(MS(1), MS(1), 2, false)
    })
    .await;
    let px = proxy(&up.url(), "[timeouts]\nfirst_byte_ms = 150\n").await;
    let got = px.chat().await;
    assert_eq!(got.status, 504);
    let r = &px.records(1).await[0];
    assert_eq!(r.outcome, Outcome::Timeout);
    assert!(r.e2e_ms >= 150.0 && r.e2e_ms < 400.0, "{}", r.e2e_ms);
}

#[tokio::test]
async fn idle_timeout_cuts_the_stream_and_keeps_tokens_seen() {
    let up = Upstream::spawn(|_| {
        let mut s = Script::chat_stream(MS(10), MS(5), 3, false);
        s.chunks.pop(); // no [DONE]
        s.finish = Finish::Stall(MS(3000));
        s
    })
    .await;
    let px = proxy(&up.url(), "[timeouts]\nidle_ms = 200\n").await;
    let got = px.chat().await;
    assert_eq!(got.status, 200);
    assert!(got.body_error, "the client's stream is cut");
    let r = &px.records(1).await[0];
    assert_eq!(r.outcome, Outcome::Timeout);
    assert_eq!(r.output_tokens, Some(3));
    assert!(r.e2e_ms >= 200.0 && r.e2e_ms < 600.0, "{}", r.e2e_ms);
}

#[tokio::test]
async fn upstream_reset_mid_stream_cuts_the_client_stream() {
    let up = Upstream::spawn(|_| {
        let mut s = Script::chat_stream(MS(10), MS(5), 4, false);
        s.chunks.pop();
        s.finish = Finish::Reset;
        s
    })
    .await;
    let px = proxy(&up.url(), "").await;
    let got = px.chat().await;
    assert!(
        got.body_error,
        "the client sees the stream end as the upstream's did"
    );
    assert!(
        got.body
            .ends_with(b"t3 \"},\"finish_reason\":\"stop\"}]}\n\n"),
        "everything sent before the reset arrived"
    );
    let r = &px.records(1).await[0];
    assert_eq!(r.outcome, Outcome::UpstreamReset);
    assert_eq!(r.output_tokens, Some(4));
}

#[tokio::test]
async fn stream_without_done_is_incomplete() {
    let up = Upstream::spawn(|_| {
        let mut s = Script::chat_stream(MS(5), MS(1), 2, false);
        s.chunks.pop();
        s
    })
    .await;
    let px = proxy(&up.url(), "").await;
    let got = px.chat().await;
    assert!(!got.body_error);
    assert_eq!(px.records(1).await[0].outcome, Outcome::Incomplete);
}

#[tokio::test]
async fn client_cancel_drops_the_upstream_at_once() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(10), MS(10), 500, false)).await;
    let px = proxy(&up.url(), "").await;
    // A raw client that reads the head and a little body, then disconnects.
    use tokio::io::AsyncReadExt;
    let mut s = raw_chat(px.addr).await;
    let mut buf = vec![0u8; 4096];
    let mut seen = 0;
    while seen < 600 {
        seen += s.read(&mut buf).await.unwrap();
    }
    let closed_at = tokio::time::Instant::now();
    drop(s);
    let r = &px.records(1).await[0];
    assert_eq!(r.outcome, Outcome::ClientCancelled);
    assert!(r.output_tokens.unwrap() >= 1 && r.output_tokens.unwrap() < 100);
    // The upstream notices within ~100 ms: its next writes fail.
    let deadline = tokio::time::Instant::now() + MS(1000);
    while up.write_failures.lock().unwrap().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(MS(5)).await;
    }
    let failed = up.write_failures.lock().unwrap()[0];
    let lag = failed.saturating_duration_since(closed_at);
    assert!(
        lag < MS(100),
        "upstream still written to {lag:?} after the client left"
    );
}

#[tokio::test]
async fn rejections_are_json_and_recorded() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(300), MS(1), 1, false)).await;
    let team = tokentap::keys::fingerprint(b"sk-team-a");
    let px = proxy_toml(&format!(
        "[keys]\naliases = {{ \"{team}\" = \"team-a\" }}\n[limits]\nmax_request_bytes = 1000\nmax_concurrent = 1\n[[routes]]\nname = \"only\"\nupstream = \"{}\"\npath_prefix = \"/v1\"\n",
        up.url()
    ))
    .await;
    let c = client();
    // 413: body over the limit (declared and streamed).
    let got = send(
        &c,
        "POST",
        &px.url("/v1/chat/completions"),
        &[("authorization", "Bearer sk-team-a")],
        vec![b'x'; 5000],
    )
    .await
    .unwrap();
    assert_eq!(got.status, 413);
    let j: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(j["error"]["code"], "request_too_large");
    // 404: no route.
    let got = send(
        &c,
        "GET",
        &px.url("/other"),
        &[("x-api-key", "sk-other")],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(got.status, 404);
    // 503: at the concurrency limit while one request is in flight.
    let url = px.url("/v1/chat/completions");
    let slow = tokio::spawn({
        let c = c.clone();
        async move {
            send(&c, "POST", &url, &[], chat_body("m", true))
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(MS(100)).await;
    let got = px.chat_with(&c).await;
    assert_eq!(got.status, 503);
    assert_eq!(got.headers["retry-after"], "1");
    assert_eq!(slow.await.unwrap().status, 200);
    let recs = px.records(4).await;
    assert_eq!(recs.len(), 4);
    let rejected: Vec<u16> = recs
        .iter()
        .filter(|r| r.outcome == Outcome::Rejected)
        .map(|r| r.status)
        .collect();
    assert_eq!(rejected.len(), 3);
    for s in [413, 404, 503] {
        assert!(rejected.contains(&s), "{rejected:?}");
    }
    assert!(recs.iter().any(|r| r.route == "unrouted"));
    // Requests refused before reaching an upstream still name their key (alias or fingerprint).
    let by_status = |s: u16| recs.iter().find(|r| r.status == s).unwrap();
    assert_eq!(by_status(413).key_id.as_deref(), Some("team-a"));
    let other = tokentap::keys::fingerprint(b"sk-other");
    assert_eq!(by_status(404).key_id.as_deref(), Some(other.as_str()));
    assert_eq!(by_status(503).key_id, None);
    // What the body said is in the served request's record.
    let ok = by_status(200);
    assert_eq!(ok.model.as_deref(), Some("m"));
    assert!(ok.stream);
}

#[tokio::test]
async fn non_json_body_is_forwarded_unchanged_and_model_map_rewrites_only_model() {
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let px = proxy(&up.url(), "model_map = { \"gpt-4o\" = \"tiny\" }\n").await;
    let c = client();
    let raw = b"\x00\x01not json at all \xff".to_vec();
    send(
        &c,
        "POST",
        &px.url("/v1/whatever?x=1"),
        &[("content-type", "application/octet-stream")],
        raw.clone(),
    )
    .await
    .unwrap();
    let body = br#"{ "messages":[{"role":"user","content":"model"}], "model" : "gpt-4o","stream":false,"z":{"model":"gpt-4o"}}"#.to_vec();
    send(
        &c,
        "POST",
        &px.url("/v1/chat/completions"),
        &[],
        body.clone(),
    )
    .await
    .unwrap();
    let reqs = up.requests();
    assert_eq!(reqs[0].body, raw);
    assert_eq!(reqs[0].request_line(), "POST /v1/whatever?x=1 HTTP/1.1");
    let expected = String::from_utf8(body)
        .unwrap()
        .replacen("\"gpt-4o\"", "\"tiny\"", 1);
    assert_eq!(String::from_utf8(reqs[1].body.clone()).unwrap(), expected);
    let recs = px.records(2).await;
    assert_eq!(recs[1].model.as_deref(), Some("gpt-4o"));
    assert_eq!(recs[1].upstream_model.as_deref(), Some("tiny"));
    assert_eq!(recs[0].model, None);
}

#[tokio::test]
async fn headers_keys_and_no_open_proxy() {
    std::env::set_var("TOKENTAP_TEST_UPSTREAM_KEY", "sk-upstream-credential-123");
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let px = proxy(
        &up.url(),
        "set_headers = { authorization = \"Bearer ${TOKENTAP_TEST_UPSTREAM_KEY}\" }\nadmit_sources = [\"127.0.0.1\"]\n",
    )
    .await;
    let c = client();
    let secret = "sk-client-secret-key-987";
    let auth = format!("Bearer {secret}");
    // Connection names x-api-key (hop-by-hop injection), Host is spoofed.
    send(
        &c,
        "POST",
        &px.url("/v1/chat/completions"),
        &[
            ("authorization", &auth),
            ("x-api-key", secret),
            ("connection", "x-api-key"),
            ("host", "evil.example:1"),
            ("x-custom", "kept"),
        ],
        chat_body("m", false),
    )
    .await
    .unwrap();
    let req = &up.requests()[0];
    assert_eq!(
        req.header("authorization").as_deref(),
        Some("Bearer sk-upstream-credential-123")
    );
    assert_eq!(
        req.header("x-api-key").as_deref(),
        Some(secret),
        "not stripped by Connection"
    );
    assert_eq!(req.header("x-custom").as_deref(), Some("kept"));
    assert_eq!(req.header("host"), Some(up.addr.to_string()));
    assert!(req
        .header("connection")
        .is_none_or(|v| !v.contains("x-api-key")));

    // Absolute-form request URI naming another host still goes to the configured upstream.
    let mut s = tokio::net::TcpStream::connect(px.addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET http://evil.example:1/v1/models HTTP/1.1\r\nhost: evil.example:1\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).await.unwrap();
    assert!(resp.starts_with(b"HTTP/1.1 200"));
    assert_eq!(up.requests().len(), 2);
    assert_eq!(up.requests()[1].request_line(), "GET /v1/models HTTP/1.1");

    let recs = px.records(2).await;
    assert_eq!(
        recs[0].key_id.as_deref(),
        Some(tokentap::keys::fingerprint(secret.as_bytes()).as_str())
    );
    let (_, metrics) = px.admin_get("/metrics").await;
    let (_, stats) = px.admin_get("/stats").await;
    let log = std::fs::read_to_string(&px.log).unwrap();
    for text in [&metrics, &stats, &log] {
        assert!(
            !text.contains(secret) && !text.contains("sk-upstream-credential"),
            "a key leaked"
        );
    }
}

#[tokio::test]
async fn admin_endpoints() {
    let up = Upstream::spawn(|_| Script::chat_stream(MS(90), MS(5), 5, true)).await;
    let mut px = proxy(&up.url(), "").await;
    send(
        &client(),
        "POST",
        &px.url("/v1/chat/completions"),
        &[("authorization", "Bearer k1")],
        chat_body("m", true),
    )
    .await
    .unwrap();
    px.records(1).await;
    let (s, m) = px.admin_get("/metrics").await;
    assert_eq!(s, 200);
    // TTFT of ~90 ms lands between the 0.09 and 0.1 (or 0.11) edges; 0.2 is an edge.
    assert!(
        m.contains("tokentap_time_to_first_token_seconds_bucket{"),
        "{m}"
    );
    assert!(m.contains("le=\"0.2\""));
    assert!(m.contains("le=\"0.08\""));
    // The in-flight ceiling, for the alert that watches it.
    assert!(m.contains("tokentap_max_concurrent_requests 10000"), "{m}");
    // Every request's API shape is a label; the first output token has its own histogram.
    assert!(
        m.contains("tokentap_time_to_first_token_seconds_count{route=\"default\",model=\"m\",key=\"sha256:6ab9f1eb8f7d3388f4f9d586f66e99fd54080df2c446f0e58668b09c08a16dd0\",api=\"chat\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("tokentap_time_to_first_output_token_seconds_count{route=\"default\",model=\"m\",key=\"sha256:6ab9f1eb8f7d3388f4f9d586f66e99fd54080df2c446f0e58668b09c08a16dd0\",api=\"chat\"} 1"),
        "{m}"
    );
    assert!(m.contains("tokentap_requests_total{"));
    assert!(m.contains("outcome=\"ok\""));
    assert!(m.contains("tokentap_output_tokens_total{"));
    assert!(m.contains("tokentap_in_flight_requests{route=\"default\"} 0"));
    // Five events 5 ms apart: four gaps, none under 1 ms; the one ITL family is rendered once.
    let itl = |s: &str| format!("tokentap_inter_token_latency_seconds_{s}");
    assert!(
        m.contains(&format!(
            "{}{{route=\"default\",model=\"m\"}} 4",
            itl("count")
        )),
        "{m}"
    );
    // The 1 ms bucket is empty when the upstream's writes were well apart; on a busy machine a
    // late timer can send two chunks back to back, and then a gap under 1 ms is what happened.
    let sent = up.sent.lock().unwrap()[0].clone();
    let close = sent[1..=5]
        .windows(2)
        .filter(|w| w[1] - w[0] < MS(3))
        .count();
    let under_1ms: u64 = m
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "{}{{route=\"default\",model=\"m\",le=\"0.001\"}} ",
                itl("bucket")
            ))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no 1 ms ITL bucket: {m}"));
    assert!(
        under_1ms <= close as u64,
        "{under_1ms} gaps under 1 ms, upstream wrote {sent:?}"
    );
    assert!(m.contains(&format!(
        "{}{{route=\"default\",model=\"m\",le=\"+Inf\"}} 4",
        itl("bucket")
    )));
    assert_eq!(
        m.matches("# TYPE tokentap_inter_token_latency_seconds")
            .count(),
        1
    );
    assert!(m.contains(&format!("key=\"{}\"", tokentap::keys::fingerprint(b"k1"))));
    let (s, stats) = px.admin_get("/stats").await;
    assert_eq!(s, 200);
    let j: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let p50 = j["routes"]["default"]["ttft_ms"]["p50"].as_f64().unwrap();
    assert!((90.0..110.0).contains(&p50), "{p50}");
    assert_eq!(j["records"]["total"], 1);
    assert_eq!(px.admin_get("/healthz").await.0, 200);
    assert_eq!(px.admin_get("/readyz").await.0, 200);
    px.shutdown().await;
}

#[tokio::test]
async fn key_labels_are_capped() {
    let up = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let px = proxy(&up.url(), "").await;
    let px2 = proxy_toml(&format!(
        "[limits]\nmax_key_labels = 2\n[[routes]]\nname = \"r\"\nupstream = \"{}\"\n",
        up.url()
    ))
    .await;
    let c = client();
    for i in 0..5 {
        let auth = format!("Bearer key-{i}");
        send(
            &c,
            "GET",
            &px2.url("/v1/models"),
            &[("authorization", &auth)],
            vec![],
        )
        .await
        .unwrap();
    }
    let recs = px2.records(5).await;
    assert_eq!(
        recs.iter()
            .filter_map(|r| r.key_id.clone())
            .collect::<std::collections::HashSet<_>>()
            .len(),
        5
    );
    let (_, m) = px2.admin_get("/metrics").await;
    assert!(m.contains("key=\"other\""));
    let keys: std::collections::HashSet<&str> = m
        .match_indices("key=\"sha256:")
        .map(|(i, _)| &m[i..i + 20])
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    drop(px);
}

#[tokio::test]
async fn http2_clients_are_served() {
    // On Linux the request's t0 is the kernel's stamp of the read that held its HEADERS frame.
    tokentap::rxstamp::enable();
    let up = Upstream::spawn(|_| Script::chat_stream(MS(5), MS(1), 3, false)).await;
    let px = proxy(&up.url(), "").await;
    let c: hyper_util::client::legacy::Client<_, http_body_util::Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build(hyper_util::client::legacy::connect::HttpConnector::new());
    let got = px.chat_with(&c).await;
    assert_eq!(got.status, 200);
    assert!(got.body.ends_with(b"data: [DONE]\n\n"));
    let r = &px.records(1).await[0];
    assert_eq!(r.output_tokens, Some(3));
    if cfg!(target_os = "linux") {
        assert_eq!(r.clock, tokentap::meter::Clock::Kernel, "{r:?}");
    }
}

#[tokio::test]
async fn hanging_up_right_after_done_is_a_complete_request() {
    // The openai Python client stops reading at `data: [DONE]` and closes the connection
    // without waiting for the chunked terminator; LiteLLM sends that terminator late.
    let up = Upstream::spawn(|_| {
        let mut s = Script::chat_stream(MS(10), MS(2), 5, true);
        s.finish = Finish::Stall(MS(2000));
        s
    })
    .await;
    let px = proxy(&up.url(), "").await;
    let mut s = raw_chat(px.addr).await;
    read_until(&mut s, "data: [DONE]").await;
    drop(s);
    let r = &px.records(1).await[0];
    assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
    assert_eq!(r.output_tokens, Some(5));
    assert!(r.e2e_ms < 500.0, "E2E ends at [DONE]: {}", r.e2e_ms);
}
