//! The `tokentap` binary: argument parsing and exit codes; the work lives in the library.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tokentap::config::{Config, Overrides};

/// Exit code for a bad config or bad arguments (EX_USAGE).
const EXIT_CONFIG: u8 = 64;

#[derive(Parser)]
#[command(
    name = "tokentap",
    version,
    about = "A transparent measuring reverse proxy for LLM inference."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy in front of an OpenAI-compatible upstream.
    ///
    /// Try: tokentap serve --upstream http://127.0.0.1:8000 --listen 127.0.0.1:8080
    Serve(ServeArgs),
    /// Validate a config file and exit (0 = valid), like `nginx -t`.
    ///
    /// Try: tokentap check --config config/tokentap.toml
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// The embedded default: simulated engine + simulated gateway hop + tokentap + load, in one
    /// process, ending in a report. Needs nothing else installed; about a minute.
    ///
    /// Try: tokentap demo
    Demo {
        /// Where records and run.json go.
        #[arg(long, default_value = "tokentap-demo")]
        out: PathBuf,
        /// Injected gateway admission delay, MS[±JITTER].
        #[arg(long, default_value = "100±10")]
        gateway_hop: tokentap::sim::HopDelay,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// A simulated OpenAI-compatible engine (continuous-batching cost model) for demos, tests
    /// and dry runs; optionally a simulated gateway hop in front of it.
    ///
    /// Try: tokentap sim --listen 127.0.0.1:8000 --gateway-hop 100±10 --hop-listen 127.0.0.1:4000
    Sim(SimArgs),
    /// Closed-loop load generator: prompt-shape buckets × a concurrency sweep, seeded, with
    /// warm-up; writes requests.jsonl, run.json and a summary.
    ///
    /// Try: tokentap bench --target http://127.0.0.1:8080 --out bench-out --concurrency 1,2,4,8
    Bench(BenchArgs),
    /// Request records (bench folders, proxy logs, rotated files, several replicas) → tables,
    /// SLO verdicts, provisioning answers, per-key accounting, charts.
    ///
    /// Try: tokentap report tokentap-demo/bench --format html --out report.html
    Report(ReportArgs),
    /// Print the key fingerprint (sha256:<hex>) of an API key read from standard input, for
    /// `[keys.aliases]`. The key itself is never printed.
    ///
    /// Try: printf %s "$OPENAI_API_KEY" | tokentap fingerprint
    Fingerprint,
}

#[derive(Args)]
struct SimArgs {
    /// Engine listen address.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: String,
    /// Model name served.
    #[arg(long, default_value = "sim-qwen2.5-7b")]
    model: String,
    /// Cost-model profile (TOML with the fields of the built-in v100 profile); default built-in.
    #[arg(long)]
    profile: Option<PathBuf>,
    /// Add a gateway hop with this admission delay, MS[±JITTER] (e.g. 100±10).
    #[arg(long)]
    gateway_hop: Option<tokentap::sim::HopDelay>,
    /// Where the gateway hop listens.
    #[arg(long, default_value = "127.0.0.1:4000")]
    hop_listen: String,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print the built-in profile as TOML and exit.
    #[arg(long)]
    print_profile: bool,
}

#[derive(Args)]
struct BenchArgs {
    /// Base URL of an OpenAI-compatible server (tokentap, vLLM, LiteLLM).
    #[arg(long)]
    target: String,
    /// Output folder (requests.jsonl, run.json).
    #[arg(long)]
    out: PathBuf,
    /// ShareGPT JSON file; default: the bundled sample.
    #[arg(long)]
    dataset: Option<PathBuf>,
    /// Synthetic prompts of these token lengths instead of a dataset (e.g. 1019,558,127).
    #[arg(long, value_delimiter = ',')]
    synthetic: Option<Vec<u64>>,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    concurrency: Vec<usize>,
    /// Measured requests per cell.
    #[arg(long, default_value_t = 30)]
    requests: usize,
    /// Warm-up requests per cell (not recorded).
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Model name; default: the first of GET /v1/models.
    #[arg(long)]
    model: Option<String>,
    /// Environment variable holding the bearer key.
    #[arg(long, default_value = "OPENAI_API_KEY")]
    api_key_env: String,
    /// Send ignore_eos + min_tokens so output length is exact (vLLM extension).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    fixed_output: bool,
    /// Prompts under this many (estimated) tokens are "short".
    #[arg(long, default_value_t = 200)]
    short_max: u64,
    /// Prompts from this many tokens are "long".
    #[arg(long, default_value_t = 700)]
    long_min: u64,
    /// Output tokens for long-short, balanced, short-long.
    #[arg(long, value_delimiter = ',', default_value = "64,256,512")]
    outputs: Vec<u64>,
    #[arg(long, default_value_t = 50)]
    prompts_per_bucket: usize,
    /// Skip measuring this client's own overhead against a server that answers at once.
    #[arg(long)]
    no_calibrate: bool,
    /// Send identical prompts through two experiment arms in ABBA order, choosing the arm with
    /// this request header (tokentap's `experiment.route_header`, e.g. x-tokentap-route).
    #[arg(long)]
    route_header: Option<String>,
    /// The two arm (route) names for --route-header.
    #[arg(long, value_delimiter = ',', default_value = "direct,gateway")]
    arms: Vec<String>,
}

#[derive(Args)]
struct ReportArgs {
    /// JSONL files or folders holding them (every *.jsonl* file below a folder).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "table")]
    format: tokentap::report::Format,
    /// Write here instead of standard output.
    #[arg(long)]
    out: Option<PathBuf>,
    /// SLO thresholds (TOML: ttft_interactive_ms, ttft_strict_ms, ttft_code_completion_ms,
    /// ttft_agents_ms, reading_tok_s, coding_tok_s, knee_factor, goodput_ttft_ms, goodput_tok_s).
    #[arg(long)]
    slo: Option<PathBuf>,
    /// Exit 1 when any cell misses one of these SLOs (interactive, strict, code_completion,
    /// agents, reading_speed, interactive_coding).
    #[arg(long, value_delimiter = ',')]
    fail_on_slo: Vec<String>,
    /// Keys in the per-key table.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Split the per-key table by experiment arm.
    #[arg(long)]
    by_arm: bool,
    /// The experiment arms compared in the gateway-hop section: GATEWAY,DIRECT.
    #[arg(long, value_delimiter = ',', default_value = "gateway,direct")]
    hop_arms: Vec<String>,
}

fn run_report(a: ReportArgs) -> ExitCode {
    use tokentap::report;
    let slos = match &a.slo {
        None => report::Slos::default(),
        Some(p) => match report::Slos::load(p) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("tokentap: config error: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        },
    };
    let known: Vec<&str> = slos.list().iter().map(|s| s.0).collect();
    if let Some(bad) = a.fail_on_slo.iter().find(|n| !known.contains(&n.as_str())) {
        eprintln!(
            "tokentap: --fail-on-slo {bad}: unknown SLO (one of {})",
            known.join(", ")
        );
        return ExitCode::from(EXIT_CONFIG);
    }
    let records = match report::load(&a.paths, &mut |w| {
        eprintln!("tokentap report: warning: {w}")
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tokentap: report: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (g, d) = match a.hop_arms.as_slice() {
        [g, d] => (g.as_str(), d.as_str()),
        _ => {
            eprintln!("tokentap: --hop-arms takes two arm names: GATEWAY,DIRECT");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let rep = report::compute_with_arms(&records, &slos, a.top, a.by_arm, (g, d));
    let text = report::render(&rep, a.format);
    match &a.out {
        Some(p) => {
            if let Err(e) = std::fs::write(p, text) {
                eprintln!("tokentap: report: {}: {e}", p.display());
                return ExitCode::FAILURE;
            }
        }
        None => print!("{text}"),
    }
    let missed = report::missed(&rep, &a.fail_on_slo);
    if !missed.is_empty() {
        for m in &missed {
            eprintln!("tokentap report: SLO missed: {m}");
        }
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[derive(Args)]
struct ServeArgs {
    /// TOML config file (see config/tokentap.toml).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Upstream base URL (quick start without a file; replaces the first route's upstream).
    #[arg(long)]
    upstream: Option<String>,
    /// Proxy listen address [default: 0.0.0.0:8080].
    #[arg(long)]
    listen: Option<String>,
    /// Admin listen address for /metrics /healthz /readyz /stats [default: 127.0.0.1:9464];
    /// "off" disables it.
    #[arg(long)]
    admin: Option<String>,
    /// Request log (JSONL) path [default: tokentap.jsonl]; "off" disables it.
    #[arg(long)]
    log: Option<PathBuf>,
}

fn load(config: Option<&PathBuf>, over: &Overrides) -> Result<Config, ExitCode> {
    let res = match config {
        Some(p) => Config::load(p, over),
        None => Config::from_flags(over),
    };
    res.map_err(|e| {
        eprintln!("tokentap: config error: {e}");
        ExitCode::from(EXIT_CONFIG)
    })
}

fn init_tracing() {
    let level = std::env::var("TOKENTAP_LOG")
        .ok()
        .and_then(|v| v.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_max_level(level)
        .with_target(false)
        .init();
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("tokentap: cannot start the runtime: {e}");
            ExitCode::FAILURE
        })
}

fn run_sim(a: SimArgs) -> ExitCode {
    let profile = match &a.profile {
        None => tokentap::sim::Profile::v100(),
        Some(p) => match std::fs::read_to_string(p)
            .map_err(|e| e.to_string())
            .and_then(|t| toml::from_str(&t).map_err(|e| e.to_string()))
        {
            Ok(p) => p,
            Err(e) => {
                eprintln!("tokentap: config error: {}: {e}", p.display());
                return ExitCode::from(EXIT_CONFIG);
            }
        },
    };
    if a.print_profile {
        print!("{}", toml::to_string(&profile).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(c) => return c,
    };
    rt.block_on(async move {
        let bind = |s: String| async move {
            tokio::net::TcpListener::bind(&s)
                .await
                .map_err(|e| format!("cannot listen on {s}: {e}"))
        };
        let engine = match bind(a.listen.clone()).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("tokentap: {e}");
                return ExitCode::FAILURE;
            }
        };
        let hop = match a.gateway_hop {
            None => None,
            Some(d) => match bind(a.hop_listen.clone()).await {
                Ok(l) => Some((l, d)),
                Err(e) => {
                    eprintln!("tokentap: {e}");
                    return ExitCode::FAILURE;
                }
            },
        };
        match tokentap::sim::Sim::start(profile.clone(), &a.model, a.seed, engine, hop).await {
            Ok(sim) => {
                eprintln!(
                    "tokentap sim: SIMULATED engine ({}) serving model {:?} on http://{}/v1",
                    profile.name, a.model, sim.engine
                );
                if let (Some(h), Some(d)) = (sim.hop, a.gateway_hop) {
                    eprintln!(
                        "tokentap sim: simulated gateway hop ({}±{} ms) on http://{h}/v1",
                        d.ms, d.jitter_ms
                    );
                }
                shutdown_signal().await;
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tokentap: sim: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn run_bench(a: BenchArgs) -> ExitCode {
    let [o0, o1, o2] = match a.outputs.as_slice() {
        [x, y, z] => [*x, *y, *z],
        _ => {
            eprintln!("tokentap: --outputs takes three numbers: long-short,balanced,short-long");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let cfg = tokentap::bench::BenchConfig {
        target: a.target,
        out: a.out,
        dataset: a.dataset,
        synthetic: a.synthetic,
        seed: a.seed,
        concurrency: a.concurrency,
        requests: a.requests,
        warmup: a.warmup,
        model: a.model,
        api_key: std::env::var(&a.api_key_env)
            .ok()
            .filter(|k| !k.is_empty())
            .map(tokentap::keys::Secret::new),
        fixed_output: a.fixed_output,
        short_max: a.short_max,
        long_min: a.long_min,
        outputs: [o0, o1, o2],
        prompts_per_bucket: a.prompts_per_bucket,
        calibrate: !a.no_calibrate,
        arms: if a.route_header.is_some() {
            a.arms.iter().map(|n| (n.clone(), String::new())).collect()
        } else {
            Vec::new()
        },
        route_header: a.route_header,
        ..Default::default()
    };
    if cfg.route_header.is_some() && cfg.arms.len() != 2 {
        eprintln!("tokentap: --arms takes exactly two route names");
        return ExitCode::from(EXIT_CONFIG);
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(c) => return c,
    };
    rt.block_on(async move {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            eprintln!("\ntokentap bench: stopping; keeping what was measured");
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        match tokentap::bench::run(&cfg, stop).await {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tokentap: bench: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Sim(a) => run_sim(a),
        Command::Report(a) => run_report(a),
        Command::Bench(a) => run_bench(a),
        Command::Demo {
            out,
            gateway_hop,
            seed,
        } => {
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(c) => return c,
            };
            let cfg = tokentap::demo::DemoConfig {
                out,
                hop: gateway_hop,
                seed,
            };
            match rt.block_on(tokentap::demo::run(&cfg)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tokentap: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Check { config } => match Config::load(&config, &Overrides::default()) {
            Ok(c) => {
                println!(
                    "{}: ok — listen {}, admin {}, {} route(s): {}",
                    config.display(),
                    c.listen,
                    c.admin
                        .map(|a| a.to_string())
                        .unwrap_or_else(|| "off".into()),
                    c.routes.len(),
                    c.routes
                        .iter()
                        .map(|r| format!(
                            "{} → {}{}",
                            r.name,
                            r.upstream.to_string().trim_end_matches('/'),
                            r.base_path
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tokentap: config error: {e}");
                ExitCode::from(EXIT_CONFIG)
            }
        },
        Command::Fingerprint => {
            let mut key = Vec::new();
            if std::io::stdin().read_to_end(&mut key).is_err() {
                eprintln!("tokentap: cannot read standard input");
                return ExitCode::FAILURE;
            }
            let key = key.trim_ascii();
            if key.is_empty() {
                eprintln!("tokentap: no key on standard input");
                return ExitCode::from(EXIT_CONFIG);
            }
            println!("{}", tokentap::keys::fingerprint(key));
            ExitCode::SUCCESS
        }
        Command::Serve(a) => {
            let over = Overrides {
                upstream: a.upstream,
                listen: a.listen,
                admin: a.admin,
                log: a.log.map(|p| p.display().to_string()),
            };
            let config = match load(a.config.as_ref(), &over) {
                Ok(c) => c,
                Err(code) => return code,
            };
            init_tracing();
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("tokentap: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            rt.block_on(async move {
                let (main, admin) = match tokentap::serve::bind(&config).await {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("tokentap: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                match tokentap::serve::run(config, main, admin, shutdown_signal()).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("tokentap: {e}");
                        ExitCode::FAILURE
                    }
                }
            })
        }
    }
}
