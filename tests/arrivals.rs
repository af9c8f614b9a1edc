//! The open loop's clock, alone in its test binary so no other test shares the cores: the
//! spread of each arrival process as sent, and a replay's arrival offsets and token counts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::time::Duration;

use support::load::*;
use support::*;
use tokentap::bench::{self, Arrivals, BenchConfig, Process};
use tokentap::meter::{Outcome, RequestRecord};
use tokentap::sim::Profile;

/// Seconds of each record's send (its `ts`), in order.
fn sends(recs: &[RequestRecord]) -> Vec<f64> {
    let mut t: Vec<f64> = recs
        .iter()
        .map(|r| {
            humantime::parse_rfc3339(&r.ts)
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrivals_have_the_spread_of_their_process() {
    let s = sim_on(Profile::instant());
    let dir = scratch("arrivals");
    // Constant gaps at a lower rate: a millisecond of scheduling noise is a larger share of an
    // 8 ms gap than of a 20 ms one. Its bound, 0.1, allows the few-millisecond stalls a debug
    // build on a busy 2-core machine has (a release build alone, at 8 ms gaps: 0.014 to 0.025).
    for (name, process, k, want, tol, rate, n) in [
        ("poisson", Process::Poisson, 1.0, 1.0, 0.1, 125.0, 500),
        ("gamma-4", Process::Gamma, 4.0, 0.5, 0.05, 125.0, 500),
        ("gamma-0.25", Process::Gamma, 0.25, 2.0, 0.2, 125.0, 500),
        ("constant", Process::Constant, 1.0, 0.0, 0.1, 50.0, 250),
    ] {
        let c = BenchConfig {
            request_rates: vec![rate],
            arrivals: Arrivals {
                process,
                burstiness: k,
                seed: 1,
            },
            requests: n,
            warmup: 0,
            outputs: [2, 2, 2],
            buckets: vec!["short-long".into()],
            ..bench_cfg(&s, dir.join(name))
        };
        let info = run_bench(&c).await;
        let recs = bench_records(&dir.join(name));
        assert_eq!(recs.len(), n, "{name}");
        assert!(recs
            .iter()
            .all(|r| r.outcome == Outcome::Ok && r.request_rate == Some(rate)));
        let (mean, cv) = bench::arrival::gap_stats(&sends(&recs)).unwrap();
        assert!(
            (cv - want).abs() <= tol,
            "{name}: gaps' CV {cv:.3}, want {want} ± {tol} (mean gap {:.2} ms)",
            mean * 1000.0
        );
        // The client kept the schedule it drew: the sends' spread is the schedule's.
        let mut due: Vec<f64> = recs
            .iter()
            .map(|r| r.scheduled_ms.unwrap() / 1000.0)
            .collect();
        due.sort_by(f64::total_cmp);
        let (_, drawn) = bench::arrival::gap_stats(&due).unwrap();
        assert!(
            (cv - drawn).abs() < tol.min(0.1),
            "{name}: sent {cv:.3}, drawn {drawn:.3}"
        );
        let o = info.cells[0].open_loop.as_ref().unwrap();
        assert!(!o.behind, "{name}: {o:?}");
    }
}

/// A tokentap log of 200 requests over about 3 s at irregular times, with known token counts.
fn synthetic_log(path: &std::path::Path) -> Vec<(f64, u64, u64)> {
    let base = std::time::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
    let mut rng = fastrand::Rng::with_seed(3);
    let mut t = 0.0;
    let mut want = Vec::new();
    let mut lines = String::new();
    for i in 0..200 {
        t += rng.f64() * 0.03;
        let (input, output) = (20 + rng.u64(..900), 1 + rng.u64(..12));
        let api = ["chat", "completions", "responses", "messages"][i % 4];
        let ts = humantime::format_rfc3339_micros(base + Duration::from_secs_f64(t));
        lines.push_str(&format!(
            r#"{{"ts":"{ts}","outcome":"ok","e2e_ms":5.0,"api":"{api}","model":"sim","input_tokens":{input},"output_tokens":{output},"stream":true}}"#
        ));
        lines.push('\n');
        want.push((t, input, output));
    }
    // Left out: the gateway's own request, an embeddings request, and a line of another tool.
    lines.push_str(r#"{"ts":"2026-11-18T11:06:40Z","outcome":"ok","e2e_ms":1,"api":"chat","input_tokens":5,"output_tokens":5,"gateway_tap":{"side":"inner"}}"#);
    lines.push('\n');
    lines.push_str(r#"{"ts":"2026-11-18T11:06:40Z","outcome":"ok","e2e_ms":1,"api":"embeddings","input_tokens":5}"#);
    lines.push('\n');
    lines.push_str("{\"level\":\"info\",\"msg\":\"not a record\"}\n");
    std::fs::write(path, lines).unwrap();
    want
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_keeps_the_arrivals_and_the_token_counts() {
    let s = sim_on(Profile::instant());
    let dir = scratch("replay");
    let log = dir.join("recorded.jsonl");
    let want = synthetic_log(&log);
    let c = BenchConfig {
        replay: vec![log.clone()],
        ..bench_cfg(&s, dir.join("out"))
    };
    let info = run_bench(&c).await;
    let r = info.replay.as_ref().unwrap();
    assert_eq!(
        (r.format, r.read, r.replayed),
        ("tokentap", 202, 200),
        "{r:?}"
    );
    assert_eq!(r.left_out.values().sum::<usize>(), 2, "{:?}", r.left_out);
    // In the order they were due (two due a fraction of a millisecond apart may go out in
    // either order).
    let mut recs = bench_records(&dir.join("out"));
    recs.sort_by(|a, b| a.scheduled_ms.unwrap().total_cmp(&b.scheduled_ms.unwrap()));
    assert_eq!(recs.len(), 200);
    let at = |r: &RequestRecord| sends(std::slice::from_ref(r))[0];
    let first = at(&recs[0]);
    // Arrival offsets within 2 ms (p99) of the recorded ones.
    let mut err: Vec<f64> = recs
        .iter()
        .zip(&want)
        .map(|(r, w)| ((at(r) - first) - (w.0 - want[0].0)).abs() * 1000.0)
        .collect();
    err.sort_by(f64::total_cmp);
    let p99 = err[(0.99 * err.len() as f64).ceil() as usize - 1];
    assert!(p99 <= 2.0, "offset error p99 {p99:.3} ms: {err:?}");
    // Token counts exactly, and each request's API shape.
    for (r, w) in recs.iter().zip(&want) {
        assert_eq!(
            (r.input_tokens, r.output_tokens),
            (Some(w.1), Some(w.2)),
            "{r:?}"
        );
        assert!(r.scheduled_ms.is_some() && r.concurrency.is_none());
    }
    assert_eq!(
        recs.iter().filter(|r| r.endpoint == "/v1/messages").count(),
        50
    );

    // Twice as fast, a slice: offsets halve, the window keeps its requests.
    let c = BenchConfig {
        replay: vec![log.clone()],
        speed: 2.0,
        window: Some(bench::replay::Window::parse("1s..").unwrap()),
        ..bench_cfg(&s, dir.join("fast"))
    };
    let info = run_bench(&c).await;
    let r = info.replay.unwrap();
    let kept = want.iter().filter(|w| w.0 - want[0].0 >= 1.0).count();
    assert_eq!(r.replayed, kept);
    let span = want.last().unwrap().0 - want.iter().find(|w| w.0 - want[0].0 >= 1.0).unwrap().0;
    assert!(
        (r.span_s - span / 2.0).abs() < 1e-3,
        "{} vs {}",
        r.span_s,
        span / 2.0
    );
}
