//! `run.json` assembled once the load is over: the session's knobs and clock, the plan's prompts
//! and mode, the cells (with their plateaus, time slices and the engine's figures), what the
//! load found and what was scraped.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::cell::Out;
use super::dataset::Chosen;
use super::info::{BucketInfo, LoadInfo, RunInfo, ScrapeInfo, TokenStats};
use super::plan::Plan;
use super::search::{SaturationInfo, Until};
use super::session::Session;
use super::{scrape, slices, steady, BenchConfig};

/// What `run.json` says of a load besides its cells: the search's findings, the replay's
/// account.
#[derive(Default)]
pub(crate) struct Findings {
    pub saturation: BTreeMap<String, SaturationInfo>,
    pub replay: Option<super::replay::ReplayInfo>,
}

impl RunInfo {
    /// `run.json` once the load is over: the session's knobs and clock, the plan's prompts and
    /// mode, the cells (taken from `out`; the records stay), what the load found and scraped.
    pub(crate) fn of(
        s: &Session<'_>,
        plan: &Plan,
        found: Findings,
        scrape: Option<ScrapeInfo>,
        out: &mut Out,
    ) -> RunInfo {
        let cfg = s.cfg;
        let (dataset, prompt_set_sha256) = plan.source();
        let interrupted = s.stop.load(Ordering::Relaxed);
        let verdict = verdict_of(cfg, plan, &out.cells, interrupted);
        let stall_share = super::stall::run_share(&out.cells);
        RunInfo {
            tool: "tokentap bench",
            tool_version: env!("CARGO_PKG_VERSION"),
            target: cfg.target.clone(),
            model: s.load.model.to_string(),
            dataset,
            seed: cfg.seed,
            prompt_set_sha256,
            fixed_output: cfg.fixed_output,
            concurrency: cfg.concurrency.clone(),
            requests_per_cell: cfg.requests,
            warmup_per_cell: cfg.warmup,
            buckets: plan.chosen().iter().map(BucketInfo::of).collect(),
            started_at: s.started_at.clone(),
            ended_at: super::session::now_rfc3339(),
            interrupted,
            client_overhead_ttft_ms: s.overhead.clone(),
            load: LoadInfo::of(cfg, plan),
            cells: std::mem::take(&mut out.cells),
            saturation: found.saturation,
            replay: found.replay,
            scrape,
            hardware: (cfg.peak_bandwidth.is_some() || cfg.peak_flops.is_some()).then(|| {
                crate::report::engine::Hardware {
                    gpu: cfg.gpu.clone(),
                    peak_bandwidth_bytes_s: cfg.peak_bandwidth,
                    peak_flops: cfg.peak_flops,
                }
            }),
            runs: (plan.runs() > 1).then_some(plan.runs()),
            spread: match plan.runs() {
                0 | 1 => Vec::new(),
                _ => crate::spread::as_written(&out.records),
            },
            experiment: experiment(cfg),
            arm_resources: Vec::new(),
            stall_share,
            verdict,
        }
    }
}

/// `run.json`'s `experiment`, when the run has arms.
fn experiment(cfg: &BenchConfig) -> Option<super::arms::ExperimentInfo> {
    if cfg.arms.len() < 2 {
        return None;
    }
    let arms: Vec<String> = cfg.arms.iter().map(|a| a.0.clone()).collect();
    Some(super::arms::ExperimentInfo {
        baseline: super::arms::baseline(&arms, cfg.baseline.as_deref()),
        arms,
        order: "balanced-latin-square",
        route_header: cfg.route_header.clone(),
        cache_salt: cfg.cache_salt,
    })
}

/// The run's verdict: its cells by the rule (`verdict::judge`), with the planned cells it could
/// not measure — a named bucket without prompts, the cells a stop left unrun — and the cells
/// whose own lag passed its bound (`stall::warnings`).
fn verdict_of(
    cfg: &BenchConfig,
    plan: &Plan,
    cells: &[super::CellInfo],
    interrupted: bool,
) -> super::verdict::RunVerdict {
    let mut unmeasured = plan.unmeasurable();
    if interrupted {
        match plan.planned_cells() {
            Some(n) if n > cells.len() => unmeasured.push(format!(
                "interrupted: {} of {n} planned cells not measured",
                n - cells.len()
            )),
            _ => {}
        }
    }
    let rules = super::verdict::Rules {
        search: matches!(plan, Plan::Search { .. }),
        max_error_rate: cfg.max_error_rate,
        unmeasured,
    };
    let mut v = super::verdict::judge(cells, &rules);
    // bench's own lag: a warning beside the verdict, never a change of its status.
    v.client_lag = super::stall::warnings(cells);
    v
}

impl LoadInfo {
    /// The load's knobs as given, and its mode as planned.
    fn of(cfg: &BenchConfig, plan: &Plan) -> LoadInfo {
        let turns = matches!(plan, Plan::Conversations { .. });
        LoadInfo {
            mode: plan.mode(),
            request_rates: cfg.request_rates.clone(),
            arrivals: (!cfg.request_rates.is_empty()).then_some(cfg.arrivals),
            max_concurrency: cfg.max_concurrency,
            until: cfg.until.as_ref().map(Until::to_string),
            max_level: cfg.max_level,
            max_time_s: cfg.max_time.as_secs_f64(),
            buckets: cfg.buckets.clone(),
            shared_prefix_tokens: cfg.shared_prefix,
            prefix_groups: cfg.prefix_groups,
            multi_turn: turns,
            think_time_ms: turns.then_some(cfg.think_time.as_secs_f64() * 1000.0),
            max_turns: turns.then_some(cfg.max_turns),
            api: cfg.api.as_str(),
        }
    }
}

impl BucketInfo {
    /// A bucket's prompts: how many, and their estimated input tokens.
    fn of(c: &Chosen) -> BucketInfo {
        let mut t: Vec<u64> = c.prompts.iter().map(|p| p.est_tokens).collect();
        t.sort_unstable();
        BucketInfo {
            name: c.spec.name,
            output_tokens: c.spec.output_tokens,
            prompts: c.prompts.len(),
            input_tokens_est: (!t.is_empty()).then(|| TokenStats {
                min: t[0],
                median: t[t.len() / 2],
                max: t[t.len() - 1],
            }),
        }
    }
}

/// After the load: the scraper finished, each cell's plateau and time slices found, the engine's
/// figures summarised per cell; what `run.json` says of the scraping.
pub(crate) async fn scraped(s: &mut Session<'_>, out: &mut Out) -> Option<ScrapeInfo> {
    let scraped = match s.scraper.take() {
        Some(scraper) => Some(scraper.finish().await),
        None => None,
    };
    steady::attach(s.cfg, out, s.origin.1, scraped.as_ref());
    slices::attach(s.cfg, out, s.origin.1, scraped.as_ref());
    scraped.map(|c| scrape::summarise(s.cfg, &c, &mut out.cells))
}
