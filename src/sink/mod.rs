//! Where finished requests go: the record is built once, then fed to the metrics, the live
//! stats and the JSONL writer's bounded queue.
//!
//! Runs on the data path at the end of each request, so it never blocks: a full queue drops the
//! record and counts it; nothing here can fail a request.

pub mod log;
pub mod metrics;
pub mod stats;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::config::Config;
use crate::keys::KeyIdentity;
use crate::meter::body::End;
use crate::meter::{build_record, Ctx, Meter, Outcome};

/// The route name recorded for requests that matched no route.
pub const UNROUTED: &str = "unrouted";

/// Per-route live state shared by requests.
pub struct RouteCounters {
    pub name: String,
    pub in_flight: AtomicU64,
    /// Connections opened to the route's upstream (shared with its client; none for `unrouted`).
    pub upstream_opened: Option<Arc<AtomicU64>>,
}

pub struct Sink {
    pub config: Arc<Config>,
    pub routes: Vec<RouteCounters>,
    pub metrics: metrics::Metrics,
    pub stats: stats::Stats,
    log_tx: Option<mpsc::Sender<log::LogMsg>>,
    pub log_counters: Arc<log::LogCounters>,
    pub records_dropped: AtomicU64,
    pub records_total: AtomicU64,
    /// Experiment copies skipped because `max_shadow_in_flight` were already running.
    pub shadow_skipped: AtomicU64,
    /// Set when the shutdown grace period is over: streams dropped after this were cut by us.
    pub shutdown_cut: AtomicBool,
    /// Key fingerprints and aliases (`key_id`s are made with the record, or up front when an
    /// experiment routes by key).
    pub keys: KeyIdentity,
}

impl Sink {
    pub fn new(
        config: Arc<Config>,
        log_tx: Option<mpsc::Sender<log::LogMsg>>,
        log_counters: Arc<log::LogCounters>,
        upstream_opened: &[Arc<AtomicU64>],
    ) -> Result<Self, metrics_exporter_prometheus::BuildError> {
        // One entry per configured route, plus `unrouted` for requests no route matched.
        let names: Vec<String> = config
            .routes
            .iter()
            .map(|r| r.name.clone())
            .chain(std::iter::once(UNROUTED.to_owned()))
            .collect();
        let routes = names
            .iter()
            .enumerate()
            .map(|(i, n)| RouteCounters {
                name: n.clone(),
                in_flight: AtomicU64::new(0),
                upstream_opened: upstream_opened.get(i).cloned(),
            })
            .collect();
        let keys = KeyIdentity::new(config.key_aliases.clone());
        let metrics = metrics::Metrics::new(&config)?;
        let stats = stats::Stats::new(names.into_iter());
        Ok(Self {
            config,
            routes,
            metrics,
            stats,
            log_tx,
            log_counters,
            records_dropped: AtomicU64::new(0),
            records_total: AtomicU64::new(0),
            shadow_skipped: AtomicU64::new(0),
            shutdown_cut: AtomicBool::new(false),
            keys,
        })
    }

    /// The Prometheus exposition, with the writer's counters brought up to date.
    pub fn render_metrics(&self) -> String {
        // NB: the gauge is read from the counters at scrape time; setting it per request from
        // racing finishes could leave it stale.
        for r in &self.routes {
            self.metrics
                .set_in_flight(&r.name, r.in_flight.load(Ordering::Relaxed));
            if let Some(opened) = &r.upstream_opened {
                self.metrics
                    .set_upstream_opened(&r.name, opened.load(Ordering::Relaxed));
            }
        }
        self.metrics.sync_counters(
            self.records_dropped.load(Ordering::Relaxed),
            self.log_counters.write_errors.load(Ordering::Relaxed),
            self.shadow_skipped.load(Ordering::Relaxed),
        );
        self.metrics.render()
    }

    /// Ask the writer to write what is queued and stop (after the last request finished).
    pub async fn close_log(&self) {
        if let Some(tx) = &self.log_tx {
            let _ = tx.send(log::LogMsg::Close).await;
        }
    }

    /// Requests admitted whose record is not yet queued, over all routes.
    pub fn in_flight(&self) -> u64 {
        self.routes
            .iter()
            .map(|r| r.in_flight.load(Ordering::Acquire))
            .sum()
    }

    /// Wait (at most `limit`) until every admitted request has its record queued: a finished
    /// stream's record is made by a task spawned after its last write, which may still be
    /// pending when its connection has closed. True when none is left.
    pub async fn settle(&self, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        while self.in_flight() > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        true
    }

    /// Admit a request on a route: returns the in-flight count including it.
    pub fn admit(&self, route: usize) -> u64 {
        self.routes[route].in_flight.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Finalize one request. Called exactly once per request (see `meter::body::Finalizer`).
    pub fn finish(&self, mut ctx: Ctx, mut meter: Meter, end: End, now: Instant) -> (u16, Outcome) {
        if let Some(key) = ctx.key.take() {
            ctx.key_id = ctx.key_id.or_else(|| Some(self.keys.id_of(key.expose())));
        }
        let end = match end {
            End::Dropped if !meter.done && self.shutdown_cut.load(Ordering::Relaxed) => {
                End::Outcome(
                    Outcome::ShutdownCut,
                    "cut at shutdown grace deadline".into(),
                )
            }
            e => e,
        };
        let route_idx = ctx.route;
        let rec = build_record(
            ctx,
            &mut meter,
            end,
            now,
            &self.routes[route_idx].name,
            &self.config.buckets,
        );
        self.metrics.observe(&rec, meter.itl_samples());
        self.stats.observe(route_idx, &rec, meter.itl_samples());
        self.records_total.fetch_add(1, Ordering::Relaxed);
        let result = (rec.status, rec.outcome);
        if let Some(tx) = &self.log_tx {
            if tx.try_send(log::LogMsg::Record(Box::new(rec))).is_err() {
                self.records_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Last: a request leaves the in-flight count only once its record is queued (the
        // shutdown waits on this count before it closes the log).
        self.routes[route_idx]
            .in_flight
            .fetch_sub(1, Ordering::Release);
        result
    }
}
