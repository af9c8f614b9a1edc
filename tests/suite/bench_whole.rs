//! `bench --stream false` against the paced mock: each request sends `"stream": false` and its
//! record says so (`stream: false`); a whole JSON body has no first token, so TTFT, TTFO, TPOT
//! and ITL are null (DESIGN: a non-streaming response's TTFT is null, not E2E), E2E is the
//! whole body's, and the output tokens are the body's usage. `run.json` carries the mode
//! (`stream`), and `compare` names a streamed and a non-streamed run as different loads. And
//! `sim --pace 0,0,N`, the mock with no delay, answers N tokens at once, streamed or not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use serde_json::Value;
use support::load::*;
use support::*;
use tokentap::bench;
use tokentap::compare::{self, side};
use tokentap::meter::{Outcome, TokensSource};
use tokentap::report::Slos;

/// The mock's pace: the whole answer 20 + 7 × 5 = 55 ms after the request, 8 tokens.
const PACE: &str = "20,5,8";

fn run_json(dir: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streamed_run_measures_whole_bodies_and_says_so() {
    let sim = sim_paced(PACE.parse().unwrap());
    let dir = scratch("whole");
    let cfg = |out: &str, stream: bool| {
        let mut b = bench_cfg(&sim, dir.join(out));
        (b.common.requests, b.common.warmup) = (4, 1);
        b.common.prompts.outputs = [4, 6, 12];
        b.common.stream = stream;
        b.load = bench::Load::closed(vec![1, 2]);
        b
    };
    let info = run_bench(&cfg("whole", false)).await;
    assert!(!info.stream);
    let recs = bench_records(&dir.join("whole"));
    assert_eq!(recs.len(), info.cells.len() * 4);
    assert!(!recs.is_empty());
    for r in &recs {
        assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
        assert!(!r.stream, "the record says the answer was not streamed");
        // A whole body: no first token, so no TTFT, TTFO, TPOT or ITL; not 0, null.
        assert_eq!(
            (r.ttft_ms, r.ttfo_ms, r.tpot_ms),
            (None, None, None),
            "{r:?}"
        );
        assert_eq!(
            (r.itl_p50_ms, r.itl_p99_ms, r.itl_max_ms),
            (None, None, None)
        );
        // The output tokens are the body's usage: the bucket's, at most the pace's 8.
        let want = match r.bucket.as_deref() {
            Some("long-short") => 4,
            Some("balanced") => 6,
            _ => 8,
        };
        assert_eq!(r.output_tokens, Some(want), "{r:?}");
        assert_eq!(r.tokens_source, Some(TokensSource::Usage));
        assert!(r.input_tokens.is_some_and(|n| n > 0));
        // E2E is the whole body's: never before the mock's last token is due.
        assert!(r.e2e_ms >= 20.0 + 5.0 * (want - 1) as f64, "{r:?}");
    }
    let whole = run_json(&dir.join("whole"));
    assert_eq!(whole["stream"], false);

    // The same load streamed: the records and run.json say so, and have their first tokens.
    let info = run_bench(&cfg("streamed", true)).await;
    assert!(info.stream);
    let recs = bench_records(&dir.join("streamed"));
    assert!(recs
        .iter()
        .all(|r| r.stream && r.ttft_ms.is_some_and(|t| t >= 20.0)));
    let streamed = run_json(&dir.join("streamed"));
    assert_eq!(streamed["stream"], true);

    // compare names the difference of mode; a run.json without the key is a streamed one.
    let slos = Slos::default();
    let base = side::read(&dir.join("streamed"), &slos, false).unwrap();
    let new = side::read(&dir.join("whole"), &slos, false).unwrap();
    let c = compare::compare(&base, &new, 42, false);
    let m = c.mismatches.join("\n");
    assert!(m.contains("load differs: stream true → false"), "{m}");
    let mut old = streamed.clone();
    old.as_object_mut().unwrap().remove("stream");
    let older = side::of_records(
        "older".into(),
        Some(old),
        &bench_records(&dir.join("streamed")),
        &slos,
    );
    let c = compare::compare(&older, &base, 42, false);
    assert!(
        !c.mismatches.iter().any(|m| m.contains("stream")),
        "{:?}",
        c.mismatches
    );
}

/// One chat request to the mock: the body as text.
async fn ask(addr: std::net::SocketAddr, stream: bool) -> String {
    let body = format!(
        r#"{{"model":"sim","messages":[{{"role":"user","content":"x"}}],"stream":{stream},"stream_options":{{"include_usage":true}}}}"#
    );
    let got = send(
        &client(),
        "POST",
        &format!("http://{addr}/v1/chat/completions"),
        &[("content-type", "application/json")],
        body.into_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    String::from_utf8(got.body).unwrap()
}

#[tokio::test]
async fn the_mock_with_no_delay_answers_every_token_at_once() {
    const N: usize = 32;
    let sim = sim_paced(format!("0,0,{N}").parse().unwrap());
    for _ in 0..20 {
        let text = ask(sim.engine, true).await;
        let events: Vec<Value> = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|e| *e != "[DONE]")
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let contents = events
            .iter()
            .filter(|v| {
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty())
            })
            .count();
        assert_eq!(contents, N, "{text}");
        let usage = events.iter().find(|v| v["usage"].is_object()).unwrap();
        assert_eq!(usage["usage"]["completion_tokens"], N);
        assert!(text.ends_with("data: [DONE]\n\n"));
        // Every write on time: the schedule is the request's arrival itself.
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(": tokentap-sim lateness "))
            .unwrap();
        assert!(line.starts_with(&format!("writes={N} ")), "{line}");

        let v: Value = serde_json::from_str(&ask(sim.engine, false).await).unwrap();
        assert_eq!(v["usage"]["completion_tokens"], N);
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
    }
}
