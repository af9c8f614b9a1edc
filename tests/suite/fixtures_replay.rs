//! Every recorded vLLM / LiteLLM exchange replayed byte for byte through the proxy, with
//! controlled delays: the client gets exactly the upstream's bytes, and the record's TTFT, TPOT,
//! E2E and token counts agree with the schedule the upstream used.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::time::Duration;

use support::*;
use tokentap::meter::{Outcome, TokensSource};

const FIRST: Duration = Duration::from_millis(40);
const GAP: Duration = Duration::from_millis(8);

/// (fixture, outcome, input tokens, output tokens, source). Independently read off the
/// fixtures (see tests/fixtures/sse/README.md).
type Expect = (
    &'static str,
    Outcome,
    Option<u64>,
    Option<u64>,
    Option<TokensSource>,
);

const EXPECT: &[Expect] = &[
    (
        "litellm-chat-nonstream",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "litellm-chat-stream",
        Outcome::Ok,
        None,
        Some(15),
        Some(TokensSource::Events),
    ),
    (
        "litellm-chat-stream-empty-tokens",
        Outcome::Ok,
        Some(19),
        Some(4),
        Some(TokensSource::Usage),
    ),
    (
        "litellm-chat-stream-n2",
        Outcome::Ok,
        None,
        Some(12),
        Some(TokensSource::Events),
    ),
    (
        "litellm-chat-stream-usage",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "litellm-chat-stream-usage-continuous",
        Outcome::Ok,
        Some(19),
        Some(8),
        Some(TokensSource::Usage),
    ),
    // LiteLLM's placeholder zeros on every event are not believed: counted from events.
    (
        "litellm-completions-stream",
        Outcome::Ok,
        None,
        Some(16),
        Some(TokensSource::Events),
    ),
    (
        "litellm-completions-stream-usage",
        Outcome::Ok,
        Some(8),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "litellm-error-bad-key",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "litellm-error-engine-killed-before-first-chunk",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "litellm-error-max-tokens-too-large",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "litellm-error-midstream-engine-killed",
        Outcome::StreamError,
        None,
        Some(117),
        Some(TokensSource::Events),
    ),
    (
        "litellm-error-no-auth",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "litellm-error-prompt-too-long",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "litellm-error-unknown-model",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "vllm-chat-nonstream",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-chat-stream",
        Outcome::Ok,
        None,
        Some(16),
        Some(TokensSource::Events),
    ),
    (
        "vllm-chat-stream-empty-tokens",
        Outcome::Ok,
        Some(19),
        Some(4),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-chat-stream-n2",
        Outcome::Ok,
        None,
        Some(12),
        Some(TokensSource::Events),
    ),
    (
        "vllm-chat-stream-usage",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-chat-stream-usage-continuous",
        Outcome::Ok,
        Some(19),
        Some(8),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-completions-stream",
        Outcome::Ok,
        None,
        Some(16),
        Some(TokensSource::Events),
    ),
    (
        "vllm-completions-stream-usage",
        Outcome::Ok,
        Some(8),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-error-max-tokens-too-large",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "vllm-error-midstream-engine-killed",
        Outcome::StreamError,
        None,
        Some(21),
        Some(TokensSource::Events),
    ),
    (
        "vllm-error-prompt-too-long",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "vllm-error-unknown-model",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    // The Responses and Anthropic Messages APIs (no `[DONE]`: their own end markers), and
    // prefix-cache hits (vLLM --enable-prompt-tokens-details).
    (
        "litellm-chat-stream-cached",
        Outcome::Ok,
        Some(693),
        Some(8),
        Some(TokensSource::Usage),
    ),
    (
        "litellm-messages-error-unknown-model",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "litellm-messages-nonstream",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "litellm-messages-stream",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "litellm-responses-error-unknown-model",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "litellm-responses-nonstream",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "litellm-responses-stream",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    // LiteLLM did not pass max_output_tokens (8) on: 16 tokens came.
    (
        "litellm-responses-stream-cached",
        Outcome::Ok,
        Some(693),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-chat-stream-cached",
        Outcome::Ok,
        Some(693),
        Some(8),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-messages-error-unknown-model",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "vllm-messages-nonstream",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-messages-stream",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-responses-error-unknown-model",
        Outcome::UpstreamError,
        None,
        None,
        None,
    ),
    (
        "vllm-responses-nonstream",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-responses-stream",
        Outcome::Ok,
        Some(19),
        Some(16),
        Some(TokensSource::Usage),
    ),
    (
        "vllm-responses-stream-cached",
        Outcome::Ok,
        Some(693),
        Some(8),
        Some(TokensSource::Usage),
    ),
    // Servers stopped mid-stream (README: "Stopped mid-stream"). vLLM's designed ending (an
    // empty chunk with `"finish_reason":"abort"`, then `[DONE]`): cut short, never ok.
    (
        "vllm-chat-stream-sigterm",
        Outcome::Incomplete,
        None,
        Some(37),
        Some(TokensSource::Events),
    ),
    // vLLM's engine process died first: an error event, then `[DONE]`.
    (
        "vllm-chat-stream-usage-sigterm",
        Outcome::StreamError,
        None,
        Some(30),
        Some(TokensSource::Events),
    ),
    (
        "vllm-chat-stream-usage-sigint",
        Outcome::StreamError,
        None,
        Some(30),
        Some(TokensSource::Events),
    ),
    // vLLM stalled (no byte more, no terminating chunk) until the client gave up; replayed as
    // a close: a cut body.
    (
        "vllm-chat-stream-usage-sigterm-stall",
        Outcome::UpstreamReset,
        None,
        Some(30),
        Some(TokensSource::Events),
    ),
    // LiteLLM stopped with SIGTERM drains its streams: the whole stream, a finish reason.
    (
        "litellm-chat-stream-sigterm",
        Outcome::Ok,
        None,
        Some(LITELLM_DRAINED),
        Some(TokensSource::Events),
    ),
    // LiteLLM forced down (a second SIGINT): the connection closed without the terminator.
    (
        "litellm-chat-stream-sigint-twice",
        Outcome::UpstreamReset,
        None,
        Some(51),
        Some(TokensSource::Events),
    ),
    // vLLM stopped behind LiteLLM: LiteLLM's error event without `[DONE]`, or the stall.
    (
        "litellm-chat-stream-vllm-sigterm",
        Outcome::StreamError,
        None,
        Some(30),
        Some(TokensSource::Events),
    ),
    (
        "litellm-chat-stream-vllm-sigterm-stall",
        Outcome::UpstreamReset,
        None,
        Some(30),
        Some(TokensSource::Events),
    ),
];

/// Tokens of the LiteLLM stream drained at its SIGTERM (its `max_tokens`, `ignore_eos`).
const LITELLM_DRAINED: u64 = 48;

/// Index of the first chunk carrying generated text, read with a plain substring test that is
/// independent of the proxy's parser.
fn first_content_chunk(f: &Fixture) -> Option<usize> {
    f.chunks().iter().position(|c| {
        let s = String::from_utf8_lossy(c);
        let nonempty = |key: &str| {
            s.match_indices(key)
                .any(|(i, _)| !s[i + key.len()..].starts_with('"'))
        };
        // Chat and completions chunks; Anthropic's `text_delta` (its `text`); the Responses
        // API's `*.delta` events (a string `delta`; its `*.done` events repeat the text).
        let responses = s.contains("\"response.");
        s.contains("data: {")
            && if responses {
                s.contains(".delta\"") && nonempty("\"delta\":\"")
            } else {
                nonempty("\"content\":\"") || nonempty("\"text\":\"") || nonempty("\"text\": \"")
            }
    })
}

/// The API shape a fixture's name says it is.
fn api_of(name: &str) -> tokentap::openai::Api {
    use tokentap::openai::Api;
    if name.contains("-responses-") {
        Api::Responses
    } else if name.contains("-messages-") {
        Api::Messages
    } else if name.contains("-completions-") || name.contains("prompt-too-long") {
        Api::Completions
    } else {
        Api::Chat
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_is_forwarded_byte_exact_and_measured() {
    let names = Fixture::all();
    assert_eq!(
        names.len(),
        EXPECT.len(),
        "a fixture without an expectation: {names:?}"
    );
    let fixtures: Vec<Fixture> = names.iter().map(|n| Fixture::load(n)).collect();
    let scripts: Vec<(String, support::Script)> = fixtures
        .iter()
        .map(|f| (f.path.clone() + "#" + &f.name, f.script(FIRST, GAP)))
        .collect();
    let up = Upstream::spawn(move |req: &Received| {
        // The fixture name rides in a test-only header so one upstream serves every case.
        let name = req.header("x-fixture").unwrap();
        scripts
            .iter()
            .find(|(k, _)| k.ends_with(&format!("#{name}")))
            .unwrap()
            .1
            .clone()
    })
    .await;
    let px = proxy(&up.url(), "").await;
    let c = client();

    for (i, f) in fixtures.iter().enumerate() {
        let mut headers: Vec<(&str, &str)> = f
            .req_headers
            .iter()
            .filter(|(k, _)| {
                !["host", "content-length", "connection"].contains(&k.to_ascii_lowercase().as_str())
            })
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        headers.push(("x-fixture", &f.name));
        let got = send(
            &c,
            &f.method,
            &px.url(&f.path),
            &headers,
            f.req_body.clone(),
        )
        .await
        .unwrap();
        assert_eq!(got.status, f.status, "{}: status", f.name);
        assert_eq!(
            got.body_error, !f.terminated,
            "{}: the body is cut exactly when the server cut it",
            f.name
        );
        assert_eq!(got.body, f.body, "{}: bytes out != bytes in", f.name);
        let recorded_ct = f
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.as_str());
        assert_eq!(
            got.headers.get("content-type").map(|v| v.to_str().unwrap()),
            recorded_ct,
            "{}",
            f.name
        );

        let recs = px.records(i + 1).await;
        assert_eq!(
            recs.len(),
            i + 1,
            "{}: exactly one record per request",
            f.name
        );
        let r = &recs[i];
        let (_, outcome, input, output, source) = EXPECT.iter().find(|e| e.0 == f.name).unwrap();
        assert_eq!(r.outcome, *outcome, "{}: outcome {r:?}", f.name);
        if f.stopped {
            // A server stopped mid-stream: served only when the stream still said it finished
            // (read here by a plain substring test, apart from the proxy's parser).
            let body = String::from_utf8_lossy(&f.body);
            let finished = body.contains(r#""finish_reason":"length""#);
            let class = tokentap::report::row::Row::of(r).class();
            assert_eq!(
                class == tokentap::report::row::Class::Served,
                finished,
                "{}: {class:?}",
                f.name
            );
        }
        assert_eq!(r.status, f.status);
        assert_eq!(r.input_tokens, *input, "{}: input tokens", f.name);
        assert_eq!(r.output_tokens, *output, "{}: output tokens", f.name);
        assert_eq!(r.tokens_source, *source, "{}: tokens source", f.name);
        assert_eq!(r.response_bytes, f.body.len() as u64);
        assert_eq!(r.api, api_of(&f.name), "{}: api", f.name);
        assert_eq!(
            r.endpoint_api, None,
            "{}: the path and the events agree",
            f.name
        );
        if f.status == 200 {
            // Every real success names the model that served it, and the record keeps it.
            let m = r
                .response_model
                .as_deref()
                .unwrap_or_else(|| panic!("{}: no response_model", f.name));
            assert!(
                String::from_utf8_lossy(&f.body).contains(&format!("\"{m}\"")),
                "{}: {m} is not in the body",
                f.name
            );
        }
        let cached = f.name.ends_with("-cached").then_some(640);
        if f.status == 200 && !f.name.contains("litellm-chat-stream-usage") {
            // Where usage carries the cache's count (vLLM --enable-prompt-tokens-details).
            assert_eq!(
                r.cached_tokens.filter(|c| *c > 0),
                cached,
                "{}: cached",
                f.name
            );
        }
        assert_eq!(r.request_bytes, f.req_body.len() as u64);

        // Timing: chunk k is scheduled to leave the upstream at FIRST + k·GAP after its headers;
        // the bounds use when it actually left, so a late timer on a busy machine moves the
        // expectation with the measurement.
        let sent = up.sent.lock().unwrap()[i].clone();
        assert_eq!(sent.len(), f.chunk_lens.len(), "{}: chunks written", f.name);
        for (k, d) in sent.iter().enumerate() {
            let scheduled = FIRST + GAP * k as u32;
            assert!(
                *d + Duration::from_millis(1) >= scheduled,
                "{}: chunk {k} early",
                f.name
            );
        }
        let at = |k: usize| sent[k].as_secs_f64() * 1000.0;
        let e2e_expect = at(f.chunk_lens.len() - 1);
        assert!(
            r.e2e_ms >= e2e_expect - 1.0 && r.e2e_ms < e2e_expect + 40.0,
            "{}: e2e {} vs {e2e_expect}",
            f.name,
            r.e2e_ms
        );
        match first_content_chunk(f) {
            Some(k) if r.stream => {
                let ttft = r.ttft_ms.unwrap();
                assert!(
                    ttft >= at(k) - 1.0 && ttft < at(k) + 15.0,
                    "{}: ttft {ttft} vs {}",
                    f.name,
                    at(k)
                );
                // No reasoning in these models: the first output token is the first token.
                assert_eq!(r.ttfo_ms, r.ttft_ms, "{}: ttfo", f.name);
                if *outcome == Outcome::Ok {
                    assert_eq!(r.done, Some(true), "{}: the stream's end marker", f.name);
                    // Every real stream that finished says why.
                    assert!(r.finish_reason.is_some(), "{}: finish reason", f.name);
                }
                let n = r.output_tokens.unwrap();
                // TPOT is computed from the record's own E2E and TTFT, per the definition.
                let tpot = r.tpot_ms.unwrap();
                assert!((tpot - (r.e2e_ms - ttft) / (n - 1) as f64).abs() < 1e-6);
                let last_gap_sum = r.e2e_ms - ttft;
                assert!(
                    last_gap_sum >= at(f.chunk_lens.len() - 1) - at(k) - 15.0,
                    "{}",
                    f.name
                );
                let itl_p50 = r.itl_p50_ms.unwrap();
                assert!(
                    (7.0..20.0).contains(&itl_p50),
                    "{}: itl p50 {itl_p50}",
                    f.name
                );
            }
            _ => {
                assert_eq!(r.ttft_ms, None, "{}: no content, no TTFT", f.name);
                assert_eq!(r.tpot_ms, None);
            }
        }
        if f.name.contains("empty-tokens") {
            // Tokens that decode to "" are not a first token.
            assert_eq!(r.ttft_ms, None);
        }
        if f.name.starts_with("litellm-")
            && f.status == 200
            && f.headers
                .iter()
                .any(|(k, _)| k == "x-litellm-overhead-duration-ms")
        {
            assert!(r.gateway_overhead_ms.is_some(), "{}", f.name);
        }
    }
}
