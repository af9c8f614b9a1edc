//! `tokentap demo`: the embedded default. In one process, on ephemeral loopback ports: a
//! simulated engine, a simulated gateway hop in front of it, tokentap with two routes (`direct`
//! → engine, `gateway` → hop → engine), and a short bench sweep of the three prompt shapes that
//! alternates the two routes on identical prompts. Ends in a report. Everything it measures is
//! real; the engine is SIMULATED, and the output says so.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::bench::{self, BenchConfig};
use crate::config::{Config, Overrides};
use crate::meter::{Outcome, RequestRecord};
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
    let engine_l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(setup("bind"))?;
    let hop_l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(setup("bind"))?;
    let profile = Profile::v100();
    let sim = Sim::start(
        profile.clone(),
        "sim-qwen2.5-7b",
        cfg.seed,
        engine_l,
        Some((hop_l, cfg.hop)),
    )
    .await
    .map_err(setup("simulator"))?;
    let hop_addr = sim
        .hop
        .ok_or_else(|| DemoError::Setup("hop did not start".into()))?;
    let proxy_log = cfg.out.join("proxy.jsonl");
    let _ = std::fs::remove_file(&proxy_log);
    let toml = format!(
        "[[routes]]\nname = \"direct\"\nupstream = \"http://{}\"\n[[routes]]\nname = \"gateway\"\nupstream = \"http://{hop_addr}\"\npath_prefix = \"/gateway\"\n",
        sim.engine
    );
    let over = Overrides {
        listen: Some("127.0.0.1:0".into()),
        admin: Some("off".into()),
        log: Some(proxy_log.display().to_string()),
        upstream: None,
    };
    let config = Config::from_toml(&toml, "(demo)", &over).map_err(setup("config"))?;
    let proxy = Running::start(config).await.map_err(setup("proxy"))?;

    println!("tokentap demo — the engine is SIMULATED ({}: a continuous-batching cost model shaped on the", profile.name);
    println!(
        "write-up's 4× V100 / Qwen2.5-7B / TP=4 results). Proxy, client and measurements are real."
    );
    println!(
        "  engine {}   gateway hop {} (injected {}±{} ms)   tokentap {} (direct: /v1, gateway: /gateway/v1)\n",
        sim.engine, hop_addr, cfg.hop.ms, cfg.hop.jitter_ms, proxy.addr
    );

    let bench_cfg = BenchConfig {
        target: format!("http://{}", proxy.addr),
        out: cfg.out.join("bench"),
        seed: cfg.seed,
        concurrency: vec![1, 4, 8],
        requests: 8,
        warmup: 0,
        outputs: [32, 64, 128],
        prompts_per_bucket: 20,
        arms: vec![
            ("direct".into(), String::new()),
            ("gateway".into(), "/gateway".into()),
        ],
        ..BenchConfig::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let info = bench::run(&bench_cfg, stop).await?;
    let _ = proxy.shutdown().await;
    drop(sim);

    let text = std::fs::read_to_string(bench_cfg.out.join("requests.jsonl")).unwrap_or_default();
    let records: Vec<RequestRecord> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let proxy_text = std::fs::read_to_string(&proxy_log).unwrap_or_default();
    let proxied: Vec<RequestRecord> = proxy_text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();

    // Injected vs measured hop: paired differences (gateway − direct, same prompt), by
    // concurrency. At C=1 the pair does not share the engine; above it, the two arms' requests
    // land in different batches, so engine contention is mixed into the difference.
    let arm_of = |r: &RequestRecord| {
        r.experiment
            .as_ref()
            .map(|e| (e.arm.clone(), e.pair_id.clone()))
    };
    println!();
    println!("gateway hop (injected {:.0}±{:.0} ms), paired TTFT(gateway) − TTFT(direct) on identical prompts:", cfg.hop.ms, cfg.hop.jitter_ms);
    for &c in &bench_cfg.concurrency {
        let mut ttft = Vec::new();
        let mut tpot = Vec::new();
        for g in records.iter().filter(|r| {
            r.concurrency == Some(c as u64)
                && r.outcome == Outcome::Ok
                && arm_of(r).is_some_and(|(a, _)| a == "gateway")
        }) {
            let pair = arm_of(g).and_then(|(_, p)| p);
            let direct = records.iter().find(|r| {
                r.outcome == Outcome::Ok
                    && arm_of(r).is_some_and(|(a, p)| a == "direct" && p == pair)
            });
            if let Some(d) = direct {
                if let (Some(a), Some(b)) = (g.ttft_ms, d.ttft_ms) {
                    ttft.push(a - b);
                }
                if let (Some(a), Some(b)) = (g.tpot_ms, d.tpot_ms) {
                    tpot.push(a - b);
                }
            }
        }
        ttft.sort_by(f64::total_cmp);
        tpot.sort_by(f64::total_cmp);
        println!(
            "  C={c}: {:>2} pairs  TTFT median {:>6.1} ms  p95 {:>6.1} ms  |  TPOT median {:>5.2} ms{}",
            ttft.len(),
            pct(&ttft, 0.5).unwrap_or(f64::NAN),
            pct(&ttft, 0.95).unwrap_or(f64::NAN),
            pct(&tpot, 0.5).unwrap_or(f64::NAN),
            if c == 1 { "  (no engine contention: this is the hop)" } else { "  (engine contention mixed in)" }
        );
    }
    let ok = proxied.iter().filter(|r| r.outcome == Outcome::Ok).count();
    println!(
        "tokentap recorded {} requests ({ok} ok) in {}; bench's own records: {} (+ run.json) in {}",
        proxied.len(),
        proxy_log.display(),
        records.len(),
        bench_cfg.out.display()
    );
    println!(
        "client overhead (bench → zero-cost engine) TTFT p50 {:.3} ms",
        info.client_overhead_ttft_ms
            .as_ref()
            .map(|o| o.p50)
            .unwrap_or(f64::NAN)
    );
    println!(
        "full report with SLO verdicts, provisioning and charts: tokentap report {} --format html --out report.html",
        bench_cfg.out.display()
    );
    println!("\nReading it like the write-up: TTFT grows with prompt length and with concurrency (prefill");
    println!("competes for compute); per-stream tok/s barely moves (decode is bandwidth-bound); E2E is set by");
    println!("how much was asked for. The gateway hop taxes the front of the request (TTFT), not the body (TPOT).");
    Ok(())
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
