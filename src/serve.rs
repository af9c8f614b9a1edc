//! `tokentap serve`: wire config, clients, sink, log writer, admin and the proxy listener, run
//! until shutdown, then drain, flush the log and return.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch, Semaphore};
use tokio::task::JoinHandle;

use crate::admin::{self, Admin};
use crate::config::Config;
use crate::proxy::{client, State};
use crate::route::RouteTable;
use crate::server;
use crate::sink::log::{self, LogCounters};
use crate::sink::Sink;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Client(#[from] client::ClientError),
    #[error("listener TLS: {0}")]
    Tls(#[from] server::TlsError),
    #[error("request log {path}: {source}")]
    Log {
        path: String,
        source: std::io::Error,
    },
    #[error("metrics setup: {0}")]
    Metrics(#[from] metrics_exporter_prometheus::BuildError),
}

/// How long the shutdown waits, after the last connection closed, for records still being made.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Bind the proxy and admin listeners named in the config.
pub async fn bind(config: &Config) -> Result<(TcpListener, Option<TcpListener>), ServeError> {
    let main = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
    let admin = match config.admin {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind { addr, source })?,
        ),
        None => None,
    };
    Ok((main, admin))
}

/// Run the proxy on bound listeners until `shutdown` resolves; returns after the drain, with
/// every record written and flushed.
pub async fn run(
    config: Config,
    main: TcpListener,
    admin_listener: Option<TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let config = Arc::new(config);
    let tls = config.tls.as_ref().map(server::tls_acceptor).transpose()?;
    let opened: Vec<Arc<std::sync::atomic::AtomicU64>> =
        config.routes.iter().map(|_| Arc::default()).collect();
    let clients = config
        .routes
        .iter()
        .zip(&opened)
        .map(|(r, o)| client::build(r, config.timeouts.connect, o.clone()))
        .collect::<Result<Vec<_>, _>>()?;

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
    let sink = Arc::new(Sink::new(config.clone(), log_tx, counters, &opened)?);
    let state = Arc::new(State {
        config: config.clone(),
        sink: sink.clone(),
        routes: RouteTable::new(&config.routes),
        clients,
        limit: Arc::new(Semaphore::new(config.limits.max_concurrent)),
        shadow: Arc::new(Semaphore::new(config.experiment.max_shadow_in_flight)),
        rng: std::sync::Mutex::new(fastrand::Rng::with_seed(config.experiment.seed)),
    });

    let admin = Arc::new(Admin {
        sink: sink.clone(),
        ready: AtomicBool::new(true),
        started: tokio::time::Instant::now(),
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

    // Histogram values wait in the recorder until an upkeep folds them in: run it whether or not
    // anything scrapes, so memory stays flat with the admin listener off.
    // Pooled upstream connections the upstream closed are let go on the same tick.
    let upkeep = {
        let sink = sink.clone();
        let clients = state.clients.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            tick.tick().await; // the first tick is immediate: nothing to do yet
            loop {
                tick.tick().await;
                sink.metrics.run_upkeep();
                for c in &clients {
                    c.prune();
                }
            }
        })
    };
    tracing::info!(
        listen = %main.local_addr().map(|a| a.to_string()).unwrap_or_default(),
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
    server::run(
        main,
        state.clone(),
        tls,
        shutdown,
        config.timeouts.shutdown_grace,
    )
    .await;

    upkeep.abort();
    // Every connection is closed; records still being made (a stream's is made just after its
    // last write; experiment copies run on their own) are waited for, briefly.
    if !sink.settle(SETTLE).await {
        tracing::warn!(
            in_flight = sink.in_flight(),
            "shutdown: requests still unrecorded after the drain; closing the log"
        );
    }
    // Let the writer empty its queue and stop.
    sink.close_log().await;
    drop(state);
    if let Some(w) = writer {
        let _ = tokio::task::spawn_blocking(move || w.join()).await;
    }
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
        let (main, admin) = bind(&config).await?;
        let addr = main.local_addr().map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
        let admin_addr = admin.as_ref().and_then(|l| l.local_addr().ok());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(run(config, main, admin, async move {
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
