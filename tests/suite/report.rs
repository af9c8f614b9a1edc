//! `tokentap report`: known records give known percentiles and verdicts; splitting records
//! across files changes nothing; bad lines are named and skipped; `--fail-on-slo` gates; the
//! HTML is self-contained; and on a simulated sweep the report reads like the write-up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use support::*;
use tokentap::meter::{Experiment, Outcome, RequestRecord, TokensSource};
use tokentap::report::{self, Slos};

fn rec(i: usize, bucket: &str, c: u64, ttft: f64, tpot: f64, key: &str) -> RequestRecord {
    let out = 64u64;
    RequestRecord {
        ts: format!("2026-11-30T00:00:{:02}.{:03}Z", i / 1000 % 60, i % 1000),
        id: format!("{i:016x}"),
        route: "r".into(),
        experiment: None,
        method: "POST".into(),
        endpoint: "/v1/chat/completions".into(),
        api: tokentap::openai::Api::Chat,
        endpoint_api: None,
        model: Some("m".into()),
        upstream_model: None,
        key_id: Some(key.into()),
        stream: true,
        status: 200,
        outcome: Outcome::Ok,
        input_tokens: Some(500),
        output_tokens: Some(out),
        tokens_source: Some(TokensSource::Usage),
        cached_tokens: None,
        reasoning_tokens: None,
        ttft_ms: Some(ttft),
        ttfo_ms: Some(ttft),
        tpot_ms: Some(tpot),
        e2e_ms: ttft + tpot * (out - 1) as f64,
        itl_p50_ms: None,
        itl_p99_ms: None,
        itl_max_ms: None,
        body_read_ms: None,
        upstream_headers_ms: None,
        first_byte_ms: None,
        first_event_ms: None,
        last_token_ms: None,
        in_flight: c,
        max_tokens: Some(out),
        request_bytes: 100,
        response_bytes: 1000,
        events: 66,
        content_events: 64,
        done: Some(true),
        finish_reason: None,
        bucket: Some(bucket.into()),
        parse_errors: 0,
        oversize_events: 0,
        engine_queue_ms: None,
        engine_ttft_ms: None,
        engine_decode_ms: None,
        gateway_overhead_ms: None,
        concurrency: Some(c),
        request_rate: None,
        scheduled_ms: None,
        client_queue_ms: None,
        client_lag_ms: None,
        turn: None,
        prompt_index: None,
        run: None,
        run_id: None,
        shard: None,
        shards: None,
        upstream_sent_ms: None,
        ttft_split: None,
        gateway_tap: None,
        response_model: None,
        request_id: None,
        join_id: None,
        join_sent: false,
        boot_id: None,
        upstream_request_id: None,
        trace_id: None,
        span_id: None,
        content_encoding: None,
        decode_error: None,
        delivery: None,
        clock: tokentap::meter::Clock::Process,
        stamp_lag_ms: None,
        error: None,
    }
}

/// C=1: TTFT 1..=100 ms, TPOT 10 ms. C=2: TTFT 101..=200, TPOT 20 ms, plus 2 upstream errors.
fn known() -> Vec<RequestRecord> {
    let mut v = Vec::new();
    for i in 1..=100 {
        v.push(rec(
            i,
            "balanced",
            1,
            i as f64,
            10.0,
            if i % 4 == 0 { "team-b" } else { "team-a" },
        ));
    }
    for i in 1..=100 {
        v.push(rec(
            100 + i,
            "balanced",
            2,
            100.0 + i as f64,
            20.0,
            "team-a",
        ));
    }
    for i in 0..2 {
        let mut r = rec(300 + i, "balanced", 2, 0.0, 0.0, "team-a");
        r.outcome = Outcome::UpstreamError;
        r.status = 500;
        r.ttft_ms = None;
        r.tpot_ms = None;
        v.push(r);
    }
    v
}

fn write_jsonl(path: &std::path::Path, recs: &[RequestRecord]) {
    let text: String = recs
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn known_records_give_known_percentiles_and_verdicts() {
    let r = report::compute(&known(), &Slos::default(), 10, false);
    assert_eq!(r.cells.len(), 2);
    let c1 = &r.cells[0];
    assert_eq!((c1.concurrency.as_str(), c1.requests), ("1", 100));
    assert_eq!(
        (
            c1.ttft_ms.p50,
            c1.ttft_ms.p95,
            c1.ttft_ms.p99,
            c1.ttft_ms.max
        ),
        (Some(50.0), Some(95.0), Some(99.0), Some(100.0))
    );
    assert_eq!(c1.tok_s_per_stream.p50, Some(100.0));
    assert!(c1.slo["code_completion"]); // p95 95 ≤ 100
    assert!(c1.slo["interactive_coding"]); // 100 tok/s ≥ 60
    let c2 = &r.cells[1];
    assert_eq!(c2.requests, 102);
    assert_eq!(c2.errors, 2);
    assert!((c2.error_rate - 2.0 / 102.0).abs() < 1e-9);
    assert_eq!(c2.ttft_ms.p95, Some(195.0));
    assert!(!c2.slo["code_completion"]);
    assert!(c2.slo["strict"]);
    assert!(!c2.slo["interactive_coding"]); // 50 tok/s
    let p = &r.provisioning[0];
    assert_eq!(p.ceiling["code_completion"].as_deref(), Some("1"));
    assert_eq!(p.ceiling["strict"].as_deref(), Some("2"));
    assert_eq!(p.knee.as_deref(), Some("2")); // 195 > 2 × 95
    assert_eq!(p.failure_mode, "errors"); // 2 % errors at C=2
                                          // Per key: team-a has 75 + 102 requests.
    assert_eq!(r.keys[0].key_id, "team-a");
    assert_eq!(r.keys[0].requests, 177);
    assert_eq!(r.keys[1].requests, 25);
    // JSON schema keys other tools read.
    let j: serde_json::Value =
        serde_json::from_str(&report::render(&r, report::Format::Json)).unwrap();
    assert_eq!(j["cells"][0]["ttft_ms"]["p95"], 95.0);
    assert_eq!(j["cells"][1]["slo"]["strict"], true);
    assert!(j["provisioning"][0]["ceiling"]["interactive"].is_string());
}

#[test]
fn splitting_records_across_files_changes_nothing() {
    let dir = scratch("split");
    let recs = known();
    write_jsonl(&dir.join("one.jsonl"), &recs);
    let parts = dir.join("parts");
    std::fs::create_dir_all(&parts).unwrap();
    // Shuffled into three files, one of them a rotated name.
    let mut shuffled = recs.clone();
    fastrand::Rng::with_seed(1).shuffle(&mut shuffled);
    write_jsonl(&parts.join("a.jsonl"), &shuffled[..50]);
    write_jsonl(&parts.join("b.jsonl.1"), &shuffled[50..120]);
    write_jsonl(&parts.join("c.jsonl"), &shuffled[120..]);
    let mut warn = |w: String| panic!("unexpected warning {w}");
    let one = report::load(&[dir.join("one.jsonl")], &mut warn).unwrap();
    let many = report::load(std::slice::from_ref(&parts), &mut warn).unwrap();
    let a = report::render(
        &report::compute(&one, &Slos::default(), 10, false),
        report::Format::Json,
    );
    let b = report::render(
        &report::compute(&many, &Slos::default(), 10, false),
        report::Format::Json,
    );
    assert_eq!(a, b);
}

#[test]
fn bad_lines_are_named_and_the_rest_is_reported() {
    let dir = scratch("badlines");
    let f = dir.join("log.jsonl");
    let mut text: String = known()[..10]
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    text.push('\n');
    // Another tool's JSON, three times; binary garbage; an old record without today's fields.
    for _ in 0..3 {
        text.push_str("{\"level\":\"info\",\"msg\":\"started\"}\n");
    }
    text.push_str("\u{1}\u{2}garbage\n");
    let mut old = serde_json::to_value(&known()[0]).unwrap();
    for k in [
        "api",
        "ttfo_ms",
        "cached_tokens",
        "method",
        "content_events",
        "gateway_tap",
    ] {
        old.as_object_mut().unwrap().remove(k);
    }
    text.push_str(&(old.to_string() + "\n"));
    // A line being written: read up to the last whole line, without a warning.
    text.push_str("{\"ts\":\"2026-11-30T00:00:00Z\",\"id\":\"trunc");
    std::fs::write(&f, text).unwrap();
    let mut warnings = Vec::new();
    let recs = report::load(std::slice::from_ref(&f), &mut |w| warnings.push(w)).unwrap();
    assert_eq!(recs.len(), 11, "{warnings:?}");
    assert_eq!(recs[10].method, "", "a missing field takes its default");
    // One warning per reason, with the count and the first place.
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    let has = |s: &str| warnings.iter().any(|w| w.contains(s));
    assert!(
        has(&format!(
            "1 line skipped: empty line; first at {}:11",
            f.display()
        )),
        "{warnings:?}"
    );
    assert!(
        has(&format!(
            "3 lines skipped: missing field `outcome`; first at {}:12",
            f.display()
        )),
        "{warnings:?}"
    );
    assert!(
        has(&format!(
            "1 line skipped: not a JSON object; first at {}:15",
            f.display()
        )),
        "{warnings:?}"
    );

    // Nothing readable at all: an error, and a non-zero exit.
    let none = dir.join("none.jsonl");
    std::fs::write(&none, "{\"msg\":\"x\"}\nnot json\n").unwrap();
    let e = report::load(std::slice::from_ref(&none), &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no readable record") && e.contains("2 lines skipped"),
        "{e}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("report")
        .arg(&none)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no readable record"));
}

#[test]
fn cli_formats_and_slo_gate() {
    let dir = scratch("cli-report");
    let f = dir.join("r.jsonl");
    write_jsonl(&f, &known());
    let bin = env!("CARGO_BIN_EXE_tokentap");
    let out = Command::new(bin)
        .args(["report", "--fail-on-slo", "interactive"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("balanced"));
    let out = Command::new(bin)
        .args(["report", "--fail-on-slo", "code_completion"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("code_completion: balanced C=2"));
    let slo = dir.join("slo.toml");
    std::fs::write(&slo, "ttft_code_completion_ms = 250\n").unwrap();
    let out = Command::new(bin)
        .args(["report", "--fail-on-slo", "code_completion", "--slo"])
        .arg(&slo)
        .arg(&f)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(&slo, "ttft_code_completion = 250\n").unwrap();
    let out = Command::new(bin)
        .args(["report", "--slo"])
        .arg(&slo)
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("slo.toml"));

    let html = dir.join("r.html");
    let md = dir.join("r.md");
    assert!(Command::new(bin)
        .args(["report", "--format", "html", "--out"])
        .arg(&html)
        .arg(&f)
        .status()
        .unwrap()
        .success());
    assert!(Command::new(bin)
        .args(["report", "--format", "md", "--out"])
        .arg(&md)
        .arg(&f)
        .status()
        .unwrap()
        .success());
    let h = std::fs::read_to_string(&html).unwrap();
    assert_eq!(h.matches("<svg").count(), 4);
    // It opens with the questions answered, before any chart.
    let answers = h.find("How good is it for one user?").unwrap();
    assert!(answers < h.find("<svg").unwrap());
    for q in [
        "What is the interactive ceiling per prompt shape?",
        "Where does it actually hurt?",
        "What is the failure mode?",
        "What does the gateway cost, at which concurrency?",
    ] {
        assert!(h.contains(q), "{q}");
    }
    // The TTFT charts draw the SLO they are judged against.
    assert!(h.contains("interactive 500 ms") && h.contains("stroke-dasharray"));
    assert!(
        !h.contains("<script")
            && !h.contains("src=")
            && !h.contains("@import")
            && !h.contains("href=")
    );
    assert!(std::fs::read_to_string(&md)
        .unwrap()
        .contains("| bucket | C |"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_sweep_reads_like_the_write_up() {
    // The built-in V100 profile, short outputs to keep it quick.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim = tokentap::sim::Sim::start(tokentap::sim::Profile::v100(), "sim", 42, l, None)
        .await
        .unwrap();
    let dir = scratch("writeup");
    let cfg = {
        let mut b =
            support::load::bench_through_proxy(format!("http://{}", sim.engine), dir.clone());
        (b.common.requests, b.common.warmup) = (8, 0);
        b.common.prompts.outputs = [8, 16, 32];
        // The write-up's shapes alone: no /metrics scrapes against the in-process engine.
        b.load = tokentap::bench::Load::closed(vec![1, 8]);
        b
    };
    tokentap::bench::run(&cfg, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap();
    let recs = report::load(&[dir], &mut |w| panic!("{w}")).unwrap();
    let r = report::compute(&recs, &Slos::default(), 10, false);
    let cell = |b: &str, c: &str| {
        r.cells
            .iter()
            .find(|x| x.bucket == b && x.concurrency == c)
            .unwrap()
    };
    // Tokens per second from the median request's median gap between tokens.
    let decode_rate = |b: &str, c: u64| {
        let mut gaps: Vec<f64> = recs
            .iter()
            .filter(|x| x.bucket.as_deref() == Some(b) && x.concurrency == Some(c))
            .filter_map(|x| x.itl_p50_ms)
            .collect();
        gaps.sort_by(f64::total_cmp);
        assert!(!gaps.is_empty(), "{b} at C={c}: no gaps between tokens");
        1000.0 / gaps[gaps.len() / 2]
    };
    // TTFT fans out with prompt length and with concurrency.
    assert!(cell("long-short", "1").ttft_ms.p50 > cell("short-long", "1").ttft_ms.p50);
    assert!(cell("long-short", "8").ttft_ms.p50 > cell("short-long", "8").ttft_ms.p50);
    for b in ["long-short", "balanced", "short-long"] {
        assert!(
            cell(b, "8").ttft_ms.p50.unwrap() > 1.5 * cell(b, "1").ttft_ms.p50.unwrap(),
            "{b}"
        );
        // The engine's decode rate per stream stays nearly flat: its step is 26.85 ms for one
        // sequence and 32.8 ms for eight (0.82×). Read from the median gap between tokens,
        // which a stall does not move; the bound leaves room for a loaded machine.
        let (d1, d8) = (decode_rate(b, 1), decode_rate(b, 8));
        assert!(d8 > 0.6 * d1 && d8 <= d1 * 1.01, "{b}: decode {d1} → {d8}");
        // Per-stream tok/s counts the stalls too: the engine prefills whole prompts between
        // decode steps, so a stream whose prefill came first waits out the later arrivals'.
        // Which of eight requests sent within a millisecond make the first prefill is a race:
        // one of eight, or four (then the median stream waits a 300 ms prefill of four long
        // prompts among its 7 tokens: 0.35× at long-short). A decode rate that collapsed with
        // concurrency, toward 1/8, still fails the bound.
        let (t1, t8) = (
            cell(b, "1").tok_s_per_stream.p50.unwrap(),
            cell(b, "8").tok_s_per_stream.p50.unwrap(),
        );
        assert!(t8 > 0.25 * t1 && t8 <= t1 * 1.01, "{b}: {t1} → {t8}");
    }
    // E2E is set by output length.
    assert!(cell("short-long", "1").e2e_ms.p50 > cell("long-short", "1").e2e_ms.p50);
    // The answers carry the figures of the cells they summarise.
    let one = &r.answers[0].answer;
    let p95 = cell("long-short", "1").ttft_ms.p95.unwrap();
    assert!(one.contains(&format!("{p95:.0}")), "{one} vs {p95}");
    assert!(
        r.answers[3].answer.starts_with("Slower, never wrong")
            || r.answers[3].answer.starts_with("None seen"),
        "{}",
        r.answers[3].answer
    );
    assert!(
        r.answers[4].answer.starts_with("Not measured"),
        "{}",
        r.answers[4].answer
    );
    // The sim reports vLLM's per-request timings: every cell splits its TTFT.
    assert!(r.cells.iter().all(|c| c
        .ttft_split
        .as_ref()
        .is_some_and(|s| s.engine_prefill_ms.is_some())));
    // Aggregate tok/s grows with concurrency while per-stream does not.
    assert!(
        cell("short-long", "8").aggregate_tok_s.unwrap()
            > 4.0 * cell("short-long", "1").aggregate_tok_s.unwrap()
    );
}

#[test]
fn arms_split_cells_and_keys() {
    let mut recs = known();
    for (i, r) in recs.iter_mut().enumerate() {
        r.experiment = Some(Experiment {
            arm: if i % 2 == 0 {
                "direct".into()
            } else {
                "gateway".into()
            },
            pair_id: Some((i / 2).to_string()),
        });
    }
    let r = report::compute(&recs, &Slos::default(), 10, true);
    assert_eq!(r.cells.len(), 4);
    assert!(r.keys.iter().any(|k| k.arm.as_deref() == Some("gateway")));
}

/// Paired records at C=1, 4, 8: the gateway copy +100 ms (±jitter) at C=1 and 4, +150 at C=8
/// (contention mixed in). The pooled figure says what it pools; the level where the difference
/// stops being the hop is named; with a tap reading +100 at C=8, the tap is the reference.
#[test]
fn the_hop_is_read_per_concurrency_level() {
    let mut recs = Vec::new();
    let mut i = 0;
    for (c, hop) in [(1u64, 100.0), (4, 100.0), (8, 150.0)] {
        for p in 0..12 {
            let base = 50.0 + p as f64;
            let jitter = (p % 5) as f64 - 2.0;
            for (arm, ttft) in [("direct", base), ("gateway", base + hop + jitter)] {
                let mut r = rec(i, "balanced", c, ttft, 10.0, "k");
                r.experiment = Some(Experiment {
                    arm: arm.into(),
                    pair_id: Some(format!("{c}-{p}")),
                });
                recs.push(r);
                i += 1;
            }
        }
    }
    let rep = report::compute(&recs, &Slos::default(), 10, false);
    let hop = rep.gateway_hop.as_ref().unwrap();
    assert_eq!(hop.pooled_over, ["1", "4", "8"]);
    let med = |l: &str| hop.by_concurrency[l].ttft_ms.median.unwrap();
    assert!((med("1") - 100.0).abs() < 2.5 && (med("8") - 150.0).abs() < 2.5);
    assert_eq!(hop.by_concurrency["4"].pairs, 12);
    assert_eq!(hop.contention_from.as_deref(), Some("8"));
    assert!(
        hop.summary.contains("pools C=1, 4, 8") && hop.summary.contains("From C=8"),
        "{}",
        hop.summary
    );
    let v = serde_json::to_value(&rep).unwrap();
    assert!(v["gateway_hop"]["by_concurrency"]["8"]["ttft_ms"]["ci95"].is_array());
    assert!(v["gateway_tap"].is_null());
}

/// Per-shape rows, and TTFT split by prefix-cache hit vs miss where usage says.
#[test]
fn shapes_and_cache_hits_are_read_apart() {
    use tokentap::openai::Api;
    let mut recs = Vec::new();
    for i in 0..20 {
        let hit = i % 2 == 0;
        let mut r = rec(i, "balanced", 1, if hit { 20.0 } else { 120.0 }, 10.0, "k");
        r.cached_tokens = Some(if hit { 400 } else { 0 });
        r.api = if i < 10 { Api::Chat } else { Api::Messages };
        r.ttfo_ms = r.ttft_ms.map(|t| t + 50.0);
        r.reasoning_tokens = Some(3);
        recs.push(r);
    }
    // No usage detail: left out of the split.
    recs.push(rec(99, "balanced", 1, 500.0, 10.0, "k"));
    let rep = report::compute(&recs, &Slos::default(), 10, false);
    // Per bucket, pooled over every level: all 21 in one row.
    assert_eq!(rep.by_bucket["balanced"].requests, 21);
    assert_eq!(rep.by_bucket["balanced"].ttft_ms.max, Some(500.0));
    let c = rep.prefix_cache.as_ref().unwrap();
    assert_eq!((c.hit.n, c.miss.n), (10, 10));
    assert_eq!((c.hit.p50, c.miss.p50), (Some(20.0), Some(120.0)));
    assert!((c.cached_token_share.unwrap() - 0.4).abs() < 1e-9);
    assert_eq!(c.by_bucket["balanced"].hit.n, 10);
    assert_eq!(rep.by_api["messages"].requests, 10);
    assert_eq!(rep.by_api["chat"].requests, 11);
    assert_eq!(rep.by_api["messages"].ttfo_ms.p50, Some(70.0));
    assert_eq!(rep.by_api["chat"].reasoning_tokens, 30);
    let text = report::render(&rep, report::Format::Table);
    assert!(text.contains("Per API shape") && text.contains("prefix-cache hit vs miss"));
}

/// Rotated logs compressed by logrotate (`.jsonl.1.gz`, several gzip members in one file) read
/// as if they were plain; a compressed file cut short is read to its last whole line and named.
#[test]
fn compressed_rotated_logs_are_read_like_plain_ones() {
    use std::io::Write;
    let gz = |recs: &[RequestRecord]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        for r in recs {
            e.write_all((serde_json::to_string(r).unwrap() + "\n").as_bytes())
                .unwrap();
        }
        e.finish().unwrap()
    };
    let dir = scratch("gz");
    let recs = known();
    write_jsonl(&dir.join("plain.jsonl"), &recs);
    let parts = dir.join("parts");
    std::fs::create_dir_all(&parts).unwrap();
    write_jsonl(&parts.join("log.jsonl"), &recs[..40]);
    // Two gzip members in one file, as `cat a.gz b.gz` or some shippers make.
    let mut two = gz(&recs[40..100]);
    two.extend(gz(&recs[100..]));
    std::fs::write(parts.join("log.jsonl.1.gz"), two).unwrap();
    let mut warn = |w: String| panic!("unexpected warning {w}");
    let plain = report::load(&[dir.join("plain.jsonl")], &mut warn).unwrap();
    let mixed = report::load(std::slice::from_ref(&parts), &mut warn).unwrap();
    assert_eq!(mixed.len(), recs.len());
    let json = |r: &[RequestRecord]| {
        report::render(
            &report::compute(r, &Slos::default(), 10, false),
            report::Format::Json,
        )
    };
    assert_eq!(json(&plain), json(&mixed));

    // Cut short: the records that decompress whole are read, and the file is named.
    let cut = dir.join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    let whole = gz(&recs);
    std::fs::write(cut.join("log.jsonl.2.gz"), &whole[..whole.len() * 2 / 3]).unwrap();
    let mut warnings = Vec::new();
    let got = report::load(std::slice::from_ref(&cut), &mut |w| warnings.push(w)).unwrap();
    assert!(!got.is_empty() && got.len() < recs.len(), "{}", got.len());
    assert_eq!(got[..], recs[..got.len()], "the whole lines before the cut");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("log.jsonl.2.gz") && warnings[0].contains("ends early"));
}

/// Only generations are judged: a client's 4xx, a listing and a probe never make a cell; a
/// 429 is an error, counted as throttling apart from failures.
#[test]
fn only_generations_are_judged_and_throttling_is_named() {
    let mut v: Vec<RequestRecord> = (0..10)
        .map(|i| rec(i, "balanced", 1, 50.0, 10.0, "k"))
        .collect();
    let listing = {
        let mut r = rec(20, "balanced", 1, 0.0, 0.0, "k");
        (r.method, r.endpoint, r.api) = (
            "GET".into(),
            "/v1/models".into(),
            tokentap::openai::Api::Models,
        );
        (r.ttft_ms, r.tpot_ms, r.bucket) = (None, None, None);
        r
    };
    let mut client_error = rec(21, "balanced", 1, 0.0, 0.0, "k");
    (client_error.status, client_error.outcome) = (404, Outcome::UpstreamError);
    (client_error.ttft_ms, client_error.bucket) = (None, None);
    let mut throttled = rec(22, "balanced", 1, 0.0, 0.0, "k");
    (throttled.status, throttled.outcome, throttled.ttft_ms) = (429, Outcome::UpstreamError, None);
    let mut failed = rec(23, "balanced", 1, 0.0, 0.0, "k");
    (failed.status, failed.outcome, failed.ttft_ms) = (502, Outcome::ConnectError, None);
    v.extend([listing, client_error, throttled, failed]);
    let r = report::compute(&v, &Slos::default(), 10, false);
    assert_eq!(r.cells.len(), 1, "{:?}", r.cells);
    let c = &r.cells[0];
    assert_eq!((c.requests, c.errors, c.throttled), (12, 2, 1));
    assert_eq!(
        (r.traffic.generation, r.traffic.failed, r.traffic.throttled),
        (12, 1, 1)
    );
    assert_eq!((r.traffic.client_errors, r.traffic.other), (1, 1));
    let fm = &r
        .answers
        .iter()
        .find(|a| a.question == "What is the failure mode?")
        .unwrap()
        .answer;
    assert!(fm.contains("1 failed, 1 throttled (429)"), "{fm}");
    assert_eq!(r.keys[0].client_errors, 1);
    assert_eq!(r.other_traffic.len(), 2);
    assert!(r.cells.iter().all(|c| c.bucket != "unknown"));
}

/// A prompt shape served only without streaming has no TTFT: its ceiling is not judged (not
/// "none"), and the single-user answer counts it apart, not as a miss.
#[test]
fn a_shape_with_nothing_streamed_is_not_judged() {
    let mut v: Vec<RequestRecord> = (0..10)
        .map(|i| rec(i, "balanced", 1, 50.0, 10.0, "k"))
        .collect();
    for i in 0..3 {
        let mut r = rec(40 + i, "long-short", 1, 0.0, 0.0, "k");
        (r.stream, r.ttft_ms, r.ttfo_ms, r.tpot_ms) = (false, None, None, None);
        v.push(r);
    }
    let r = report::compute(&v, &Slos::default(), 10, false);
    let p = |b: &str| r.provisioning.iter().find(|p| p.bucket == b).unwrap();
    assert!(
        p("long-short").not_judged.contains(&"interactive"),
        "{:?}",
        p("long-short")
    );
    assert_eq!(p("long-short").ceiling.get("interactive"), Some(&None));
    assert!(p("balanced").not_judged.is_empty());
    assert_eq!(
        p("balanced").ceiling.get("interactive"),
        Some(&Some("1".to_string()))
    );
    let answer = |q: &str| {
        r.answers
            .iter()
            .find(|a| a.question == q)
            .unwrap()
            .answer
            .clone()
    };
    let ceiling = answer("What is the interactive ceiling per prompt shape?");
    assert!(
        ceiling.contains("long-short not judged (nothing streamed)"),
        "{ceiling}"
    );
    assert!(!ceiling.contains("not even"), "{ceiling}");
    let one = answer("How good is it for one user?");
    assert!(
        one.contains("met by 1 of 1 prompt shapes (1 more not judged: nothing streamed)"),
        "{one}"
    );
    let json = serde_json::to_value(&r).unwrap();
    let rows = json["provisioning"].as_array().unwrap();
    let short = rows.iter().find(|p| p["bucket"] == "long-short").unwrap();
    assert_eq!(short["not_judged"][0], "interactive");
    let bal = rows.iter().find(|p| p["bucket"] == "balanced").unwrap();
    assert!(
        bal.get("not_judged").is_none(),
        "absent when every SLO was judged"
    );
    let md = report::render(&r, report::Format::Md);
    assert!(
        md.contains("long-short: interactive (TTFT p95 ≤ 500 ms) is not judged (nothing streamed)"),
        "{md}"
    );
    assert!(!md.contains("not even the lowest level"), "{md}");
}

/// Saturation is named only when aggregate throughput stopped rising; a ceiling at the top of
/// the sweep was not reached; tokens per day need 20 served requests.
#[test]
fn saturation_ceilings_and_tokens_per_day_follow_their_rules() {
    // Per level: TTFT (tight), and the spacing of requests in time, which sets aggregate tok/s.
    let mut v = Vec::new();
    let mut i = 0;
    for (c, ttft, n, step_ms) in [
        (1u64, 50.0, 20, 100),
        (2, 150.0, 20, 50),
        (4, 160.0, 20, 48),
    ] {
        for k in 0..n {
            let mut r = rec(i, "balanced", c, ttft, 10.0, "k");
            // Requests spread so the cell's wall time (and so its aggregate tok/s) is chosen.
            r.ts = format!(
                "2026-11-30T00:{:02}:{:02}.{:03}Z",
                c,
                (k * step_ms) / 1000,
                (k * step_ms) % 1000
            );
            v.push(r);
            i += 1;
        }
    }
    let r = report::compute(&v, &Slos::default(), 10, false);
    let tail = |lvl: &str| {
        r.cells
            .iter()
            .find(|c| c.concurrency == lvl)
            .unwrap()
            .tail
            .as_str()
    };
    let agg = |lvl: &str| {
        r.cells
            .iter()
            .find(|c| c.concurrency == lvl)
            .unwrap()
            .aggregate_tok_s
            .unwrap()
    };
    assert!(agg("2") > 1.1 * agg("1"), "{} {}", agg("1"), agg("2"));
    assert!(agg("4") <= 1.1 * agg("2"), "{} {}", agg("2"), agg("4"));
    // C=2: far above C=1 with throughput still rising; C=4: throughput flat.
    assert_eq!(
        (tail("1"), tail("2"), tail("4")),
        ("tight", "shifted", "converged-high")
    );
    let p = &r.provisioning[0];
    assert_eq!(p.top, "4");
    assert_eq!(p.ceiling["interactive"].as_deref(), Some("4"));
    let answer = &r
        .answers
        .iter()
        .find(|a| a.question.contains("ceiling"))
        .unwrap()
        .answer;
    assert!(answer.contains("≥ C=4 (not reached)"), "{answer}");
    assert!(p.tokens_per_day_at_interactive_ceiling.is_some());
    // With fewer than 20 served requests at the ceiling, no extrapolation, and a reason.
    let few: Vec<RequestRecord> = v
        .iter()
        .filter(|r| r.concurrency != Some(4) || r.id < format!("{:016x}", 45))
        .cloned()
        .collect();
    let r = report::compute(&few, &Slos::default(), 10, false);
    let p = &r.provisioning[0];
    assert_eq!(p.tokens_per_day_at_interactive_ceiling, None);
    assert!(p
        .tokens_per_day_note
        .as_deref()
        .unwrap()
        .contains("fewer than 20"));
}

/// The views format one list of sections: every view shows every section the report holds,
/// under the same title, in the same order, and nothing else.
#[test]
fn every_view_shows_every_section() {
    use support::records::{record, Mix};
    let mut recs: Vec<RequestRecord> = (0..3000).map(|i| record(i, 7, Mix::Everything)).collect();
    recs.extend((0..600).map(|i| record(i, 11, Mix::Load)));
    let r = report::compute(&recs, &Slos::default(), 20, false);
    let titles = report::section_titles(&r);
    assert!(titles.len() >= 12, "{titles:?}");
    let text = report::render(&r, report::Format::Table);
    let md = report::render(&r, report::Format::Md);
    let html = report::render(&r, report::Format::Html);
    let (mut at_t, mut at_m, mut at_h) = (0, 0, 0);
    for t in &titles {
        let esc = t
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        for (view, at, needle) in [
            ("text", &mut at_t, format!("\n{t}\n")),
            ("md", &mut at_m, format!("\n## {t}\n")),
            ("html", &mut at_h, format!("<h2>{esc}</h2>")),
        ] {
            let doc = match view {
                "text" => &text,
                "md" => &md,
                _ => &html,
            };
            let found = doc[*at..].find(&needle);
            assert!(
                found.is_some(),
                "{view}: section {t:?} missing or out of order"
            );
            *at += found.unwrap_or(0) + needle.len();
        }
    }
    assert_eq!(
        md.matches("\n## ").count(),
        titles.len(),
        "md: a heading outside the list"
    );
    assert_eq!(
        html.matches("<h2>").count(),
        titles.len(),
        "html: a heading outside the list"
    );
}
