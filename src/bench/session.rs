//! A bench run's session: what every stage of a run carries — the config, the client, how a
//! request is made, the progress lines, the stop flag, the scraper and the run's clock — opened
//! once, after the plan and the model are known.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;

use super::cell::{shared_prefixes, Load};
use super::live::{self, AbortOnDrop, Live};
use super::progress::Progress;
use super::runner::{self, Overhead, Target};
use super::scrape::{self, Scraper};
use super::{BenchConfig, BenchError};

/// What a run carries from its plan to its `run.json`.
pub(crate) struct Session<'a> {
    pub cfg: &'a BenchConfig,
    /// The endpoint under test.
    pub target: Arc<Target>,
    /// How request `i` of a cell is made: the model, the shared prefixes; the scraper's marks.
    pub load: Load<'a>,
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
    pub async fn connect(cfg: &BenchConfig) -> Result<Client, BenchError> {
        let (counters, server) = live::start(cfg).await?.unzip();
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

impl<'a> Session<'a> {
    /// The output folder, this client's overhead, the progress lines, the run's clock, the
    /// scraper; requests name `model`, and the `prefixed` buckets' carry shared prefixes.
    pub async fn open(
        cfg: &'a BenchConfig,
        client: Client,
        model: Arc<str>,
        prefixed: &[&'static str],
        stop: Arc<AtomicBool>,
    ) -> Result<Session<'a>, BenchError> {
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
        let scraper = scrape::start_for(cfg, origin.0).await?;
        let load = Load {
            cfg,
            model,
            prefixes: prefixed
                .iter()
                .map(|&b| (b, shared_prefixes(cfg, b)))
                .collect(),
            scrape: scraper.as_ref().map(|s| s.handle.clone()),
        };
        Ok(Session {
            cfg,
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
