//! Load that looks like production, against `tokentap sim` over real sockets: the concurrency
//! cap and its queue, a rate the client cannot keep, replay of a Mooncake trace, shared
//! prefixes on a prefix-caching engine, conversations turn by turn, the proxy's view of them,
//! stopping. (Tests that hold the clock to a budget are in `tests/suite/arrivals.rs` and
//! `tests/suite/saturation.rs`, alone in their binaries.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use support::load::*;
use support::*;
use tokentap::bench::{self, Arrivals, Process, Until};
use tokentap::report::{self, Slos};
use tokentap::sim::Profile;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_queues_requests_outside_their_ttft_and_a_rate_too_fast_is_reported() {
    // Each request takes about 120 ms: at 40 a second, a cap of 2 makes them queue.
    let slow = Profile {
        prefill_base_ms: 40.0,
        prefill_per_token_ms: 0.0,
        prefill_per_seq_ms: 0.0,
        step_base_ms: 20.0,
        step_per_seq_ms: 0.0,
        ..Profile::v100()
    };
    let s = sim_on(slow);
    let dir = scratch("cap");
    let c = {
        let mut b = bench_cfg(&s, dir.join("cap"));
        (b.common.requests, b.common.warmup) = (20, 0);
        b.common.prompts.outputs = [4, 4, 4];
        b.common.prompts.buckets = vec!["short-long".into()];
        b.load = bench::Load::Open(bench::Open {
            rates: bench::OpenLoop {
                rates: vec![40.0],
                arrivals: Arrivals {
                    process: Process::Constant,
                    burstiness: 1.0,
                    seed: 1,
                },
                max_concurrency: Some(2),
            },
            ..Default::default()
        });
        b
    };
    run_bench(&c).await;
    let recs = bench_records(&dir.join("cap"));
    assert!(recs.iter().all(|r| r.in_flight <= 2), "the cap holds");
    let queued: Vec<f64> = recs.iter().map(|r| r.client_queue_ms.unwrap()).collect();
    assert!(queued[15..].iter().all(|q| *q > 200.0), "{queued:?}");
    // TTFT starts when a request is sent: the engine's own ~45 ms, not the queue.
    for r in &recs {
        let t = r.ttft_ms.unwrap();
        assert!(t > 35.0 && t < 150.0, "ttft {t}");
    }
    let rep = report::compute(&recs, &Slos::default(), 5, false);
    let cell = &rep.cells[0];
    assert_eq!(cell.concurrency, "40/s");
    assert!(cell.client_queue_ms.as_ref().unwrap().p99.unwrap() > 200.0);
    assert!(cell.achieved_rate.unwrap() < 0.6 * cell.scheduled_rate.unwrap());

    // A rate no client keeps: 300 requests due within 3 ms.
    let fast = {
        let mut b = bench_cfg(&s, dir.join("fast"));
        b.common.prompts.buckets = c.common.prompts.buckets.clone();
        (b.common.requests, b.common.warmup) = (300, 0);
        b.common.prompts.outputs = [1, 1, 1];
        b.load = bench::Load::Open(bench::Open {
            rates: bench::OpenLoop {
                rates: vec![100_000.0],
                arrivals: match &c.load {
                    bench::Load::Open(o) => o.rates.arrivals,
                    _ => unreachable!("an open loop"),
                },
                ..Default::default()
            },
            ..Default::default()
        });
        b
    };
    let info = run_bench(&fast).await;
    let o = info.cells[0].open_loop.as_ref().unwrap();
    assert!(o.behind, "{o:?}");
    assert!(o.achieved_rate.unwrap() < 0.95 * o.scheduled_rate.unwrap());
    let run_json = std::fs::read_to_string(dir.join("fast/run.json")).unwrap();
    assert!(run_json.contains("\"behind\": true"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mooncake_trace_replays_with_its_shared_blocks_cached() {
    let s = sim_on(Profile {
        prefix_cache: true,
        ..Profile::instant()
    });
    let dir = scratch("mooncake");
    let trace = dir.join("trace.jsonl");
    // Four requests sharing two 512-token blocks, then one of their own.
    let mut lines = String::new();
    for (i, ids) in ["[1,2,3]", "[1,2,4]", "[1,2,5]", "[9]"].iter().enumerate() {
        lines.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": 1400, \"output_length\": 3, \"hash_ids\": {ids}}}\n",
            i * 50
        ));
    }
    std::fs::write(&trace, lines).unwrap();
    let c = {
        let mut b = bench_cfg(&s, dir.join("out"));
        b.common.model = Some("sim".into());
        b.load = bench::Load::Replay(bench::Replay {
            files: vec![trace],
            ..Default::default()
        });
        b
    };
    let info = run_bench(&c).await;
    assert_eq!(info.replay.as_ref().unwrap().format, "mooncake");
    let mut recs = bench_records(&dir.join("out"));
    recs.sort_by(|a, b| a.ts.cmp(&b.ts));
    assert!(recs
        .iter()
        .all(|r| r.input_tokens == Some(1400) && r.output_tokens == Some(3)));
    let cached: Vec<u64> = recs.iter().map(|r| r.cached_tokens.unwrap_or(0)).collect();
    assert_eq!(cached[0], 0);
    assert!(cached[1] >= 1024 && cached[2] >= 1024, "{cached:?}");
    assert_eq!(cached[3], 0, "{cached:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_prefix_gives_back_ttft_on_a_caching_engine() {
    let s = sim_on(Profile {
        prefix_cache: true,
        ..Profile::v100()
    });
    let dir = scratch("prefix");
    let c = {
        let mut b = bench_cfg(&s, dir.clone());
        b.common.prompts.shared_prefix = 2000;
        b.common.prompts.prefix_groups = 4;
        (b.common.requests, b.common.warmup) = (12, 0);
        b.common.prompts.outputs = [2, 2, 2];
        b.common.prompts.buckets = vec!["short-long".into()];
        b.load = bench::Load::closed(vec![1]);
        b
    };
    run_bench(&c).await;
    let recs = bench_records(&dir);
    let misses = recs.iter().filter(|r| r.cached_tokens == Some(0)).count();
    assert_eq!(misses, 4, "each group's first request misses");
    let rep = report::compute(&recs, &Slos::default(), 5, false);
    let pc = rep.prefix_cache.as_ref().unwrap();
    let (hit, miss) = (pc.hit.p50.unwrap(), pc.miss.p50.unwrap());
    assert!(hit + 50.0 < miss, "hit {hit} miss {miss}");
    assert!(pc.ttft_saved_ms.unwrap() > 50.0);
    let answer = &rep
        .answers
        .iter()
        .find(|a| a.question == "What does the prefix cache give back?")
        .unwrap()
        .answer;
    assert!(answer.contains("given back"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_go_turn_by_turn_and_the_report_reads_each_turn() {
    let s = sim_on(Profile {
        prefix_cache: true,
        ..Profile::instant()
    });
    let dir = scratch("turns");
    let c = {
        let mut b = bench_cfg(&s, dir.clone());
        (b.common.requests, b.common.warmup) = (24, 0);
        b.load = bench::Load::Conversations(bench::Conversations {
            concurrency: vec![2],
            think_time: Duration::from_millis(5),
            max_turns: 4,
        });
        b
    };
    let info = run_bench(&c).await;
    assert_eq!(info.cells[0].bucket, "conversations");
    let recs = bench_records(&dir);
    assert_eq!(recs.len(), 24);
    assert!(recs
        .iter()
        .all(|r| r.turn.is_some_and(|t| (1..=4).contains(&t))));
    // Each turn carries the history: prompts grow, and from turn 2 the cache holds the start.
    let rep = report::compute(&recs, &Slos::default(), 5, false);
    let t1 = &rep.by_turn["1"];
    let t2 = &rep.by_turn["2"];
    assert!(t2.input_tokens_median.unwrap() > t1.input_tokens_median.unwrap());
    assert_eq!(t2.cache_hit_rate, Some(1.0));
    assert!(t2.cached_token_share.unwrap() > 0.3);
    let text = report::render(&rep, report::Format::Table);
    assert!(text.contains("Per conversation turn"), "{text}");
}

#[tokio::test]
async fn bad_replay_input_is_named() {
    let dir = scratch("replay-bad");
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let garbage = dir.join("garbage.jsonl");
    std::fs::write(&garbage, "not json\n{\"msg\":\"other tool\"}\n").unwrap();
    for f in [&empty, &garbage] {
        let c = {
            let mut b = support::load::quiet_bench("http://127.0.0.1:9".into(), dir.join("out"));
            b.load = bench::Load::Replay(bench::Replay {
                files: vec![f.clone()],
                ..Default::default()
            });
            b
        };
        let e = bench::run(&c, Arc::new(AtomicBool::new(false)))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(&f.display().to_string()), "{e}");
    }
    // The CLI's usage errors.
    for args in [
        &["--burstiness", "2"][..],
        &["--until", "slo:fast"],
        &["--until", "forever"],
        &["--window", "soon"],
        &["--request-rate", "0"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .args(["bench", "--target", "http://127.0.0.1:9", "--out"])
            .arg(dir.join("cli"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).trim().is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_proxy_the_rate_turn_and_bucket_are_recorded_and_never_forwarded() {
    let up = Upstream::spawn(|_| {
        Script::chat_stream(Duration::from_millis(2), Duration::from_millis(1), 3, true)
    })
    .await;
    let px = proxy(&up.url(), "").await;
    let dir = scratch("load-proxy");
    let base = {
        let mut b = bench::Bench::default();
        b.common.target = format!("http://{}", px.addr);
        b.common.model = Some("m".into());
        b.common.calibrate = false;
        b.common.quiet = true;
        (b.common.requests, b.common.warmup) = (4, 0);
        b.common.prompts.outputs = [3, 3, 3];
        b.common.prompts.buckets = vec!["short-long".into()];
        // The proxy's log holds bench's requests alone: no scrape of /metrics through it.
        b.common.scrape.plan = tokentap::bench::scrape::ScrapePlan::Off;
        b
    };
    run_bench(&{
        let mut b = base.clone();
        b.common.out = dir.join("rate");
        b.load = bench::Load::Open(bench::Open {
            rates: bench::OpenLoop {
                rates: vec![50.0],
                ..Default::default()
            },
            ..Default::default()
        });
        b
    })
    .await;
    run_bench(&{
        let mut b = base;
        b.common.out = dir.join("turns");
        b.load = bench::Load::Conversations(bench::Conversations {
            concurrency: vec![1],
            think_time: Duration::ZERO,
            max_turns: 2,
        });
        b
    })
    .await;
    // 8 requests, and the listing that opens the conversation's connection (no warm-up).
    let (listings, recs): (Vec<_>, Vec<_>) = px
        .records(9)
        .await
        .into_iter()
        .partition(|r| r.endpoint == "/v1/models");
    assert_eq!(listings.len(), 1);
    assert_eq!(
        recs.iter().filter(|r| r.request_rate == Some(50.0)).count(),
        4
    );
    let turns: Vec<u32> = recs.iter().filter_map(|r| r.turn).collect();
    assert_eq!(turns.len(), 4, "{turns:?}");
    assert!(turns.contains(&2));
    // bench's bucket, not the one the proxy's thresholds would give 3 output tokens: one
    // bucket for a request, in bench's records and the proxy's alike.
    let rated: Vec<Option<&str>> = recs
        .iter()
        .filter(|r| r.request_rate.is_some())
        .map(|r| r.bucket.as_deref())
        .collect();
    assert_eq!(rated, vec![Some("short-long"); 4]);
    let sorted = |mut v: Vec<Option<String>>| {
        v.sort();
        v
    };
    let bench: Vec<Option<String>> = ["rate", "turns"]
        .iter()
        .flat_map(|d| read_records(&dir.join(d).join("requests.jsonl")))
        .map(|r| r.bucket)
        .collect();
    assert_eq!(
        sorted(recs.iter().map(|r| r.bucket.clone()).collect()),
        sorted(bench)
    );
    for r in up.requests() {
        for h in [
            "x-tokentap-request-rate",
            "x-tokentap-turn",
            "x-tokentap-concurrency",
            "x-tokentap-bucket",
        ] {
            assert!(r.header(h).is_none(), "{h} reached the upstream");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_an_open_loop_or_a_search_keeps_what_was_measured() {
    let s = sim_on(Profile::instant());
    let slow = sim_on(Profile {
        prefill_base_ms: 50.0,
        ..Profile::instant()
    });
    let dir = scratch("load-stop");
    for (name, c) in [
        ("open", {
            let mut b = bench_cfg(&s, dir.join("open"));
            (b.common.requests, b.common.warmup) = (400, 0);
            b.common.prompts.outputs = [2, 2, 2];
            b.common.prompts.buckets = vec!["short-long".into()];
            b.load = bench::Load::Open(bench::Open {
                rates: bench::OpenLoop {
                    rates: vec![20.0],
                    ..Default::default()
                },
                ..Default::default()
            });
            b
        }),
        ("search", {
            let mut b = bench_cfg(&slow, dir.join("search"));
            (b.common.requests, b.common.warmup) = (200, 0);
            b.common.prompts.outputs = [2, 2, 2];
            b.common.prompts.buckets = vec!["short-long".into()];
            b.load = bench::Load::Search(bench::Search::until(Until::Errors));
            b
        }),
    ] {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let info = bench::run(&c, stop).await.unwrap();
        assert!(info.interrupted, "{name}");
        let recs = bench_records(&dir.join(name));
        assert!(!recs.is_empty(), "{name}");
        if name == "open" {
            assert!(recs.len() < 400, "{name}: {}", recs.len());
        }
        let run_json = std::fs::read_to_string(dir.join(name).join("run.json")).unwrap();
        assert!(run_json.contains("\"interrupted\": true"), "{name}");
        if name == "search" {
            let found = &info.saturation["short-long"];
            assert_eq!(found.stopped, "interrupted");
            assert!(
                found.levels.is_empty(),
                "the level cut short is not judged: {:?}",
                found.levels.iter().map(|l| l.level).collect::<Vec<_>>()
            );
        }
    }
}
