//! `run.json` assembled once the load is over: the session's knobs and clock, the plan's prompts
//! and mode, the cells (with their plateaus, time slices and the engine's figures), what the
//! load found and what was scraped.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use crate::bench::cell::Out;
use crate::bench::dataset::Chosen;
use crate::bench::info::{BucketInfo, LoadInfo, RunInfo, ScrapeInfo, TokenStats};
use crate::bench::model::settings::{self, Common, Experiment, SearchOver};
use crate::bench::plan::Plan;
use crate::bench::session::Session;
use crate::bench::stage::search::SaturationInfo;
use crate::bench::{scrape, slices, steady};

/// What `run.json` says of a load besides its cells: the search's findings, the replay's
/// account.
#[derive(Default)]
pub(crate) struct Findings {
    pub saturation: BTreeMap<String, SaturationInfo>,
    pub replay: Option<crate::bench::stage::replay::ReplayInfo>,
}

impl RunInfo {
    /// `run.json` once the load is over: the session's knobs and clock, the plan's prompts and
    /// mode, the cells (taken from `out`; the records stay), what the load found and scraped.
    pub(crate) fn of(
        (s, cfg): (&Session, &Common),
        plan: &Plan,
        found: Findings,
        scrape: Option<ScrapeInfo>,
        out: &mut Out,
    ) -> RunInfo {
        let (dataset, prompt_set_sha256) = plan.source();
        let interrupted = s.stop.load(Ordering::Relaxed);
        let verdict = verdict_of(cfg.max_error_rate, plan, &out.cells, interrupted);
        let stall_share = crate::bench::stall::run_share(&out.cells);
        RunInfo {
            tool: "tokentap bench",
            tool_version: env!("CARGO_PKG_VERSION"),
            target: cfg.target.clone(),
            model: s.load.model.to_string(),
            dataset,
            seed: cfg.seed,
            prompt_set_sha256,
            fixed_output: cfg.fixed_output,
            stream: cfg.stream,
            concurrency: concurrency(plan),
            requests_per_cell: cfg.requests,
            warmup_per_cell: cfg.warmup,
            buckets: plan.chosen().iter().map(BucketInfo::of).collect(),
            started_at: s.started_at.clone(),
            ended_at: crate::bench::session::now_rfc3339(),
            interrupted,
            client_overhead_ttft_ms: s.overhead.clone(),
            load: LoadInfo::of(cfg, plan),
            cells: std::mem::take(&mut out.cells),
            saturation: found.saturation,
            replay: found.replay,
            scrape,
            hardware: (cfg.hardware.peak_bandwidth_bytes_s.is_some()
                || cfg.hardware.peak_flops.is_some())
            .then(|| cfg.hardware.clone()),
            runs: (plan.runs() > 1).then_some(plan.runs()),
            spread: match plan.runs() {
                0 | 1 => Vec::new(),
                _ => crate::spread::as_written(&out.records),
            },
            experiment: plan.experiment().and_then(experiment),
            arm_resources: Vec::new(),
            run_id: String::new(),
            shard: None,
            shards: None,
            fleet: None,
            clickhouse: None,
            stall_share,
            verdict,
        }
    }
}

/// `run.json`'s `experiment`, when the run has arms.
fn experiment(cfg: &Experiment) -> Option<crate::bench::arms::ExperimentInfo> {
    if cfg.arms.len() < 2 {
        return None;
    }
    let arms: Vec<String> = cfg.arms.iter().map(|a| a.0.clone()).collect();
    Some(crate::bench::arms::ExperimentInfo {
        baseline: crate::bench::arms::baseline(&arms, cfg.baseline.as_deref()),
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
    max_error_rate: Option<f64>,
    plan: &Plan,
    cells: &[crate::bench::CellInfo],
    interrupted: bool,
) -> crate::bench::verdict::RunVerdict {
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
    let rules = crate::bench::verdict::Rules {
        search: matches!(plan, Plan::Search { .. }),
        max_error_rate,
        unmeasured,
    };
    let mut v = crate::bench::verdict::judge(cells, &rules);
    // bench's own lag: a warning beside the verdict, never a change of its status.
    v.client_lag = crate::bench::stall::warnings(cells);
    v
}

impl LoadInfo {
    /// The load's knobs as given, and its mode as planned.
    fn of(cfg: &Common, plan: &Plan) -> LoadInfo {
        let open = match plan {
            Plan::Open(w) => w.open.as_ref(),
            Plan::Search { search, .. } => match &search.over {
                SearchOver::Rate(o) => Some(o),
                SearchOver::Concurrency(_) => None,
            },
            _ => None,
        };
        let (search, replay, turns) = match plan {
            Plan::Search { search, .. } => (Some(search), None, None),
            Plan::Replay { replay, .. } => (None, Some(replay), None),
            Plan::Conversations { turns, .. } => (None, None, Some(turns)),
            _ => (None, None, None),
        };
        let rates = open.map(|o| o.rates.clone()).unwrap_or_default();
        let max_time = search
            .map(|s| s.max_time)
            .or(replay.map(|r| r.max_time))
            .unwrap_or(settings::MAX_TIME);
        LoadInfo {
            mode: plan.mode(),
            arrivals: open.filter(|_| !rates.is_empty()).map(|o| o.arrivals),
            request_rates: rates,
            max_concurrency: open
                .and_then(|o| o.max_concurrency)
                .or(replay.and_then(|r| r.max_concurrency)),
            until: search.map(|s| s.until.to_string()),
            max_level: search.and_then(|s| s.max_level),
            max_time_s: max_time.as_secs_f64(),
            buckets: cfg.prompts.buckets.clone(),
            shared_prefix_tokens: cfg.prompts.shared_prefix,
            prefix_groups: cfg.prompts.prefix_groups,
            multi_turn: turns.is_some(),
            think_time_ms: turns.map(|t| t.think_time.as_secs_f64() * 1000.0),
            max_turns: turns.map(|t| t.max_turns),
            api: cfg.api.as_str(),
        }
    }
}

/// `concurrency` in `run.json`: the levels of a load that has concurrencies, else the default
/// levels (an open loop's cap is `load.max_concurrency`).
fn concurrency(plan: &Plan) -> Vec<usize> {
    match plan {
        Plan::Closed(w) => w
            .levels
            .iter()
            .filter_map(|l| match l {
                crate::bench::cell::Level::Concurrency(c) => Some(*c),
                crate::bench::cell::Level::Rate(_) => None,
            })
            .collect(),
        Plan::Search { search, .. } => match &search.over {
            SearchOver::Concurrency(c) => c.clone(),
            SearchOver::Rate(_) => settings::CONCURRENCY.to_vec(),
        },
        Plan::Conversations { turns, .. } => turns.concurrency.clone(),
        Plan::Open(_) | Plan::Replay { .. } => settings::CONCURRENCY.to_vec(),
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
pub(crate) async fn scraped(
    (s, cfg): (&mut Session, &Common),
    out: &mut Out,
) -> Option<ScrapeInfo> {
    let scraped = match s.scraper.take() {
        Some(scraper) => Some(scraper.finish().await),
        None => None,
    };
    steady::attach(&cfg.hardware, out, s.origin.1, scraped.as_ref());
    slices::attach(cfg.timeslice, out, s.origin.1, scraped.as_ref());
    scraped.map(|c| scrape::summarise(&cfg.hardware, &c, &mut out.cells))
}
