//! What every command shares on the command line: exit codes (docs/report.md "Exit statuses":
//! 0 ok, 1 failed or a gate said no, 3 nothing to judge, 64 a bad config or bad arguments, like
//! `nginx -t`), the runtime, the shutdown signal, diagnostics on stderr.

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
    /// The command ran but had no evidence for the verdict it was asked for (3): nothing
    /// measured, or nothing a gate could judge. Already reported. A gate fails closed.
    NotJudged,
}

/// The exit status of a verdict without evidence (`Exit::NotJudged`).
pub const NOT_JUDGED: u8 = 3;

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
            Exit::NotJudged => ExitCode::from(NOT_JUDGED),
        }
    }
}

/// Write to standard output. A closed stdout (its reader left: `report … | head -3`) ends the
/// process quietly with status 0, as ripgrep does: nothing more can be shown, and nothing is
/// wrong. Every command writes its output here (`outln!`), never with `print!`, which panics on
/// a closed pipe; `tests/suite/layout.rs` holds that.
pub fn out(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("tokentap: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// `println!` to [`out`]: a closed stdout ends the process quietly.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cli::out("\n")
    };
    ($($t:tt)*) => {
        $crate::cli::out(&format!("{}\n", format_args!($($t)*)))
    };
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
    crate::outln!("{}", crate::keys::fingerprint(key));
    Exit::Ok
}

#[derive(clap::Args)]
pub struct HealthArgs {
    /// The admin listener's address.
    #[arg(long, default_value = crate::config::defaults::ADMIN)]
    pub admin: String,
    /// Ask `/readyz` (503 once shutdown began) instead of `/healthz`.
    #[arg(long)]
    pub ready: bool,
    /// How long to wait for the answer, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub timeout_ms: u64,
}

/// `tokentap health`: one HTTP/1.1 GET to the admin listener; exit 0 on a 200.
pub fn health(a: &HealthArgs) -> Exit {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let path = if a.ready { "/readyz" } else { "/healthz" };
    let timeout = std::time::Duration::from_millis(a.timeout_ms.max(1));
    let Some(addr) = a.admin.to_socket_addrs().ok().and_then(|mut v| v.next()) else {
        return Exit::Usage(format!(
            "--admin {:?} is not an address like 127.0.0.1:9464",
            a.admin
        ));
    };
    let answer = (|| -> std::io::Result<String> {
        let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
        )?;
        let mut head = [0u8; 64];
        let n = s.read(&mut head)?;
        Ok(String::from_utf8_lossy(&head[..n]).into_owned())
    })();
    match answer {
        Ok(h) if h.starts_with("HTTP/1.1 200") => {
            crate::outln!("{path}: ok");
            Exit::Ok
        }
        Ok(h) => Exit::Failed(format!(
            "http://{addr}{path}: {}",
            h.lines().next().unwrap_or("no answer")
        )),
        Err(e) => Exit::Failed(format!("http://{addr}{path}: {e}")),
    }
}
