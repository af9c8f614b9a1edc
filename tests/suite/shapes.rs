//! Every API shape's events as the meter reads them, on a paused clock: reasoning before the
//! answer (TTFT at the first token of any kind, TTFO at the first answer token), usage with
//! cached and reasoning tokens, failure events, unknown events, and a stream mixing shapes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokentap::meter::{Meter, Outcome};
use tokentap::openai::Api;
use tokio::time::Instant;

/// Feed `events` (SSE `event:`/`data:` text, one per 10 ms from t0 + 10 ms) to a meter.
fn stream(events: &[&str]) -> Meter {
    let t0 = Instant::now();
    let mut m = Meter::new(t0);
    m.expect_body(Some(b"text/event-stream"), 1 << 16, 1 << 16);
    for (i, e) in events.iter().enumerate() {
        m.on_data(
            e.as_bytes(),
            t0 + Duration::from_millis(10 * (i as u64 + 1)),
        );
    }
    m.settle();
    m
}

fn ms(m: &Meter, t: Option<Instant>) -> Option<f64> {
    m.timeline.ms(t).map(f64::round)
}

#[test]
fn chat_reasoning_then_answer() {
    let m = stream(&[
        "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"reasoning_content\":\"Let me\"}}]}\n\n",
        "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"reasoning_content\":\" think\"}}]}\n\n",
        "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":700,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":640},\"completion_tokens_details\":{\"reasoning_tokens\":2}}}\n\n",
        "data: [DONE]\n\n",
    ]);
    assert_eq!(ms(&m, m.timeline.first_token), Some(20.0));
    assert_eq!(ms(&m, m.timeline.first_output), Some(40.0));
    let u = m.usage.unwrap();
    assert_eq!((u.prompt_tokens, u.completion_tokens), (Some(700), Some(3)));
    assert_eq!((u.cached_tokens, u.reasoning_tokens), (Some(640), Some(2)));
    assert_eq!(m.api, Some(Api::Chat));
    assert_eq!(m.finish_reason.as_deref(), Some("stop"));
    assert_eq!(m.clean_end(200).0, Outcome::Ok);
}

#[test]
fn a_tool_call_is_output() {
    let m = stream(&[
        "data: {\"choices\":[{\"delta\":{\"reasoning\":\"I need the weather\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"get_weather\"}}]}}]}\n\n",
        "data: [DONE]\n\n",
    ]);
    assert_eq!(ms(&m, m.timeline.first_token), Some(10.0));
    assert_eq!(ms(&m, m.timeline.first_output), Some(20.0));
}

const RESP_REASONING: &[&str] = &[
    "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\",\"usage\":null,\"text\":{\"format\":{\"type\":\"text\"}}},\"sequence_number\":0}\n\n",
    "event: response.reasoning_text.delta\ndata: {\"type\":\"response.reasoning_text.delta\",\"delta\":\"Hmm\",\"sequence_number\":1}\n\n",
    "event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"delta\":\"thinking\",\"sequence_number\":2}\n\n",
    "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hello\",\"sequence_number\":3}\n\n",
    "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"delta\":\"{\\\"city\\\"\",\"sequence_number\":4}\n\n",
    "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"text\":\"Hello\",\"sequence_number\":5}\n\n",
    "event: response.some_future_event\ndata: {\"type\":\"response.some_future_event\",\"text\":\"not output\",\"sequence_number\":6}\n\n",
    "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":30,\"input_tokens_details\":{\"cached_tokens\":16},\"output_tokens\":9,\"output_tokens_details\":{\"reasoning_tokens\":5}}},\"sequence_number\":7}\n\n",
];

#[test]
fn responses_reasoning_then_answer_ends_without_done() {
    let m = stream(RESP_REASONING);
    assert_eq!(ms(&m, m.timeline.first_token), Some(20.0));
    assert_eq!(ms(&m, m.timeline.first_output), Some(40.0));
    // Reasoning, summary, text, tool arguments; not the `*.done` repeat or the unknown event.
    assert_eq!(m.content_events, 4);
    assert_eq!(ms(&m, m.timeline.last_token), Some(50.0));
    let u = m.usage.unwrap();
    assert_eq!(
        (
            u.prompt_tokens,
            u.completion_tokens,
            u.cached_tokens,
            u.reasoning_tokens
        ),
        (Some(30), Some(9), Some(16), Some(5))
    );
    assert!(m.done);
    assert_eq!(ms(&m, m.timeline.end), Some(80.0));
    assert_eq!(m.api, Some(Api::Responses));
    assert_eq!(m.clean_end(200).0, Outcome::Ok);
    assert_eq!(m.parse_errors, 0);
}

#[test]
fn responses_failures_are_stream_errors() {
    let failed = stream(&[
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hel\"}\n\n",
        "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"type\":\"server_error\",\"code\":\"engine_dead\",\"message\":\"secret sk-123\"}}}\n\n",
    ]);
    assert_eq!(failed.clean_end(200).0, Outcome::StreamError);
    let e = failed.error_event.clone().unwrap();
    assert!(e.contains("engine_dead") && !e.contains("sk-123"), "{e}");
    let error = stream(&[
        "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit\",\"message\":\"slow down\"}\n\n",
    ]);
    assert_eq!(error.clean_end(200).0, Outcome::StreamError);
    // Cut before its end marker: incomplete, as a chat stream without [DONE].
    let cut = stream(&RESP_REASONING[..4]);
    assert_eq!(cut.clean_end(200).0, Outcome::Incomplete);
}

#[test]
fn messages_thinking_then_text_with_cache_reads() {
    let m = stream(&[
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[],\"usage\":{\"input_tokens\":60,\"cache_read_input_tokens\":640,\"cache_creation_input_tokens\":4,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
        "event: ping\ndata: {\"type\": \"ping\"}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me see\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"abc\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\"\"}}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":12}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ]);
    assert_eq!(ms(&m, m.timeline.first_token), Some(40.0));
    assert_eq!(ms(&m, m.timeline.first_output), Some(60.0));
    assert_eq!(m.content_events, 3);
    let u = m.usage.unwrap();
    // Anthropic's input_tokens exclude the cache: all prompt tokens are 60 + 640 + 4.
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
        (Some(704), Some(12), Some(640))
    );
    assert!(m.done);
    assert_eq!(m.api, Some(Api::Messages));
    assert_eq!(m.clean_end(200).0, Outcome::Ok);
}

#[test]
fn a_messages_error_event_is_a_stream_error() {
    let m = stream(&[
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    ]);
    assert_eq!(m.clean_end(200).0, Outcome::StreamError);
    assert!(m
        .error_event
        .as_deref()
        .unwrap()
        .contains("overloaded_error"));
}

#[test]
fn a_stream_mixing_shapes_counts_parse_errors() {
    let m = stream(&[
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}\n\n",
        "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"reasoning_content\":\"x\"}}]}\n\n",
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"y\"}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ]);
    assert_eq!(m.parse_errors, 2);
    assert_eq!(m.content_events, 1);
    assert_eq!(ms(&m, m.timeline.first_token), Some(40.0));
    assert_eq!(m.api, Some(Api::Messages));
}

#[test]
fn non_streaming_bodies_of_every_shape() {
    let body = |b: &str| {
        let mut m = Meter::new(Instant::now());
        m.expect_body(Some(b"application/json"), 1 << 16, 1 << 16);
        m.on_data(b.as_bytes(), Instant::now());
        m.settle();
        m
    };
    let r = body(
        r#"{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":19,"input_tokens_details":{"cached_tokens":0},"output_tokens":16,"output_tokens_details":{"reasoning_tokens":0}}}"#,
    );
    assert_eq!(r.api, Some(Api::Responses));
    assert_eq!(r.tokens().0, Some(19));
    assert_eq!(r.tokens().1, Some(16));
    let a = body(
        r#"{"id":"msg_1","type":"message","content":[{"type":"text","text":"Hi"}],"usage":{"input_tokens":19,"output_tokens":16,"cache_read_input_tokens":0}}"#,
    );
    assert_eq!(a.api, Some(Api::Messages));
    assert_eq!((a.tokens().0, a.tokens().1), (Some(19), Some(16)));
    let e = body(
        r#"{"object":"list","data":[{"object":"embedding","embedding":[0.1],"index":0}],"usage":{"prompt_tokens":7,"total_tokens":7}}"#,
    );
    assert_eq!(e.api, Some(Api::Embeddings));
    assert_eq!((e.tokens().0, e.tokens().1), (Some(7), None));
    assert_eq!(e.timeline.first_token, None);
}

/// Through the proxy: chat JSON on `/v1/messages` is measured as chat, and the record says the
/// path said otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_does_not_match_its_events_is_named() {
    use tokentap_test_support as support;
    let up = support::Upstream::spawn(|_| {
        support::Script::chat_stream(Duration::from_millis(5), Duration::from_millis(2), 4, true)
    })
    .await;
    let px = support::proxy(&up.url(), "").await;
    let got = support::send(
        &support::client(),
        "POST",
        &px.url("/v1/messages"),
        &[("x-api-key", "sk-anthropic-style")],
        support::chat_body("m", true),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    let r = px.records(1).await.pop().unwrap();
    assert_eq!((r.api, r.endpoint_api), (Api::Chat, Some(Api::Messages)));
    assert_eq!(r.outcome, Outcome::Ok);
    assert!(r
        .key_id
        .as_deref()
        .is_some_and(|k| k.starts_with("sha256:")));
}

#[test]
fn a_spaced_responses_done_event_is_not_a_token() {
    // Spacing as a Python gateway re-serialises it: the `*.done` repeat still is not output.
    let m = stream(&[
        "event: response.output_text.delta\ndata: {\"type\": \"response.output_text.delta\", \"delta\": \"Hi\"}\n\n",
        "event: response.output_text.done\ndata: {\"type\": \"response.output_text.done\",\"text\":\"Hi\"}\n\n",
        "event: response.completed\ndata: {\"type\": \"response.completed\", \"response\": {\"usage\": {\"input_tokens\": 3, \"output_tokens\": 1}}}\n\n",
    ]);
    assert_eq!(m.content_events, 1);
    assert_eq!(ms(&m, m.timeline.last_token), Some(10.0));
    assert!(m.done);
}
