//! Rendering a computed [`Report`]: terminal table, Markdown, JSON (stable schema) or HTML.

use super::answers::ceiling_words;
use super::hop::DiffStats;
pub(super) use super::sections::{
    api_rows, binding_rows, bucket_rows, cache_rows, engine_rows, open_loop_rows, split_rows,
    steady_rows, turn_rows,
};
use super::{Axis, Cell, Dist, Report};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Md,
    Json,
    Html,
}

pub(super) fn n(v: Option<f64>, d: usize) -> String {
    v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| "-".into())
}

pub(super) fn cell_name(c: &Cell) -> String {
    match &c.arm {
        Some(a) => format!("{} [{a}]", c.bucket),
        None => c.bucket.clone(),
    }
}

pub(super) fn dist3(d: &Dist) -> String {
    format!("{}/{}/{}", n(d.p50, 0), n(d.p95, 0), n(d.p99, 0))
}

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
                    (super::steady::Figures::SteadyState, Some(p)) => {
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
        "ttft" => format!("{name} (TTFT p95 ≤ {thr:.0} ms)"),
        _ => format!("{name} (≥ {thr:.0} tok/s)"),
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
            row.push(p.failure_mode.into());
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

/// The sort key of a concurrency label: `8` → 8, `5-8` → 8.
pub(super) fn level_key(label: &str) -> u64 {
    label
        .rsplit('-')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
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

pub(crate) fn text_table<S: AsRef<str>>(head: &[S], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.as_ref().chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = w[i]))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut s = line(head.iter().map(|h| h.as_ref()).collect());
    s.push('\n');
    for r in rows {
        s.push_str(line(r.iter().map(String::as_str).collect()).trim_end());
        s.push('\n');
    }
    s
}

/// A GFM table: a header row, a delimiter row with one `---` per column, a row per row; a `|`
/// inside a cell is escaped.
pub(crate) fn md_table<S: AsRef<str>>(head: &[S], rows: &[Vec<String>]) -> String {
    let esc = |c: &str| c.replace('|', "\\|");
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    let mut s = line(head.iter().map(|h| esc(h.as_ref())).collect());
    s.push_str(&line(vec!["---".to_owned(); head.len()]));
    for r in rows {
        s.push_str(&line(r.iter().map(|c| esc(c)).collect()));
    }
    s
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
            Some("request_rate") | Some("in_flight") => "",
            _ => "C=",
        };
        out.push(format!(
            "{}: interactive (TTFT p95 < {:.0} ms) holds up to {}; knee {}; at the highest level measured the failure mode is {}.",
            p.bucket,
            r.slos.ttft_interactive_ms,
            ceiling_words(p, "interactive"),
            p.knee.clone().map(|k| format!("at {c}{k}")).unwrap_or_else(|| "not reached".into()),
            p.failure_mode
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

pub fn render(r: &Report, f: Format) -> String {
    match f {
        Format::Json => serde_json::to_string_pretty(r).unwrap_or_default() + "\n",
        Format::Table => {
            let mut s = format!(
                "tokentap report — {} records ({})\n{}\n\n",
                r.records, r.sources, r.judged
            );
            for a in &r.answers {
                s += &format!("{}\n  {}\n", a.question, a.answer);
            }
            if let Some(note) = super::steady::note(&r.cells) {
                s += &format!("\n{note}\n");
            }
            s += "\nPer prompt shape (all concurrency levels)\n";
            let (h, rows) = bucket_rows(r);
            s += &text_table(&h, &rows);
            s.push('\n');
            let (h, rows) = cell_rows(r);
            s += &text_table(&h, &rows);
            if let Some((h, rows)) = open_loop_rows(r) {
                s += "\nOpen-loop cells: offered and achieved arrival rate\n";
                s += &text_table(&h, &rows);
            }
            s += "\nSLO verdicts at p95\n";
            let (h, rows) = slo_rows(r);
            s += &text_table(&h, &rows);
            s += "\nProvisioning\n";
            let (h, rows) = prov_rows(r);
            s += &text_table(&h, &rows);
            for line in readings(r) {
                s += &format!("- {line}\n");
            }
            if let (Some((h, rows)), Some(hop)) = (hop_rows(r), &r.gateway_hop) {
                s += &format!("\n{}\n", hop_title(r));
                s += &text_table(&h, &rows);
                s += &format!("- {}\n", hop.summary);
            }
            if let (Some((h, rows)), Some(t)) = (tap_rows(r), &r.gateway_tap) {
                s += "\nGateway tap: the hop on every joined request (ms)\n";
                s += &text_table(&h, &rows);
                s += &format!("- {}\n", t.summary);
            }
            if let Some((h, rows)) = split_rows(r) {
                s += "\nWhere TTFT went (medians, ms)\n";
                s += &text_table(&h, &rows);
            }
            if let Some((h, rows)) = engine_rows(r) {
                s += "\nEngine and GPU per cell (bench's scrapes)\n";
                s += &text_table(&h, &rows);
            }
            if let Some((h, rows)) = binding_rows(r) {
                s += "\nBinding constraint per bucket\n";
                s += &text_table(&h, &rows);
            }
            if let Some((h, rows)) = steady_rows(r) {
                s += "\nSteady state: each cell's plateau beside the whole cell\n";
                s += &text_table(&h, &rows);
            }
            s += "\nPer API shape\n";
            let (h, rows) = api_rows(r);
            s += &text_table(&h, &rows);
            if let Some((h, rows)) = super::streaming::table(&r.streaming) {
                s += &format!("\n{}\n", super::streaming::TITLE);
                s += &text_table(&h, &rows);
            }
            if let Some((h, rows)) = super::runs::table(&r.spread) {
                s += &format!("\n{}\n", super::runs::TITLE);
                s += &text_table(&h, &rows);
            }
            if let Some((h, rows)) = other_rows(r) {
                s += "\nNot judged: client errors and other traffic\n";
                s += &text_table(&h, &rows);
            }
            if let Some((h, rows)) = cache_rows(r) {
                s += "\nTTFT by prefix-cache hit vs miss\n";
                s += &text_table(&h, &rows);
            }
            if let Some((h, rows)) = turn_rows(r) {
                s += "\nPer conversation turn\n";
                s += &text_table(&h, &rows);
            }
            s += "\nPer key (top by requests)\n";
            let (h, rows) = key_rows(r);
            s += &text_table(&h, &rows);
            s
        }
        Format::Md => {
            let mut s = format!(
                "# tokentap report\n\n{} records ({}). {}\n\n",
                r.records, r.sources, r.judged
            );
            for a in &r.answers {
                s += &format!("- **{}** {}\n", a.question, a.answer);
            }
            if let Some(note) = super::steady::note(&r.cells) {
                s += &format!("\n{note}\n");
            }
            s += "\n## Per prompt shape (all concurrency levels)\n\n";
            let (h, rows) = bucket_rows(r);
            s += &md_table(&h, &rows);
            s += "\n## Per bucket × concurrency\n\n";
            let (h, rows) = cell_rows(r);
            s += &md_table(&h, &rows);
            if let Some((h, rows)) = open_loop_rows(r) {
                s += "\n## Open-loop cells: offered and achieved arrival rate\n\n";
                s += &md_table(&h, &rows);
            }
            s += "\n## SLO verdicts (p95)\n\n";
            let (h, rows) = slo_rows(r);
            s += &md_table(&h, &rows);
            s += "\n## Provisioning\n\n";
            let (h, rows) = prov_rows(r);
            s += &md_table(&h, &rows);
            s += "\n";
            for line in readings(r) {
                s += &format!("- {line}\n");
            }
            if let (Some((h, rows)), Some(hop)) = (hop_rows(r), &r.gateway_hop) {
                s += &format!("\n## {}\n\n", hop_title(r));
                s += &md_table(&h, &rows);
                s += &format!("\n{}\n", hop.summary);
            }
            if let (Some((h, rows)), Some(t)) = (tap_rows(r), &r.gateway_tap) {
                s += "\n## Gateway tap (ms)\n\n";
                s += &md_table(&h, &rows);
                s += &format!("\n{}\n", t.summary);
            }
            if let Some((h, rows)) = split_rows(r) {
                s += "\n## Where TTFT went (medians, ms)\n\n";
                s += &md_table(&h, &rows);
            }
            if let Some((h, rows)) = engine_rows(r) {
                s += "\n## Engine and GPU per cell (bench's scrapes)\n\n";
                s += &md_table(&h, &rows);
            }
            if let Some((h, rows)) = binding_rows(r) {
                s += "\n## Binding constraint per bucket\n\n";
                s += &md_table(&h, &rows);
            }
            if let Some((h, rows)) = steady_rows(r) {
                s += "\n## Steady state: each cell's plateau beside the whole cell\n\n";
                s += &md_table(&h, &rows);
            }
            s += "\n## Per API shape\n\n";
            let (h, rows) = api_rows(r);
            s += &md_table(&h, &rows);
            if let Some((h, rows)) = super::streaming::table(&r.streaming) {
                s += &format!("\n## {}\n\n", super::streaming::TITLE);
                s += &md_table(&h, &rows);
            }
            if let Some((h, rows)) = super::runs::table(&r.spread) {
                s += &format!("\n## {}\n\n", super::runs::TITLE);
                s += &md_table(&h, &rows);
            }
            if let Some((h, rows)) = other_rows(r) {
                s += "\n## Not judged: client errors and other traffic\n\n";
                s += &md_table(&h, &rows);
            }
            if let Some((h, rows)) = cache_rows(r) {
                s += "\n## TTFT by prefix-cache hit vs miss\n\n";
                s += &md_table(&h, &rows);
            }
            if let Some((h, rows)) = turn_rows(r) {
                s += "\n## Per conversation turn\n\n";
                s += &md_table(&h, &rows);
            }
            s += "\n## Per key\n\n";
            let (h, rows) = key_rows(r);
            s += &md_table(&h, &rows);
            s
        }
        Format::Html => super::html::html(r),
    }
}
