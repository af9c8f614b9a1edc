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
    /// Print the key fingerprint (sha256:<hex>) of an API key read from standard input, for
    /// `[keys.aliases]`. The key itself is never printed.
    ///
    /// Try: printf %s "$OPENAI_API_KEY" | tokentap fingerprint
    Fingerprint,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
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
