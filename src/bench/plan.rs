//! A bench run's plan: which load it is — a closed-loop sweep, an open-loop sweep, a saturation
//! search, a replay, or conversations — decided once from the config, with what that load needs
//! (its prompts, levels, criterion or recorded requests). Knobs that cannot go together are
//! refused here, as usage errors; nothing after this tests a knob again to learn the mode.

use std::sync::Arc;

use super::cell::Level;
use super::dataset::{self, BucketSpec, Chosen, Conversation};
use super::open::Planned;
use super::replay::{self, ReplayInfo};
use super::runner::Target;
use super::search::{Ladder, Until};
use super::{BenchConfig, BenchError};

/// The load a run sends, and what it needs to send it.
pub(crate) enum Plan {
    /// Every bucket at every concurrency, C requests in flight.
    Closed(Sweep),
    /// Every bucket at every arrival rate (`--request-rate`).
    Open(Sweep),
    /// Per bucket, levels stepped up until `until` breaks, then refined (`--until`).
    Search {
        prompts: Prompts,
        until: Until,
        ladder: Ladder,
    },
    /// Recorded traffic on its own schedule (`--replay`), as one cell.
    Replay {
        requests: Vec<Planned>,
        info: Box<ReplayInfo>,
    },
    /// Conversations turn by turn at every concurrency (`--multi-turn`).
    Conversations {
        convs: Vec<Conversation>,
        /// The dataset's name and the conversation set's sha256.
        dataset: String,
        sha256: String,
        /// The buckets a turn's prompt is sorted into.
        specs: Vec<BucketSpec>,
        levels: Vec<usize>,
    },
}

/// A sweep's or a search's prompts: each bucket's, drawn from a dataset.
pub(crate) struct Prompts {
    pub chosen: Vec<Chosen>,
    /// Each bucket without a prompt, and why: which bucket the prompts fall in instead.
    pub empty: Vec<String>,
    /// The buckets were named (`--buckets`): an empty one was asked for, and is not measured.
    pub named: bool,
    /// The dataset's name and the prompt set's sha256.
    pub dataset: String,
    pub sha256: String,
}

/// A sweep's cells: every bucket at every level, the whole sweep `runs` times (`--runs`).
pub(crate) struct Sweep {
    pub prompts: Prompts,
    pub levels: Vec<Level>,
    pub runs: u32,
}

impl Plan {
    /// The plan the config asks for, its prompts or recorded requests read; a usage error when
    /// knobs conflict or a value is out of range.
    pub fn of(cfg: &BenchConfig) -> Result<Plan, BenchError> {
        validate(cfg)?;
        if !cfg.replay.is_empty() {
            let (requests, info) = replay::plan(cfg)?;
            return Ok(Plan::Replay {
                requests,
                info: Box::new(info),
            });
        }
        let specs: Vec<BucketSpec> = dataset::buckets(cfg.short_max, cfg.long_min, cfg.outputs)
            .into_iter()
            .filter(|s| cfg.buckets.is_empty() || cfg.buckets.iter().any(|b| b == s.name))
            .collect();
        if cfg.multi_turn {
            let (convs, dataset) = dataset::load_conversations(cfg.dataset.as_deref())?;
            let convs = dataset::choose_conversations(convs, cfg.seed, cfg.prompts_per_bucket);
            let sha256 = dataset::conversations_sha256(&convs);
            let levels = cfg.concurrency.clone();
            return Ok(Plan::Conversations {
                convs,
                dataset,
                sha256,
                specs,
                levels,
            });
        }
        let prompts = Prompts::load(cfg, &specs)?;
        Ok(match &cfg.until {
            Some(until) => Plan::Search {
                prompts,
                until: until.clone(),
                ladder: Ladder::of(cfg),
            },
            None if !cfg.request_rates.is_empty() => Plan::Open(Sweep {
                prompts,
                levels: cfg.request_rates.iter().map(|&r| Level::Rate(r)).collect(),
                runs: cfg.runs,
            }),
            None => Plan::Closed(Sweep {
                prompts,
                levels: cfg
                    .concurrency
                    .iter()
                    .map(|&c| Level::Concurrency(c))
                    .collect(),
                runs: cfg.runs,
            }),
        })
    }

    /// `load.mode` in `run.json`: conversations are a closed loop.
    pub fn mode(&self) -> &'static str {
        match self {
            Plan::Closed(_) | Plan::Conversations { .. } => "closed",
            Plan::Open(_) => "open",
            Plan::Search { .. } => "search",
            Plan::Replay { .. } => "replay",
        }
    }

    /// The buckets drawn from the dataset (none for a replay or conversations).
    pub fn chosen(&self) -> &[Chosen] {
        match self {
            Plan::Closed(Sweep { prompts, .. })
            | Plan::Open(Sweep { prompts, .. })
            | Plan::Search { prompts, .. } => &prompts.chosen,
            Plan::Replay { .. } | Plan::Conversations { .. } => &[],
        }
    }

    /// The buckets whose requests may carry a shared system prompt (`--shared-prefix`).
    pub fn prefixed(&self) -> Vec<&'static str> {
        match self {
            Plan::Conversations { .. } => vec!["conversations"],
            _ => self.chosen().iter().map(|c| c.spec.name).collect(),
        }
    }

    /// `dataset` and `prompt_set_sha256` in `run.json` (a replay's: its files, no hash).
    pub fn source(&self) -> (String, String) {
        match self {
            Plan::Closed(Sweep { prompts, .. })
            | Plan::Open(Sweep { prompts, .. })
            | Plan::Search { prompts, .. } => (prompts.dataset.clone(), prompts.sha256.clone()),
            Plan::Conversations {
                dataset, sha256, ..
            } => (dataset.clone(), sha256.clone()),
            Plan::Replay { info, .. } => (info.files.join(", "), String::new()),
        }
    }

    /// Planned cells that cannot be measured, each with why: a bucket named by `--buckets`
    /// that no prompt falls in.
    pub fn unmeasurable(&self) -> Vec<String> {
        match self {
            Plan::Closed(Sweep { prompts, .. })
            | Plan::Open(Sweep { prompts, .. })
            | Plan::Search { prompts, .. }
                if prompts.named =>
            {
                prompts.empty.clone()
            }
            _ => Vec::new(),
        }
    }

    /// How many cells the plan measures when it runs to its end (a search's is open).
    pub fn planned_cells(&self) -> Option<usize> {
        let with_prompts = |p: &Prompts| p.chosen.iter().filter(|c| !c.prompts.is_empty()).count();
        match self {
            Plan::Closed(w) | Plan::Open(w) => {
                Some(with_prompts(&w.prompts) * w.levels.len() * w.runs as usize)
            }
            Plan::Conversations { levels, .. } => Some(levels.len()),
            Plan::Replay { .. } => Some(1),
            Plan::Search { .. } => None,
        }
    }

    /// Repetitions of the sweep (`--runs`; 1 for anything but a sweep).
    pub fn runs(&self) -> u32 {
        match self {
            Plan::Closed(w) | Plan::Open(w) => w.runs,
            _ => 1,
        }
    }

    /// The model requests name: `--model`, else a replay's recorded ones (the target's first
    /// only for requests that named none), else the target's first. A replay's requests that
    /// named none get it.
    pub async fn model(
        &mut self,
        cfg: &BenchConfig,
        target: &Target,
    ) -> Result<Arc<str>, BenchError> {
        let mut recorded = match self {
            Plan::Replay { requests, info } => Some((requests, &*info)),
            _ => None,
        };
        let ask = recorded
            .as_ref()
            .is_none_or(|(r, _)| r.iter().any(|x| x.req.model.is_empty()));
        let model: Arc<str> = match &cfg.model {
            Some(m) => m.as_str().into(),
            None if ask => target
                .first_model()
                .await
                .map_err(|e| BenchError::Target(cfg.target.clone(), e))?
                .into(),
            None => recorded
                .as_ref()
                .and_then(|(_, info)| info.model.clone())
                .unwrap_or_else(|| "recorded models".into())
                .into(),
        };
        if let Some((requests, _)) = &mut recorded {
            replay::default_model(requests, &model);
        }
        Ok(model)
    }

    /// The line before the load: target, model, prompts and their hash (not for a replay).
    pub fn announce(&self, cfg: &BenchConfig, model: &str) {
        let (n, what) = match self {
            _ if cfg.quiet => return,
            Plan::Replay { .. } => return,
            Plan::Conversations { convs, .. } => (convs.len(), "conversations"),
            _ => (
                self.chosen().iter().map(|c| c.prompts.len()).sum::<usize>(),
                "prompts",
            ),
        };
        let (_, hash) = self.source();
        eprintln!(
            "tokentap bench → {} model {model}; {n} {what}, seed {}, prompt set sha256 {hash}",
            cfg.target, cfg.seed
        );
    }
}

impl Prompts {
    /// The dataset's (or synthetic) prompts, drawn into the buckets.
    fn load(cfg: &BenchConfig, specs: &[BucketSpec]) -> Result<Prompts, BenchError> {
        let (prompts, dataset) = match &cfg.synthetic {
            Some(lengths) => (
                dataset::synthetic(lengths, 8),
                format!("synthetic {lengths:?} tokens"),
            ),
            None => dataset::load(cfg.dataset.as_deref())?,
        };
        let chosen = dataset::choose(&prompts, specs, cfg.seed, cfg.prompts_per_bucket);
        let sha256 = dataset::prompt_set_sha256(&chosen);
        let all = dataset::buckets(cfg.short_max, cfg.long_min, cfg.outputs);
        let empty = chosen
            .iter()
            .filter(|c| c.prompts.is_empty())
            .map(|c| dataset::why_empty(&c.spec, &all, &prompts))
            .collect();
        Ok(Prompts {
            chosen,
            empty,
            named: !cfg.buckets.is_empty(),
            dataset,
            sha256,
        })
    }
}

/// Values in range, and no two loads asked for at once.
fn validate(cfg: &BenchConfig) -> Result<(), BenchError> {
    let usage = |m: &str| Err(BenchError::Usage(m.into()));
    if cfg.concurrency.is_empty() || cfg.concurrency.contains(&0) {
        return usage("--concurrency needs positive levels, e.g. 1,2,4,8");
    }
    if cfg.requests == 0 {
        return usage("--requests must be at least 1");
    }
    if cfg
        .request_rates
        .iter()
        .any(|r| !r.is_finite() || *r <= 0.0)
    {
        return usage("--request-rate needs positive rates (requests a second), e.g. 1,2,4");
    }
    if !(cfg.arrivals.burstiness.is_finite() && cfg.arrivals.burstiness > 0.0) {
        return usage("--burstiness must be a positive number (the gamma shape; 1 is Poisson)");
    }
    if cfg.max_concurrency == Some(0) {
        return usage("--max-concurrency must be at least 1");
    }
    if !(cfg.speed.is_finite() && cfg.speed > 0.0) {
        return usage("--speed must be a positive number (2 replays twice as fast)");
    }
    if cfg.max_level.is_some_and(|m| !(m.is_finite() && m > 0.0)) {
        return usage("--max-level must be positive");
    }
    if cfg.prefix_groups == 0 {
        return usage("--prefix-groups must be at least 1");
    }
    if cfg.timeslice.is_some_and(|t| t.is_zero()) {
        return usage("--timeslice must be positive");
    }
    if cfg.scrape_interval.is_zero() {
        return usage("--scrape-interval must be positive");
    }
    if cfg.progress_every.is_zero() {
        return usage("--progress-every must be positive");
    }
    if cfg.runs == 0 {
        return usage("--runs must be at least 1");
    }
    if cfg.runs > 1 && (!cfg.replay.is_empty() || cfg.multi_turn || cfg.until.is_some()) {
        return usage(
            "--runs repeats a sweep of cells (buckets × --concurrency or --request-rate); not --replay, --multi-turn or --until",
        );
    }
    if cfg.max_turns == 0 {
        return usage("--max-turns must be at least 1");
    }
    exclusive(cfg)?;
    for b in &cfg.buckets {
        if !["long-short", "balanced", "short-long"].contains(&b.as_str()) {
            return Err(BenchError::Usage(format!(
                "--buckets: unknown bucket {b:?} (long-short, balanced, short-long)"
            )));
        }
    }
    Ok(())
}

/// A replay, conversations and an open-loop or searched load are separate runs; only a sweep
/// or a search alternates experiment arms.
fn exclusive(cfg: &BenchConfig) -> Result<(), BenchError> {
    let usage = |m: &str| Err(BenchError::Usage(m.into()));
    let modes = [
        !cfg.replay.is_empty(),
        cfg.multi_turn,
        cfg.until.is_some() || !cfg.request_rates.is_empty(),
    ];
    if modes.iter().filter(|m| **m).count() > 1 {
        return usage(
            "--replay, --multi-turn and an open-loop or searched load are separate runs: choose one",
        );
    }
    if cfg.multi_turn && !cfg.arms.is_empty() {
        return usage("--multi-turn does not alternate experiment arms (--route-header)");
    }
    if !cfg.replay.is_empty() && !cfg.arms.is_empty() {
        return usage("--replay does not alternate experiment arms (--route-header)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(cfg: &BenchConfig) -> String {
        match Plan::of(cfg) {
            Err(BenchError::Usage(e)) => e,
            Err(e) => panic!("a usage error, not {e}"),
            Ok(p) => panic!("a usage error, not a {} plan", p.mode()),
        }
    }

    #[test]
    fn each_load_is_one_plan_with_its_mode() {
        let base = BenchConfig {
            synthetic: Some(vec![100, 400, 1000]),
            ..BenchConfig::default()
        };
        let closed = Plan::of(&base).unwrap();
        assert_eq!(closed.mode(), "closed");
        assert!(matches!(&closed, Plan::Closed(w) if w.levels.len() == 4 && w.runs == 1));
        let open = Plan::of(&BenchConfig {
            request_rates: vec![1.0, 2.0],
            ..base.clone()
        })
        .unwrap();
        assert_eq!(open.mode(), "open");
        assert!(
            matches!(&open, Plan::Open(w) if matches!(w.levels[1], Level::Rate(r) if r == 2.0))
        );
        let search = Plan::of(&BenchConfig {
            until: Some(Until::Errors),
            request_rates: vec![4.0, 2.0],
            ..base.clone()
        })
        .unwrap();
        assert_eq!(search.mode(), "search");
        let Plan::Search { ladder, .. } = search else {
            panic!("a search")
        };
        assert_eq!((ladder.start, ladder.max), (2.0, 1000.0));
        let convs = Plan::of(&BenchConfig {
            multi_turn: true,
            ..base.clone()
        })
        .unwrap();
        assert_eq!(convs.mode(), "closed");
        assert_eq!(convs.prefixed(), ["conversations"]);
        assert!(convs.chosen().is_empty() && convs.runs() == 1);
    }

    #[test]
    fn knobs_of_two_loads_are_refused_with_what_to_do() {
        let both = BenchConfig {
            multi_turn: true,
            request_rates: vec![1.0],
            ..BenchConfig::default()
        };
        assert!(usage(&both).ends_with("separate runs: choose one"));
        let arms = BenchConfig {
            replay: vec!["x.jsonl".into()],
            arms: vec![("a".into(), String::new()), ("b".into(), String::new())],
            ..BenchConfig::default()
        };
        assert_eq!(
            usage(&arms),
            "--replay does not alternate experiment arms (--route-header)"
        );
        let runs = BenchConfig {
            runs: 3,
            until: Some(Until::Errors),
            ..BenchConfig::default()
        };
        assert!(usage(&runs).starts_with("--runs repeats a sweep"));
    }
}
