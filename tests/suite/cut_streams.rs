//! A stream cut short never reads as a clean `ok`, whatever the upstream sends: a stream that
//! ends with `[DONE]` but without a finish reason, or with vLLM's `abort`, is `incomplete` and
//! the report counts it a service failure; a stream that says why it ended is `ok`. The sim,
//! stopped mid-stream (in-process and as a process, by SIGTERM), ends its streams as vLLM does
//! (docs/records.md, "A stream cut short"; tests/fixtures/sse/README.md for vLLM's own bytes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use support::*;
use tokentap::meter::{Outcome, RequestRecord};
use tokentap::report::row::{Class, Row};
use tokentap::report::{self, Slos};
use tokentap::sim::{Profile, Sim};

fn ev(json: &str) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}

/// Role chunk, `n` tokens, then `tail` (each event after 2 ms).
fn stream_then(n: usize, tail: &[&str]) -> Script {
    let mut chunks = vec![(
        MS(0),
        ev(
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        ),
    )];
    for i in 0..n {
        let tok = format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"t{i} "}},"finish_reason":null}}]}}"#
        );
        chunks.push((MS(2), ev(&tok)));
    }
    chunks.extend(tail.iter().map(|t| (MS(2), ev(t))));
    Script {
        chunks,
        ..Script::default()
    }
}

/// The events after 35 tokens; the record's outcome, finish reason and error.
type Case<'a> = (Vec<&'a str>, Outcome, Option<&'a str>, Option<&'a str>);

/// The report's traffic counts of these records: (served, failed).
fn served_failed(recs: &[RequestRecord]) -> (usize, usize) {
    let r = report::compute(recs, &Slos::default(), 10, false);
    (r.traffic.served, r.traffic.failed)
}

#[tokio::test]
async fn a_stream_without_a_finish_reason_is_incomplete_and_counted_failed() {
    let usage = r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":35}}"#;
    let abort = r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"abort","stop_reason":null}]}"#;
    let last = r#"{"choices":[{"index":0,"delta":{"content":"end"},"finish_reason":"length"}]}"#;
    let cases: [Case; 4] = [
        (
            vec!["[DONE]"],
            Outcome::Incomplete,
            None,
            Some("stream ended without a finish reason"),
        ),
        (
            vec![usage, "[DONE]"],
            Outcome::Incomplete,
            None,
            Some("stream ended without a finish reason"),
        ),
        (
            vec![abort, usage, "[DONE]"],
            Outcome::Incomplete,
            Some("abort"),
            Some("stream ended with finish reason abort"),
        ),
        (
            vec![last, usage, "[DONE]"],
            Outcome::Ok,
            Some("length"),
            None,
        ),
    ];
    let scripts: Vec<Script> = cases.iter().map(|c| stream_then(35, &c.0)).collect();
    let up = Upstream::spawn(move |req| {
        let i: usize = req.header("x-case").unwrap().parse().unwrap();
        scripts[i].clone()
    })
    .await;
    let px = proxy(&up.url(), "").await;
    let c = client();
    for (i, (tail, outcome, finish, error)) in cases.iter().enumerate() {
        let case = i.to_string();
        let got = send(
            &c,
            "POST",
            &px.url("/v1/chat/completions"),
            &[("content-type", "application/json"), ("x-case", &case)],
            chat_body("m", true),
        )
        .await
        .unwrap();
        assert!(!got.body_error, "{tail:?}: the transport ended cleanly");
        assert!(got.body.ends_with(b"data: [DONE]\n\n"));
        let recs = px.records(i + 1).await;
        let r = &recs[i];
        assert_eq!(r.outcome, *outcome, "{tail:?}: {r:?}");
        assert_eq!(r.finish_reason.as_deref(), *finish, "{tail:?}");
        assert_eq!(r.error.as_deref(), *error, "{tail:?}");
        assert_eq!(
            r.done,
            Some(true),
            "[DONE] came: the flag is the finish reason"
        );
        let class = Row::of(r).class();
        let want = if *outcome == Outcome::Ok {
            Class::Served
        } else {
            Class::Failed
        };
        assert_eq!(class, want, "{tail:?}");
    }
    let recs = px.records(cases.len()).await;
    assert_eq!(served_failed(&recs), (1, 3));
}

/// Send a long streamed chat request to `url` and read it; once `after` token events have
/// come, call `stop`. The body, and whether it ended with an error.
async fn read_stopping(url: &str, after: usize, stop: impl FnOnce()) -> (String, bool) {
    let body = br#"{"model":"m","messages":[{"role":"user","content":"Say hello to the proxy."}],"max_tokens":400,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}"#;
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(body)))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let (mut text, mut stop) = (String::new(), Some(stop));
    while let Some(f) = body.frame().await {
        let Ok(f) = f else { return (text, true) };
        if let Some(d) = f.data_ref() {
            text.push_str(&String::from_utf8_lossy(d));
        }
        if text.matches(r#""content":"#).count() > after {
            if let Some(s) = stop.take() {
                s();
            }
        }
    }
    (text, false)
}

/// What the client got of a stream the sim aborted: vLLM's abort chunk, the usage chunk, then
/// `[DONE]` and a clean end. The tokens the usage chunk counts.
fn assert_ended_as_vllm_does(body: &str, cut: bool) -> u64 {
    assert!(!cut, "a clean chunked end, as vLLM's");
    let events: Vec<&str> = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    let n = events.len();
    assert!(n > 8, "{body}");
    assert_eq!(events[n - 1], "[DONE]");
    let abort: serde_json::Value = serde_json::from_str(events[n - 3]).unwrap();
    assert_eq!(abort["choices"][0]["finish_reason"], "abort", "{body}");
    assert_eq!(abort["choices"][0]["delta"]["content"], "");
    let usage: serde_json::Value = serde_json::from_str(events[n - 2]).unwrap();
    assert_eq!(usage["choices"], serde_json::json!([]));
    let tokens = usage["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((5..400).contains(&tokens), "stopped mid-stream: {tokens}");
    // Every token made was sent, and no other event says why it ended.
    assert_eq!(
        body.matches(r#""finish_reason":"#).count() as u64,
        tokens + 2
    );
    assert_eq!(
        body.matches(r#""finish_reason":null"#).count() as u64,
        tokens + 1
    );
    tokens
}

/// The record tokentap made of it: cut, with vLLM's reason, and a failure in the report.
fn assert_recorded_cut(r: &RequestRecord, tokens: u64) {
    assert_eq!(r.outcome, Outcome::Incomplete, "{r:?}");
    assert_eq!(r.finish_reason.as_deref(), Some("abort"));
    assert_eq!(
        r.error.as_deref(),
        Some("stream ended with finish reason abort")
    );
    assert_eq!((r.done, r.output_tokens), (Some(true), Some(tokens)));
    assert_eq!(served_failed(std::slice::from_ref(r)), (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_stopped_mid_stream_ends_it_as_vllm_does() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim = Sim::start(Profile::v100(), "m", 7, l, None).await.unwrap();
    let px = proxy(&format!("http://{}", sim.engine), "").await;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let stopping = tokio::spawn(async move {
        let _ = rx.await;
        sim.stop(Duration::from_secs(5)).await;
    });
    let (body, cut) = read_stopping(&px.url("/v1/chat/completions"), 5, || {
        let _ = tx.send(());
    })
    .await;
    stopping.await.unwrap();
    let tokens = assert_ended_as_vllm_does(&body, cut);
    assert_recorded_cut(&px.records(1).await[0], tokens);
}

/// Kills the child if the test ends before it exits.
struct Child(Option<std::process::Child>);

impl Drop for Child {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokentap_sim_sigtermed_mid_stream_ends_it_as_vllm_does_and_exits() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Child(Some(
        Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .args(["sim", "--listen", &listen, "--model", "m"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let pid = child.0.as_ref().unwrap().id().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(&listen).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sim never listened"
        );
        tokio::time::sleep(MS(20)).await;
    }
    let px = proxy(&format!("http://{listen}"), "").await;
    let (body, cut) = read_stopping(&px.url("/v1/chat/completions"), 5, || {
        let st = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(st.success());
    })
    .await;
    let mut owned = child.0.take().unwrap();
    let status = tokio::task::spawn_blocking(move || owned.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "a stopped sim exits 0: {status:?}");
    let tokens = assert_ended_as_vllm_does(&body, cut);
    assert_recorded_cut(&px.records(1).await[0], tokens);
}
