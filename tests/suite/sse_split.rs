//! The SSE splitter and the meter give the same answer however the bytes are cut: every fixture
//! split at every byte offset, random multi-way splits (proptest), and the awkward cases real
//! servers and hostile ones produce.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use proptest::prelude::*;
use support::Fixture;
use tokentap::meter::Meter;
use tokentap::sse::{SseItem, SseSplitter};
use tokio::time::Instant;

fn events(chunks: &[&[u8]], max: usize) -> Vec<Option<Vec<u8>>> {
    let mut s = SseSplitter::new(max);
    let mut out = Vec::new();
    for c in chunks {
        s.feed(c, &mut |it| match it {
            SseItem::Data(d) => out.push(Some(d.to_vec())),
            SseItem::Oversize => out.push(None),
        });
    }
    out
}

fn sse_fixtures() -> Vec<Fixture> {
    Fixture::all()
        .iter()
        .map(|n| Fixture::load(n))
        .filter(|f| f.body.starts_with(b"data:") || f.body.starts_with(b"event:"))
        .collect()
}

/// What the meter concludes from a body cut into `chunks`.
type Measured = (u64, u64, bool, Option<(Option<u64>, Option<u64>)>);

fn measure(chunks: &[&[u8]]) -> Measured {
    let mut m = Meter::new(Instant::now());
    m.expect_body(Some(b"text/event-stream"), 1 << 20, 1 << 20);
    for c in chunks {
        m.on_data(c, Instant::now());
    }
    let (i, o, _) = m.tokens();
    (m.events, m.content_events, m.done, Some((i, o)))
}

#[test]
fn every_fixture_split_at_every_offset_yields_the_same_events() {
    for f in sse_fixtures() {
        let whole = events(&[&f.body], 1 << 20);
        assert!(!whole.is_empty(), "{}", f.name);
        // The splitter's events are exactly the `data: ` payloads between blank lines (an
        // `event:` line before one names it; the Responses and Messages APIs send them).
        let expected: Vec<Option<Vec<u8>>> = f
            .body
            .split(|_| false)
            .flat_map(|b| {
                String::from_utf8_lossy(b)
                    .split("\n\n")
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .filter(|e| !e.is_empty())
            .map(|e| {
                let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
                Some(data.as_bytes().to_vec())
            })
            .collect();
        assert_eq!(whole, expected, "{}", f.name);
        for cut in 0..=f.body.len() {
            let (a, b) = f.body.split_at(cut);
            assert_eq!(events(&[a, b], 1 << 20), whole, "{} cut at {cut}", f.name);
        }
    }
}

#[test]
fn byte_at_a_time_gives_the_same_measurement() {
    for f in sse_fixtures() {
        let whole = measure(&[&f.body]);
        let bytes: Vec<&[u8]> = f.body.chunks(1).collect();
        assert_eq!(measure(&bytes), whole, "{}", f.name);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_split_of_any_fixture_gives_same_events_and_tokens(
        idx in 0usize..64,
        cuts in proptest::collection::vec(0.0f64..1.0, 0..40),
        crlf in any::<bool>(),
    ) {
        let fixtures = sse_fixtures();
        let f = &fixtures[idx % fixtures.len()];
        // The same stream with CRLF line ends must read the same.
        let body: Vec<u8> = if crlf {
            String::from_utf8_lossy(&f.body).replace('\n', "\r\n").into_bytes()
        } else {
            f.body.clone()
        };
        let mut points: Vec<usize> = cuts.iter().map(|c| (c * body.len() as f64) as usize).collect();
        points.sort_unstable();
        points.dedup();
        let mut chunks: Vec<&[u8]> = Vec::new();
        let mut prev = 0;
        for p in points {
            chunks.push(&body[prev..p]);
            prev = p;
        }
        chunks.push(&body[prev..]);
        prop_assert_eq!(events(&chunks, 1 << 20), events(&[&f.body], 1 << 20));
        prop_assert_eq!(measure(&chunks), measure(&[&f.body]));
    }
}

#[test]
fn sse_edge_cases() {
    // Several events in one read, comments, CR-only and CRLF line ends, multi-line data,
    // fields other than data, a final event without its blank line (not dispatched).
    let input = b": ping\n\ndata: a\n\ndata: b1\ndata: b2\n\nevent: x\nid: 7\ndata:c\r\n\r\ndata: d\r\rretry: 5\n\ndata: tail";
    let got = events(&[input], 1024);
    let want: Vec<Option<Vec<u8>>> = [&b"a"[..], b"b1\nb2", b"c", b"d"]
        .iter()
        .map(|s| Some(s.to_vec()))
        .collect();
    assert_eq!(got, want);
    // A CR at the end of one read and its LF at the start of the next is one line end.
    assert_eq!(
        events(&[b"data: x\r", b"\n\r", b"\n"], 64),
        vec![Some(b"x".to_vec())]
    );
    // Non-UTF-8 passes through as bytes.
    assert_eq!(
        events(&[b"data: \xff\xfe\n\n"], 64),
        vec![Some(b"\xff\xfe".to_vec())]
    );
    // Field names are whole: `datax` is not data; `data` without a colon is an empty value; only
    // one space after the colon is dropped.
    assert_eq!(
        events(&[b"datax: no\ndata: yes\n\ndata\n\ndata:  two\n\n"], 64),
        vec![
            Some(b"yes".to_vec()),
            Some(Vec::new()),
            Some(b" two".to_vec())
        ]
    );
    // The same cut at every byte.
    let body = b"datax: no\ndata: yes\n\ndata\n\ndata:  two\n\n";
    for cut in 1..body.len() {
        assert_eq!(
            events(&[&body[..cut], &body[cut..]], 64),
            vec![
                Some(b"yes".to_vec()),
                Some(Vec::new()),
                Some(b" two".to_vec())
            ],
            "cut at {cut}"
        );
    }
}

#[test]
fn oversize_events_are_skipped_with_bounded_memory() {
    let mut s = SseSplitter::new(1024);
    let mut items = Vec::new();
    // 10 MB in one event, fed in 64 KiB reads; then a normal event.
    let chunk = vec![b'x'; 64 * 1024];
    s.feed(b"data: ", &mut |_| {});
    for _ in 0..160 {
        s.feed(&chunk, &mut |it| {
            items.push(matches!(it, SseItem::Oversize))
        });
        assert!(s.buffered() <= 4 * 1024, "buffered {}", s.buffered());
    }
    s.feed(b"\n\ndata: ok\n\n", &mut |it| {
        items.push(matches!(it, SseItem::Oversize))
    });
    assert_eq!(items, vec![true, false]);
}

#[test]
fn meter_counts_reasoning_tool_calls_and_skips_role_only() {
    let mut m = Meter::new(Instant::now());
    m.expect_body(Some(b"text/event-stream; charset=utf-8"), 1 << 16, 1 << 16);
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning\":\"more\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":null,\"function_call\":{\"name\":\"f\"}}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"}}]}\n\n",
        "data: {not json\n\n",
        "data: [DONE]\n\n",
    );
    m.on_data(body.as_bytes(), Instant::now());
    assert_eq!(m.content_events, 4);
    assert_eq!(m.events, 8);
    assert_eq!(m.parse_errors, 1);
    assert!(m.done);
}

#[test]
fn vllm_per_request_server_timings_are_kept() {
    // The final usage chunk of vLLM run with --enable-per-request-metrics (PerRequestMetrics).
    let mut m = Meter::new(Instant::now());
    m.expect_body(Some(b"text/event-stream"), 1 << 16, 1 << 16);
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1},",
        "\"metrics\":{\"time_to_first_token_ms\":41.5,\"generation_time_ms\":0.0,\"queue_time_ms\":12.25,",
        "\"mean_itl_ms\":null,\"tokens_per_second\":24.1}}\n\n",
        "data: [DONE]\n\n",
    );
    m.on_data(body.as_bytes(), Instant::now());
    assert_eq!(m.timings.queue_ms, Some(12.25));
    assert_eq!(m.timings.ttft_ms, Some(41.5));
    assert_eq!(m.timings.generation_ms, Some(0.0));
}
