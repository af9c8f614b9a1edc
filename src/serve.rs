//! `tokentap serve`: wire config, clients, sink, log writer, admin and the proxy listener, run
//! until shutdown (reloading the config on SIGHUP or `POST /reload`), then drain, flush the log
//! and return.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::admin::{self, Admin};
use crate::config::{Config, Overrides};
use crate::listen::{self, Backlog, Bound};
use crate::proxy::{client, Live, Shared, State};
use crate::reload::{self, Reloader};
use crate::server;
use crate::sink::log::{self, LogCounters};
use crate::sink::metrics::Metrics;
use crate::sink::Sink;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr} ({which}): {source}")]
    Bind {
        /// `listen.addr` (the proxy) or `admin.addr` (the admin listener).
        which: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Client(#[from] client::ClientError),
    #[error("listener TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("request log {path}: {source}")]
    Log {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Export(#[from] crate::sink::export::ExportError),
    #[error("metrics setup: {0}")]
    Metrics(#[from] metrics_exporter_prometheus::BuildError),
}

/// How long the shutdown waits, after the last connection closed, for records still being made.
const SETTLE: Duration = Duration::from_secs(1);

/// Bind the proxy and admin listeners named in the config: the proxy's with `listen.backlog`,
/// the admin's with the system's maximum (both the system's maximum by default).
pub async fn bind(config: &Config) -> Result<(Bound, Option<Bound>), ServeError> {
    let backlog = Backlog::resolve(config.backlog);
    if let (Some(asked), Some(got)) = (config.backlog, backlog.effective) {
        if got < asked {
            tracing::warn!(
                asked,
                got,
                "listen.backlog is above the system's maximum (net.core.somaxconn): the kernel \
                 caps the accept queue at {got}"
            );
        }
    }
    let main = listen::bind_stamped(config.listen, backlog)
        .await
        .map_err(|source| ServeError::Bind {
            which: "listen.addr, the proxy",
            addr: config.listen,
            source,
        })?;
    let admin = match config.admin {
        Some(addr) => Some(
            listen::bind(addr, Backlog::resolve(None)).map_err(|source| ServeError::Bind {
                which: "admin.addr, the admin listener",
                addr,
                source,
            })?,
        ),
        None => None,
    };
    Ok((main, admin))
}

/// The listeners whose accept queues the admin's `/metrics` shows.
fn watched(main: &Bound, admin: Option<&Bound>) -> listen::Watch {
    let one = |name, b: &Bound| {
        let addr = b.listener.local_addr().ok()?;
        Some(listen::Watched {
            name,
            addr,
            backlog: b.backlog,
        })
    };
    let listeners = one("proxy", main)
        .into_iter()
        .chain(admin.and_then(|a| one("admin", a)))
        .collect();
    listen::Watch::new(listeners)
}

/// Where a running config came from, so a reload can read it again.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// The config file; `None` when serve started from flags alone (nothing to re-read).
    pub path: Option<PathBuf>,
    pub over: Overrides,
}

/// Run the proxy on bound listeners until `shutdown` resolves; returns after the drain, with
/// every record written and flushed.
pub async fn run(
    config: Config,
    origin: Origin,
    main: Bound,
    admin_listener: Option<Bound>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let config = Arc::new(config);
    // The host's boot id, read once before any request (records of the tap across pods carry it).
    let _ = crate::meter::boot_id();
    let listeners = watched(&main, admin_listener.as_ref());
    let backlog = main.backlog.effective.unwrap_or(main.backlog.asked);
    let main = main.listener;
    let admin_listener = admin_listener.map(|b| b.listener);
    let tls = config.tls.as_ref().map(crate::tls::acceptor).transpose()?;
    let listen = main.local_addr().map(|a| a.to_string()).unwrap_or_default();

    let (sink, drains) = open_sink(&config)?;
    let shared = Arc::new(Shared::new(sink.clone()));
    let live = Arc::new(Live::new(
        State::new(config.clone(), shared.clone(), None)?,
        tls,
    ));
    let reloader = Arc::new(Reloader::new(origin.path, origin.over, live.clone()));
    let sighup = tokio::spawn(reload::on_sighup(reloader.clone()));

    let admin = Arc::new(Admin {
        reloader,
        ready: AtomicBool::new(true),
        started: crate::rxstamp::now(),
        listeners,
    });
    let admin_addr = admin_listener
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map_or_else(|| "off".to_owned(), |a| a.to_string());
    let (admin_stop_tx, mut admin_stop_rx) = watch::channel(false);
    let admin_task = admin_listener.map(|l| {
        let admin = admin.clone();
        tokio::spawn(admin::run(l, admin, async move {
            let _ = admin_stop_rx.wait_for(|stop| *stop).await;
        }))
    });

    let upkeep = spawn_upkeep(live.clone());
    tracing::info!(
        listen = %listen,
        backlog,
        admin = %admin_addr,
        routes = config.routes.len(),
        log = %config.log.path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "off".into()),
        "tokentap serving"
    );
    let ready = admin.clone();
    let shutdown = async move {
        shutdown.await;
        ready.ready.store(false, Ordering::Relaxed);
    };
    server::run(main, live.clone(), shutdown).await;

    upkeep.abort();
    sighup.abort();
    // Every connection is closed; records still being made (a stream's is made just after its
    // last write; experiment copies run on their own) are waited for, briefly.
    if !live.settle(SETTLE).await {
        tracing::warn!(
            in_flight = live.in_flight(),
            "shutdown: requests still unrecorded after the drain; closing the log"
        );
    }
    // Let the writer empty its queue and stop.
    sink.close_log().await;
    drop(live);
    drop(admin);
    drains.wait().await;
    let _ = admin_stop_tx.send(true);
    if let Some(t) = admin_task {
        let _ = t.await;
    }
    tracing::info!(
        records = sink.records_total.load(Ordering::Relaxed),
        dropped = sink.records_dropped.load(Ordering::Relaxed),
        "tokentap stopped"
    );
    Ok(())
}

/// The sink with every output the config names: the request log's writer thread, the OTLP
/// exporter, the ClickHouse inserter. Returns it with what shutdown waits for.
fn open_sink(config: &Config) -> Result<(Arc<Sink>, Drains), ServeError> {
    let counters = Arc::new(LogCounters::default());
    let (log_tx, writer) = match &config.log.path {
        Some(path) => {
            let (tx, handle) =
                log::spawn(&config.log, path, counters.clone()).map_err(|source| {
                    ServeError::Log {
                        path: path.display().to_string(),
                        source,
                    }
                })?;
            (Some(tx), Some(handle))
        }
        None => (None, None),
    };
    let metrics = Metrics::new(
        config.limits.max_key_labels,
        config.limits.max_model_labels,
        &config.slo,
    )?;
    let mut sink = Sink::new(metrics, log_tx, counters);
    let mut exporter = None;
    if let Some(o) = &config.otlp {
        let (otlp, task) = crate::sink::otlp::spawn(o)?;
        sink = sink.with_otlp(otlp);
        exporter = Some((task, o.timeout));
    }
    let mut inserter = None;
    if let Some(c) = &config.clickhouse {
        let (ch, task) = crate::sink::clickhouse::spawn(c)?;
        sink = sink.with_clickhouse(ch);
        inserter = Some((task, c.timeout));
    }
    let drains = Drains {
        writer,
        exporter,
        inserter,
    };
    Ok((Arc::new(sink), drains))
}

/// The sink's background work, waited for at shutdown once nothing can make a record.
struct Drains {
    /// The request log's writer thread.
    writer: Option<std::thread::JoinHandle<()>>,
    /// The OTLP exporter and its `otlp.timeout_ms`.
    exporter: Option<(JoinHandle<()>, Duration)>,
    /// The ClickHouse inserter and its `clickhouse.timeout_ms`.
    inserter: Option<(JoinHandle<()>, Duration)>,
}

impl Drains {
    /// Wait for the log writer to stop; give the exporters their last attempts.
    async fn wait(self) {
        if let Some(w) = self.writer {
            let _ = tokio::task::spawn_blocking(move || w.join()).await;
        }
        if let Some((task, timeout)) = self.exporter {
            // One attempt per batch left, each within `otlp.timeout_ms`; then the rest is let go.
            if tokio::time::timeout(timeout * 4, task).await.is_err() {
                tracing::warn!(
                    "shutdown: the OTLP exporter did not finish; spans still queued are lost"
                );
            }
        }
        if let Some((task, timeout)) = self.inserter {
            // The same for rows: one attempt per batch left, then the rest is let go.
            if tokio::time::timeout(timeout * 4, task).await.is_err() {
                tracing::warn!(
                    "shutdown: the ClickHouse inserter did not finish; rows still queued are lost"
                );
            }
        }
    }
}

/// Histogram values wait in the recorder until an upkeep folds them in: run it whether or not
/// anything scrapes, so memory stays flat with the admin listener off. Pooled upstream
/// connections the upstream closed are let go on the same tick.
fn spawn_upkeep(live: Arc<Live>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await; // the first tick is immediate: nothing to do yet
        loop {
            tick.tick().await;
            live.shared.sink.metrics.run_upkeep();
            // (A replaced generation's clients go with its last request.)
            let state = live.state();
            for t in state.routes.iter().filter_map(|r| r.target.as_ref()) {
                t.client.prune();
            }
        }
    })
}

/// A proxy running in the background (the demo and the tests use it).
pub struct Running {
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// Start on the config's addresses (use port 0 for ephemeral ports).
    pub async fn start(config: Config) -> Result<Running, ServeError> {
        Self::start_from(config, Origin::default()).await
    }

    /// Start on a config read from `origin`, which a reload reads again.
    pub async fn start_from(config: Config, origin: Origin) -> Result<Running, ServeError> {
        let (main, admin) = bind(&config).await?;
        let addr = main
            .listener
            .local_addr()
            .map_err(|source| ServeError::Bind {
                which: "listen.addr, the proxy",
                addr: config.listen,
                source,
            })?;
        let admin_addr = admin.as_ref().and_then(|b| b.listener.local_addr().ok());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(run(config, origin, main, admin, async move {
            let _ = rx.await;
        }));
        Ok(Running {
            addr,
            admin: admin_addr,
            stop: Some(tx),
            task,
        })
    }

    /// Begin shutdown without waiting.
    pub fn trigger_shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Shut down and wait for the drain and the log flush.
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        self.trigger_shutdown();
        match self.task.await {
            Ok(r) => r,
            Err(_) => Ok(()),
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// TOML config file (see config/tokentap.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Upstream base URL. Without a file (or a file without routes): one route, named
    /// `default`, on every path; with a file's routes, it replaces the first route's upstream.
    #[arg(long)]
    pub upstream: Option<String>,
    /// Proxy listen address [default: 0.0.0.0:8080].
    #[arg(long)]
    pub listen: Option<String>,
    /// Admin listen address for /metrics /healthz /readyz /stats [default: 127.0.0.1:9464];
    /// "off" disables it.
    #[arg(long)]
    pub admin: Option<String>,
    /// Request log (JSONL) path [default: tokentap.jsonl]; "-" writes records to stdout (one
    /// JSON line each, for a container's log collector); "off" disables it.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// The proxy listener's accept queue (listen.backlog) [default: the system's maximum,
    /// net.core.somaxconn].
    #[arg(long, value_name = "N")]
    pub backlog: Option<u64>,
    /// Add `x-tokentap-join: <record id>` to what the route forwards (its `join_header`): this
    /// tokentap is in front of a gateway, and another behind it records the id (docs/tap.md).
    /// With a file's routes, the first route's.
    #[arg(long)]
    pub join_header: bool,
    /// Whose `x-tokentap-join` the route records as `join_id` (its `join_sources`): addresses
    /// or CIDR blocks [default: 127.0.0.0/8,::1]. From anyone else the header is taken off and
    /// not recorded. With a file's routes, the first route's.
    #[arg(long, value_name = "CIDR,...", value_delimiter = ',')]
    pub join_sources: Option<Vec<String>>,
}

/// `tokentap serve`: load the config (errors exit 64 before any port is bound), serve until
/// SIGTERM or Ctrl-C, drain, flush.
pub fn cli(a: Args) -> crate::cli::Exit {
    use crate::cli::Exit;
    let over = crate::config::Overrides {
        upstream: a.upstream,
        listen: a.listen,
        admin: a.admin,
        log: a.log.map(|p| p.display().to_string()),
        backlog: a.backlog,
        join_header: a.join_header,
        join_sources: a.join_sources,
    };
    let loaded = match &a.config {
        Some(p) => Config::load(p, &over),
        None => Config::from_flags(&over),
    };
    let origin = Origin {
        path: a.config,
        over,
    };
    let config = match loaded {
        Ok(c) => c,
        Err(e) => return Exit::Usage(format!("config error: {e}")),
    };
    crate::cli::init_tracing();
    let rt = match crate::cli::runtime() {
        Ok(rt) => rt,
        Err(e) => return e,
    };
    rt.block_on(async move {
        let (main, admin) = match bind(&config).await {
            Ok(l) => l,
            Err(e) => return Exit::Failed(e.to_string()),
        };
        match run(config, origin, main, admin, crate::cli::shutdown_signal()).await {
            Ok(()) => Exit::Ok,
            Err(e) => Exit::Failed(e.to_string()),
        }
    })
}
