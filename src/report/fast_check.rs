//! The report's fast path checked against serde, line by line: the comparison the unit tests
//! (`fast_tests.rs`) and the `report_line` fuzz target share.

use super::fast::Fast;
use super::row::Row;

/// A record as tokentap writes it.
pub(crate) const RECORD: &str = r#"{"ts":"2026-11-18T11:06:40.004425Z","id":"eb0354df4a45b34e","route":"default","experiment":null,"method":"POST","endpoint":"/v1/chat/completions","api":"chat","model":"meta-llama/Llama-3.1-8B-Instruct","upstream_model":null,"response_model":"meta-llama/Llama-3.1-8B-Instruct","key_id":"sha256:10d8850c48cfd084693dcce25719c5b5dd739535ae1a8a4bde61b7bb460f651f","stream":true,"status":200,"outcome":"ok","input_tokens":54,"output_tokens":22,"tokens_source":"usage","cached_tokens":null,"reasoning_tokens":null,"ttft_ms":18.874196172882993,"ttfo_ms":19.062938134611823,"tpot_ms":26.59388015896535,"e2e_ms":577.3456795111554,"itl_p50_ms":25.79606375419639,"itl_p99_ms":66.48470039741338,"itl_max_ms":159.56328095379212,"body_read_ms":0.10965748331999202,"upstream_headers_ms":5.662258851864897,"first_byte_ms":5.8510008135937275,"first_event_ms":6.039742775322558,"last_token_ms":577.2956795111554,"in_flight":35,"max_tokens":60,"request_bytes":416,"response_bytes":3300,"events":24,"content_events":22,"done":true,"bucket":"other","parse_errors":0,"oversize_events":0,"engine_queue_ms":null,"engine_ttft_ms":null,"engine_decode_ms":null,"gateway_overhead_ms":null,"upstream_sent_ms":0.35184547905112684,"ttft_split":{"proxy_ms":0.3,"upstream_headers_ms":5.662258851864897,"engine_queue_ms":null,"engine_prefill_ms":null,"outside_engine_ms":null},"request_id":"aiperf-7f3c2b","upstream_request_id":"chatcmpl-aiperf-7f3c2b","trace_id":"538c6a0cda7326c79e7eb00e4c9c9e35","span_id":"c1dfda7a5eb236f8","error":null}"#;

/// The fast path's reading of a line three ways: fresh, after a tokentap record taught it
/// another template, and a second time (its own template). All three must agree.
pub(crate) fn row(l: &[u8]) -> Option<Row<'_>> {
    let fresh = Fast::default().row(l);
    let mut taught = Fast::default();
    assert!(taught.row(RECORD.as_bytes()).is_some());
    let other = taught.row(l);
    let again = taught.row(l);
    let d = |r: &Option<Row<'_>>| format!("{r:?}");
    assert_eq!(d(&fresh), d(&other), "{}", String::from_utf8_lossy(l));
    assert_eq!(d(&fresh), d(&again), "{}", String::from_utf8_lossy(l));
    fresh
}

/// What serde reads of a line, beside the fast path's reading: the same row, or the fast path
/// left the line to serde. Panics otherwise.
pub(crate) fn agrees(l: &[u8], fast: &Option<Row<'_>>) {
    let Some(f) = fast else { return };
    match serde_json::from_slice::<Row<'_>>(l) {
        Ok(s) => assert_eq!(
            format!("{f:?}"),
            format!("{s:?}"),
            "{}",
            String::from_utf8_lossy(l)
        ),
        Err(e) => panic!(
            "fast read {f:?}, serde says {e} of {}",
            String::from_utf8_lossy(l)
        ),
    }
}

/// Every line of `text` through one reader, as a log is read (its template learned from the
/// lines before), and through [`row`]: the same readings, each serde's or left to serde.
pub(crate) fn check_lines(text: &[u8]) {
    let mut stream = Fast::default();
    for l in text.split(|&b| b == b'\n') {
        let fast = row(l);
        let streamed = stream.row(l);
        assert_eq!(
            format!("{fast:?}"),
            format!("{streamed:?}"),
            "{}",
            String::from_utf8_lossy(l)
        );
        agrees(l, &fast);
    }
}
