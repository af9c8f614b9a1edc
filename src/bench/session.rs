//! A bench run's session: what every stage of a run carries — the config, the client, how a
//! request is made, the progress lines, the stop flag, the scraper and the run's clock — opened
//! once the plan is made, closed after the load into the figures the scraper adds.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;

use super::cell::{shared_prefixes, Load, Out};
use super::info::{Overhead, ScrapeInfo};
use super::live::{self, AbortOnDrop};
use super::plan::Plan;
use super::progress::Progress;
use super::runner::{self, Target};
use super::scrape::{self, Scraper};
use super::{slices, steady, BenchConfig, BenchError};

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
    /// `--scrape`: finished when the session closes.
    scraper: Option<Scraper>,
    /// `--metrics-listen`: its server stops with the session.
    _live: Option<AbortOnDrop>,
}

impl<'a> Session<'a> {
    /// The client, the model (the plan's replay gets it where it named none), the output
    /// folder, this client's overhead, the scraper.
    pub async fn open(
        cfg: &'a BenchConfig,
        plan: &mut Plan,
        stop: Arc<AtomicBool>,
    ) -> Result<Session<'a>, BenchError> {
        let (counters, live) = live::start(cfg).await?.unzip();
        let target = Target::new(
            &cfg.target,
            cfg.api_key.as_ref().map(|k| k.expose().clone()),
            cfg.headers.clone(),
        )
        .map_err(|e| BenchError::Target(cfg.target.clone(), e))?;
        let target = Arc::new(target.with_live(counters.clone()));
        let model = plan.model(cfg, &target).await?;
        std::fs::create_dir_all(&cfg.out).map_err(|source| BenchError::Io {
            path: cfg.out.display().to_string(),
            source,
        })?;
        let started_at = now_rfc3339();
        let overhead = match cfg.calibrate {
            true => Some(runner::client_overhead().await),
            false => None,
        };
        let progress = Progress::new(cfg.quiet, cfg.progress_every).with_live(counters);
        let origin = (Instant::now(), SystemTime::now());
        let scraper = scrape::start_for(cfg, origin.0).await?;
        let prefixes = plan.prefixed().into_iter();
        let load = Load {
            cfg,
            model,
            prefixes: prefixes.map(|b| (b, shared_prefixes(cfg, b))).collect(),
            scrape: scraper.as_ref().map(|s| s.handle.clone()),
        };
        Ok(Session {
            cfg,
            target,
            load,
            progress,
            stop,
            origin,
            started_at,
            overhead,
            scraper,
            _live: live,
        })
    }

    /// After the load: the scraper finished, each cell's plateau and time slices found, the
    /// engine's figures summarised per cell; what `run.json` says of the scraping.
    pub async fn close(&mut self, out: &mut Out) -> Option<ScrapeInfo> {
        let scraped = match self.scraper.take() {
            Some(s) => Some(s.finish().await),
            None => None,
        };
        steady::attach(self.cfg, out, self.origin.1, scraped.as_ref());
        slices::attach(self.cfg, out, self.origin.1, scraped.as_ref());
        scraped.map(|c| scrape::summarise(self.cfg, &c, &mut out.cells))
    }
}

/// Now, as `run.json` writes times.
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}
