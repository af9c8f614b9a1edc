//! `tokentap demo`: the embedded default. In one process, on ephemeral loopback ports: a
//! simulated engine, a simulated gateway hop, tokentap with three routes (`direct` → engine,
//! `gateway` → hop, and `engine` → engine behind the gateway: the hop relays through it, so the
//! tap sees both sides of the hop), and a short bench sweep of the three prompt shapes that
//! alternates direct and gateway on identical prompts. Ends with the hop per concurrency level,
//! A/B and tap side by side. Everything it measures is real; the engine is SIMULATED, and the
//! output says so.

mod reading;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::bench::{self, Bench};
use crate::config::{Config, Overrides};
use crate::meter::{Outcome, RequestRecord};
use crate::report;
use crate::serve::Running;
use crate::sim::{HopDelay, Profile, Sim};
use crate::stats::pct;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("demo: {0}")]
    Setup(String),
    #[error(transparent)]
    Bench(#[from] bench::BenchError),
}

pub struct DemoConfig {
    pub out: PathBuf,
    pub hop: HopDelay,
    pub seed: u64,
}

fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> DemoError + '_ {
    move |e| DemoError::Setup(format!("{what}: {e}"))
}

pub async fn run(cfg: &DemoConfig) -> Result<(), DemoError> {
    std::fs::create_dir_all(&cfg.out).map_err(setup("output folder"))?;
    let bind = || crate::listen::bind_str("127.0.0.1:0");
    let engine_l = bind().await.map_err(setup("bind"))?;
    let hop_l = bind().await.map_err(setup("bind"))?;
    let hop_addr = hop_l.local_addr().map_err(setup("bind"))?;
    let profile = Profile::v100();
    let mut sim = Sim::start(profile.clone(), "sim-qwen2.5-7b", cfg.seed, engine_l, None)
        .await
        .map_err(setup("simulator"))?;
    let proxy_log = cfg.out.join("proxy.jsonl");
    let _ = std::fs::remove_file(&proxy_log);
    // Three routes: direct → engine; gateway → hop; and the hop's own upstream, `engine`, behind
    // the gateway route: the tap sees every gateway request on both sides of the hop.
    let toml = format!(
        "[[routes]]\nname = \"direct\"\nupstream = \"http://{e}\"\n\
         [[routes]]\nname = \"gateway\"\nupstream = \"http://{hop_addr}\"\npath_prefix = \"/gateway\"\n\
         [[routes]]\nname = \"engine\"\nupstream = \"http://{e}\"\npath_prefix = \"/engine\"\n\
         behind = \"gateway\"\nbehind_sources = [\"127.0.0.1/32\"]\n",
        e = sim.engine
    );
    let over = Overrides {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("off".into()),
        log: Some(proxy_log.display().to_string()),
        ..Overrides::default()
    };
    let config = Config::from_toml(&toml, "(demo)", &over).map_err(setup("config"))?;
    let proxy = Running::start(config).await.map_err(setup("proxy"))?;
    let via = format!("http://{}/engine", proxy.addr)
        .parse()
        .map_err(setup("hop upstream"))?;
    sim.start_hop(hop_l, cfg.hop, via, cfg.seed)
        .map_err(setup("hop"))?;

    print_intro(cfg, &profile, sim.engine, hop_addr, proxy.addr);

    let bench_cfg = bench_config(cfg, proxy.addr, sim.engine)?;
    let stop = Arc::new(AtomicBool::new(false));
    let info = bench::run(&bench_cfg, stop).await?;
    let _ = proxy.shutdown().await;
    drop(sim);

    let records = read_records(&bench_cfg.common.out.join("requests.jsonl"));
    let proxied = read_records(&proxy_log);
    let mut rep = report::compute_all(
        &records,
        &proxied,
        &report::Slos::default(),
        0,
        false,
        ("gateway", "direct"),
    );
    report::engine::attach(
        &mut rep,
        std::slice::from_ref(&bench_cfg.common.out),
        &mut |w| {
            eprintln!("tokentap demo: {w}");
        },
    );
    print_hop(cfg, &rep, &proxied);
    print_split(&rep);
    print_engine(&rep);

    let ok = proxied.iter().filter(|r| r.outcome == Outcome::Ok).count();
    crate::outln!(
        "\ntokentap recorded {} requests ({ok} ok) in {}; bench's own records: {} (+ run.json) in {}",
        proxied.len(),
        proxy_log.display(),
        records.len(),
        bench_cfg.common.out.display()
    );
    crate::outln!(
        "client overhead (bench → zero-cost engine) TTFT p50 {:.3} ms",
        info.client_overhead_ttft_ms
            .as_ref()
            .map(|o| o.p50)
            .unwrap_or(f64::NAN)
    );
    crate::outln!(
        "full report (answers, SLO verdicts, provisioning, charts): tokentap report {} --tap {} --format html --out report.html",
        bench_cfg.common.out.display(),
        proxy_log.display()
    );
    crate::outln!("\nReading it like the write-up, from the figures above (the direct arm):");
    for line in reading::lines(&rep) {
        crate::outln!("  {line}");
    }
    Ok(())
}

/// Say what runs where, and that the engine is simulated.
fn print_intro(
    cfg: &DemoConfig,
    profile: &Profile,
    engine: SocketAddr,
    hop_addr: SocketAddr,
    proxy: SocketAddr,
) {
    crate::outln!("tokentap demo — the engine is SIMULATED ({}: a continuous-batching cost model shaped on the", profile.name);
    crate::outln!(
        "write-up's 4× V100 / Qwen2.5-7B / TP=4 results). Proxy, client and measurements are real."
    );
    crate::outln!(
        "  engine {engine}   gateway hop {hop_addr} (injected {}±{} ms)   tokentap {proxy}",
        cfg.hop.ms,
        cfg.hop.jitter_ms
    );
    crate::outln!("  direct:  client → tokentap /v1 → engine");
    crate::outln!(
        "  gateway: client → tokentap /gateway/v1 → hop → tokentap /engine/v1 → engine (the tap)\n"
    );
}

/// The bench sweep: three prompt shapes at concurrency 1, 4, 8, alternating the direct and
/// gateway arms on identical prompts, with the engine's /metrics scraped against a V100.
fn bench_config(
    cfg: &DemoConfig,
    proxy: SocketAddr,
    engine: SocketAddr,
) -> Result<Bench, DemoError> {
    let v100 = bench::gpu::lookup("v100").map_err(DemoError::Setup)?;
    let mut b = Bench::new(format!("http://{proxy}"), cfg.out.join("bench"));
    let c = &mut b.common;
    c.seed = cfg.seed;
    (c.requests, c.warmup) = (8, 0);
    c.prompts.outputs = [32, 64, 128];
    c.prompts.prompts_per_bucket = 20;
    // No probe requests: the proxy's log holds the pairs alone.
    c.estimate = false;
    // The engine's /metrics scraped directly (not through tokentap: its log holds the pairs
    // alone), against a V100's published peaks for MBU and MFU.
    c.scrape = bench::Scraping {
        plan: bench::scrape::ScrapePlan::Urls(vec![format!("http://{engine}/metrics")]),
        interval: std::time::Duration::from_millis(250),
        metrics: Vec::new(),
    };
    c.timeslice = Some(std::time::Duration::from_millis(500));
    c.hardware = crate::report::engine::Hardware {
        gpu: Some(v100.name.into()),
        peak_bandwidth_bytes_s: Some(v100.bandwidth),
        peak_flops: Some(v100.flops),
    };
    // The demo's own folder: a second demo replaces its run.
    c.force = true;
    b.load = bench::Load::Closed(bench::Closed {
        concurrency: vec![1, 4, 8],
        runs: 1,
        experiment: bench::Experiment {
            arms: vec![
                ("direct".into(), String::new()),
                ("gateway".into(), "/gateway".into()),
            ],
            ..bench::Experiment::default()
        },
    });
    Ok(b)
}

/// The records of a JSONL file; unreadable lines (and a missing file) are skipped.
fn read_records(p: &std::path::Path) -> Vec<RequestRecord> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Where TTFT went at C=1, from the simulated engine's per-request metrics (vLLM's fields).
fn print_split(rep: &report::Report) {
    let f = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.1}"));
    crate::outln!("\nwhere TTFT went at C=1 (medians of each part, ms; the engine's parts from its per-request metrics):");
    for c in rep.cells.iter().filter(|c| c.level == 1) {
        let Some(sp) = &c.ttft_split else { continue };
        crate::outln!(
            "  {:<21} TTFT {:>6}   engine queue {:>5}   engine prefill {:>6}   outside the engine {:>6}",
            format!("{} [{}]", c.bucket, c.arm.as_deref().unwrap_or("-")),
            f(c.ttft_ms.p50),
            f(sp.engine_queue_ms),
            f(sp.engine_prefill_ms),
            f(sp.outside_engine_ms),
        );
    }
}

/// The engine's side per cell (scraped from its /metrics) and each bucket's binding constraint.
fn print_engine(rep: &report::Report) {
    let f = |v: Option<f64>, d: usize| v.map_or_else(|| "-".into(), |v| format!("{v:.d$}"));
    crate::outln!("\nthe engine per cell (scraped from its /metrics in vLLM's names; MBU against a V100's 900 GB/s):");
    crate::outln!(
        "  cell                C   KV mean/peak %  waiting mean/peak  preempt/req  GB/s/GPU  MBU %"
    );
    for c in rep
        .cells
        .iter()
        .filter(|c| c.arm.as_deref() != Some("gateway"))
    {
        let Some(t) = &c.engine else { continue };
        let g = |g: Option<report::engine::Gauge>, k: f64, d: usize| {
            g.map_or_else(
                || "-".into(),
                |g| format!("{:.d$}/{:.d$}", g.mean * k, g.peak * k),
            )
        };
        crate::outln!(
            "  {:<18} {:>2}   {:>14}  {:>17}  {:>11}  {:>8}  {:>5}",
            c.bucket,
            c.concurrency,
            g(t.kv_cache_usage, 100.0, 0),
            g(t.waiting, 1.0, 1),
            f(t.preemptions_per_request, 2),
            f(t.read_bytes_per_s_per_gpu.map(|b| b / 1e9), 0),
            f(t.mbu.map(|m| m * 100.0), 0),
        );
    }
    for b in &rep.binding {
        crate::outln!("  binding constraint — {}", b.text);
    }
}

/// The hop at every level: the A/B's paired difference beside the tap's per-request hop and
/// the hop's own claim (its injected delay), and what the tap's extra tokentap leg costs.
fn print_hop(cfg: &DemoConfig, rep: &report::Report, proxied: &[RequestRecord]) {
    let f = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:+.1}"));
    crate::outln!();
    crate::outln!(
        "gateway hop (injected {:.0}±{:.0} ms), TTFT ms, median per concurrency level:",
        cfg.hop.ms,
        cfg.hop.jitter_ms
    );
    crate::outln!("  level  A/B pairs  A/B gateway−direct  tap joined  tap hop  admission  relay  tap − hop's hold (median, max |·|)");
    let (hop, tap) = (rep.gateway_hop.as_ref(), rep.gateway_tap.as_ref());
    let mut levels: Vec<&String> = hop
        .map(|h| h.by_concurrency.keys().collect())
        .unwrap_or_default();
    levels.sort_by_key(|l| l.parse::<u64>().unwrap_or(u64::MAX));
    for l in levels {
        let ab = hop.and_then(|h| h.by_concurrency.get(l));
        let t = tap.and_then(|t| t.by_concurrency.get(l));
        // The hop claims its injected delay per request: the tap's error on each one.
        let err = crate::stats::sorted(proxied.iter().filter_map(|r| {
            let g = r.gateway_tap.as_ref()?;
            (r.concurrency.map(|c| c.to_string()).as_ref() == Some(l))
                .then_some(g.ttft_ms? - r.gateway_overhead_ms?)
        }));
        let max_abs = err
            .iter()
            .map(|e| e.abs())
            .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.max(e))));
        crate::outln!(
            "  C={l:<4} {:>9}  {:>18}  {:>10}  {:>7}  {:>9}  {:>5}  {} , {}",
            ab.map_or(0, |a| a.pairs),
            f(ab.and_then(|a| a.ttft_ms.median)),
            t.map_or(0, |t| t.joined),
            f(t.and_then(|t| t.ttft_ms.median)),
            f(t.and_then(|t| t.admission_ms.median)),
            f(t.and_then(|t| t.relay_ms.median)),
            f(pct(&err, 0.5)),
            max_abs.map_or_else(|| "-".into(), |v| format!("{v:.1}")),
        );
    }
    if let Some(h) = hop {
        crate::outln!("  A/B: {}", h.summary);
    }
    if let Some(t) = tap {
        crate::outln!("  tap: {}", t.summary);
    }
    // The gateway arm also crosses tokentap's engine route: its own share of that leg.
    let leg = crate::stats::sorted(proxied.iter().filter_map(|r| {
        let inner = r.gateway_tap.as_ref()?.side == crate::meter::TapSide::Inner;
        inner.then_some(r.upstream_sent_ms?)
    }));
    crate::outln!(
        "  the tap's extra leg (tokentap's engine route: request head → written upstream) median {:.3} ms, p99 {:.3} ms: the A/B's gateway arm pays it, the tap's figure does not",
        pct(&leg, 0.5).unwrap_or(f64::NAN),
        pct(&leg, 0.99).unwrap_or(f64::NAN)
    );
}

#[derive(clap::Args)]
pub struct Args {
    /// Where records and run.json go.
    #[arg(long, default_value = "tokentap-demo")]
    pub out: PathBuf,
    /// Injected gateway admission delay, MS[±JITTER].
    #[arg(long, default_value = "100±10")]
    pub gateway_hop: HopDelay,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// `tokentap demo` on the command line.
pub fn cli(a: Args) -> crate::cli::Exit {
    use crate::cli::Exit;
    let rt = match crate::cli::runtime() {
        Ok(rt) => rt,
        Err(e) => return e,
    };
    let cfg = DemoConfig {
        out: a.out,
        hop: a.gateway_hop,
        seed: a.seed,
    };
    match rt.block_on(run(&cfg)) {
        Ok(()) => Exit::Ok,
        Err(e) => Exit::Failed(e.to_string()),
    }
}
