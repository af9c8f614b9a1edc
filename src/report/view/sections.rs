//! The report's tables beyond the cells: per API shape and per bucket, the prefix-cache split,
//! open-loop cells, conversation turns, and where TTFT went. Each returns a header and rows,
//! rendered as text, Markdown or HTML by the caller.

use super::grid::{dist3, n};
use crate::report::model::{
    Cell, Dist, Figures, Gauge, Report, ShapeRow, SplitCell, SteadyClock, Telemetry, TurnRow,
    STEADY_MIN_REQUESTS,
};
use crate::report::words::cell_name;

/// Per API shape.
pub(super) fn api_rows(r: &Report) -> (Vec<&'static str>, Vec<Vec<String>>) {
    shape_rows("api", &r.by_api)
}

/// Per bucket, pooled over concurrency levels.
pub(super) fn bucket_rows(r: &Report) -> (Vec<&'static str>, Vec<Vec<String>>) {
    shape_rows("bucket (all levels)", &r.by_bucket)
}

fn shape_rows(
    name: &'static str,
    rows: &std::collections::BTreeMap<String, ShapeRow>,
) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let head = vec![
        name,
        "n",
        "err%",
        "TTFT p50/95/99 ms",
        "TTFO p50/95/99 ms",
        "TPOT p50/95 ms",
        "E2E p50/95/99 ms",
        "tokens in/out (reasoning)",
    ];
    let rows = rows
        .iter()
        .map(|(api, s)| {
            vec![
                api.clone(),
                s.requests.to_string(),
                format!("{:.1}", 100.0 * s.error_rate),
                dist3(&s.ttft_ms),
                dist3(&s.ttfo_ms),
                format!("{}/{}", n(s.tpot_ms.p50, 1), n(s.tpot_ms.p95, 1)),
                dist3(&s.e2e_ms),
                format!(
                    "{}/{} ({})",
                    s.input_tokens, s.output_tokens, s.reasoning_tokens
                ),
            ]
        })
        .collect();
    (head, rows)
}

/// TTFT by prefix-cache hit vs miss, overall and per bucket.
pub(super) fn cache_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    let c = r.prefix_cache.as_ref()?;
    let head = vec![
        "scope",
        "hits",
        "TTFT p50/95/99 ms (hit)",
        "misses",
        "TTFT p50/95/99 ms (miss)",
    ];
    let row = |scope: &str, hit: &Dist, miss: &Dist| {
        vec![
            scope.to_string(),
            hit.n.to_string(),
            dist3(hit),
            miss.n.to_string(),
            dist3(miss),
        ]
    };
    let mut rows = vec![row("overall", &c.hit, &c.miss)];
    for (b, s) in &c.by_bucket {
        rows.push(row(b, &s.hit, &s.miss));
    }
    Some((head, rows))
}

/// Open-loop cells: offered against achieved rate, the client's queue and lag.
pub(super) fn open_loop_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    let cs: Vec<&Cell> = r
        .cells
        .iter()
        .filter(|c| c.request_rate.is_some())
        .collect();
    if cs.is_empty() {
        return None;
    }
    let head = vec![
        "bucket",
        "offered req/s",
        "scheduled req/s",
        "achieved req/s",
        "n",
        "client queue p50/p99 ms",
        "client lag p50/p99/max ms",
    ];
    let rows = cs
        .iter()
        .map(|c| {
            let q = c.client_queue_ms.as_ref();
            let l = c.client_lag_ms.as_ref();
            vec![
                cell_name(c),
                n(c.request_rate, 2),
                n(c.scheduled_rate, 2),
                n(c.achieved_rate, 2),
                c.requests.to_string(),
                format!(
                    "{}/{}",
                    n(q.and_then(|d| d.p50), 1),
                    n(q.and_then(|d| d.p99), 1)
                ),
                format!(
                    "{}/{}/{}",
                    n(l.and_then(|d| d.p50), 1),
                    n(l.and_then(|d| d.p99), 1),
                    n(l.and_then(|d| d.max), 1)
                ),
            ]
        })
        .collect();
    Some((head, rows))
}

/// Per conversation turn (`bench --multi-turn`).
pub(super) fn turn_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    if r.by_turn.is_empty() {
        return None;
    }
    let head = vec![
        "turn",
        "n",
        "err%",
        "TTFT p50/95/99 ms",
        "prompt tok p50",
        "cache hits",
        "cached tokens",
    ];
    let mut turns: Vec<(&String, &TurnRow)> = r.by_turn.iter().collect();
    turns.sort_by_key(|(t, _)| t.parse::<u64>().unwrap_or(u64::MAX));
    let pc = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{:.0}%", 100.0 * v));
    let rows = turns
        .iter()
        .map(|(t, s)| {
            vec![
                (*t).clone(),
                s.requests.to_string(),
                format!("{:.1}", 100.0 * s.error_rate),
                dist3(&s.ttft_ms),
                n(s.input_tokens_median, 0),
                pc(s.cache_hit_rate),
                pc(s.cached_token_share),
            ]
        })
        .collect();
    Some((head, rows))
}

/// Where TTFT went, per cell (medians), when any record says.
pub(super) fn split_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    if r.cells.iter().all(|c| c.ttft_split.is_none()) {
        return None;
    }
    let head = vec![
        "bucket",
        "C",
        "TTFT p50",
        "tokentap",
        "upstream headers",
        "engine queue",
        "engine prefill",
        "outside engine",
        "missing",
    ];
    let rows = r
        .cells
        .iter()
        .map(|c| {
            let sp = c.ttft_split.as_ref();
            let f = |g: &dyn Fn(&SplitCell) -> Option<f64>| n(sp.and_then(g), 2);
            vec![
                cell_name(c),
                c.concurrency.clone(),
                n(c.ttft_ms.p50, 1),
                f(&|s| s.proxy_ms),
                f(&|s| s.upstream_headers_ms),
                f(&|s| s.engine_queue_ms),
                f(&|s| s.engine_prefill_ms),
                f(&|s| s.outside_engine_ms),
                sp.map_or_else(
                    || "no split: no record of this cell says".into(),
                    |s| s.missing.clone().unwrap_or_default(),
                ),
            ]
        })
        .collect();
    Some((head, rows))
}

/// The engine's and GPUs' figures per cell (bench's scrapes); GPU columns only when DCGM was
/// scraped, MBU and MFU only when the card's peaks were given.
pub(super) fn engine_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    let cells: Vec<(&Cell, &Telemetry)> = r
        .cells
        .iter()
        .filter_map(|c| Some((c, c.engine.as_ref()?)))
        .collect();
    if cells.is_empty() {
        return None;
    }
    let dcgm = cells
        .iter()
        .any(|(_, t)| t.power_w.is_some() || t.gpu_util_pct.is_some());
    let peaks = cells
        .iter()
        .any(|(_, t)| t.mbu.is_some() || t.mfu.is_some());
    let mut head = vec![
        "cell",
        "C",
        "KV mean/peak %",
        "running mean/peak",
        "waiting mean/peak",
        "preempt/req",
        "prefix hit %",
        "TFLOP/s/GPU",
        "GB/s/GPU",
    ];
    if peaks {
        head.extend(["MBU %", "MFU %"]);
    }
    if dcgm {
        head.extend(["GPU util %", "DRAM active %", "power W", "J/token"]);
    }
    let g = |v: Option<Gauge>, scale: f64, d: usize| match v {
        Some(g) => format!(
            "{}/{}",
            n(Some(g.mean * scale), d),
            n(Some(g.peak * scale), d)
        ),
        None => "-".into(),
    };
    let rows = cells
        .iter()
        .map(|(c, t)| {
            let mut row = vec![
                cell_name(c),
                c.concurrency.clone(),
                g(t.kv_cache_usage, 100.0, 0),
                g(t.running, 1.0, 1),
                g(t.waiting, 1.0, 1),
                n(t.preemptions_per_request, 2),
                n(t.prefix_cache_hit_rate.map(|h| h * 100.0), 0),
                n(t.flops_per_s_per_gpu.map(|f| f / 1e12), 2),
                n(t.read_bytes_per_s_per_gpu.map(|b| b / 1e9), 0),
            ];
            if peaks {
                row.push(n(t.mbu.map(|m| m * 100.0), 0));
                row.push(n(t.mfu.map(|m| m * 100.0), 1));
            }
            if dcgm {
                row.push(n(t.gpu_util_pct.map(|u| u.mean), 0));
                row.push(n(t.dram_active.map(|d| d.mean * 100.0), 0));
                row.push(n(t.power_w.map(|p| p.mean), 0));
                row.push(n(t.j_per_token, 2));
            }
            row
        })
        .collect();
    Some((head, rows))
}

/// Per bucket, the binding constraint at its knee or ceiling, with its figures.
pub(super) fn binding_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    if r.binding.is_empty() {
        return None;
    }
    let head = vec![
        "bucket",
        "at",
        "why there",
        "binding constraint",
        "KV peak %",
        "preempt/req",
        "waiting mean",
        "MBU %",
        "MFU %",
    ];
    let rows = r
        .binding
        .iter()
        .map(|b| {
            let f = &b.figures;
            vec![
                b.bucket.clone(),
                b.at.clone().unwrap_or_else(|| "-".into()),
                b.point.as_str().to_owned(),
                b.constraint.as_str().to_owned(),
                n(f.kv_cache_usage_peak.map(|k| k * 100.0), 0),
                n(f.preemptions_per_request, 2),
                n(f.waiting_mean, 1),
                n(f.mbu.map(|m| m * 100.0), 0),
                n(f.mfu.map(|m| m * 100.0), 0),
            ]
        })
        .collect();
    Some((head, rows))
}

/// Each closed-loop cell's plateau beside the whole cell, and which of the two the other
/// tables give.
pub(super) fn steady_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    let rows: Vec<Vec<String>> = r
        .cells
        .iter()
        .filter_map(|c| {
            let s = c.steady_state.as_ref()?;
            let (ttft, tpot) = match &c.whole_cell {
                Some(w) => (&w.ttft_ms, &w.tpot_ms),
                None => (&c.ttft_ms, &c.tpot_ms),
            };
            let used = match c.figures {
                Figures::SteadyState => "plateau".to_owned(),
                Figures::WholeCell
                    if c.level == 1 && c.axis == crate::report::Axis::Concurrency =>
                {
                    "whole cell (C=1: the same)".to_owned()
                }
                Figures::WholeCell if s.requests < STEADY_MIN_REQUESTS => {
                    format!("whole cell (plateau < {})", STEADY_MIN_REQUESTS)
                }
                Figures::WholeCell => "whole cell".to_owned(),
            };
            let clock = match s.clock {
                SteadyClock::Run => "run",
                SteadyClock::Cell => "cell",
            };
            Some(vec![
                cell_name(c),
                c.concurrency.clone(),
                format!("{:.0}–{:.0} ({clock})", s.from_ms, s.to_ms),
                format!("{} of {}", s.requests, c.requests),
                used,
                format!("{}/{}", n(s.ttft_ms.p50, 0), n(s.ttft_ms.p95, 0)),
                format!("{}/{}", n(ttft.p50, 0), n(ttft.p95, 0)),
                format!("{}/{}", n(s.tpot_ms.p50, 1), n(s.tpot_ms.p95, 1)),
                format!("{}/{}", n(tpot.p50, 1), n(tpot.p95, 1)),
            ])
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let head = vec![
        "cell",
        "C",
        "plateau ms (clock)",
        "requests",
        "figures used",
        "TTFT p50/95 plateau",
        "TTFT p50/95 whole cell",
        "TPOT p50/95 plateau",
        "TPOT p50/95 whole cell",
    ];
    Some((head, rows))
}

/// The line every format prints when some cell's figures are its plateau's.
pub(super) fn note(cells: &[Cell]) -> Option<String> {
    let n = cells
        .iter()
        .filter(|c| c.figures == Figures::SteadyState)
        .count();
    (n > 0).then(|| {
        format!(
            "Steady state: {n} of {} cells take their latency figures, SLO verdicts and goodput \
             from their plateau (C in flight; ramp-up and drain left out), marked \"plateau\" \
             in n; their requests, errors, tokens and aggregate tok/s stay whole cells'. \
             `--whole-cell` gives whole cells throughout.",
            cells.len()
        )
    })
}
