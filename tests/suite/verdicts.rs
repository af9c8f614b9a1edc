//! The verdict truth table (docs/report.md "What each verdict needs"): adversarial runs made
//! over real sockets — the sim, a scripted upstream, tokentap in between — and every gate's
//! verdict and exit status on each, from the binary as a user runs it: `bench`'s exit status,
//! `report --fail-on-slo`, and what the report says when it has nothing to judge.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokentap::sim::Profile;
use tokentap_test_support as support;

use support::load::{sim_on, sim_paced};
use support::{Script, Upstream};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tokentap"))
}

/// Run the binary to its end, off the runtime's threads (the servers it talks to are on them).
async fn run(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || bin().args(&args).output().unwrap())
        .await
        .unwrap()
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `bench` at one cell (balanced, C=1, 6 requests, no warm-up), quiet about probes and scrapes.
async fn bench(target: &str, out: &Path, extra: &[&str]) -> Output {
    bench_n(target, out, "6", extra).await
}

/// `bench` at one cell of `n` requests.
async fn bench_n(target: &str, out: &Path, n: &str, extra: &[&str]) -> Output {
    run(bench_args(target, out, n, extra)).await
}

/// The arguments of `bench` at one cell of `n` requests (balanced, C=1, no warm-up).
fn bench_args(target: &str, out: &Path, n: &str, extra: &[&str]) -> Vec<String> {
    let mut a = strs(&[
        "bench",
        "--target",
        target,
        "--out",
        &out.display().to_string(),
        "--concurrency",
        "1",
        "--requests",
        n,
        "--warmup",
        "0",
        "--buckets",
        "balanced",
        "--no-estimate",
        "--no-calibrate",
        "--scrape",
        "off",
    ]);
    a.extend(strs(extra));
    a
}

async fn report(path: &Path, extra: &[&str]) -> Output {
    let mut a = strs(&["report", &path.display().to_string()]);
    a.extend(strs(extra));
    run(a).await
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn run_json(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

async fn report_json(path: &Path) -> Value {
    let o = report(path, &["--format", "json"]).await;
    assert!(o.status.success(), "{}", err(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Every request refused (an unknown model: 404): bench fails and says why; the report has
/// nothing to judge and says so in every answer; its SLO gate fails closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_404_fails_bench_and_leaves_nothing_judged() {
    let sim = sim_on(Profile::instant());
    let dir = support::scratch("verdict-404");
    let target = format!("http://{}", sim.engine);
    let o = bench(&target, &dir, &["--model", "nope"]).await;
    let e = err(&o);
    assert_eq!(code(&o), 1, "{e}");
    assert!(
        e.contains("failed: balanced C=1: none of 6 requests served: 6 × status 404"),
        "{e}"
    );
    assert!(e.contains("type NotFoundError"), "{e}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("not served in balanced C=1: 6 × status 404"),
        "{stdout}"
    );
    let rj = run_json(&dir);
    assert_eq!(rj["verdict"]["status"], "failed");
    assert_eq!(rj["cells"][0]["served"], 0);
    assert_eq!(rj["cells"][0]["failures"][0]["status"], 404);
    assert_eq!(rj["cells"][0]["failures"][0]["error_type"], "NotFoundError");

    let gate = report(&dir, &["--fail-on-slo", "interactive"]).await;
    assert_eq!(code(&gate), 3, "{}", err(&gate));
    assert!(
        err(&gate).contains("SLO interactive: not judged"),
        "{}",
        err(&gate)
    );
    let r = report_json(&dir).await;
    assert_eq!(r["traffic"]["generation"], 0);
    assert_eq!(r["traffic"]["client_errors"], 6);
    for a in r["answers"].as_array().unwrap().iter().take(4) {
        let text = a["answer"].as_str().unwrap();
        assert!(text.starts_with("Not judged"), "{text}");
        assert!(
            !text.contains("--concurrency 1"),
            "no advice for a C=1 run: {text}"
        );
        assert!(!text.contains("meets"), "{text}");
    }
    let first = r["answers"][0]["answer"].as_str().unwrap();
    assert!(first.contains("6 × 404"), "{first}");
}

/// Every request 502 (tokentap in front of an upstream that is down): bench fails, naming the
/// status; every cell misses every SLO (its streams failed), so the SLO gate fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_502_fails_bench_and_misses_every_slo() {
    // A port that was just free: nothing listens there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = support::proxy(&format!("http://{dead}"), "").await;
    let dir = support::scratch("verdict-502");
    let o = bench(&proxy.url(""), &dir, &["--model", "m"]).await;
    let e = err(&o);
    assert_eq!(code(&o), 1, "{e}");
    assert!(
        e.contains("none of 6 requests served: 6 × status 502"),
        "{e}"
    );
    let gate = report(&dir, &["--fail-on-slo", "interactive,reading_speed"]).await;
    assert_eq!(code(&gate), 1, "{}", err(&gate));
    let g = err(&gate);
    assert!(g.contains("SLO missed: interactive: balanced C=1"), "{g}");
    assert!(g.contains("SLO missed: reading_speed: balanced C=1"), "{g}");
    let r = report_json(&dir).await;
    let cell = &r["cells"][0];
    assert_eq!(cell["failed_streams"], 6);
    assert_eq!(cell["slo"]["interactive"], false);
    assert_eq!(cell["slo"]["agents"], false);
    assert_eq!(cell["goodput"], 0.0);
}

/// One arm of an experiment serves nothing (its gateway is down) while the other serves
/// every request: bench fails, naming the arm and its status; the cell's other arm does not
/// make the dead one's row a pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_arm_that_served_nothing_fails_bench() {
    let sim = sim_on(Profile::instant());
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let key = "sk-verdict-arms";
    let proxy = support::proxy_toml(&format!(
        "[[routes]]\nname = \"direct\"\nupstream = \"http://{}\"\n\
         [[routes]]\nname = \"down\"\nupstream = \"http://{dead}\"\npath_prefix = \"/down\"\n\
         [experiment]\narms = [\"direct\", \"down\"]\nallow_forcing = true\ndirect_keys = [\"{}\"]\n",
        sim.engine,
        tokentap::keys::fingerprint(key.as_bytes())
    ))
    .await;
    let dir = support::scratch("verdict-arm-down");
    let a = bench_args(
        &proxy.url(""),
        &dir,
        "8",
        &[
            "--route-header",
            "x-tokentap-route",
            "--arms",
            "direct,down",
            "--api-key-env",
            "TOKENTAP_VERDICT_ARMS_KEY",
        ],
    );
    let o = tokio::task::spawn_blocking(move || {
        bin()
            .args(&a)
            .env("TOKENTAP_VERDICT_ARMS_KEY", key)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let e = err(&o);
    assert_eq!(code(&o), 1, "{e}");
    assert!(
        e.contains("balanced C=1 arm down: none of 4 requests served: 4 × status 502"),
        "{e}"
    );
    assert!(e.contains("on arm down"), "{e}");
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        run_json["cells"][0]["arms"],
        serde_json::json!([{"arm": "direct", "asked": 4, "served": 4}, {"arm": "down", "asked": 4, "served": 0}])
    );
}

/// Half the requests fail (an upstream that answers every other request with 500): bench
/// passes without a bound and fails with `--max-error-rate`; the SLO gate fails (a failure is
/// beyond every threshold, and half is more than 5 %).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_failed_fails_the_error_bound_and_the_slo() {
    let n = Arc::new(AtomicUsize::new(0));
    let up = Upstream::spawn(move |r| {
        if r.request_line().contains("/v1/models") {
            return Script::json(200, r#"{"data":[{"id":"m"}]}"#);
        }
        match n.fetch_add(1, Ordering::Relaxed) % 2 {
            0 => Script::chat_stream(Duration::from_millis(5), Duration::from_millis(1), 8, true),
            _ => Script::json(
                500,
                r#"{"error":{"type":"InternalServerError","code":500}}"#,
            ),
        }
    })
    .await;
    let dir = support::scratch("verdict-half");
    let o = bench(&up.url(), &dir.join("plain"), &[]).await;
    assert_eq!(code(&o), 0, "{}", err(&o));
    let rj = run_json(&dir.join("plain"));
    assert_eq!(rj["verdict"]["status"], "ok");
    assert_eq!(rj["cells"][0]["served"], 3);
    assert_eq!(rj["cells"][0]["failures"][0]["requests"], 3);

    let o = bench(&up.url(), &dir.join("bound"), &["--max-error-rate", "10%"]).await;
    let e = err(&o);
    assert_eq!(code(&o), 1, "{e}");
    assert!(
        e.contains("3 of 6 requests failed (50.0 %), above --max-error-rate 10.0 %"),
        "{e}"
    );
    assert!(
        e.contains("3 × status 500 upstream_error (type InternalServerError, code 500)"),
        "{e}"
    );

    let gate = report(&dir.join("plain"), &["--fail-on-slo", "agents"]).await;
    assert_eq!(code(&gate), 1, "{}", err(&gate));
    let r = report_json(&dir.join("plain")).await;
    assert_eq!(r["cells"][0]["failed_streams"], 3);
    // Three served streams of a few ms: their own p95 meets every bound.
    assert!(r["cells"][0]["ttft_ms"]["p95"].as_f64().unwrap() < 100.0);
    assert_eq!(r["cells"][0]["slo"]["agents"], false);
}

/// Nothing sent: `--buckets balanced` on prompts that all fall in short-long. bench is not
/// judged (3) and names where the prompts fall; a report of the empty folder is not judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_measured_nothing_is_not_judged() {
    let sim = sim_on(Profile::instant());
    let dir = support::scratch("verdict-nothing");
    let target = format!("http://{}", sim.engine);
    let o = bench(&target, &dir, &["--synthetic", "100,100,100"]).await;
    let e = err(&o);
    assert_eq!(code(&o), 3, "{e}");
    assert!(
        e.contains("not judged: bucket balanced: no prompt falls in it"),
        "{e}"
    );
    assert!(
        e.contains("balanced takes 200 to 700 estimated prompt tokens"),
        "{e}"
    );
    assert!(e.contains("in short-long (100 tokens)"), "{e}");
    assert!(e.contains("not judged: nothing measured"), "{e}");
    assert_eq!(run_json(&dir)["verdict"]["status"], "not_judged");
    let o = report(&dir, &["--fail-on-slo", "interactive"]).await;
    assert_eq!(code(&o), 3, "{}", err(&o));
}

/// A healthy run passes every gate: bench 0, the SLO gate 0 (the sim answers in a few ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_run_passes() {
    let sim = sim_on(Profile::instant());
    let dir = support::scratch("verdict-healthy");
    let target = format!("http://{}", sim.engine);
    let o = bench(&target, &dir, &["--max-error-rate", "0"]).await;
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(run_json(&dir)["verdict"]["status"], "ok");
    let o = report(&dir, &["--fail-on-slo", "interactive,agents"]).await;
    assert_eq!(code(&o), 0, "{}", err(&o));
    // A second run into the same folder is refused (it may be a comparison's baseline)…
    let again = bench(&target, &dir, &[]).await;
    assert_eq!(code(&again), 64, "{}", err(&again));
    assert!(
        err(&again).contains("already holds a run"),
        "{}",
        err(&again)
    );
    // … unless asked.
    let forced = bench(&target, &dir, &["--force"]).await;
    assert_eq!(code(&forced), 0, "{}", err(&forced));
}

/// Flags a load would not read are refused, never dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flag_the_load_would_drop_is_refused() {
    let dir = support::scratch("verdict-flags");
    let out = dir.display().to_string();
    let base = [
        "bench",
        "--target",
        "http://127.0.0.1:9",
        "--out",
        out.as_str(),
    ];
    let mut a = strs(&base);
    a.extend(strs(&["--request-rate", "4", "--concurrency", "2"]));
    let o = run(a).await;
    assert_eq!(code(&o), 64);
    assert!(err(&o).contains("--max-concurrency"), "{}", err(&o));
    let mut a = strs(&base);
    a.extend(strs(&["--until", "errors", "--max-error-rate", "5%"]));
    let o = run(a).await;
    assert_eq!(code(&o), 64, "{}", err(&o));
}

/// Records written by hand: a healthy cell of 40 streams with two the client cancelled, and an
/// old log's records without `api`.
fn write_records(dir: &Path) -> PathBuf {
    let mut lines = Vec::new();
    for i in 0..42 {
        let outcome = if i < 2 { "client_cancelled" } else { "ok" };
        lines.push(format!(
            r#"{{"ts":"2026-12-01T00:00:{:02}.000Z","method":"POST","endpoint":"/v1/chat/completions","status":200,"stream":true,"outcome":"{outcome}","ttft_ms":80.0,"tpot_ms":20.0,"e2e_ms":900.0,"output_tokens":40,"input_tokens":300,"in_flight":1}}"#,
            i % 60
        ));
    }
    lines.push(
        r#"{"method":"GET","endpoint":"/v1/models","status":200,"outcome":"ok","e2e_ms":1.0}"#
            .into(),
    );
    let p = dir.join("old.jsonl");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

/// The client's cancels are not held against the service; a record without `api` is classed by
/// its method and endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_are_not_the_services_and_old_records_are_judged() {
    let dir = support::scratch("verdict-cancel");
    let log = write_records(&dir);
    let r = report_json(&log).await;
    let t = &r["traffic"];
    assert_eq!(t["generation"], 42, "{t}");
    assert_eq!(t["cancelled"], 2);
    assert_eq!(t["other"], 1, "the listing is other traffic");
    let cell = &r["cells"][0];
    assert_eq!(cell["cancelled"], 2);
    assert_eq!(cell["goodput"], 1.0, "{cell}");
    assert_eq!(cell["slo"]["interactive"], true);
    let o = report(&log, &["--fail-on-slo", "interactive"]).await;
    assert_eq!(code(&o), 0, "{}", err(&o));
}

/// Every command ends quietly on a closed stdout: no panic, no message, status 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_quietly() {
    let dir = support::scratch("verdict-pipe");
    let log = write_records(&dir);
    let log = log.display().to_string();
    for args in [
        vec!["report", log.as_str()],
        vec!["report", log.as_str(), "--format", "html"],
        vec!["compare", log.as_str(), log.as_str()],
        vec!["sim", "--print-profile"],
    ] {
        let args: Vec<String> = strs(&args);
        let o = tokio::task::spawn_blocking(move || {
            // The reader is gone before the command writes a byte, as with `| true`.
            let (reader, writer) = std::io::pipe().unwrap();
            drop(reader);
            bin()
                .args(&args)
                .stdout(writer)
                .stderr(Stdio::piped())
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert_eq!(code(&o), 0, "{}", err(&o));
        assert!(err(&o).is_empty(), "nothing on stderr: {}", err(&o));
    }
}

/// One stream's record, as a client-side (bench) or proxy record carries it.
fn stream_line(route: &str, arm: &str, tap: Option<(&str, Option<&str>)>, i: u32) -> String {
    let tap = match tap {
        None => String::new(),
        Some((side, verdict)) => {
            let v = verdict.map_or(String::new(), |v| {
                format!(r#","relay_verdict":"{v}","relay_max_ms":70.0"#)
            });
            format!(r#","gateway_tap":{{"side":"{side}"{v}}}"#)
        }
    };
    format!(
        r#"{{"ts":"2026-12-01T00:00:{:02}.000Z","route":"{route}","experiment":{{"arm":"{arm}","pair_id":"p{i}"}},"api":"chat","method":"POST","endpoint":"/v1/chat/completions","status":200,"stream":true,"outcome":"ok","ttft_ms":80.0,"tpot_ms":20.0,"e2e_ms":900.0,"output_tokens":40,"input_tokens":300,"concurrency":1,"bucket":"balanced","delivery":{{"content_reads":40,"max_events_per_read":1,"first_read_events":1,"coalesced_share":0.0,"verdict":"streamed"}}{tap}}}"#,
        i % 60
    )
}

/// `report BENCH --tap PROXYLOG` (the README's command): each request is counted once. The
/// proxy's records of bench's requests add only what the tap saw — the inner side, the held
/// streams — so the streaming answer's "of N streams" is the client's served streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tap_log_beside_its_client_records_counts_each_request_once() {
    let dir = support::scratch("verdict-tap");
    let mut client = Vec::new();
    let mut proxy = Vec::new();
    for i in 0..12 {
        let arm = if i % 2 == 0 { "direct" } else { "gateway" };
        client.push(stream_line("bench", arm, None, i));
        if arm == "direct" {
            proxy.push(stream_line("direct", arm, None, i));
        } else {
            let held = (i == 1).then_some("held");
            proxy.push(stream_line(
                "gateway",
                arm,
                Some(("outer", held.or(Some("relayed")))),
                i,
            ));
            proxy.push(stream_line("inner", arm, Some(("inner", None)), i));
        }
    }
    let bench = dir.join("bench.jsonl");
    let tap = dir.join("proxy.jsonl");
    std::fs::write(&bench, client.join("\n") + "\n").unwrap();
    std::fs::write(&tap, proxy.join("\n") + "\n").unwrap();
    let o = run(strs(&[
        "report",
        &bench.display().to_string(),
        "--tap",
        &tap.display().to_string(),
        "--format",
        "json",
    ]))
    .await;
    assert!(o.status.success(), "{}", err(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["traffic"]["streams_served"], 12);
    let rows = r["streaming"].as_array().unwrap();
    let client_streams: u64 = rows
        .iter()
        .filter(|r| r["side"] != "inner")
        .map(|r| r["streams"].as_u64().unwrap())
        .sum();
    assert_eq!(client_streams, 12, "{rows:?}");
    let mut names: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r["route"].to_string(), r["arm"].to_string()))
        .collect();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "a (route, arm) once: {rows:?}");
    assert!(
        !rows.iter().any(|r| r["route"] == "direct"),
        "the proxy's direct records are bench's requests again: {rows:?}"
    );
    let held: u64 = rows
        .iter()
        .map(|r| r["gateway_held"].as_u64().unwrap())
        .sum();
    assert_eq!(held, 1);
    let answer = r["answers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["question"] == "Is it really streaming?")
        .unwrap()["answer"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(answer.contains("none of 12 streams"), "{answer}");
}

/// The first binding word the report names, and its `--fail-on-slo interactive` status.
async fn binding_of(dir: &Path) -> (String, i32) {
    let r = report_json(dir).await;
    let word = r["binding"][0]["constraint"]
        .as_str()
        .unwrap_or("-")
        .to_owned();
    let gate = report(dir, &["--fail-on-slo", "interactive"]).await;
    (word, code(&gate))
}

/// A slow gateway hop (600 ms of admission before the sim's engine): C=1 already misses the
/// interactive SLO, and what binds there is the gateway — most of TTFT is outside the engine,
/// by the engine's own per-request timings — never the engine's queue or compute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_gateway_hop_is_named_the_gateway() {
    let (el, hl) = (
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    );
    let hop = "600".parse::<tokentap::sim::HopDelay>().unwrap();
    let sim = tokentap::sim::Sim::start(Profile::v100(), "sim", 7, el, Some((hl, hop)))
        .await
        .unwrap();
    let dir = support::scratch("verdict-hop");
    let target = format!("http://{}", sim.hop.unwrap());
    let scrape = format!("http://{}/metrics", sim.engine);
    let mut a = strs(&[
        "bench",
        "--target",
        &target,
        "--out",
        &dir.display().to_string(),
        "--concurrency",
        "1",
        "--requests",
        "4",
        "--warmup",
        "0",
        "--buckets",
        "short-long",
        "--outputs",
        "8,8,8",
        "--no-estimate",
        "--no-calibrate",
        "--scrape",
        &scrape,
    ]);
    a.extend(strs(&["--scrape-interval", "200ms"]));
    let o = run(a).await;
    assert_eq!(code(&o), 0, "{}", err(&o));
    let (word, gate) = binding_of(&dir).await;
    assert_eq!(word, "gateway");
    assert_eq!(gate, 1, "C=1 misses 500 ms");
}

/// A lagging client: an open loop whose sender fell 40 ms behind its schedule at the higher
/// rate, where TTFT tripled. bench set the pace there, not the server: the binding word is
/// `client`. (Records and run.json are written here: a client cannot be made to lag on cue.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_client_is_named_the_client() {
    let dir = support::scratch("verdict-lag");
    let mut lines = Vec::new();
    for (rate, ttft, lag) in [(2.0, 100.0, 0.5), (8.0, 320.0, 40.0)] {
        for i in 0..30 {
            lines.push(format!(
                r#"{{"ts":"2026-12-01T00:{:02}:{:02}.000Z","method":"POST","endpoint":"/v1/chat/completions","api":"chat","status":200,"stream":true,"outcome":"ok","ttft_ms":{ttft},"tpot_ms":20.0,"e2e_ms":900.0,"output_tokens":40,"input_tokens":300,"bucket":"balanced","request_rate":{rate},"client_lag_ms":{lag},"client_queue_ms":0.0}}"#,
                rate as u32,
                i
            ));
        }
    }
    std::fs::write(dir.join("requests.jsonl"), lines.join("\n") + "\n").unwrap();
    let gauge = |v: f64| format!(r#"{{"mean":{v},"peak":{v},"p95":{v},"samples":10}}"#);
    let telemetry = format!(
        r#"{{"kv_cache_usage":{},"running":{},"waiting":{},"preemptions_per_request":0.0}}"#,
        gauge(0.1),
        gauge(2.0),
        gauge(0.0)
    );
    let cells: Vec<String> = [2.0, 8.0]
        .iter()
        .map(|r| {
            format!(r#"{{"bucket":"balanced","open_loop":{{"offered_rate":{r}}},"scrape":{{"telemetry":{telemetry}}}}}"#)
        })
        .collect();
    std::fs::write(
        dir.join("run.json"),
        format!(r#"{{"cells":[{}]}}"#, cells.join(",")),
    )
    .unwrap();
    let (word, gate) = binding_of(&dir).await;
    assert_eq!(word, "client");
    assert_eq!(
        gate, 0,
        "every cell meets 500 ms: the knee is not an SLO miss"
    );
}

/// bench's own lag in a healthy run: one stream at a time against the paced mock (about 120 ms a
/// request). Its stall share (per request, the gap from one response's end to the next send)
/// stays far under 5 % by construction; its reader lag is measured, and the run's warnings are
/// exactly the cells whose figures passed a bound (the reader lag is a timed figure, so a
/// loaded machine may flag it: then it must say so, and the exit status stands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_run_reports_its_own_lag_within_bounds() {
    let sim = sim_paced("20,10,10".parse().unwrap());
    let dir = support::scratch("verdict-own-lag-healthy");
    let target = format!("http://{}", sim.engine);
    let o = bench_n(&target, &dir, "8", &[]).await;
    assert_eq!(code(&o), 0, "{}", err(&o));
    let info = run_json(&dir);
    let cell = &info["cells"][0];
    let stall = cell["stall_share"].as_f64().unwrap();
    assert!((0.0..0.05).contains(&stall), "{cell}");
    assert!(info["stall_share"].as_f64().unwrap() < 0.05, "{info}");
    let p99 = cell["reader_lag_ms"]["p99"].as_f64().unwrap();
    let max = cell["reader_lag_ms"]["max"].as_f64().unwrap();
    assert!(p99 >= 0.0 && max >= p99 && max < 1000.0, "{cell}");
    let flagged = p99 > tokentap::report::binding::BENCH_READER_LAG_MS;
    let warned = info["verdict"].get("client_lag").is_some();
    assert_eq!(
        warned, flagged,
        "warned only when a bound was passed: {info}"
    );
    assert_eq!(info["verdict"]["status"], "ok");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("bench's own lag, balanced C=1: stall ")
            && out.contains("bench's own stall over the run: "),
        "{out}"
    );
    assert_eq!(out.contains("WARNING bench's own lag"), flagged, "{out}");
}

/// bench starved by its own cap: an open loop at 50 requests a second with one request in flight
/// at most, against the paced mock (about 120 ms a request). By construction, from the second
/// request on one is always due and waiting, so the stall share is near 100 %. The summary
/// warns, naming the cell and the figure; run.json says so in `verdict.client_lag` while the
/// run passes (exit 0); and the report names the cell's binding constraint `client`, with the
/// stall share among its figures, though nothing was scraped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starved_bench_warns_of_its_own_lag_and_binds_as_the_client() {
    let sim = sim_paced("20,10,10".parse().unwrap());
    let dir = support::scratch("verdict-own-lag-starved");
    let target = format!("http://{}", sim.engine);
    let o = run(strs(&[
        "bench",
        "--target",
        &target,
        "--out",
        &dir.display().to_string(),
        "--request-rate",
        "50",
        "--arrival",
        "constant",
        "--max-concurrency",
        "1",
        "--requests",
        "10",
        "--warmup",
        "0",
        "--buckets",
        "balanced",
        "--no-estimate",
        "--no-calibrate",
        "--scrape",
        "off",
    ]))
    .await;
    assert_eq!(code(&o), 0, "a warning, not a failed run: {}", err(&o));
    let info = run_json(&dir);
    let cell = &info["cells"][0];
    let stall = cell["stall_share"].as_f64().unwrap();
    assert!(stall > 0.5, "{cell}");
    assert!(info["stall_share"].as_f64().unwrap() > 0.5, "{info}");
    assert_eq!(info["verdict"]["status"], "ok");
    assert!(info["verdict"]["reasons"].as_array().unwrap().is_empty());
    let warned = info["verdict"]["client_lag"][0].as_str().unwrap();
    assert!(
        warned.starts_with("balanced 50/s: stall share ")
            && warned.contains("(bound 5 %)")
            && warned.contains("--max-concurrency"),
        "{warned}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("WARNING bench's own lag: {warned}")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "bench's own lag, balanced 50/s: stall {:.1} %",
            100.0 * stall
        )),
        "{out}"
    );
    // The report: the cell misses a 5 ms interactive SLO (TTFT is the mock's 20 ms), so it is
    // the cell examined, and bench set its pace.
    let slo = dir.join("slo.toml");
    std::fs::write(&slo, "ttft_interactive_ms = 5\n").unwrap();
    let r = report(
        &dir,
        &["--format", "json", "--slo", &slo.display().to_string()],
    )
    .await;
    assert!(r.status.success(), "{}", err(&r));
    let r: Value = serde_json::from_slice(&r.stdout).unwrap();
    let b = &r["binding"][0];
    assert_eq!(b["constraint"], "client", "{b}");
    assert_eq!(b["at"], "50/s", "{b}");
    assert_eq!(
        b["figures"]["bench_stall_share"].as_f64(),
        Some(stall),
        "{b}"
    );
    assert!(
        b["text"].as_str().unwrap().contains("bench's stall share"),
        "{b}"
    );
}

/// A fast engine for comparisons: TPOT is its decode step, 3 ms (or `step_ms`).
fn quick(step_ms: f64) -> Profile {
    Profile {
        prefill_base_ms: 5.0,
        prefill_per_token_ms: 0.0,
        prefill_per_seq_ms: 0.0,
        step_base_ms: step_ms,
        step_per_seq_ms: 0.0,
        ..Profile::v100()
    }
}

/// `compare BASE NEW --fail-on-regression …`: its exit status and stderr.
async fn gate(base: &Path, new: &Path, spec: &str) -> (i32, String) {
    let o = run(strs(&[
        "compare",
        &base.display().to_string(),
        &new.display().to_string(),
        "--fail-on-regression",
        spec,
    ]))
    .await;
    (code(&o), err(&o))
}

/// The comparison gate fails closed: two identical engines at 8 requests a cell cannot be
/// judged (exit 3, the cells named), nor said unchanged; at 24 requests an engine 30 % slower a
/// token is a regression beyond +10 % (exit 1), and the same engine twice passes (exit 0). The
/// step is 10 ms so that a busy machine's scheduling jitter (a few hundred µs a token) stays
/// well inside the +10 % margin: on a 3 ms step it did not, and the gate rightly said "not
/// judged".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_samples_are_not_judged_and_a_real_regression_fails() {
    let (a, b, slow) = (
        sim_on(quick(10.0)),
        sim_on(quick(10.0)),
        sim_on(quick(13.0)),
    );
    let dir = support::scratch("verdict-compare");
    let one = |s: &support::load::SimApart, out: &str, n: &'static str| {
        let (target, out) = (format!("http://{}", s.engine), dir.join(out));
        async move {
            let o = bench_n(&target, &out, n, &["--outputs", "16,16,16"]).await;
            assert_eq!(code(&o), 0, "{}", err(&o));
            out
        }
    };
    let (a8, b8) = (one(&a, "a8", "8").await, one(&b, "b8", "8").await);
    let (code8, e) = gate(&a8, &b8, "ttft_p95:+5%,tpot_p50:+3%").await;
    assert_eq!(code8, 3, "{e}");
    assert!(e.contains("could not be judged"), "{e}");
    assert!(e.contains("balanced C=1"), "{e}");
    let (a24, b24, s24) = (
        one(&a, "a24", "24").await,
        one(&b, "b24", "24").await,
        one(&slow, "s24", "24").await,
    );
    let (same, e) = gate(&a24, &b24, "tpot_p50:+10%").await;
    assert_eq!(same, 0, "{e}");
    let (worse, e) = gate(&a24, &s24, "tpot_p50:+10%").await;
    assert_eq!(worse, 1, "{e}");
    assert!(e.contains("regression"), "{e}");
}

/// An engine that died: the cell examined served nothing and its scrapes failed. What binds
/// there is the failure itself, never a cause read from figures nobody scraped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_engine_binds_as_failed() {
    let dir = support::scratch("verdict-dead");
    let mut lines = Vec::new();
    for (c, outcome, status) in [(1, "ok", 200), (2, "connect_error", 502)] {
        for i in 0..8 {
            lines.push(format!(
                r#"{{"ts":"2026-12-01T00:0{c}:{i:02}.000Z","method":"POST","endpoint":"/v1/chat/completions","api":"chat","status":{status},"stream":true,"outcome":"{outcome}","ttft_ms":{},"tpot_ms":20.0,"e2e_ms":900.0,"output_tokens":40,"input_tokens":300,"bucket":"balanced","concurrency":{c}}}"#,
                if outcome == "ok" { "80.0" } else { "null" }
            ));
        }
    }
    std::fs::write(dir.join("requests.jsonl"), lines.join("\n") + "\n").unwrap();
    let cell = |c: u32, t: &str| {
        format!(r#"{{"bucket":"balanced","concurrency":{c},"scrape":{{"telemetry":{t}}}}}"#)
    };
    let gauge = r#"{"mean":0.1,"peak":0.1,"p95":0.1,"samples":4}"#;
    let alive = format!(r#"{{"kv_cache_usage":{gauge},"running":{gauge},"waiting":{gauge}}}"#);
    let cells = [cell(1, &alive), cell(2, "{}")].join(",");
    std::fs::write(dir.join("run.json"), format!(r#"{{"cells":[{cells}]}}"#)).unwrap();
    let r = report_json(&dir).await;
    assert_eq!(r["binding"][0]["constraint"], "failed", "{}", r["binding"]);
    assert_eq!(r["binding"][0]["at"], "C=2");
}

/// Two runs whose engine's prefix cache was cold in one and warm in the other are named a
/// mismatch: a TTFT change between them may be the cache's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_prefix_cache_in_one_run_is_a_mismatch() {
    let dir = support::scratch("verdict-cache");
    for (name, hit) in [("cold", 0.0), ("warm", 0.96)] {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let line = r#"{"ts":"2026-12-01T00:00:00.000Z","method":"POST","endpoint":"/v1/chat/completions","api":"chat","status":200,"stream":true,"outcome":"ok","ttft_ms":80.0,"tpot_ms":20.0,"e2e_ms":900.0,"output_tokens":40,"input_tokens":300,"bucket":"balanced","concurrency":1}"#;
        std::fs::write(d.join("requests.jsonl"), format!("{line}\n")).unwrap();
        let run = format!(
            r#"{{"cells":[{{"bucket":"balanced","concurrency":1,"scrape":{{"telemetry":{{"prefix_cache_hit_rate":{hit}}}}}}}]}}"#
        );
        std::fs::write(d.join("run.json"), run).unwrap();
    }
    let o = run(strs(&[
        "compare",
        &dir.join("cold").display().to_string(),
        &dir.join("warm").display().to_string(),
    ]))
    .await;
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("the engine's prefix cache differs: hit rate BASE 0 %, NEW 96 %"),
        "{out}"
    );
}

/// A search is meant to break at its last level: `--until errors` in front of a proxy that sheds
/// load above two in flight finds the ceiling (2) and passes, its breaking levels' 503s
/// notwithstanding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_whose_last_level_breaks_passes() {
    let sim = sim_on(quick(3.0));
    let proxy = support::proxy(
        &format!("http://{}", sim.engine),
        "[limits]\nmax_concurrent = 2\n",
    )
    .await;
    let dir = support::scratch("verdict-search");
    let o = bench(
        &proxy.url(""),
        &dir,
        &["--until", "errors", "--max-level", "8"],
    )
    .await;
    assert_eq!(code(&o), 0, "{}", err(&o));
    let rj = run_json(&dir);
    assert_eq!(rj["verdict"]["status"], "ok", "{}", rj["verdict"]);
    assert_eq!(
        rj["saturation"]["balanced"]["ceiling"], 2.0,
        "{}",
        rj["saturation"]
    );
}
