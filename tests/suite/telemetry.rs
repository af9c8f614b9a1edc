//! The engine's telemetry during bench, over real sockets: the sim's `/metrics` in vLLM's
//! names, bench scraping it every cell (raw samples in scrape.jsonl, summaries in run.json), a
//! long-prompt sweep that fills the sim's KV cache (queueing, preemptions) against a
//! short-prompt one held by its batch limit, prompts waiting for a cache not full, the binding
//! constraint named only when measured (per-step overhead, memory bandwidth, not identified),
//! a DCGM exporter's page, a scrape that fails (counted, the
//! run goes on) and credentials in a scrape URL (used, never written).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokentap_test_support as support;

use support::load::{bench_cfg, run_bench, sim_on};
use support::{scratch, Script, Upstream};
use tokentap::bench::scrape::{prom, ScrapePlan};
use tokentap::sim::Profile;

/// Small costs, a KV cache of 3,200 tokens and vLLM's preemption: three prompts of 1,000
/// tokens fit at admission, and they outgrow it while they decode 128 tokens.
fn small_kv() -> Profile {
    Profile {
        prefill_base_ms: 2.0,
        prefill_per_token_ms: 0.002,
        prefill_per_seq_ms: 0.5,
        step_base_ms: 1.0,
        step_per_seq_ms: 0.1,
        kv_tokens: 3200,
        ..Profile::v100_small_kv()
    }
}

fn sweep(
    prompt: u64,
    out: std::path::PathBuf,
    s: &support::load::SimApart,
) -> tokentap::bench::Bench {
    {
        let mut b = bench_cfg(s, out);
        b.common.prompts.synthetic = Some(vec![prompt]);
        b.common.prompts.buckets = vec![if prompt >= 700 {
            "long-short"
        } else {
            "short-long"
        }
        .into()];
        b.common.prompts.outputs = [128, 128, 64];
        b.common.requests = 8;
        b.common.warmup = 0;
        b.common.estimate = false;
        b.common.scrape.interval = Duration::from_millis(50);
        b.common.timeslice = Some(Duration::from_millis(200));
        b.load = tokentap::bench::Load::closed(vec![1, 8]);
        b
    }
}

fn run_json(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sim_speaks_vllms_metric_names() {
    let s = sim_on(small_kv());
    let c = support::client();
    let got = support::send(
        &c,
        "GET",
        &format!("http://{}/metrics", s.engine),
        &[],
        vec![],
    )
    .await
    .unwrap();
    let page = prom::parse(&String::from_utf8_lossy(&got.body));
    assert_eq!(page.bad_lines, 0);
    for name in [
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_preemptions_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:estimated_flops_per_gpu_total",
        "vllm:estimated_read_bytes_per_gpu_total",
        "tokentap_sim_kv_cache_usage_perc",
    ] {
        assert!(page.samples.iter().any(|x| x.name == name), "{name}");
    }
    assert_eq!(
        page.kind_of("vllm:num_preemptions_total"),
        prom::Kind::Counter
    );
}

/// `tokentap report --format FORMAT DIR`, its output.
fn report(dir: &std::path::Path, format: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["report", "--format", format])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The report's binding constraint for the one bucket, and the JSON report.
fn binding(dir: &std::path::Path) -> (String, serde_json::Value) {
    let rep: serde_json::Value = serde_json::from_str(&report(dir, "json")).unwrap();
    let b = rep["binding"][0]["constraint"].as_str().unwrap().to_owned();
    (b, rep)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_prompt_sweep_is_kv_bound_a_short_one_is_not() {
    let s = sim_on(small_kv());
    let dir = scratch("telemetry-kv");
    let long = run_bench(&sweep(1000, dir.join("long"), &s)).await;
    assert!(
        long.scrape.is_some(),
        "the sim's /metrics is scraped by default"
    );
    let run = run_json(&dir.join("long"));
    assert_eq!(run["scrape"]["failures"], 0);
    assert!(run["scrape"]["endpoints"][0]
        .as_str()
        .unwrap()
        .ends_with("/metrics"));
    // C=1: one sequence, the cache far from full.
    let t1 = &run["cells"][0]["scrape"]["telemetry"];
    assert!(t1["kv_cache_usage"]["peak"].as_f64().unwrap() < 0.5, "{t1}");
    assert_eq!(t1["preemptions"], 0.0, "{t1}");
    let t = &run["cells"][1]["scrape"]["telemetry"];
    assert!(t["kv_cache_usage"]["peak"].as_f64().unwrap() > 0.9, "{t}");
    assert!(t["waiting"]["peak"].as_f64().unwrap() >= 1.0, "{t}");
    assert!(t["preemptions"].as_f64().unwrap() >= 1.0, "{t}");
    assert!(t["preemptions_per_request"].as_f64().unwrap() > 0.0, "{t}");
    assert!(t["running"]["peak"].as_f64().unwrap() <= 4.0, "{t}");
    assert!(t["flops_per_s_per_gpu"].as_f64().unwrap() > 0.0, "{t}");
    assert!(t["read_bytes_per_s_per_gpu"].as_f64().unwrap() > 0.0, "{t}");
    assert_eq!(
        t["prefix_cache_hit_rate"], 0.0,
        "no prefix cache in this profile"
    );
    // Every request still ended well: preemption delays, it does not fail.
    assert_eq!(run["cells"][1]["errors"], 0);
    // The raw samples: one line a sample, the fields the issue names.
    let raw = std::fs::read_to_string(dir.join("long/scrape.jsonl")).unwrap();
    let kv: Vec<serde_json::Value> = raw
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["metric"] == "vllm:kv_cache_usage_perc")
        .collect();
    assert!(kv.len() >= 3, "{}", kv.len());
    for k in ["time", "t_ms", "endpoint", "labels", "value"] {
        assert!(!kv[0][k].is_null(), "{k}");
    }
    assert_eq!(kv[0]["labels"]["engine"], "0");

    // The report names the KV cache, with its figures, in every format.
    let (b, rep) = binding(&dir.join("long"));
    assert_eq!(b, "kv_cache", "{}", rep["binding"]);
    assert_eq!(rep["binding"][0]["at"], "C=8");
    assert!(
        rep["binding"][0]["figures"]["kv_cache_usage_peak"]
            .as_f64()
            .unwrap()
            > 0.9
    );
    let cell8 = rep["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["concurrency"] == "8")
        .unwrap();
    assert!(cell8["engine"]["kv_cache_usage"]["peak"].as_f64().unwrap() > 0.9);
    for (format, heading) in [
        ("table", "Binding constraint per bucket"),
        ("md", "## Binding constraint per bucket"),
        ("html", "<h2>Binding constraint per bucket</h2>"),
    ] {
        let text = report(&dir.join("long"), format);
        assert!(text.contains(heading), "{format}");
        assert!(
            text.contains("KV mean/peak %") && text.contains("KV cache"),
            "{format}"
        );
    }
    // Time slices: the queue and the full cache in the same windows as the latency.
    let slices = run["cells"][1]["timeslices"].as_array().unwrap();
    assert!(slices.len() >= 2, "{}", slices.len());
    assert!(slices
        .iter()
        .any(|s| s["kv_cache_usage"].as_f64().unwrap_or(0.0) > 0.8));
    assert!(slices
        .iter()
        .any(|s| s["waiting"].as_f64().unwrap_or(0.0) > 0.0));
    assert!(slices.iter().any(|s| s["ttft_ms_p95"].as_f64().is_some()));
    let secs = |s: &serde_json::Value| {
        (s["to_ms"].as_f64().unwrap() - s["from_ms"].as_f64().unwrap()) / 1000.0
    };
    let total: f64 = slices
        .iter()
        .map(|s| s["output_tok_s"].as_f64().unwrap() * secs(s))
        .sum();
    let tokens = run["cells"][1]["output_tokens"].as_f64().unwrap();
    assert!(
        (total - tokens).abs() < 0.02 * tokens,
        "{total} of {tokens} tokens in the windows"
    );
    assert_eq!(
        cell8["timeslices"].as_array().map(Vec::len),
        Some(slices.len())
    );
    // The plateau beside the whole cell, in the report too: at C=1 every request; at C=8 with
    // eight requests, none lived wholly while eight were in flight.
    let cell1 = rep["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["concurrency"] == "1")
        .unwrap();
    assert_eq!(cell1["steady_state"]["requests"], 8);
    assert_eq!(run["cells"][0]["steady_state"]["requests"], 8);
    assert!(cell1["steady_state"]["ttft_ms"]["p95"].as_f64().is_some());
    assert!(cell8["steady_state"].is_null() && run["cells"][1]["steady_state"].is_null());
    assert!(report(&dir.join("long"), "md").contains("## Steady state: each cell's plateau"));
    let html = report(&dir.join("long"), "html");
    for t in [
        "TTFT p95 over time",
        "KV-cache usage over time",
        "Waiting requests over time",
    ] {
        assert!(html.contains(t), "{t}");
    }

    // Short prompts on an engine that runs two at once: a queue, the cache far from full.
    let s2 = sim_on(Profile {
        max_batch: 2,
        ..small_kv()
    });
    let short = run_bench(&sweep(100, dir.join("short"), &s2)).await;
    assert!(short.scrape.is_some());
    let run = run_json(&dir.join("short"));
    let t = &run["cells"][1]["scrape"]["telemetry"];
    assert!(t["kv_cache_usage"]["peak"].as_f64().unwrap() < 0.6, "{t}");
    assert_eq!(t["preemptions"], 0.0, "{t}");
    // The cache's size, from vllm:cache_config_info: 200 blocks of 16 tokens.
    assert_eq!(t["kv_cache_tokens"], 3200.0, "{t}");
    assert_eq!(t["running_waiting"]["peak"], 2.0, "{t}");
    let (b, rep) = binding(&dir.join("short"));
    assert_eq!(b, "batch_limit", "{}", rep["binding"]);
    assert_eq!(rep["binding"][0]["figures"]["running_limit"], 2.0);
}

/// A KV cache of 4,000 tokens and 1,000-token prompts: three run, the fourth waits for a
/// cache that is three-quarters full, and nothing is preempted. Decode steps of 3 ms: the last
/// of eight waits two rounds of about 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_waiting_for_a_cache_not_full_are_kv_bound() {
    let s = sim_on(Profile {
        kv_tokens: 4000,
        step_base_ms: 3.0,
        ..small_kv()
    });
    let dir = scratch("telemetry-kv-admission");
    let cfg = {
        let mut b = sweep(1000, dir.clone(), &s);
        b.common.prompts.outputs = [32, 32, 32];
        b
    };
    run_bench(&cfg).await;
    let run = run_json(&dir);
    let t = &run["cells"][1]["scrape"]["telemetry"];
    assert_eq!(t["kv_cache_tokens"], 4000.0, "{t}");
    assert_eq!(t["preemptions"], 0.0, "{t}");
    assert!(t["kv_cache_usage"]["peak"].as_f64().unwrap() < 0.9, "{t}");
    let (b, rep) = binding(&dir);
    let f = &rep["binding"][0]["figures"];
    assert_eq!(b, "kv_cache", "{}", rep["binding"]);
    assert_eq!(f["kv_cache_tokens"], 4000.0);
    let free = f["kv_free_tokens_waiting"].as_f64().unwrap();
    assert!(free < f["prompt_tokens_median"].as_f64().unwrap(), "{f}");
    let text = rep["binding"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("of 4000 KV tokens free while requests waited"),
        "{text}"
    );
}

/// Decode steps of 6 ms, 5 of them kernel launches (CUDA graphs off), 0.1 ms more a sequence;
/// prefill cheap but for 20 ms a prompt, so eight at once make a knee (about 180 ms against
/// 30); a small model, so the bytes read stay far below a V100's bandwidth.
fn eager() -> Profile {
    Profile {
        prefill_base_ms: 1.0,
        prefill_per_token_ms: 0.002,
        prefill_per_seq_ms: 20.0,
        step_base_ms: 6.0,
        launch_overhead_ms: 5.0,
        cuda_graphs: false,
        step_per_seq_ms: 0.1,
        params_b: 0.25,
        gpus: 1,
        ..Profile::v100()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_and_the_step_name_a_cause_only_when_measured() {
    let s = sim_on(eager());
    let dir = scratch("telemetry-step");
    let v100 = tokentap::bench::gpu::lookup("v100").unwrap();
    let run = |name: &str, peaks: Option<(f64, f64)>| {
        let mut b = sweep(1000, dir.join(name), &s);
        b.common.prompts.outputs = [64, 64, 64];
        b.common.hardware.peak_bandwidth_bytes_s = peaks.map(|p| p.0);
        b.common.hardware.peak_flops = peaks.map(|p| p.1);
        b
    };
    // No card peaks: no MBU or MFU, nothing waits. No cause is shown, and none is named.
    run_bench(&run("blind", None)).await;
    let (b, rep) = binding(&dir.join("blind"));
    assert_eq!(b, "not_identified", "{}", rep["binding"]);
    let text = rep["binding"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("not identified") && text.contains("bench --gpu"),
        "{text}"
    );

    // A V100's peaks: MBU and MFU far from them, the step time flat while the batch grew.
    run_bench(&run("v100", Some((v100.bandwidth, v100.flops)))).await;
    let (b, rep) = binding(&dir.join("v100"));
    let f = &rep["binding"][0]["figures"];
    assert_eq!(b, "step_overhead", "{}", rep["binding"]);
    assert_eq!(rep["binding"][0]["at"], "C=8");
    assert_eq!(f["lowest_at"], "C=1");
    assert!(f["mbu"].as_f64().unwrap() < 0.3 && f["mfu"].as_f64().unwrap() < 0.2);
    let (t, t0) = (f["tpot_ms_p50"].as_f64(), f["tpot_ms_p50_lowest"].as_f64());
    assert!(t.unwrap() <= 1.5 * t0.unwrap(), "{f}");

    // A card whose bandwidth the same engine's reads come near: memory bandwidth.
    let reads = run_json(&dir.join("v100"))["cells"][1]["scrape"]["telemetry"]
        ["read_bytes_per_s_per_gpu"]
        .as_f64()
        .unwrap();
    run_bench(&run("narrow", Some((reads / 0.8, v100.flops)))).await;
    let (b, rep) = binding(&dir.join("narrow"));
    assert_eq!(b, "memory_bandwidth", "{}", rep["binding"]);
    let mbu = rep["binding"][0]["figures"]["mbu"].as_f64().unwrap();
    assert!((0.6..=1.0).contains(&mbu), "{mbu}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dcgm_failures_and_credentials() {
    let s = sim_on(small_kv());
    let fixture = include_str!("../fixtures/metrics/dcgm-exporter.txt");
    let dcgm = Upstream::spawn(move |_| Script::json(200, fixture)).await;
    // A port that refuses: bound, then closed.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let dir = scratch("telemetry-dcgm");
    let with_secret = format!(
        "http://scraper:hunter2@{}/metrics?token=s3cr3t&x=1",
        dcgm.addr
    );
    let cfg = {
        let mut b = sweep(100, dir.clone(), &s);
        b.common.scrape.plan = ScrapePlan::Urls(vec![
            format!("http://{}/metrics", s.engine),
            with_secret,
            format!("http://{dead_addr}/metrics"),
        ]);
        b.common.requests = 4;
        b.common.prompts.outputs = [8, 8, 8];
        b.load = tokentap::bench::Load::closed(vec![2]);
        b
    };
    let info = run_bench(&cfg).await;
    let sc = info.scrape.as_ref().unwrap();
    assert!(
        sc.failures >= 2,
        "the dead endpoint fails every round: {}",
        sc.failures
    );
    assert_eq!(
        info.cells[0].measured, 4,
        "failed scrapes never stop the run"
    );
    // The exporter was asked with the URL's credentials, as Basic auth.
    let asked = dcgm.requests();
    assert!(!asked.is_empty());
    assert_eq!(
        asked[0].header("authorization").as_deref(),
        Some("Basic c2NyYXBlcjpodW50ZXIy")
    );
    assert!(asked[0].request_line().contains("token=s3cr3t"));
    // …and neither is written anywhere.
    for f in ["run.json", "scrape.jsonl", "requests.jsonl"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(!text.contains("hunter2") && !text.contains("s3cr3t"), "{f}");
    }
    let run = run_json(&dir);
    assert!(run["scrape"]["endpoints"][1]
        .as_str()
        .unwrap()
        .starts_with("http://REDACTED@"));
    let cell = &run["cells"][0]["scrape"];
    assert!(cell["failures"].as_u64().unwrap() >= 2);
    let t = &cell["telemetry"];
    // Two GPUs: utilisation and DRAM activity are means, power and memory sums.
    assert_eq!(t["gpu_util_pct"]["mean"], 94.0);
    assert!((t["dram_active"]["mean"].as_f64().unwrap() - 0.7).abs() < 1e-9);
    assert_eq!(t["power_w"]["mean"], 800.0);
    assert_eq!(t["fb_used_mib"]["peak"], 148420.0);
    let tokens = run["cells"][0]["output_tokens"].as_f64().unwrap();
    let wall = run["cells"][0]["wall_s"].as_f64().unwrap();
    let j = t["j_per_token"].as_f64().unwrap();
    assert!((j - 800.0 * wall / tokens).abs() < 1e-6 * j, "{j}");
    // The engine's figures sit beside the GPU's.
    assert!(t["kv_cache_usage"]["mean"].as_f64().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plateau_leaves_out_the_drain_on_the_sims_own_timeline() {
    let s = sim_on(small_kv());
    let dir = scratch("telemetry-steady");
    // Output lengths drawn from 32 to 64 tokens (no ignore_eos): the last requests end apart,
    // so the cell drains.
    let cfg = {
        let mut b = sweep(100, dir.clone(), &s);
        b.common.requests = 16;
        b.common.fixed_output = false;
        b.common.scrape.interval = Duration::from_millis(10);
        b.load = tokentap::bench::Load::closed(vec![4]);
        b
    };
    run_bench(&cfg).await;
    let run = run_json(&dir);
    let cell = &run["cells"][0];
    let st = &cell["steady_state"];
    let (from, to) = (
        st["from_ms"].as_f64().unwrap(),
        st["to_ms"].as_f64().unwrap(),
    );
    let (cell_from, cell_to) = (
        cell["scrape"]["from_ms"].as_f64().unwrap(),
        cell["scrape"]["to_ms"].as_f64().unwrap(),
    );
    assert_eq!(st["target"], 4);
    assert!(cell_from <= from && from < to && to < cell_to, "{st}");
    let n = st["requests"].as_u64().unwrap();
    assert!(
        (4..16).contains(&n),
        "the last requests ran into the drain: {n}"
    );
    assert!(st["ttft_ms"]["p95"].as_f64().is_some() && st["telemetry"]["running"].is_object());
    // The sim's own count of running sequences: four while the plateau lasts (a request's
    // replacement takes a round trip to arrive), fewer once it ends.
    let raw = std::fs::read_to_string(dir.join("scrape.jsonl")).unwrap();
    let running: Vec<(f64, f64)> = raw
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["metric"] == "vllm:num_requests_running")
        .map(|v| (v["t_ms"].as_f64().unwrap(), v["value"].as_f64().unwrap()))
        .collect();
    let inside: Vec<f64> = running
        .iter()
        .filter(|(t, _)| *t > from && *t < to)
        .map(|x| x.1)
        .collect();
    let drain: Vec<f64> = running
        .iter()
        .filter(|(t, _)| *t > to && *t <= cell_to)
        .map(|x| x.1)
        .collect();
    assert!(inside.len() >= 3, "{running:?}");
    let mean = inside.iter().sum::<f64>() / inside.len() as f64;
    assert!(
        mean >= 3.0 && inside.iter().all(|v| *v <= 4.0),
        "{inside:?}"
    );
    assert!(
        !drain.is_empty() && drain.iter().all(|v| *v < 4.0),
        "{drain:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_serves_its_own_metrics_while_it_runs() {
    let s = sim_on(Profile {
        step_base_ms: 5.0,
        ..small_kv()
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = scratch("telemetry-live");
    let cfg = {
        let mut b = sweep(100, dir.clone(), &s);
        b.common.requests = 9;
        b.common.metrics_listen = Some(port.to_string());
        b.common.scrape.plan = ScrapePlan::Off;
        b.load = tokentap::bench::Load::closed(vec![3]);
        b
    };
    let run = tokio::spawn(async move { run_bench(&cfg).await });
    let c = support::client();
    let url = format!("http://{port}/metrics");
    let mut seen_in_flight = false;
    let mut last = String::new();
    for _ in 0..400 {
        if let Ok(got) = support::send(&c, "GET", &url, &[], vec![]).await {
            last = String::from_utf8_lossy(&got.body).into_owned();
            let page = prom::parse(&last);
            assert_eq!(page.bad_lines, 0);
            let v = |n: &str| page.samples.iter().find(|x| x.name == n).map(|x| x.value);
            if v("tokentap_bench_requests_in_flight") == Some(3.0) {
                seen_in_flight = true;
                assert!(
                    last.contains("tokentap_bench_cell{cell=\"short-long C=3\"} 1"),
                    "{last}"
                );
                assert!(v("tokentap_bench_requests_sent_total").unwrap() >= 3.0);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen_in_flight, "never three in flight: {last}");
    run.await.unwrap();
    // The server ends with the run.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(support::send(&c, "GET", &url, &[], vec![]).await.is_err());
    assert!(!dir.join("scrape.jsonl").exists(), "--scrape off");
}

/// `tokentap report --format json DIR [extra]`, parsed.
fn report_json(dir: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["report", "--format", "json"])
        .arg(dir)
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cells_figures_are_its_plateaus_when_it_holds_enough_and_whole_on_request() {
    let s = sim_on(small_kv());
    let dir = scratch("telemetry-figures");
    // 40 requests at C=4 with drawn output lengths: a ramp, a plateau of well over 20, a drain.
    let cfg = {
        let mut b = sweep(100, dir.clone(), &s);
        b.common.requests = 40;
        b.common.fixed_output = false;
        b.common.prompts.outputs = [48, 48, 48];
        b.common.timeslice = None;
        b.load = tokentap::bench::Load::closed(vec![4]);
        b
    };
    run_bench(&cfg).await;
    let run = run_json(&dir);
    let bench_st = &run["cells"][0]["steady_state"];
    let plateau = bench_st["requests"].as_u64().unwrap();
    assert!((20..40).contains(&plateau), "{bench_st}");

    let rep = report_json(&dir, &[]);
    let cell = &rep["cells"][0];
    assert_eq!(cell["figures"], "steady_state", "{cell}");
    assert_eq!(cell["requests"], 40, "counts stay the whole cell's");
    // The report found the same plateau from the records as bench did, and its latency
    // figures are that plateau's: the run's own window, on the run's clock once run.json is
    // read beside the records.
    let st = &cell["steady_state"];
    assert_eq!(st["requests"], plateau, "{st}");
    assert_eq!(st["clock"], "run");
    assert_eq!(cell["ttft_ms"]["n"], plateau);
    assert_eq!(cell["ttft_ms"]["p95"], st["ttft_ms"]["p95"]);
    assert_eq!(cell["tpot_ms"]["p95"], st["tpot_ms"]["p95"]);
    let whole = &cell["whole_cell"];
    assert_eq!(whole["requests"], 40);
    assert_eq!(whole["ttft_ms"]["n"], 40);
    assert!(whole["ttft_ms"]["max"].as_f64() >= cell["ttft_ms"]["max"].as_f64());
    assert!(whole["e2e_ms"]["n"].as_u64().unwrap() > cell["e2e_ms"]["n"].as_u64().unwrap());

    // The records alone (no run.json): the same plateau, on the cell's clock.
    let alone = scratch("telemetry-figures-alone");
    std::fs::copy(dir.join("requests.jsonl"), alone.join("requests.jsonl")).unwrap();
    let rep = report_json(&alone, &[]);
    let st = &rep["cells"][0]["steady_state"];
    assert_eq!(
        (st["requests"].as_u64(), &st["clock"]),
        (Some(plateau), &"cell".into())
    );
    let span = st["to_ms"].as_f64().unwrap() - st["from_ms"].as_f64().unwrap();
    let bench_span = bench_st["to_ms"].as_f64().unwrap() - bench_st["from_ms"].as_f64().unwrap();
    assert!((span - bench_span).abs() < 0.01, "{span} vs {bench_span}");

    // `--whole-cell`: every request, the plateau still shown beside.
    let rep = report_json(&dir, &["--whole-cell"]);
    let cell = &rep["cells"][0];
    assert_eq!(cell["figures"], "whole_cell");
    assert_eq!(cell["ttft_ms"]["n"], 40);
    assert!(cell["whole_cell"].is_null() && cell["steady_state"]["requests"] == plateau);
}
