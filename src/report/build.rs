//! The report's engine: what was read (from records, or from ClickHouse's answers) becomes the
//! model — cells with their figures, tails and SLO verdicts, the provisioning answers, the
//! gateway sections — in typed values. It never formats: sentences come from `answers`.

use std::collections::BTreeMap;

use super::acc::{self, Acc, CellIn, DEFAULT_EXACT_VALUES};
use super::model::{
    Axis, Cell, Dist, FailureMode, Figures, NoTokensPerDay, Provision, Report, SloKind, SloP95,
    Slos, Sources, Steady, SteadyClock, SteadyDist, Tail, WholeCell, JUDGED, SATURATION_RISE,
    TOKENS_PER_DAY_MIN_REQUESTS,
};
use super::row::Row;
use super::values::Values;
use super::{answers, board, hop, steady, tap};
use crate::meter::RequestRecord;

/// Compute the whole report. `top` keys; `by_arm` splits the key table by experiment arm.
/// The gateway-hop section compares the arms named `gateway` and `direct`.
pub fn compute(records: &[RequestRecord], slos: &Slos, top: usize, by_arm: bool) -> Report {
    compute_with_arms(records, slos, top, by_arm, ("gateway", "direct"))
}

pub fn compute_with_arms(
    records: &[RequestRecord],
    slos: &Slos,
    top: usize,
    by_arm: bool,
    arms: (&str, &str),
) -> Report {
    compute_all(records, &[], slos, top, by_arm, arms)
}

/// The whole report of records in memory; `tap_only` records feed the gateway-tap section alone
/// (a proxy log of traffic whose client-side records are `records`, as in the demo).
pub fn compute_all(
    records: &[RequestRecord],
    tap_only: &[RequestRecord],
    slos: &Slos,
    top: usize,
    by_arm: bool,
    arms: (&str, &str),
) -> Report {
    let mut acc = Acc::new(slos, by_arm, arms, DEFAULT_EXACT_VALUES);
    for r in records {
        acc.add(&Row::of(r));
    }
    for r in tap_only {
        acc.add_tap_only(&Row::of(r));
    }
    finish(acc, slos, top, arms)
}

/// The report of what an [`Acc`] has read.
pub fn finish(mut acc: Acc, slos: &Slos, top: usize, arms: (&str, &str)) -> Report {
    let spread = acc.take_spread();
    let mut report = report_of(acc.finish(top), slos, arms);
    report.spread = spread;
    report
}

/// Cells whose levels are one axis: (bucket, arm, axis).
type Group = (String, Option<String>, Axis);

fn group_of(c: &Cell) -> Group {
    (c.bucket.clone(), c.arm.clone(), c.axis)
}

/// The report of figures read (from records, or from ClickHouse's answers).
pub(super) fn report_of(read: acc::Read, slos: &Slos, arms: (&str, &str)) -> Report {
    // C=1 p95 TTFT per (bucket, arm), for the tail reading and the knee; for open-loop cells,
    // the lowest rate's.
    let mut base: BTreeMap<Group, f64> = BTreeMap::new();
    let mut cells = Vec::new();
    for cell in read.cells {
        let c = cell_of(cell, read.whole_cell, slos);
        let group = group_of(&c);
        // Cells come in level order: the lowest level is the first of its group.
        if !base.contains_key(&group) && (c.axis != Axis::Concurrency || c.level == 1) {
            if let Some(p) = c.ttft_ms.p95 {
                base.insert(group, p);
            }
        }
        cells.push(c);
    }
    read_tails(&mut cells, &base, slos);
    for s in cells.iter_mut().filter_map(|c| c.ttft_split.as_mut()) {
        s.missing = answers::split_missing(s);
    }
    let mut provisioning = provision(&cells, &base, slos);
    for p in &mut provisioning {
        p.tokens_per_day_note = p.tokens_per_day_missing.map(answers::tokens_per_day_note);
    }
    let sources = match (read.live == 0, read.live == read.records) {
        (true, _) => Sources::Bench,
        (false, true) => Sources::Live,
        _ => Sources::Mixed,
    };
    let mut gateway_tap = tap::compute(read.tap.iter());
    let mut gateway_hop = hop::compute(&read.hop, arms.0, arms.1, gateway_tap.as_ref());
    if let Some(h) = &mut gateway_hop {
        h.summary = answers::hop_summary(h, gateway_tap.is_some());
    }
    if let Some(t) = &mut gateway_tap {
        t.summary = answers::tap_summary(t);
    }
    let (gateway_board, gateway_board_not_judged) =
        match board::compute(&read.board, &read.tap, &read.board_opts) {
            None => (Vec::new(), None),
            Some(Err(why)) => (Vec::new(), Some(why)),
            Some(Ok(mut rows)) => {
                for r in &mut rows {
                    r.summary = answers::board_summary(r);
                }
                (rows, None)
            }
        };
    let mut report = Report {
        answers: Vec::new(),
        records: read.records,
        sources,
        window: None,
        distributed: None,
        traffic: read.traffic,
        judged: JUDGED,
        percentiles: read.method,
        slos: slos.clone(),
        cells,
        in_flight: read.in_flight,
        provisioning,
        keys: read.keys,
        gateway_hop,
        gateway_tap,
        gateway_board,
        gateway_board_not_judged,
        by_api: read.by_api,
        by_bucket: read.by_bucket,
        prefix_cache: read.prefix_cache,
        by_turn: read.by_turn,
        other_traffic: read.other,
        streaming: read.streaming,
        hardware: None,
        binding: Vec::new(),
        spread: Vec::new(),
    };
    report.answers = answers::answers(&report);
    report
}

/// The latency figures a cell reports: its plateau's, when it holds enough and `--whole-cell`
/// is not given, else the whole cell's; with the plateau as `steady_state`.
struct Chosen {
    figures: Figures,
    whole_cell: Option<WholeCell>,
    ttft: Dist,
    tpot: Dist,
    e2e: Dist,
    tps: Dist,
    goodput: f64,
    /// The SLO p95s of TTFT and TPOT, the failures ranked in.
    slo: [SloP95; 2],
    /// Failed or throttled streams among the figures' requests.
    failed_streams: usize,
    steady_state: Option<Steady>,
}

fn choose(c: &mut acc::CellAcc, kind: acc::Kind, level: u64, whole_cell: bool) -> Chosen {
    let take = |v: &mut Values| std::mem::replace(v, Values::new(false));
    let whole_slo = c.known_slo.unwrap_or_else(|| {
        [
            c.ttft.slo_p95(c.failed_streams),
            c.tpot.slo_p95(c.failed_streams),
        ]
    });
    let whole = WholeCell {
        requests: c.requests,
        ttft_ms: take(&mut c.ttft).dist(),
        tpot_ms: take(&mut c.tpot).dist(),
        e2e_ms: take(&mut c.e2e).dist(),
        tok_s_per_stream: take(&mut c.tps).dist(),
        // The client's cancels are not the service's: they are not in the share.
        goodput: c.good as f64 / (c.requests - c.cancelled).max(1) as f64,
    };
    let plateau = match kind {
        acc::Kind::Concurrency => steady::plateau(&c.spans, level as usize),
        _ => None,
    };
    let first_ms = c.spans.iter().map(|s| s.start_ms).reduce(f64::min);
    let steady_state = plateau.as_ref().map(|p| Steady {
        from_ms: p.from_ms - first_ms.unwrap_or(p.from_ms),
        to_ms: p.to_ms - first_ms.unwrap_or(p.from_ms),
        requests: p.requests,
        ttft_ms: SteadyDist {
            p50: p.ttft.p50,
            p95: p.ttft.p95,
        },
        tpot_ms: SteadyDist {
            p50: p.tpot.p50,
            p95: p.tpot.p95,
        },
        clock: SteadyClock::Cell,
    });
    // One at a time, the plateau is the whole cell: the cell keeps its own figures.
    let enough = |p: &steady::Plateau| level > 1 && p.requests >= steady::STEADY_MIN_REQUESTS;
    match plateau.filter(|p| !whole_cell && enough(p)) {
        Some(p) => Chosen {
            figures: Figures::SteadyState,
            whole_cell: Some(whole),
            ttft: p.ttft,
            tpot: p.tpot,
            e2e: p.e2e,
            tps: p.tps,
            // A failure on the plateau is a request that missed.
            goodput: p.good as f64 / (p.requests + p.failed) as f64,
            slo: p.slo,
            failed_streams: p.failed,
            steady_state,
        },
        None => Chosen {
            figures: Figures::WholeCell,
            whole_cell: None,
            ttft: whole.ttft_ms,
            tpot: whole.tpot_ms,
            e2e: whole.e2e_ms,
            tps: whole.tok_s_per_stream,
            goodput: whole.goodput,
            slo: whole_slo,
            failed_streams: c.failed_streams,
            steady_state,
        },
    }
}

/// SLO name → met at p95, for the SLOs the figures can judge: a failed stream is a miss
/// (beyond every threshold); nothing served and nothing failed is not judged (absent).
fn verdicts(slos: &Slos, [ttft, tpot]: [SloP95; 2]) -> BTreeMap<&'static str, bool> {
    let mut slo = BTreeMap::new();
    for (name, kind, thr) in slos.list() {
        let met = match kind {
            SloKind::Ttft => ttft.at_most(thr),
            // The slowest 5 % of streams: the 5th percentile of tok/s = 1000 / TPOT p95.
            SloKind::TokS => tpot.tok_s_at_least(thr),
        };
        if let Some(met) = met {
            slo.insert(name, met);
        }
    }
    slo
}

/// One cell of the report from what was read of it; its tail is read later, against its group.
fn cell_of(cell: CellIn, whole_cell: bool, slos: &Slos) -> Cell {
    let CellIn {
        bucket,
        arm,
        level,
        label,
        rate,
        kind,
        acc: mut c,
    } = cell;
    let axis = match kind {
        acc::Kind::Concurrency => Axis::Concurrency,
        acc::Kind::Live => Axis::InFlight,
        acc::Kind::Rate => Axis::RequestRate,
    };
    let chosen = choose(&mut c, kind, level, whole_cell);
    let wall = match (c.start, c.end) {
        (Some(s), Some(e)) => e.duration_since(s).map(|d| d.as_secs_f64()).unwrap_or(0.0),
        _ => 0.0,
    };
    let achieved = c.sent.and_then(|(first, last)| {
        let span = last.duration_since(first).ok()?.as_secs_f64();
        (c.requests > 1 && span > 0.0).then(|| (c.requests - 1) as f64 / span)
    });
    let scheduled = c
        .scheduled
        .filter(|(a, b, n)| *n > 1 && b > a)
        .map(|(a, b, n)| (n - 1) as f64 / ((b - a) / 1000.0));
    let take = |v: &mut Values| std::mem::replace(v, Values::new(false));
    let (queue, lag) = match rate {
        Some(_) => (
            Some(take(&mut c.queue).dist()),
            Some(take(&mut c.lag).dist()),
        ),
        None => (None, None),
    };
    let slo = verdicts(slos, chosen.slo);
    let ttft_split = c.split_cell();
    Cell {
        bucket,
        arm,
        concurrency: label,
        level,
        axis,
        requests: c.requests,
        errors: c.errors,
        throttled: c.throttled,
        cancelled: c.cancelled,
        failed_streams: chosen.failed_streams,
        buffered_streams: c.buffered,
        error_rate: c.errors as f64 / c.requests.max(1) as f64,
        ttft_ms: chosen.ttft,
        tpot_ms: chosen.tpot,
        e2e_ms: chosen.e2e,
        tok_s_per_stream: chosen.tps,
        aggregate_tok_s: (wall > 0.0).then(|| c.out_tokens as f64 / wall),
        input_tokens_median: take(&mut c.input).median(),
        output_tokens_median: take(&mut c.output).median(),
        tail: Tail::Tight,
        slo,
        goodput: chosen.goodput,
        figures: chosen.figures,
        whole_cell: chosen.whole_cell,
        ttft_split,
        request_rate: rate,
        scheduled_rate: scheduled.filter(|_| rate.is_some()),
        achieved_rate: achieved,
        client_queue_ms: queue,
        client_lag_ms: lag,
        engine: None,
        bench_stall_share: None,
        bench_reader_lag_p99_ms: None,
        timeslices: Vec::new(),
        steady_state: chosen.steady_state,
    }
}

/// The tail: against the group's lowest level, and (for saturation) the level below's
/// aggregate throughput. Cells are in level order within a group.
fn read_tails(cells: &mut [Cell], base: &BTreeMap<Group, f64>, slos: &Slos) {
    let mut below: Option<(Group, Option<f64>)> = None;
    for c in cells {
        let group = group_of(c);
        let b = base.get(&group).copied();
        let prev = match &below {
            Some((g, t)) if *g == group => Some(*t),
            _ => None,
        };
        let above = prev.is_some();
        let rising = match (prev.flatten(), c.aggregate_tok_s) {
            (Some(p), Some(t)) if c.axis != Axis::InFlight => t > SATURATION_RISE * p,
            // Live cells' throughput is the traffic's, not a sustained load: never saturation.
            _ => true,
        };
        c.tail = match (c.ttft_ms.p50, c.ttft_ms.p99) {
            (Some(p50), Some(p99)) if p50 > 0.0 => {
                if p99 > 1.5 * p50 {
                    Tail::Widening
                } else if b.is_some_and(|b| above && p50 > slos.knee_factor * b) {
                    if rising {
                        Tail::Shifted
                    } else {
                        Tail::ConvergedHigh
                    }
                } else {
                    Tail::Tight
                }
            }
            _ => Tail::Unknown,
        };
        below = Some((group, c.aggregate_tok_s));
    }
}

/// Tokens per day at the interactive ceiling, or why there is no figure.
fn tokens_per_day(at_ceiling: Option<&Cell>) -> (Option<f64>, Option<NoTokensPerDay>) {
    let served = |c: &Cell| c.ttft_ms.n.max(c.e2e_ms.n);
    match at_ceiling {
        None => (None, None),
        Some(c) if c.axis == Axis::InFlight => (None, Some(NoTokensPerDay::Live)),
        Some(c) if served(c) < TOKENS_PER_DAY_MIN_REQUESTS => {
            (None, Some(NoTokensPerDay::TooFew(served(c))))
        }
        Some(c) => (c.aggregate_tok_s.map(|t| t * 86_400.0), None),
    }
}

/// Ceilings, knee and failure mode per (bucket, arm) and axis, from its cells in level order.
fn provision(cells: &[Cell], base: &BTreeMap<Group, f64>, slos: &Slos) -> Vec<Provision> {
    let mut keyset: Vec<Group> = Vec::new();
    for g in cells.iter().map(group_of) {
        if !keyset.contains(&g) {
            keyset.push(g);
        }
    }
    keyset
        .into_iter()
        .map(|group| {
            let cs: Vec<&Cell> = cells.iter().filter(|c| group_of(c) == group).collect();
            let b = base.get(&group).copied();
            provision_of(group, &cs, b, slos)
        })
        .collect()
}

fn provision_of(group: Group, cs: &[&Cell], base: Option<f64>, slos: &Slos) -> Provision {
    let (bucket, arm_name, axis) = group;
    let mut ceiling = BTreeMap::new();
    let mut not_judged = Vec::new();
    for (name, _, _) in slos.list() {
        // Highest level such that it and every level below it meet the SLO; a level with
        // no verdict (nothing served, no TTFT) neither meets nor breaks it.
        let mut best = None;
        for c in cs {
            match c.slo.get(name) {
                Some(true) => best = Some(c.concurrency.clone()),
                Some(false) => break,
                None => {}
            }
        }
        if !cs.iter().any(|c| c.slo.contains_key(name)) {
            not_judged.push(name);
        }
        ceiling.insert(name, best);
    }
    let knee = base.and_then(|b| {
        cs.iter()
            .find(|c| c.ttft_ms.p95.is_some_and(|p| p > slos.knee_factor * b))
            .map(|c| c.concurrency.clone())
    });
    let last = cs.last();
    let failure_mode = match last {
        Some(c) if c.error_rate >= 0.01 => FailureMode::Errors,
        // Slower with load: a knee, or a tail that widened above the lowest level (one level
        // alone shows no growth with load).
        Some(c)
            if (cs.len() > 1 && !matches!(c.tail, Tail::Tight | Tail::Unknown))
                || knee.is_some() =>
        {
            FailureMode::Slower
        }
        _ => FailureMode::None,
    };
    let at_ceiling = ceiling
        .get("interactive")
        .and_then(|c| c.as_ref())
        .and_then(|label| cs.iter().find(|c| &c.concurrency == label));
    let (tpd, tpd_note) = tokens_per_day(at_ceiling.copied());
    let name = match &arm_name {
        Some(a) => format!("{bucket} [{a}]"),
        None => bucket,
    };
    Provision {
        bucket: name,
        ceiling,
        not_judged,
        top: last.map(|c| c.concurrency.clone()).unwrap_or_default(),
        knee,
        failure_mode,
        tokens_per_day_at_interactive_ceiling: tpd,
        tokens_per_day_note: None,
        tokens_per_day_missing: tpd_note,
        axis: match axis {
            Axis::Concurrency => None,
            a => Some(a),
        },
    }
}
