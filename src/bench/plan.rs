//! A bench run's plan: which load it is — a closed-loop sweep, an open-loop sweep, a saturation
//! search, a replay, or conversations — taken once from the load's settings, with what that
//! load needs (its settings, its prompts, levels, criterion or recorded requests). Nothing after
//! this tests a knob again to learn the mode; knobs that cannot go together were refused where
//! the flags became settings (`flags.rs`).

use std::sync::Arc;

use super::cell::Level;
use super::dataset::{self, BucketSpec, Chosen, Conversation};
use super::model::settings::{self, Common, Experiment, Load, OpenLoop};
use super::runner::Target;
use super::stage::open::Planned;
use super::stage::replay::{self, ReplayInfo};
use super::stage::search::Ladder;
use super::BenchError;

/// The load a run sends, and what it needs to send it: its settings, and its prompts or
/// recorded requests read.
pub(crate) enum Plan {
    /// Every bucket at every concurrency, C requests in flight.
    Closed(Sweep),
    /// Every bucket at every arrival rate (`--request-rate`).
    Open(Sweep),
    /// Per bucket, levels stepped up until `until` breaks, then refined (`--until`).
    Search {
        prompts: Prompts,
        search: settings::Search,
        ladder: Ladder,
    },
    /// Recorded traffic on its own schedule (`--replay`), as one cell.
    Replay {
        requests: Vec<Planned>,
        info: Box<ReplayInfo>,
        replay: settings::Replay,
    },
    /// Conversations turn by turn at every concurrency (`--multi-turn`).
    Conversations {
        convs: Vec<Conversation>,
        /// The dataset's name and the conversation set's sha256.
        dataset: String,
        sha256: String,
        /// The buckets a turn's prompt is sorted into.
        specs: Vec<BucketSpec>,
        turns: settings::Conversations,
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

/// A sweep's cells: every bucket at every level, the whole sweep `runs` times (`--runs`),
/// through the experiment's arms; an open loop's arrivals and cap.
pub(crate) struct Sweep {
    pub prompts: Prompts,
    pub levels: Vec<Level>,
    pub runs: u32,
    pub experiment: Experiment,
    /// The open loop's arrivals and cap (none for a closed loop).
    pub open: Option<OpenLoop>,
}

impl Plan {
    /// The plan the load asks for, its prompts or recorded requests read.
    pub fn of(common: &Common, load: &Load) -> Result<Plan, BenchError> {
        let p = &common.prompts;
        let specs: Vec<BucketSpec> = dataset::buckets(p.short_max, p.long_min, p.outputs)
            .into_iter()
            .filter(|s| p.buckets.is_empty() || p.buckets.iter().any(|b| b == s.name))
            .collect();
        Ok(match load {
            Load::Replay(r) => {
                let (requests, info) = replay::plan(r, common)?;
                Plan::Replay {
                    requests,
                    info: Box::new(info),
                    replay: r.clone(),
                }
            }
            Load::Conversations(t) => {
                let (convs, dataset) = dataset::load_conversations(p.dataset.as_deref())?;
                let convs = dataset::choose_conversations(convs, common.seed, p.prompts_per_bucket);
                let sha256 = dataset::conversations_sha256(&convs);
                Plan::Conversations {
                    convs,
                    dataset,
                    sha256,
                    specs,
                    turns: t.clone(),
                }
            }
            Load::Search(search) => Plan::Search {
                prompts: Prompts::load(common, &specs)?,
                ladder: Ladder::of(search),
                search: search.clone(),
            },
            Load::Open(o) => Plan::Open(Sweep {
                prompts: Prompts::load(common, &specs)?,
                levels: o.rates.rates.iter().map(|&r| Level::Rate(r)).collect(),
                runs: o.runs,
                experiment: o.experiment.clone(),
                open: Some(o.rates.clone()),
            }),
            Load::Closed(c) => Plan::Closed(Sweep {
                prompts: Prompts::load(common, &specs)?,
                levels: c
                    .concurrency
                    .iter()
                    .map(|&c| Level::Concurrency(c))
                    .collect(),
                runs: c.runs,
                experiment: c.experiment.clone(),
                open: None,
            }),
        })
    }

    /// The experiment's arms (none for a replay or conversations).
    pub fn experiment(&self) -> Option<&Experiment> {
        match self {
            Plan::Closed(w) | Plan::Open(w) => Some(&w.experiment),
            Plan::Search { search, .. } => Some(&search.experiment),
            Plan::Replay { .. } | Plan::Conversations { .. } => None,
        }
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
            Plan::Conversations { turns, .. } => Some(turns.concurrency.len()),
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
    pub async fn model(&mut self, cfg: &Common, target: &Target) -> Result<Arc<str>, BenchError> {
        let mut recorded = match self {
            Plan::Replay { requests, info, .. } => Some((requests, &*info)),
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
    pub fn announce(&self, cfg: &Common, model: &str) {
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
    fn load(common: &Common, specs: &[BucketSpec]) -> Result<Prompts, BenchError> {
        let cfg = &common.prompts;
        let (prompts, dataset) = match &cfg.synthetic {
            Some(lengths) => (
                dataset::synthetic(lengths, 8),
                format!("synthetic {lengths:?} tokens"),
            ),
            None => dataset::load(cfg.dataset.as_deref())?,
        };
        let chosen = dataset::choose(&prompts, specs, common.seed, cfg.prompts_per_bucket);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::model::settings::{Bench, Closed, Open, OpenLoop, SearchOver};
    use crate::bench::Until;

    fn plan(load: Load) -> Plan {
        let mut b = Bench::new("http://127.0.0.1:1", "unused");
        b.common.prompts.synthetic = Some(vec![100, 400, 1000]);
        Plan::of(&b.common, &load).unwrap()
    }

    #[test]
    fn each_load_is_one_plan_with_its_mode() {
        let closed = plan(Load::Closed(Closed::default()));
        assert_eq!(closed.mode(), "closed");
        assert!(matches!(&closed, Plan::Closed(w) if w.levels.len() == 4 && w.runs == 1));
        let rates = OpenLoop {
            rates: vec![1.0, 2.0],
            ..OpenLoop::default()
        };
        let open = plan(Load::Open(Open {
            rates: rates.clone(),
            ..Open::default()
        }));
        assert_eq!(open.mode(), "open");
        assert!(
            matches!(&open, Plan::Open(w) if matches!(w.levels[1], Level::Rate(r) if r == 2.0))
        );
        let search = plan(Load::Search(settings::Search {
            over: SearchOver::Rate(OpenLoop {
                rates: vec![4.0, 2.0],
                ..rates
            }),
            ..settings::Search::until(Until::Errors)
        }));
        assert_eq!(search.mode(), "search");
        let Plan::Search { ladder, .. } = search else {
            panic!("a search")
        };
        assert_eq!((ladder.start, ladder.max), (2.0, 1000.0));
        let convs = plan(Load::Conversations(Default::default()));
        assert_eq!(convs.mode(), "closed");
        assert_eq!(convs.prefixed(), ["conversations"]);
        assert!(convs.chosen().is_empty() && convs.runs() == 1);
    }
}
