//! A cell of a run: how request `i` of a bucket is made (its prompt, its shared prefix, its
//! experiment arm), a cell's level, the sweep's cells and their order over runs, and what
//! `run.json` says of each cell measured (`Out`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::dataset::Chosen;
use super::model::settings::{Experiment, PromptSpec};
use super::request::{self, Message, Req};
use super::{CellInfo, LagStats, OpenInfo};
use crate::meter::{Outcome, RequestRecord};

/// What every request of a run shares, and how request `i` of a cell is made.
pub(crate) struct Load {
    pub model: Arc<str>,
    /// The API shape requests are sent in, and whether their output length is fixed.
    pub api: crate::openai::Api,
    pub fixed: bool,
    /// Whether requests ask for a stream (`--stream`).
    pub stream: bool,
    /// The arms each prompt goes through (none: the target itself).
    pub experiment: Experiment,
    /// Per bucket, its shared system prompts (`--shared-prefix`).
    pub prefixes: BTreeMap<&'static str, Vec<Arc<str>>>,
    /// The scraper, asked for a round at each cell's start and end.
    pub scrape: Option<super::scrape::Handle>,
}

/// The level of a cell: what its requests' records say.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Level {
    Concurrency(usize),
    Rate(f64),
}

impl Level {
    pub fn label(self) -> String {
        match self {
            Level::Concurrency(c) => format!("C={c}"),
            Level::Rate(r) => format!("{r}/s"),
        }
    }
}

impl Load {
    /// A scrape round now (a cell's start or end): its time, ms since the run began.
    pub async fn mark(&self) -> Option<f64> {
        match &self.scrape {
            Some(h) => h.mark().await,
            None => None,
        }
    }

    /// Request `i` of a bucket's cell: prompts in their seeded order, every copy of an
    /// experiment group (one per arm) on the same prompt, shared prefixes round the groups.
    pub fn request(&self, c: &Chosen, i: usize, level: Level) -> Req {
        let ex = &self.experiment;
        let (concurrency, request_rate, tag) = match level {
            Level::Concurrency(n) => (Some(n as u64), None, format!("c{n}")),
            Level::Rate(r) => (None, Some(r), format!("r{r}")),
        };
        // N arms: group k (one prompt, one copy per arm) in the order of row k of a balanced
        // Latin square (two arms: A B B A A B B A …), so no arm always goes first and drift
        // cancels; copies i = kN … kN + N − 1 share the prompt and the pair id.
        let n = ex.arms.len();
        let arm = (n >= 2).then(|| {
            let k = i / n;
            let a = &ex.arms[super::arms::order(n, k)[i % n]];
            (
                Arc::from(a.0.as_str()),
                Arc::from(a.1.as_str()),
                format!("{}-{tag}-{k}", c.spec.name),
            )
        });
        let p = if arm.is_some() { i / n } else { i };
        let index = p % c.prompts.len();
        let prompt = &c.prompts[index];
        let system = self
            .prefixes
            .get(c.spec.name)
            .filter(|g| !g.is_empty())
            .map(|g| g[p % g.len()].clone());
        Req {
            model: self.model.clone(),
            api: self.api,
            system,
            messages: vec![Message::user(prompt.text.as_str())],
            out: c.spec.output_tokens,
            fixed: self.fixed,
            stream: self.stream,
            bucket: c.spec.name.into(),
            concurrency,
            request_rate,
            turn: None,
            arm,
            cache_salt: ex.cache_salt,
            route_header: ex.route_header.as_deref().map(Arc::from),
            prompt: Some(index as u64),
        }
    }
}

/// Everything measured so far.
#[derive(Default)]
pub(crate) struct Out {
    pub records: Vec<RequestRecord>,
    pub cells: Vec<CellInfo>,
    /// Cells that began after their common window's start (`--start-at`, `--cell-window`).
    pub late: Vec<super::shard::Late>,
}

impl Out {
    /// Keep a cell's records, with what `run.json` says of it.
    pub fn push(
        &mut self,
        bucket: &str,
        concurrency: Option<usize>,
        records: Vec<RequestRecord>,
        wall_s: f64,
        open_loop: Option<OpenInfo>,
    ) {
        let out_tokens: u64 = records
            .iter()
            .filter(|r| super::verdict::served(r))
            .filter_map(|r| r.output_tokens)
            .sum();
        let errors = records.iter().filter(|r| r.outcome != Outcome::Ok).count();
        let from = self.records.len();
        self.cells.push(CellInfo {
            bucket: bucket.to_owned(),
            concurrency,
            measured: records.len(),
            errors,
            served: records.iter().filter(|r| super::verdict::served(r)).count(),
            cancelled: records
                .iter()
                .filter(|r| r.outcome == Outcome::ClientCancelled)
                .count(),
            failures: super::verdict::failures(&records),
            arms: super::verdict::arms_served(&records),
            wall_s,
            output_tokens: out_tokens,
            aggregate_tok_s: if wall_s > 0.0 {
                out_tokens as f64 / wall_s
            } else {
                0.0
            },
            open_loop,
            run: None,
            records: from..from + records.len(),
            window_ms: None,
            scrape: None,
            steady_state: None,
            timeslices: Vec::new(),
            stall_share: None,
            reader_lag_ms: None,
        });
        self.records.extend(records);
    }

    /// The last cell's own lag: its stall share and reader lag.
    pub fn own_lag(&mut self, stall_share: Option<f64>, reader_lag_ms: Option<LagStats>) {
        if let Some(c) = self.cells.last_mut() {
            c.stall_share = stall_share;
            c.reader_lag_ms = reader_lag_ms;
        }
    }

    /// The last cell's scrape window.
    pub fn window(&mut self, from: Option<f64>, to: Option<f64>) {
        if let (Some(c), Some(a), Some(b)) = (self.cells.last_mut(), from, to) {
            c.window_ms = Some((a, b));
        }
    }
}

impl Out {
    /// The records at `at` and their cell (the last one pushed) belong to run `run`.
    pub fn mark_run(&mut self, at: std::ops::Range<usize>, run: u32) {
        for r in self.records.get_mut(at).into_iter().flatten() {
            r.run = Some(run);
        }
        if let Some(c) = self.cells.last_mut() {
            c.run = Some(run);
        }
    }
}

/// The sweep's cells in their first run's order: each bucket (by its index among the buckets
/// with prompts) at every level, the closed loop's concurrencies or the open loop's rates.
pub(crate) fn grid(levels: &[Level], buckets: usize) -> Vec<(usize, Level)> {
    (0..buckets)
        .flat_map(|b| levels.iter().map(move |l| (b, *l)))
        .collect()
}

/// Run `run` (from 1) of `runs`: the K cells rotated left by ⌊(run − 1) · K ÷ runs⌋, so the
/// runs start evenly spread over the sweep and drift falls on every cell alike (with K = runs,
/// each cell takes each place once). Run 1 is the sweep's own order.
pub(crate) fn run_order<T: Copy>(grid: &[T], run: u32, runs: u32) -> Vec<T> {
    let k = grid.len();
    let shift = match (k, runs) {
        (0, _) | (_, 0) => 0,
        _ => (run.saturating_sub(1) as usize * k / runs as usize) % k,
    };
    grid.iter().cycle().skip(shift).take(k).copied().collect()
}

/// The shared system prompts of a bucket: `prefix_groups` distinct texts of `shared_prefix`
/// tokens each, seeded by the bucket's name.
pub(crate) fn shared_prefixes(cfg: &PromptSpec, seed: u64, bucket: &str) -> Vec<Arc<str>> {
    if cfg.shared_prefix == 0 {
        return Vec::new();
    }
    let salt = bucket.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (0..cfg.prefix_groups.max(1))
        .map(|g| {
            let seed = seed ^ salt ^ (g as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut text = format!("System prompt {g} for {bucket}: ");
            text.push_str(&request::text_of_tokens(cfg.shared_prefix, seed));
            text.truncate((cfg.shared_prefix * 4) as usize);
            Arc::from(text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::run_order;

    #[test]
    fn runs_rotate_the_cells_evenly_and_one_run_keeps_the_sweep_order() {
        let g = [0, 1, 2, 3, 4, 5];
        assert_eq!(run_order(&g, 1, 1), g);
        assert_eq!(run_order(&g, 1, 3), g);
        assert_eq!(run_order(&g, 2, 3), [2, 3, 4, 5, 0, 1]);
        assert_eq!(run_order(&g, 3, 3), [4, 5, 0, 1, 2, 3]);
        // Three cells, three runs: a Latin square, each cell once in every place.
        let g = [0, 1, 2];
        let orders: Vec<Vec<i32>> = (1..=3).map(|r| run_order(&g, r, 3)).collect();
        for place in 0..3 {
            let mut at: Vec<i32> = orders.iter().map(|o| o[place]).collect();
            at.sort_unstable();
            assert_eq!(at, g);
        }
        // More runs than cells: the shift wraps, never out of range.
        assert_eq!(run_order(&[7, 8], 4, 5), [8, 7]);
        assert!(run_order::<i32>(&[], 2, 3).is_empty());
    }
}
