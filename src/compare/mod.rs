//! `tokentap compare BASE NEW [NEW2…]`: two runs (bench folders or logs) side by side, cell by
//! cell — NEW − BASE with bootstrap 95 % intervals, paired prompt by prompt when both runs used
//! the same prompt set — with SLO verdict changes, a verdict per metric, the mismatches named,
//! and a regression gate whose failures are differences wholly beyond their threshold.

pub mod boot;
pub mod evidence;
pub mod gate;
mod html;
mod render;
pub mod runs;
pub mod side;
mod tables;
mod verdict;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::cli::Exit;
use crate::report::{Format, Slos};
use boot::{Diff, Sample};
use evidence::Equivalence;
use side::{CellKey, Side};

pub use render::render;
pub use verdict::{reading, MetricChange, Of, Settle, Widest};

#[derive(clap::Args)]
pub struct Args {
    /// BASE, then one or more NEW runs (BASE NEW [NEW2…]): bench output folders (their records
    /// and run.json) or request logs (files or folders of *.jsonl*). Each NEW is compared with
    /// BASE. When both were `bench --runs N` (N ≥ 2), the intervals of TTFT, TPOT and E2E p50
    /// and p95 and per-stream tok/s come from the runs (Welch over each run's value), the
    /// others from the bootstrap; the output's Intervals line says which.
    #[arg(required = true, num_args = 2.., value_name = "RUN")]
    pub paths: Vec<PathBuf>,
    /// table (terminal), md, json, or html (one self-contained file with charts).
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Write here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// SLO thresholds for the verdicts (the report's --slo TOML file).
    #[arg(long)]
    pub slo: Option<PathBuf>,
    /// Exit 1 when a difference's 95 % interval lies wholly beyond its threshold, naming each
    /// cell and metric: METRIC:[+|-]AMOUNT(%|pp|ms|tok/s),… e.g.
    /// 'ttft_p95:+5%,tpot_p50:+3%,error_rate:+0.5pp'. % is relative (NEW ÷ BASE − 1), pp
    /// percentage points of a rate, ms and tok/s absolute. Without a sign, the metric's bad
    /// direction. Metrics: ttft_, ttfo_, tpot_, e2e_ p50/p95/p99, tok_s_per_stream_p50,
    /// aggregate_tok_s, error_rate, goodput. A gated metric that cannot be judged in a cell (too
    /// few values for its percentile, no interval, the cell in one run only) is named, and the
    /// gate exits 3 unless --allow-unjudged; a regression (1) wins over that.
    #[arg(long, value_name = "SPEC")]
    pub fail_on_regression: Option<String>,
    /// Let --fail-on-regression pass the cells it could not judge (they are still listed, and
    /// the counts of judged cells printed). Without it, an unjudged cell exits 3.
    #[arg(long, requires = "fail_on_regression")]
    pub allow_unjudged: bool,
    /// Compare a distributed bench run that is not whole (shards of different runs, or
    /// shards missing). Without it, a side whose shards' `run.json` say so is refused.
    #[arg(long)]
    pub allow_partial: bool,
    /// The equivalence margin: a metric reads `unchanged` only when every cell's 95 % interval
    /// lies within ± this; otherwise `inconclusive` (or moved). `PCT%` for latencies and
    /// throughputs (relative), `Npp` for error_rate and goodput (percentage points), or both:
    /// e.g. '3%,0.5pp'.
    #[arg(long, value_name = "MARGIN", default_value = "5%,1pp")]
    pub equivalence: String,
    /// Seed of the bootstrap: the same runs and seed give the same intervals.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Compare unpaired even when both runs used the same prompt set (to see what pairing
    /// buys).
    #[arg(long)]
    pub unpaired: bool,
}

/// One cell (or one API shape's pooled row) compared.
#[derive(Debug, Clone, Serialize)]
pub struct CellDiff {
    /// `chat long-short C=8`.
    pub cell: String,
    pub api: String,
    pub bucket: String,
    pub arm: Option<String>,
    pub level: String,
    /// True for an API shape's row pooling all its cells.
    pub pooled: bool,
    /// Whether this cell's differences were taken prompt by prompt.
    pub paired: bool,
    pub n_base: usize,
    pub n_new: usize,
    /// Requests paired (same prompt, same occurrence) when paired.
    pub pairs: Option<usize>,
    /// Runs a side (BASE, NEW) when both had several (`bench --runs N`) and the run-to-run
    /// spread gave the intervals of the metrics it covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<[usize; 2]>,
    pub metrics: Vec<Diff>,
    /// SLO name → (met in BASE, met in NEW).
    #[serde(skip)]
    pub slo: BTreeMap<&'static str, (bool, bool)>,
}

/// A verdict for one metric over every cell both runs have (pooled rows aside).
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub metric: &'static str,
    /// Cells judged higher (interval wholly above 0, not within the margin), lower, and cells
    /// judged (an interval that is evidence).
    pub higher: usize,
    pub lower: usize,
    pub cells: usize,
    pub line: String,
    /// The verdict's word.
    pub verdict: MetricChange,
    /// Cells both runs have, judged or not.
    pub compared: usize,
    /// Cells judged unchanged (within the margin) and inconclusive, and cells not judged.
    pub unchanged: usize,
    pub inconclusive: usize,
    pub not_judged: usize,
    /// The equivalence margin, in `margin_unit` (`%` or `pp`).
    pub margin: f64,
    pub margin_unit: &'static str,
    /// The widest interval among the inconclusive cells (among all, when unchanged).
    pub widest: Option<Widest>,
    /// About how many requests a cell (runs a side) would settle an inconclusive cell.
    pub settle: Option<Settle>,
}

/// A cell in one run only: never compared, never judged by the gate.
#[derive(Debug, Clone, Serialize)]
pub struct OneSide {
    pub cell: String,
    /// `base` or `new`.
    pub side: Which,
}

/// A side of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Which {
    Base,
    New,
}

/// BASE against one NEW.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub base: String,
    pub new: String,
    /// `paired` (prompt by prompt) or `unpaired`.
    pub pairing: &'static str,
    pub pairing_note: String,
    /// Which intervals were used: `bootstrap` everywhere, or `runs` where both sides had
    /// several runs (the run-to-run spread; bootstrap for the other metrics and rows).
    pub intervals: &'static str,
    pub intervals_note: String,
    pub prompt_set_sha256: [Option<String>; 2],
    pub seed: u64,
    pub resamples: usize,
    /// What differs besides the engine: cells in one run only, models, load shapes.
    pub mismatches: Vec<String>,
    pub verdicts: Vec<Verdict>,
    /// `chat long-short C=8: interactive MISS → met`.
    pub slo_changes: Vec<String>,
    pub cells: Vec<CellDiff>,
    /// `--fail-on-regression`: each cell and metric wholly beyond its threshold.
    pub regressions: Vec<String>,
    /// The margin within which a metric reads `unchanged` (`--equivalence`).
    pub equivalence: Equivalence,
    /// Cells in one run only (pooled rows aside).
    pub one_side: Vec<OneSide>,
    /// `--fail-on-regression`'s verdict, its judged counts and the cells it could not judge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<gate::Gate>,
}

/// Compare BASE with NEW at the default equivalence margin; `unpaired` forbids pairing.
pub fn compare(base: &Side, new: &Side, seed: u64, unpaired: bool) -> Comparison {
    compare_within(base, new, seed, unpaired, Equivalence::default())
}

/// Compare BASE with NEW, each difference read against the margin `eq`.
pub fn compare_within(
    base: &Side,
    new: &Side,
    seed: u64,
    unpaired: bool,
    eq: Equivalence,
) -> Comparison {
    let sets = [base.prompt_set(), new.prompt_set()];
    let (pair, note) = pairing(base, new, unpaired);
    let new_cells: BTreeMap<&CellKey, &side::SideCell> =
        new.cells.iter().map(|c| (&c.key, c)).collect();
    let mut cells: Vec<CellDiff> = base
        .cells
        .iter()
        .filter_map(|b| Some(cell_diff(b, new_cells.get(&b.key)?, pair, seed)))
        .collect();
    for d in cells.iter_mut().flat_map(|c| c.metrics.iter_mut()) {
        d.verdict = evidence::change(d.not_judged.is_none(), verdict::reading(d), &eq);
    }
    let (intervals, intervals_note) = runs::note(&cells);
    let mut c = Comparison {
        base: base.path.clone(),
        new: new.path.clone(),
        pairing: if cells.iter().any(|c| c.paired) {
            "paired"
        } else {
            "unpaired"
        },
        pairing_note: note,
        intervals,
        intervals_note,
        prompt_set_sha256: sets.map(|s| s.map(str::to_owned)),
        seed,
        resamples: boot::RESAMPLES,
        mismatches: verdict::mismatches(base, new),
        verdicts: Vec::new(),
        slo_changes: Vec::new(),
        cells,
        regressions: Vec::new(),
        equivalence: eq,
        one_side: one_side(base, new),
        gate: None,
    };
    c.verdicts = verdict::verdicts(&c.cells, &eq);
    c.slo_changes = verdict::slo_changes(&c.cells);
    c
}

/// The cells (pooled rows aside) one run has and the other has not.
fn one_side(base: &Side, new: &Side) -> Vec<OneSide> {
    fn keys(s: &Side) -> Vec<&CellKey> {
        s.cells
            .iter()
            .filter(|c| !c.key.pooled())
            .map(|c| &c.key)
            .collect()
    }
    let (kb, kn) = (keys(base), keys(new));
    let only = |a: &[&CellKey], b: &[&CellKey], side: Which| -> Vec<OneSide> {
        a.iter()
            .filter(|k| !b.contains(k))
            .map(|k| OneSide {
                cell: k.name(),
                side,
            })
            .collect()
    };
    let mut out = only(&kb, &kn, Which::Base);
    out.extend(only(&kn, &kb, Which::New));
    out
}

/// Whether the two runs' requests pair by prompt, and the sentence that says why (or why not).
fn pairing(base: &Side, new: &Side, unpaired: bool) -> (bool, String) {
    let carries = |s: &Side| {
        s.cells
            .iter()
            .any(|c| c.reqs.iter().any(|r| r.prompt.is_some()))
    };
    match [base.prompt_set(), new.prompt_set()] {
        _ if unpaired => (false, "unpaired: --unpaired".to_owned()),
        [Some(a), Some(b)] if a == b && carries(base) && carries(new) => (
            true,
            format!("paired by prompt: both runs used prompt set {}", short(a)),
        ),
        [Some(a), Some(b)] if a == b => (
            false,
            "unpaired: the records carry no prompt_index (a bench before it was recorded)"
                .to_owned(),
        ),
        [Some(a), Some(b)] => (
            false,
            format!(
                "unpaired: the prompt sets differ ({} vs {})",
                short(a),
                short(b)
            ),
        ),
        _ => (
            false,
            "unpaired: not both bench runs with a prompt set (run.json)".to_owned(),
        ),
    }
}

/// One cell of both runs compared: by prompt pairs when `pair` finds at least two, else as two
/// independent samples.
fn cell_diff(b: &side::SideCell, n: &side::SideCell, pair: bool, seed: u64) -> CellDiff {
    let pairs: Vec<_> = if pair {
        let by: BTreeMap<(u64, u64, u32), &side::Req> = n
            .reqs
            .iter()
            .filter_map(|r| r.prompt.map(|p| (p, r)))
            .collect();
        b.reqs
            .iter()
            .filter_map(|r| Some((r, *by.get(&r.prompt?)?)))
            .collect()
    } else {
        Vec::new()
    };
    let sample = if pairs.len() >= 2 {
        Sample::Paired(pairs)
    } else {
        Sample::Unpaired(b.reqs.iter().collect(), n.reqs.iter().collect())
    };
    let agg = [
        b.cell.as_ref().and_then(|c| c.aggregate_tok_s),
        n.cell.as_ref().and_then(|c| c.aggregate_tok_s),
    ];
    let mut metrics = boot::compare(&sample, agg, seed ^ fnv(&b.key.name()));
    let runs = match b.key.pooled() {
        true => None,
        false => runs::apply(&b.reqs, &n.reqs, &mut metrics),
    };
    let mut slo = BTreeMap::new();
    if let (Some(cb), Some(cn)) = (&b.cell, &n.cell) {
        for (name, met) in &cb.slo {
            if let Some(m) = cn.slo.get(name) {
                slo.insert(*name, (*met, *m));
            }
        }
    }
    let paired = matches!(sample, Sample::Paired(_));
    CellDiff {
        cell: b.key.name(),
        api: b.key.api.clone(),
        bucket: b.key.bucket.clone(),
        arm: b.key.arm.clone(),
        level: b.key.label.clone(),
        pooled: b.key.pooled(),
        paired,
        n_base: b.reqs.len(),
        n_new: n.reqs.len(),
        pairs: paired.then(|| sample.sizes().0),
        runs,
        metrics,
        slo,
    }
}

/// Apply the gate: each cell (not the pooled rows) and threshold whose interval lies wholly
/// beyond it, and the cells it could not judge (which fail it: see [`gate_with`]).
pub fn gate(c: &mut Comparison, thresholds: &[gate::Threshold]) {
    gate_with(c, thresholds, false);
}

/// The gate, with `allow_unjudged` letting the cells it could not judge pass (still listed).
pub fn gate_with(c: &mut Comparison, thresholds: &[gate::Threshold], allow_unjudged: bool) {
    let (regressions, g) = gate::judge(c, thresholds, allow_unjudged);
    c.regressions = regressions;
    c.gate = Some(g);
}

fn short(sha: &str) -> String {
    sha.chars().take(12).collect::<String>() + "…"
}

/// FNV-1a: a cell's bootstrap seed from its name, so each cell draws its own resamples.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Read, compare, render; exit 1 when the gate finds a regression, 3 when it found none but
/// could not judge a cell (unless `--allow-unjudged`).
pub fn cli(a: Args) -> Exit {
    let slos = match &a.slo {
        None => Slos::default(),
        Some(p) => match Slos::load(p) {
            Ok(s) => s,
            Err(e) => return Exit::Usage(format!("config error: {e}")),
        },
    };
    let thresholds = match a.fail_on_regression.as_deref().map(gate::parse) {
        None => Vec::new(),
        Some(Ok(t)) => t,
        Some(Err(e)) => return Exit::Usage(e.to_string()),
    };
    let eq = match Equivalence::parse(&a.equivalence) {
        Ok(e) => e,
        Err(e) => return Exit::Usage(e),
    };
    let mut sides = Vec::new();
    for p in &a.paths {
        match side::read(p, &slos, a.allow_partial) {
            Ok(s) => sides.push(s),
            // A run that measured nothing has nothing to compare: not judged, not failed.
            Err(side::ReadError::Nothing(e)) => {
                eprintln!("tokentap compare: not judged: {e}: nothing measured to compare");
                return Exit::NotJudged;
            }
            Err(side::ReadError::NotOneRun(e)) => return Exit::Usage(format!("compare: {e}")),
            Err(e) => return Exit::Failed(format!("compare: {e}")),
        }
    }
    let Some((base, news)) = sides.split_first() else {
        return Exit::Usage("compare needs BASE and at least one NEW".into());
    };
    let mut all = Vec::new();
    for n in news {
        let mut c = compare_within(base, n, a.seed, a.unpaired, eq);
        if a.fail_on_regression.is_some() {
            gate_with(&mut c, &thresholds, a.allow_unjudged);
        }
        all.push(c);
    }
    let text = render(&all, a.format);
    match &a.out {
        Some(p) => {
            if let Err(e) = std::fs::write(p, text) {
                return Exit::Failed(format!("compare: {}: {e}", p.display()));
            }
        }
        None => crate::cli::out(&text),
    }
    if a.fail_on_regression.is_none() {
        return Exit::Ok;
    }
    let spec = thresholds
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    for c in &all {
        for line in gate::stderr_lines(c) {
            eprintln!("tokentap compare: {line}");
        }
    }
    let verdicts: Vec<gate::Outcome> = all
        .iter()
        .filter_map(|c| c.gate.as_ref().map(|g| g.verdict))
        .collect();
    let unjudged: usize = all
        .iter()
        .filter_map(|c| c.gate.as_ref())
        .map(|g| g.not_judged.len())
        .sum();
    if verdicts.contains(&gate::Outcome::Regression) {
        return Exit::No;
    }
    if verdicts.contains(&gate::Outcome::NotJudged) {
        match unjudged {
            0 => eprintln!(
                "tokentap compare: not judged: nothing to judge against {spec} (exit {})",
                crate::cli::NOT_JUDGED
            ),
            k => eprintln!(
                "tokentap compare: not judged: no regression beyond {spec} in the cells judged, but {k} cell and threshold pair(s) could not be judged (exit {}; --allow-unjudged passes them)",
                crate::cli::NOT_JUDGED
            ),
        }
        return Exit::NotJudged;
    }
    match unjudged {
        0 => eprintln!("tokentap compare: no regression beyond {spec} (every cell judged)"),
        k => eprintln!(
            "tokentap compare: no regression beyond {spec} in the cells judged; {k} cell and threshold pair(s) not judged, passed by --allow-unjudged"
        ),
    }
    Exit::Ok
}
