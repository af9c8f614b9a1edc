//! Rendering a computed [`Report`]: terminal table, Markdown, JSON (stable schema) or HTML.

use super::grid::{dist3, n};
use crate::report::model::{Axis, Cell, DiffStats, Figures, Report, SloKind};
use crate::report::words::{ceiling_words, cell_name, level_key};

/// A cell's level as the tables show it: live in-flight levels say so when the report also has
/// a load generator's levels.
pub(super) fn level_cell(r: &Report, c: &Cell) -> String {
    let mixed = c.axis == Axis::InFlight && r.cells.iter().any(|o| o.axis == Axis::Concurrency);
    if mixed {
        format!("{} live", c.concurrency)
    } else {
        c.concurrency.clone()
    }
}

/// Rows of the main table: header + one row per cell.
pub(super) fn cell_rows(r: &Report) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let head = vec![
        "bucket",
        "C",
        "n",
        "err%",
        "TTFT p50/95/99 ms",
        "TPOT p50/95 ms",
        "tok/s/stream p50",
        "agg tok/s",
        "E2E p50/95/99 ms",
        "in/out tok",
        "tail",
        "goodput",
    ];
    let rows = r
        .cells
        .iter()
        .map(|c| {
            vec![
                cell_name(c),
                level_cell(r, c),
                match (c.figures, &c.steady_state) {
                    (Figures::SteadyState, Some(p)) => {
                        format!("{} ({} plateau)", c.requests, p.requests)
                    }
                    _ => c.requests.to_string(),
                },
                format!("{:.1}", c.error_rate * 100.0),
                dist3(&c.ttft_ms),
                format!("{}/{}", n(c.tpot_ms.p50, 1), n(c.tpot_ms.p95, 1)),
                n(c.tok_s_per_stream.p50, 1),
                n(c.aggregate_tok_s, 0),
                dist3(&c.e2e_ms),
                format!(
                    "{}/{}",
                    n(c.input_tokens_median, 0),
                    n(c.output_tokens_median, 0)
                ),
                c.tail.as_str().to_owned(),
                format!("{:.0}%", c.goodput * 100.0),
            ]
        })
        .collect();
    (head, rows)
}

pub(super) fn slo_rows(r: &Report) -> (Vec<String>, Vec<Vec<String>>) {
    let names: Vec<&str> = r.slos.list().iter().map(|s| s.0).collect();
    let mut head = vec!["bucket".to_string(), "C".to_string()];
    head.extend(r.slos.list().iter().map(|(name, kind, thr)| match *kind {
        SloKind::Ttft => format!("{name} (TTFT p95 ≤ {thr:.0} ms)"),
        SloKind::TokS => format!("{name} (≥ {thr:.0} tok/s)"),
    }));
    let rows = r
        .cells
        .iter()
        .map(|c| {
            let mut row = vec![cell_name(c), level_cell(r, c)];
            row.extend(names.iter().map(|nm| match c.slo.get(nm) {
                Some(true) => "pass".into(),
                Some(false) => "MISS".into(),
                // Nothing served to judge.
                None => "-".into(),
            }));
            row
        })
        .collect();
    (head, rows)
}

pub(super) fn prov_rows(r: &Report) -> (Vec<String>, Vec<Vec<String>>) {
    let names: Vec<&str> = r.slos.list().iter().map(|s| s.0).collect();
    let mut head = vec!["bucket".to_string()];
    head.extend(names.iter().map(|s| format!("max C: {s}")));
    head.extend([
        "knee".into(),
        "failure mode".into(),
        "tokens/day at interactive ceiling".into(),
    ]);
    let rows = r
        .provisioning
        .iter()
        .map(|p| {
            let mut row = vec![p.bucket.clone()];
            row.extend(names.iter().map(|nm| ceiling_words(p, nm)));
            row.push(p.knee.clone().unwrap_or_else(|| "not reached".into()));
            row.push(p.failure_mode.as_str().into());
            row.push(
                p.tokens_per_day_at_interactive_ceiling
                    .map(|t| format!("{:.1} M", t / 1e6))
                    .or_else(|| p.tokens_per_day_note.as_ref().map(|n| format!("- ({n})")))
                    .unwrap_or_else(|| "-".into()),
            );
            row
        })
        .collect();
    (head, rows)
}

pub(super) fn key_rows(r: &Report) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let head = vec![
        "key",
        "arm",
        "n",
        "err%",
        "client err",
        "tokens in",
        "tokens out",
        "TTFT p50/95/99",
        "TPOT p50/95/99",
        "E2E p50/95/99",
    ];
    let rows = r
        .keys
        .iter()
        .map(|k| {
            vec![
                k.key_id.clone(),
                k.arm.clone().unwrap_or_else(|| "-".into()),
                k.requests.to_string(),
                format!("{:.1}", k.error_rate * 100.0),
                k.client_errors.to_string(),
                k.input_tokens.to_string(),
                k.output_tokens.to_string(),
                dist3(&k.ttft_ms),
                format!(
                    "{}/{}/{}",
                    n(k.tpot_ms.p50, 1),
                    n(k.tpot_ms.p95, 1),
                    n(k.tpot_ms.p99, 1)
                ),
                dist3(&k.e2e_ms),
            ]
        })
        .collect();
    (head, rows)
}

/// One scope's statistics rows: (scope, count, metric) and median, p95, p99, CI of the median.
fn stat_rows(rows: &mut Vec<Vec<String>>, scope: &str, count: usize, stats: &[(&str, &DiffStats)]) {
    for (name, d) in stats {
        rows.push(vec![
            scope.to_string(),
            count.to_string(),
            name.to_string(),
            n(d.median, 2),
            n(d.p95, 2),
            n(d.p99, 2),
            d.ci95
                .map(|[a, b]| format!("[{a:.2}, {b:.2}]"))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
}

/// Scopes of a section: overall, then per concurrency level in order, then per bucket.
fn scoped<'a, T>(
    overall: (String, &'a T),
    by_level: &'a std::collections::BTreeMap<String, T>,
    by_bucket: &'a std::collections::BTreeMap<String, T>,
) -> Vec<(String, &'a T)> {
    let mut levels: Vec<(&String, &T)> = by_level.iter().collect();
    levels.sort_by_key(|(l, _)| level_key(l));
    std::iter::once(overall)
        .chain(levels.into_iter().map(|(l, s)| (format!("C={l}"), s)))
        .chain(by_bucket.iter().map(|(b, s)| (b.clone(), s)))
        .collect()
}

pub(super) fn hop_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    let h = r.gateway_hop.as_ref()?;
    let head = vec![
        "scope",
        "pairs",
        "metric",
        "median",
        "p95",
        "p99",
        "95% CI of median",
    ];
    let mut rows = Vec::new();
    let overall = (
        format!("overall (C={})", h.pooled_over.join(",")),
        &h.overall,
    );
    for (scope, set) in scoped(overall, &h.by_concurrency, &h.by_bucket) {
        let stats = [
            ("TTFT", &set.ttft_ms),
            ("headers", &set.upstream_headers_ms),
            ("TPOT", &set.tpot_ms),
            ("E2E", &set.e2e_ms),
        ];
        stat_rows(&mut rows, &scope, set.pairs, &stats);
    }
    Some((head, rows))
}

/// The gateway tap's table: overall, per level, per bucket; each part's median/p95/p99/CI.
pub(super) fn tap_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    let t = r.gateway_tap.as_ref()?;
    let head = vec![
        "scope",
        "joined",
        "part",
        "median",
        "p95",
        "p99",
        "95% CI of median",
    ];
    let mut rows = Vec::new();
    for (scope, set) in scoped(
        ("overall".into(), &t.overall),
        &t.by_concurrency,
        &t.by_bucket,
    ) {
        let stats = [
            ("TTFT hop", &set.ttft_ms),
            ("admission", &set.admission_ms),
            ("relay", &set.relay_ms),
        ];
        stat_rows(&mut rows, &scope, set.joined, &stats);
    }
    Some((head, rows))
}

pub(super) fn hop_title(r: &Report) -> String {
    r.gateway_hop
        .as_ref()
        .map(|h| {
            format!(
                "Gateway hop: {} − {} (paired, ms)",
                h.gateway_arm, h.direct_arm
            )
        })
        .unwrap_or_default()
}

/// The not-judged requests: by endpoint, method and status.
pub(super) fn other_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    if r.other_traffic.is_empty() {
        return None;
    }
    let head = vec!["endpoint", "method", "status", "class", "n"];
    let rows = r
        .other_traffic
        .iter()
        .map(|o| {
            vec![
                o.endpoint.clone(),
                if o.method.is_empty() {
                    "-".into()
                } else {
                    o.method.clone()
                },
                if o.status == 0 {
                    "-".into()
                } else {
                    o.status.to_string()
                },
                o.class.as_str().to_owned(),
                o.requests.to_string(),
            ]
        })
        .collect();
    Some((head, rows))
}

pub(super) fn readings(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for p in &r.provisioning {
        let c = match p.axis {
            Some(Axis::RequestRate) | Some(Axis::InFlight) => "",
            _ => "C=",
        };
        let holds = match p.not_judged.contains(&"interactive") {
            true => "is not judged (nothing streamed)".to_owned(),
            false => format!("holds up to {}", ceiling_words(p, "interactive")),
        };
        out.push(format!(
            "{}: interactive (TTFT p95 ≤ {:.0} ms) {holds}; knee {}; at the highest level measured the failure mode is {}.",
            p.bucket,
            r.slos.ttft_interactive_ms,
            p.knee.clone().map(|k| format!("at {c}{k}")).unwrap_or_else(|| "not reached".into()),
            p.failure_mode.as_str()
        ));
    }
    if r.in_flight.n > 0 {
        out.push(format!(
            "Requests in flight at admission (live traffic): p50 {} / p95 {} / p99 {} / max {} — size by this, not by user count.",
            n(r.in_flight.p50, 0),
            n(r.in_flight.p95, 0),
            n(r.in_flight.p99, 0),
            n(r.in_flight.max, 0)
        ));
    }
    out
}
