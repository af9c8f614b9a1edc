//! A bench run's session: what every stage of a run carries — the client, how a request is
//! made, the progress lines, the stop flag, the scraper and the run's clock — opened once, after
//! the plan and the model are known. It holds no setting: a stage is handed the ones it reads.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;

use super::cell::{shared_prefixes, Load};
use super::live::{self, AbortOnDrop, Live};
use super::model::settings::{Common, Experiment};
use super::progress::Progress;
use super::runner::{self, Overhead, Target};
use super::scrape::{self, Scraper};
use super::BenchError;

/// What a run carries from its plan to its `run.json`: the means of sending and watching the
/// load, and no setting (each stage is handed the settings it reads).
pub(crate) struct Session {
    /// The endpoint under test.
    pub target: Arc<Target>,
    /// How request `i` of a cell is made: the model, the shared prefixes; the scraper's marks.
    pub load: Load,
    pub progress: Progress,
    /// Set by Ctrl-C: the run ends early, keeping what was measured.
    pub stop: Arc<AtomicBool>,
    /// The run's clock: scrapes and plateaus are in ms since here (and its wall-clock time).
    pub origin: (Instant, SystemTime),
    /// `started_at` in `run.json`.
    pub started_at: String,
    /// What this client adds to TTFT (none with `--no-calibrate`).
    pub overhead: Option<Overhead>,
    /// `--scrape`: finished after the load.
    pub scraper: Option<Scraper>,
    /// `--metrics-listen`: its server stops with the session.
    _live: Option<AbortOnDrop>,
}

/// The endpoint under test, its requests counted by `--metrics-listen`'s counters.
pub(crate) struct Client {
    pub target: Arc<Target>,
    counters: Option<Arc<Live>>,
    server: Option<AbortOnDrop>,
}

impl Client {
    /// `--metrics-listen`'s server started, the target's client made.
    pub async fn connect(cfg: &Common) -> Result<Client, BenchError> {
        let (counters, server) = live::start(cfg.metrics_listen.as_deref(), cfg.quiet)
            .await?
            .unzip();
        let target = Target::new(
            &cfg.target,
            cfg.api_key.as_ref().map(|k| k.expose().clone()),
            cfg.headers.clone(),
        )
        .map_err(|e| BenchError::Target(cfg.target.clone(), e))?;
        Ok(Client {
            target: Arc::new(target.with_live(counters.clone())),
            counters,
            server,
        })
    }
}

/// What requests carry besides their prompt: the model, and the experiment's arms (none for a
/// load without).
pub(crate) struct Requests<'p> {
    pub model: Arc<str>,
    /// The buckets whose requests carry shared prefixes.
    pub prefixed: &'p [&'static str],
    pub experiment: Option<&'p Experiment>,
}

impl Session {
    /// The output folder, this client's overhead, the progress lines, the run's clock, the
    /// scraper; requests are made as `requests` says.
    pub async fn open(
        cfg: &Common,
        client: Client,
        requests: Requests<'_>,
        stop: Arc<AtomicBool>,
    ) -> Result<Session, BenchError> {
        std::fs::create_dir_all(&cfg.out).map_err(|source| BenchError::Io {
            path: cfg.out.display().to_string(),
            source,
        })?;
        let started_at = now_rfc3339();
        let overhead = match cfg.calibrate {
            true => Some(runner::client_overhead().await),
            false => None,
        };
        let progress = Progress::new(cfg.quiet, cfg.progress_every).with_live(client.counters);
        let origin = (Instant::now(), SystemTime::now());
        let scraper =
            scrape::start_for((&cfg.scrape, &cfg.target), (cfg.quiet, &cfg.out), origin.0).await?;
        let load = Load {
            model: requests.model,
            api: cfg.api,
            fixed: cfg.fixed_output,
            stream: cfg.stream,
            experiment: requests.experiment.cloned().unwrap_or_default(),
            prefixes: requests
                .prefixed
                .iter()
                .map(|&b| (b, shared_prefixes(&cfg.prompts, cfg.seed, b)))
                .collect(),
            scrape: scraper.as_ref().map(|s| s.handle.clone()),
        };
        Ok(Session {
            target: client.target,
            load,
            progress,
            stop,
            origin,
            started_at,
            overhead,
            scraper,
            _live: client.server,
        })
    }
}

/// Now, as `run.json` writes times.
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}
