//! What every command shares on the command line: exit codes (64 for a bad config or bad
//! arguments, like `nginx -t`), the runtime, the shutdown signal, diagnostics on stderr.

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug)]
pub enum Exit {
    Ok,
    /// A bad config or bad arguments (EX_USAGE, 64), with the message for stderr.
    Usage(String),
    /// The command ran and failed (1), with the message for stderr.
    Failed(String),
    /// The command ran and its result says no (1): e.g. an SLO missed. Already reported.
    No,
}

impl Exit {
    /// Print the message, if any, and give the process's exit code.
    pub fn report(self) -> ExitCode {
        match self {
            Exit::Ok => ExitCode::SUCCESS,
            Exit::Usage(m) => {
                eprintln!("tokentap: {m}");
                ExitCode::from(64)
            }
            Exit::Failed(m) => {
                eprintln!("tokentap: {m}");
                ExitCode::FAILURE
            }
            Exit::No => ExitCode::FAILURE,
        }
    }
}

/// A multi-threaded runtime, or the command's failure.
pub fn runtime() -> Result<tokio::runtime::Runtime, Exit> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Exit::Failed(format!("cannot start the runtime: {e}")))
}

/// SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
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

/// Diagnostics on stderr at `TOKENTAP_LOG` (default info).
pub fn init_tracing() {
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

/// `tokentap fingerprint`: the key on standard input → `sha256:<hex>`; the key is never printed.
pub fn fingerprint() -> Exit {
    use std::io::Read;
    let mut key = Vec::new();
    if std::io::stdin().read_to_end(&mut key).is_err() {
        return Exit::Failed("cannot read standard input".into());
    }
    let key = key.trim_ascii();
    if key.is_empty() {
        return Exit::Usage("no key on standard input".into());
    }
    println!("{}", crate::keys::fingerprint(key));
    Exit::Ok
}
