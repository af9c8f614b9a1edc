//! The `tokentap` binary: argument parsing only. Every command's work lives in the library
//! (`tokentap::<command>::cli`), and `tokentap::cli` holds the exit codes: 64 for a bad config or
//! bad arguments, 1 for a failure.

use std::process::ExitCode;

/// jemalloc rather than the system's malloc: a block carries no header of its own, so memory
/// reserved and never written stays unresident (hyper's read buffer for a connection that
/// waits; docs/overhead.md, "Memory per stream").
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::{Parser, Subcommand};
use tokentap::cli::Exit;

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
    Serve(tokentap::serve::Args),
    /// Validate a config file and exit (0 = valid), like `nginx -t`.
    ///
    /// Try: tokentap check --config config/tokentap.toml
    Check(tokentap::check::Args),
    /// The embedded default: simulated engine + simulated gateway hop + tokentap + load, in one
    /// process, ending in a report. Needs nothing else installed; about a minute.
    ///
    /// Try: tokentap demo
    Demo(tokentap::demo::Args),
    /// A simulated OpenAI-compatible engine (continuous-batching cost model) for demos, tests
    /// and dry runs; optionally a simulated gateway hop in front of it.
    ///
    /// Try: tokentap sim --listen 127.0.0.1:8000 --gateway-hop 100±10 --hop-listen 127.0.0.1:4000
    Sim(tokentap::sim::Args),
    /// Load generator: prompt-shape buckets × a concurrency sweep (closed loop) or arrival rates
    /// (open loop), a saturation search, replay of recorded traffic, shared prefixes,
    /// conversations; seeded, with warm-up; writes requests.jsonl, run.json and a summary.
    /// On stderr: an estimate of the run's length before the load (from a probe request per
    /// bucket), a line per cell with the ETA, and a heartbeat line every 10 s without one.
    ///
    /// Try: tokentap bench --target http://127.0.0.1:8080 --out bench-out --concurrency 1,2,4,8
    Bench(Box<tokentap::bench::Args>),
    /// Request records (bench folders, proxy logs, rotated files, several replicas) → tables,
    /// SLO verdicts, provisioning answers, per-key accounting, charts.
    ///
    /// Try: tokentap report tokentap-demo/bench --format html --out report.html
    Report(tokentap::report::Args),
    /// Two runs side by side (bench folders or logs): per cell and API shape, NEW − BASE with
    /// bootstrap 95 % intervals, paired prompt by prompt when both used the same prompt set;
    /// SLO verdict changes, a verdict per metric, mismatches named; a regression gate.
    ///
    /// Try: tokentap compare base-run new-run --fail-on-regression 'ttft_p95:+5%,tpot_p50:+3%'
    Compare(tokentap::compare::Args),
    /// Print the key fingerprint (sha256:<hex>) of an API key read from standard input, for
    /// `[keys.aliases]`. The key itself is never printed.
    ///
    /// Try: printf %s "$OPENAI_API_KEY" | tokentap fingerprint
    Fingerprint,
    /// Ask a running tokentap's admin listener whether it is healthy (`/healthz`) or ready
    /// (`/readyz`): exit 0 if so, 1 if not. For a container's HEALTHCHECK (no curl needed).
    ///
    /// Try: tokentap health --admin 127.0.0.1:9464 --ready
    Health(tokentap::cli::HealthArgs),
}

fn main() -> ExitCode {
    // Bad arguments exit 64, as a bad config does (clap's own status is 2); --help and
    // --version print and exit 0.
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(64)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let exit = match cli.command {
        Command::Serve(a) => tokentap::serve::cli(a),
        Command::Check(a) => match tokentap::check::run(&a) {
            Ok(summary) => {
                tokentap::outln!("{summary}");
                Exit::Ok
            }
            Err(e) => Exit::Usage(format!("config error: {e}")),
        },
        Command::Demo(a) => tokentap::demo::cli(a),
        Command::Sim(a) => tokentap::sim::cli(a),
        Command::Bench(a) => tokentap::bench::cli(*a),
        Command::Report(a) => tokentap::report::cli(a),
        Command::Compare(a) => tokentap::compare::cli(a),
        Command::Fingerprint => tokentap::cli::fingerprint(),
        Command::Health(a) => tokentap::cli::health(&a),
    };
    exit.report()
}
