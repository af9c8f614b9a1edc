//! Gateway-hop experiments: the measured hop recovers a known injected delay; the direct arm is
//! never a way around the gateway; shadow copies never touch the client's response.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokentap_test_support as support;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use support::*;
use tokentap::bench::{self, BenchConfig};
use tokentap::keys::fingerprint;
use tokentap::meter::Outcome;
use tokentap::report::{self, Slos};
use tokentap::sim::{HopDelay, Profile, Sim};

fn fast() -> Profile {
    Profile {
        prefill_base_ms: 8.0,
        prefill_per_token_ms: 0.005,
        prefill_per_seq_ms: 1.0,
        step_base_ms: 3.0,
        step_per_seq_ms: 0.2,
        ..Profile::v100()
    }
}

/// Sim engine + hop, tokentap with `direct` and `gateway` routes and forcing allowed for the
/// bench key; bench sends identical prompts through both arms (ABBA) with the route header.
async fn measure_hop(hop: &str) -> report::hop::GatewayHop {
    let (el, hl) = (
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    );
    let sim = Sim::start(
        fast(),
        "sim",
        3,
        el,
        Some((hl, hop.parse::<HopDelay>().unwrap())),
    )
    .await
    .unwrap();
    let key = "sk-bench-key";
    let px = proxy_toml(&format!(
        "[experiment]\narms = [\"direct\", \"gateway\"]\nallow_forcing = true\ndirect_keys = [\"{}\"]\n\
         [[routes]]\nname = \"direct\"\nupstream = \"http://{}\"\n[[routes]]\nname = \"gateway\"\nupstream = \"http://{}\"\npath_prefix = \"/gateway\"\n",
        fingerprint(key.as_bytes()),
        sim.engine,
        sim.hop.unwrap()
    ))
    .await;
    let dir = scratch("hop");
    let cfg = BenchConfig {
        target: format!("http://{}", px.addr),
        out: dir.clone(),
        concurrency: vec![1],
        requests: 40,
        warmup: 2,
        outputs: [6, 6, 6],
        prompts_per_bucket: 10,
        calibrate: false,
        quiet: true,
        api_key: Some(tokentap::keys::Secret::new(key.to_owned())),
        arms: vec![
            ("direct".into(), String::new()),
            ("gateway".into(), String::new()),
        ],
        route_header: Some("x-tokentap-route".into()),
        // The proxy's log holds bench's requests alone: no scrape of /metrics through it.
        scrape: tokentap::bench::scrape::ScrapePlan::Off,
        ..BenchConfig::default()
    };
    bench::run(&cfg, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap();
    // The proxy's own records carry the arm too; the report reads bench's.
    let proxied = px.records(3 * 42 + 1).await;
    assert!(proxied
        .iter()
        .filter(|r| r.stream)
        .all(|r| r.experiment.is_some()));
    let recs = report::load(&[dir], &mut |w| panic!("{w}")).unwrap();
    let r = report::compute(&recs, &Slos::default(), 10, false);
    r.gateway_hop.expect("both arms present")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_measured_hop_recovers_the_injected_delay() {
    let h = measure_hop("100±10").await;
    eprintln!("injected 100±10: {}", h.summary);
    assert_eq!(h.overall.pairs, 60);
    let t = &h.overall.ttft_ms;
    let m = t.median.unwrap();
    let [lo, hi] = t.ci95.unwrap();
    assert!((97.0..106.0).contains(&m), "median {m}");
    assert!(
        lo <= 100.0 && hi >= 100.0,
        "CI [{lo}, {hi}] does not cover 100"
    );
    let tpot = h.overall.tpot_ms.median.unwrap();
    assert!(tpot.abs() < 1.0, "TPOT difference {tpot}");
    assert!(h.summary.contains("taxes the front of the request"));
    assert_eq!(h.by_bucket.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_hop_measures_as_nothing() {
    let h = measure_hop("0").await;
    eprintln!("injected 0: {} CI {:?}", h.summary, h.overall.ttft_ms.ci95);
    let m = h.overall.ttft_ms.median.unwrap();
    // What is left is the hop's own forwarding (a real extra HTTP hop on loopback).
    assert!(m.abs() < 2.0, "median {m}");
    let [lo, _] = h.overall.ttft_ms.ci95.unwrap();
    assert!(lo < 2.0);
}

/// The demo's set-up, small: the hop relays through tokentap's `engine` route (behind
/// `gateway`), bench alternates direct and gateway at C=1 and 4. The tap recovers the hop's
/// own per-request claim (its hold) at every level, and the A/B agrees with the tap at C=1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tap_recovers_the_hop_at_every_level() {
    let (el, hl) = (
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    );
    let hop_addr = hl.local_addr().unwrap();
    let mut sim = Sim::start(fast(), "sim", 5, el, None).await.unwrap();
    let px = proxy_toml(&format!(
        "[[routes]]\nname = \"direct\"\nupstream = \"http://{e}\"\n\
         [[routes]]\nname = \"gateway\"\nupstream = \"http://{hop_addr}\"\npath_prefix = \"/gateway\"\n\
         [[routes]]\nname = \"engine\"\nupstream = \"http://{e}\"\npath_prefix = \"/engine\"\n\
         behind = \"gateway\"\nbehind_sources = [\"127.0.0.1\"]\n",
        e = sim.engine
    ))
    .await;
    sim.start_hop(
        hl,
        "40±5".parse::<HopDelay>().unwrap(),
        px.url("/engine").parse().unwrap(),
        5,
    )
    .unwrap();
    let dir = scratch("tap-levels");
    let cfg = BenchConfig {
        target: format!("http://{}", px.addr),
        out: dir.clone(),
        concurrency: vec![1, 4],
        requests: 12,
        warmup: 0,
        outputs: [6, 6, 6],
        prompts_per_bucket: 12,
        calibrate: false,
        quiet: true,
        arms: vec![
            ("direct".into(), String::new()),
            ("gateway".into(), "/gateway".into()),
        ],
        // The proxy's log holds bench's requests alone: no scrape of /metrics through it.
        scrape: tokentap::bench::scrape::ScrapePlan::Off,
        ..BenchConfig::default()
    };
    bench::run(&cfg, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap();
    let bench_recs = report::load(&[dir], &mut |w| panic!("{w}")).unwrap();
    let n_gateway = bench_recs
        .iter()
        .filter(|r| r.experiment.as_ref().is_some_and(|e| e.arm == "gateway"))
        .count();
    // Every request on the gateway route: its record, and the engine route's.
    let proxied = px.records(bench_recs.len() + n_gateway).await;
    let r = tokentap::report::compute_all(
        &bench_recs,
        &proxied,
        &Slos::default(),
        10,
        false,
        ("gateway", "direct"),
    );
    let tap = r.gateway_tap.unwrap();
    assert_eq!(tap.joined, n_gateway, "{}", tap.summary);
    assert_eq!(tap.concurrency_from, "load_generator");
    for level in ["1", "4"] {
        // Per request: the tap's hop minus what the hop says it held.
        let err = tokentap::stats::sorted(proxied.iter().filter_map(|r| {
            let g = r.gateway_tap.as_ref()?;
            (r.concurrency == level.parse().ok()).then_some(g.ttft_ms? - r.gateway_overhead_ms?)
        }));
        let med = tokentap::stats::pct(&err, 0.5).unwrap();
        assert!(
            (0.0..3.0).contains(&med),
            "C={level}: tap − hold median {med} ({err:?})"
        );
        assert!(err[0] >= 0.0, "the tap read less than the hold: {err:?}");
        let t = tap.by_concurrency[level].ttft_ms.median.unwrap();
        assert!((34.0..49.0).contains(&t), "C={level}: {t}");
    }
    let hop = r.gateway_hop.unwrap();
    let (ab1, tap1) = (
        hop.by_concurrency["1"].ttft_ms.median.unwrap(),
        tap.by_concurrency["1"].ttft_ms.median.unwrap(),
    );
    assert!((ab1 - tap1).abs() < 5.0, "A/B {ab1} vs tap {tap1} at C=1");
    // The report says which levels the pooled A/B pools, and answers with the tap's figures.
    assert!(hop.summary.contains("pools C=1, 4"), "{}", hop.summary);
    assert!(
        r.answers[4].answer.contains("gateway tap"),
        "{}",
        r.answers[4].answer
    );
}

fn exp_proxy_toml(mode: &str, gateway: &str, direct: &str, extra: &str) -> String {
    format!(
        "[experiment]\nmode = \"{mode}\"\narms = [\"direct\", \"gateway\"]\n{extra}\n\
         [[routes]]\nname = \"gateway\"\nupstream = \"{gateway}\"\n[[routes]]\nname = \"direct\"\nupstream = \"{direct}\"\npath_prefix = \"/direct\"\n"
    )
}

#[tokio::test]
async fn a_request_the_gateway_rejects_is_never_copied_to_the_direct_arm() {
    let gw = Upstream::spawn(|r: &Received| {
        if r.header("authorization").as_deref() == Some("Bearer good") {
            Script::chat_stream(MS(5), MS(1), 3, true)
        } else {
            Script::json(
                401,
                r#"{"error":{"message":"no","type":"auth_error","param":null,"code":"401"}}"#,
            )
        }
    })
    .await;
    let direct = Upstream::spawn(|_| Script::chat_stream(MS(5), MS(1), 3, true)).await;
    let px = proxy_toml(&exp_proxy_toml("mirror", &gw.url(), &direct.url(), "")).await;
    let c = client();
    let got = send(
        &c,
        "POST",
        &px.url("/v1/chat/completions"),
        &[("authorization", "Bearer bad")],
        chat_body("m", true),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 401);
    let got = send(
        &c,
        "POST",
        &px.url("/v1/chat/completions"),
        &[("authorization", "Bearer good")],
        chat_body("m", true),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    let recs = px.records(3).await;
    assert_eq!(
        recs.len(),
        3,
        "rejected original + accepted original + its copy"
    );
    assert_eq!(
        direct.requests().len(),
        1,
        "only the accepted request was copied"
    );
    let pair: Vec<_> = recs.iter().filter(|r| r.outcome == Outcome::Ok).collect();
    assert_eq!(pair.len(), 2);
    assert_eq!(
        pair[0].experiment.as_ref().unwrap().pair_id,
        pair[1].experiment.as_ref().unwrap().pair_id
    );
    let arms: Vec<&str> = pair
        .iter()
        .map(|r| r.experiment.as_ref().unwrap().arm.as_str())
        .collect();
    assert!(arms.contains(&"gateway") && arms.contains(&"direct"));
    assert_eq!(
        direct.requests()[0].body,
        chat_body("m", true),
        "identical body"
    );
}

#[tokio::test]
async fn forcing_the_direct_arm_needs_a_listed_key_and_the_header_never_leaks() {
    let gw = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let direct = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let allowed = fingerprint(b"sk-allowed");
    let px = proxy_toml(&exp_proxy_toml(
        "off",
        &gw.url(),
        &direct.url(),
        &format!("allow_forcing = true\ndirect_keys = [\"{allowed}\"]"),
    ))
    .await;
    let c = client();
    let url = px.url("/v1/chat/completions");
    let got = send(
        &c,
        "POST",
        &url,
        &[
            ("authorization", "Bearer sk-other"),
            ("x-tokentap-route", "direct"),
        ],
        chat_body("m", false),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 403);
    let j: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(j["error"]["code"], "forced_direct_not_allowed");
    assert!(!String::from_utf8_lossy(&got.body).contains("sk-other"));
    let got = send(
        &c,
        "POST",
        &url,
        &[
            ("authorization", "Bearer sk-allowed"),
            ("x-tokentap-route", "direct"),
        ],
        chat_body("m", false),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    let got = send(
        &c,
        "POST",
        &url,
        &[
            ("authorization", "Bearer sk-other"),
            ("x-tokentap-route", "gateway"),
        ],
        chat_body("m", false),
    )
    .await
    .unwrap();
    assert_eq!(got.status, 200);
    assert_eq!(direct.requests().len(), 1);
    assert_eq!(gw.requests().len(), 1);
    for r in direct.requests().iter().chain(gw.requests().iter()) {
        assert!(
            r.header("x-tokentap-route").is_none(),
            "route header reached an upstream"
        );
    }
    let recs = px.records(3).await;
    assert_eq!(
        recs.iter()
            .filter(|r| r.outcome == Outcome::Rejected && r.status == 403)
            .count(),
        1
    );

    // Forcing disabled: the header is ignored and still stripped.
    let px2 = proxy_toml(&exp_proxy_toml("off", &gw.url(), &direct.url(), "")).await;
    send(
        &c,
        "POST",
        &px2.url("/v1/chat/completions"),
        &[("x-tokentap-route", "direct")],
        chat_body("m", false),
    )
    .await
    .unwrap();
    assert_eq!(gw.requests().len(), 2, "went to its own route");
    assert!(gw.requests()[1].header("x-tokentap-route").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_shadow_arm_changes_nothing_for_the_client() {
    let gw = Upstream::spawn(|_| Script::chat_stream(MS(40), MS(5), 10, true)).await;
    // The direct arm answers nothing for 3 s.
    let direct = Upstream::spawn(|_| Script {
        head_delay: MS(3000),
        ..Script::chat_stream(MS(1), MS(1), 1, false)
    })
    .await;
    let px = proxy_toml(&exp_proxy_toml(
        "mirror",
        &gw.url(),
        &direct.url(),
        "max_shadow_in_flight = 2",
    ))
    .await;
    let c = client();
    let t = tokio::time::Instant::now();
    for _ in 0..4 {
        let got = px.chat_with(&c).await;
        assert!(got.body.ends_with(b"data: [DONE]\n\n"));
    }
    assert!(
        t.elapsed() < MS(1500),
        "the client waited for the shadow: {:?}",
        t.elapsed()
    );
    let recs = px.records(4).await;
    let primaries: Vec<_> = recs.iter().filter(|r| r.route == "gateway").collect();
    assert_eq!(primaries.len(), 4);
    // Each TTFT against when the gateway actually wrote its first content chunk (scheduled at
    // 40 ms), so a late timer on a busy machine is not taken for the shadow's doing.
    let sent: Vec<f64> = gw
        .sent
        .lock()
        .unwrap()
        .iter()
        .map(|s| s[1].as_secs_f64() * 1000.0)
        .collect();
    assert_eq!(sent.len(), 4);
    for (r, s) in primaries.iter().zip(&sent) {
        let ttft = r.ttft_ms.unwrap();
        assert!(
            *s >= 40.0 && ttft >= s - 1.0 && ttft < s + 20.0,
            "client TTFT {ttft} moved (sent at {s})"
        );
    }
    // Two copies stalled in flight; the other two were skipped (never queued), and counted.
    tokio::time::sleep(MS(100)).await;
    assert_eq!(direct.requests().len(), 2);
    let (_, stats) = px.admin_get("/stats").await;
    let j: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(j["shadow_skipped"], 2, "{j}");
    let (_, metrics) = px.admin_get("/metrics").await;
    assert!(
        metrics.contains("# HELP tokentap_shadow_skipped_total ")
            && metrics.contains("tokentap_shadow_skipped_total 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paired_copies_go_after_the_primary_ended_with_cache_salt() {
    let gw = Upstream::spawn(|_| Script::chat_stream(MS(20), MS(5), 5, true)).await;
    let direct = Upstream::spawn(|_| Script::chat_stream(MS(10), MS(5), 5, true)).await;
    let px = proxy_toml(&exp_proxy_toml(
        "paired",
        &gw.url(),
        &direct.url(),
        "cache_salt = true",
    ))
    .await;
    px.chat().await;
    let recs = px.records(2).await;
    assert_eq!(recs.len(), 2);
    let (p, c) = (&recs[0], &recs[1]);
    assert_eq!((p.route.as_str(), c.route.as_str()), ("gateway", "direct"));
    let start = |r: &tokentap::meter::RequestRecord| humantime::parse_rfc3339(&r.ts).unwrap();
    let primary_end = start(p) + Duration::from_secs_f64(p.e2e_ms / 1000.0);
    // `ts` is the process's wall clock when it took the head, `e2e_ms` runs from the kernel's
    // stamp of its arrival: on a busy machine the two are apart by the head's stamp lag, which
    // this estimate of the end adds. A mirrored copy would start with the primary, some 40 ms
    // before its end; 15 ms of slack keeps the two apart.
    assert!(
        start(c) >= primary_end - MS(15),
        "the copy started before the primary ended: {:?} before",
        primary_end.duration_since(start(c)).unwrap_or_default()
    );
    // Each arm got its own salt; nothing else changed.
    let (gb, db) = (
        String::from_utf8(gw.requests()[0].body.clone()).unwrap(),
        String::from_utf8(direct.requests()[0].body.clone()).unwrap(),
    );
    let pair = p.experiment.as_ref().unwrap().pair_id.clone().unwrap();
    assert!(
        gb.starts_with(&format!("{{\"cache_salt\":\"{pair}-gateway\",")),
        "{gb}"
    );
    assert!(
        db.starts_with(&format!("{{\"cache_salt\":\"{pair}-direct\",")),
        "{db}"
    );
    assert_eq!(
        gb.replace(&format!("\"cache_salt\":\"{pair}-gateway\","), ""),
        String::from_utf8(chat_body("m", true)).unwrap()
    );
}

#[tokio::test]
async fn split_sends_only_listed_keys_to_the_direct_arm() {
    let gw = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let direct = Upstream::spawn(|_| Script::json(200, "{}")).await;
    let listed = fingerprint(b"sk-listed");
    let px = proxy_toml(&exp_proxy_toml(
        "split",
        &gw.url(),
        &direct.url(),
        &format!("direct_keys = [\"{listed}\"]\nseed = 5"),
    ))
    .await;
    let c = client();
    for _ in 0..20 {
        send(
            &c,
            "POST",
            &px.url("/v1/chat/completions"),
            &[("authorization", "Bearer sk-unlisted")],
            chat_body("m", false),
        )
        .await
        .unwrap();
    }
    assert_eq!(direct.requests().len(), 0);
    for _ in 0..40 {
        send(
            &c,
            "POST",
            &px.url("/v1/chat/completions"),
            &[("authorization", "Bearer sk-listed")],
            chat_body("m", false),
        )
        .await
        .unwrap();
    }
    let d = direct.requests().len();
    assert!((8..32).contains(&d), "{d} of 40 to direct at 50/50");
    let recs = px.records(60).await;
    assert!(recs
        .iter()
        .all(|r| r.experiment.as_ref().is_some_and(|e| e.arm == r.route)));
}

// The gateway board, over real sockets: one sim engine, sim hops in front of it, tokentap with
// forced arms, bench sending each prompt through every arm. Today's bench drives two arms a
// run (`direct` and one gateway), so each hop gets a run of its own; the helpers take the arms
// as a list, for a run of N arms in one go.

/// A hop in front of the engine: its delay, and whether it holds the answer (`--hop-buffer`).
async fn board_hop(sim: &mut Sim, delay: &str, buffer: Option<usize>) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let engine: http::Uri = format!("http://{}", sim.engine).parse().unwrap();
    let delay = delay.parse::<HopDelay>().unwrap();
    match buffer {
        None => sim.start_hop(l, delay, engine, 5).unwrap(),
        Some(bytes) => {
            let hold = tokentap::sim::Hold {
                bytes: Some(bytes),
                flush_ms: None,
            };
            sim.start_holding_hop(l, delay, hold, engine, 5).unwrap().0
        }
    }
}

/// tokentap with a route per arm (`direct` first: the baseline) and forcing allowed for the
/// bench key; bench sends every prompt through every arm at each level. The bench folder, and
/// the median hold the sim hops claimed (`x-litellm-overhead-duration-ms`, in tokentap's
/// records: the timer rounds a hold up to its tick) per arm.
async fn board_run(
    arms: &[(&str, std::net::SocketAddr)],
    levels: Vec<usize>,
) -> (std::path::PathBuf, std::collections::BTreeMap<String, f64>) {
    let key = "sk-bench-key";
    let names: Vec<String> = arms.iter().map(|(n, _)| format!("\"{n}\"")).collect();
    let routes: String = arms
        .iter()
        .map(|(n, a)| {
            let prefix = match *n {
                "direct" => String::new(),
                _ => format!("path_prefix = \"/{n}\"\n"),
            };
            format!("[[routes]]\nname = \"{n}\"\nupstream = \"http://{a}\"\n{prefix}")
        })
        .collect();
    let px = proxy_toml(&format!(
        "[experiment]\narms = [{}]\nallow_forcing = true\ndirect_keys = [\"{}\"]\n{routes}",
        names.join(", "),
        fingerprint(key.as_bytes()),
    ))
    .await;
    let dir = scratch("board");
    let cfg = BenchConfig {
        target: format!("http://{}", px.addr),
        out: dir.clone(),
        concurrency: levels,
        requests: 30,
        warmup: 2,
        outputs: [24, 24, 24],
        prompts_per_bucket: 10,
        calibrate: false,
        quiet: true,
        api_key: Some(tokentap::keys::Secret::new(key.to_owned())),
        arms: arms
            .iter()
            .map(|(n, _)| ((*n).into(), String::new()))
            .collect(),
        route_header: Some("x-tokentap-route".into()),
        scrape: tokentap::bench::scrape::ScrapePlan::Off,
        ..BenchConfig::default()
    };
    bench::run(&cfg, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap();
    let measured = report::load(std::slice::from_ref(&dir), &mut |w| panic!("{w}")).unwrap();
    let mut claims: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for r in px.records(measured.len()).await {
        if let (Some(e), Some(c)) = (&r.experiment, r.gateway_overhead_ms) {
            claims.entry(e.arm.clone()).or_default().push(c);
        }
    }
    let median = |v: Vec<f64>| tokentap::stats::pct(&tokentap::stats::sorted(v), 0.5);
    let claims = claims
        .into_iter()
        .filter_map(|(a, v)| Some((a, median(v)?)))
        .collect();
    (dir, claims)
}

/// `tokentap report DIR ARGS… --format FORMAT`, as a user runs it.
fn board_report(dir: &std::path::Path, args: &[&str], format: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("report")
        .arg(dir)
        .args(args)
        .args(["--format", format])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The board's row of `arm`, from the report's JSON.
fn board_row(json: &str, arm: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let rows = v["gateway_board"].as_array().cloned().unwrap_or_default();
    rows.into_iter()
        .find(|r| r["arm"] == arm)
        .unwrap_or_else(|| panic!("no board row {arm}: {}", v["gateway_board_not_judged"]))
}

/// A 5 ms hop reads about 5 ms above a 0 ms hop (a sim hop costs its own forwarding even at
/// 0 ms), each within a sane interval; a hop holding 16 KB is named buffered, and its streams
/// are not sustained (the first token waits for the whole answer), while the baseline's are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_reads_each_hop_s_cost_and_names_the_buffering_one() {
    let el = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut sim = Sim::start(fast(), "sim", 3, el, None).await.unwrap();
    let engine = sim.engine;
    let (zero, five) = (
        board_hop(&mut sim, "0", None).await,
        board_hop(&mut sim, "5", None).await,
    );
    let buffering = board_hop(&mut sim, "0", Some(16 << 10)).await;
    let p50 = |row: &serde_json::Value| {
        let l = &row["levels"][0];
        assert_eq!(l["level"], 1);
        // Every prompt went through both arms, and both copies were served.
        assert!(l["pairs"].as_u64().unwrap() >= 30, "{l}");
        assert_eq!(l["pairs"], l["requests"], "{l}");
        assert_eq!(l["pairs"], l["baseline_requests"], "{l}");
        let a = &l["added_ttft_ms"];
        let (m, lo, hi) = (
            a["p50"].as_f64().unwrap(),
            a["p50_ci95"][0].as_f64().unwrap(),
            a["p50_ci95"][1].as_f64().unwrap(),
        );
        assert!(lo <= m && m <= hi && hi - lo < 4.0, "{a}");
        // Under 100 pairs: no interval for a p99.
        assert!(a["p99"].is_number() && a["p99_ci95"].is_null(), "{a}");
        (m, lo, hi)
    };
    let (run0, _) = board_run(&[("direct", engine), ("gateway", zero)], vec![1]).await;
    let (m0, ..) = p50(&board_row(&board_report(&run0, &[], "json"), "gateway"));
    let (run5, claims) = board_run(&[("direct", engine), ("gateway", five)], vec![1]).await;
    let json5 = board_report(&run5, &[], "json");
    let (m5, lo5, hi5) = p50(&board_row(&json5, "gateway"));
    // The 5 ms hold as it happened: the timer rounds it up to its tick (about 6–7 ms).
    let held = claims["gateway"];
    eprintln!("board: 0 ms hop {m0:+.2} ms, 5 ms hop {m5:+.2} ms [{lo5:+.2}, {hi5:+.2}], held {held:.2} ms");
    assert!((5.0..8.0).contains(&held), "the hop's own claim: {held}");
    assert!((-0.5..4.0).contains(&m0), "the 0 ms hop's own cost: {m0}");
    assert!(
        (m5 - m0 - held).abs() < 1.0,
        "{held:.2} ms above the 0 ms hop: {m5} vs {m0}"
    );
    assert!(
        lo5 - m0 < held + 0.75 && hi5 - m0 > held - 0.75,
        "[{lo5}, {hi5}] − {m0}"
    );
    let row5 = board_row(&json5, "gateway");
    assert_eq!(row5["levels"][0]["errors"], 0);
    assert_eq!(row5["levels"][0]["delivery"]["buffered"], 0);

    let (runb, _) = board_run(&[("direct", engine), ("gateway", buffering)], vec![1, 2]).await;
    let pace = ["--pace-gap-ms", "20"];
    let rowb = board_row(&board_report(&runb, &pace, "json"), "gateway");
    for l in rowb["levels"].as_array().unwrap() {
        let (d, b) = (&l["delivery"], &l["baseline_delivery"]);
        assert_eq!(d["buffered"], l["requests"], "{l}");
        assert_eq!(b["buffered"], 0, "{l}");
    }
    let n: u64 = rowb["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["requests"].as_u64().unwrap())
        .sum();
    let said = rowb["summary"].as_str().unwrap();
    let buffered = format!("buffered {n} of {n} streams (direct: 0 of {n})");
    assert!(said.contains(&buffered), "{said}");
    assert!(rowb["sustained_streams"].is_null(), "{rowb}");
    let why = rowb["sustained_reason"].as_str().unwrap();
    assert!(
        why.starts_with("C=1: ") && why.contains("first token"),
        "{why}"
    );
    assert_eq!(rowb["baseline_sustained_streams"], 2, "{rowb}");
    assert_eq!(rowb["pace_from"], "flag");
    // Every view has the section; the HTML its chart.
    let md = board_report(&runb, &pace, "md");
    assert!(
        md.contains("\n## Gateway board: each gateway against direct"),
        "{md}"
    );
    let html = board_report(&runb, &pace, "html");
    assert!(html.contains("Gateway board: added TTFT p50 against direct, by level"));
    sim.stop(Duration::from_secs(1)).await;
}
