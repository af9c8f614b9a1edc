//! The HTML report: one self-contained file. It opens with the write-up's questions answered,
//! then the charts (each with the SLO thresholds it is judged against, and the gateway hop by
//! concurrency level, A/B and tap side by side), then the tables.

use std::fmt::Write;

use super::render::{
    api_rows, bucket_rows, cache_rows, cell_name, cell_rows, hop_rows, hop_title, key_rows,
    level_key, open_loop_rows, prov_rows, readings, slo_rows, split_rows, tap_rows, turn_rows,
};
use super::svg::{self, Threshold};
use super::{Cell, Dist, Report};

fn html_table<S: AsRef<str>>(head: &[S], rows: &[Vec<String>]) -> String {
    let mut s = String::from("<table><thead><tr>");
    for h in head {
        let _ = write!(s, "<th>{}</th>", svg::escape(h.as_ref()));
    }
    s.push_str("</tr></thead><tbody>");
    for r in rows {
        s.push_str("<tr>");
        for c in r {
            let class = if c == "MISS" { " class=\"miss\"" } else { "" };
            let _ = write!(s, "<td{class}>{}</td>", svg::escape(c));
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    s
}

pub fn html(r: &Report) -> String {
    // x axis: the concurrency levels seen (or, for open-loop cells, the rates), in order; one
    // series per bucket (and arm).
    let axis = |open_loop: bool| {
        let mut levels: Vec<(u64, String)> = r
            .cells
            .iter()
            .filter(|c| c.request_rate.is_some() == open_loop)
            .map(|c| (c.level, c.concurrency.clone()))
            .collect();
        levels.sort();
        levels.dedup();
        levels
    };
    let (levels, rates) = (axis(false), axis(true));
    let xs: Vec<String> = levels.iter().map(|l| l.1.clone()).collect();
    let mut names: Vec<String> = r.cells.iter().map(cell_name).collect();
    names.sort();
    names.dedup();
    let series_on = |levels: &[(u64, String)],
                     open_loop: bool,
                     f: &dyn Fn(&Cell) -> Option<f64>|
     -> Vec<(String, Vec<Option<f64>>)> {
        names
            .iter()
            .map(|nm| {
                let ys = levels
                    .iter()
                    .map(|(_, l)| {
                        r.cells
                            .iter()
                            .find(|c| {
                                &cell_name(c) == nm
                                    && &c.concurrency == l
                                    && c.request_rate.is_some() == open_loop
                            })
                            .and_then(f)
                    })
                    .collect();
                (nm.clone(), ys)
            })
            .filter(|(_, ys): &(String, Vec<Option<f64>>)| ys.iter().any(Option::is_some))
            .collect()
    };
    let series = |f: &dyn Fn(&Cell) -> Option<f64>| series_on(&levels, false, f);
    let cells_x: Vec<String> = r
        .cells
        .iter()
        .map(|c| match c.request_rate {
            Some(_) => format!("{} @{}", cell_name(c), c.concurrency),
            None => format!("{} C{}", cell_name(c), c.concurrency),
        })
        .collect();
    let pcts = |f: &dyn Fn(&Dist) -> Option<f64>| {
        r.cells.iter().map(|c| f(&c.ttft_ms)).collect::<Vec<_>>()
    };
    let ms = |name: &str, v: f64| (format!("{name} {v:.0} ms"), v);
    let ttft_slos: Vec<Threshold> = vec![
        ms("interactive", r.slos.ttft_interactive_ms),
        ms("strict", r.slos.ttft_strict_ms),
        ms("code completion", r.slos.ttft_code_completion_ms),
        ms("agents", r.slos.ttft_agents_ms),
    ];
    let tok_slos: Vec<Threshold> = vec![
        (
            format!("reading {:.0} tok/s", r.slos.reading_tok_s),
            r.slos.reading_tok_s,
        ),
        (
            format!("coding {:.0} tok/s", r.slos.coding_tok_s),
            r.slos.coding_tok_s,
        ),
    ];
    // The concurrency axis when there are concurrency cells, the rate axis when there are
    // open-loop ones; the per-cell bars either way.
    let by_level = !levels.is_empty();
    let mut charts = Vec::new();
    if by_level {
        charts.push(svg::lines(
            "TTFT p95 vs concurrency",
            "ms",
            &xs,
            &series(&|c| c.ttft_ms.p95),
            &ttft_slos,
        ));
    }
    if !rates.is_empty() {
        let xs: Vec<String> = rates.iter().map(|l| l.1.clone()).collect();
        charts.push(svg::lines(
            "TTFT p95 vs arrival rate (open loop)",
            "ms",
            &xs,
            &series_on(&rates, true, &|c| c.ttft_ms.p95),
            &ttft_slos,
        ));
    }
    charts.push(svg::bars(
        "TTFT p50 / p95 / p99 per cell",
        "ms",
        &cells_x,
        &[
            ("p50".into(), pcts(&|d| d.p50)),
            ("p95".into(), pcts(&|d| d.p95)),
            ("p99".into(), pcts(&|d| d.p99)),
        ],
        &ttft_slos,
    ));
    if by_level {
        charts.push(svg::lines(
            "Per-stream output tok/s (p50) vs concurrency",
            "tok/s",
            &xs,
            &series(&|c| c.tok_s_per_stream.p50),
            &tok_slos,
        ));
        charts.push(svg::lines(
            "E2E p50 vs concurrency",
            "s",
            &xs,
            &series(&|c| c.e2e_ms.p50.map(|v| v / 1000.0)),
            &[],
        ));
    }
    if let Some(c) = hop_chart(r) {
        charts.insert(0, c);
    }
    let mut s = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tokentap report</title><style>\
         body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 20px}\
         td,th{border:1px solid #ccc;padding:3px 7px;font-size:12px;text-align:right}th{background:#f3f3f3}\
         td.miss{background:#fdd;color:#900;font-weight:bold}.charts{display:flex;flex-wrap:wrap;gap:16px}\
         dl.answers dt{font-weight:bold;margin-top:8px}dl.answers dd{margin:2px 0 0 16px}</style></head><body>",
    );
    let _ = write!(
        s,
        "<h1>tokentap report</h1><p>{} records ({}).</p><dl class=\"answers\">",
        r.records, r.sources
    );
    for a in &r.answers {
        let _ = write!(
            s,
            "<dt>{}</dt><dd>{}</dd>",
            svg::escape(a.question),
            svg::escape(&a.answer)
        );
    }
    s.push_str("</dl><div class=\"charts\">");
    for c in &charts {
        s.push_str(c);
    }
    s.push_str("</div><h2>Per prompt shape (all concurrency levels)</h2>");
    let (h, rows) = bucket_rows(r);
    s += &html_table(&h, &rows);
    s.push_str("<h2>Per bucket × concurrency</h2>");
    let (h, rows) = cell_rows(r);
    s += &html_table(&h, &rows);
    if let Some((h, rows)) = open_loop_rows(r) {
        s.push_str("<h2>Open-loop cells: offered and achieved arrival rate</h2>");
        s += &html_table(&h, &rows);
    }
    s.push_str("<h2>SLO verdicts (p95)</h2>");
    let (h, rows) = slo_rows(r);
    s += &html_table(&h, &rows);
    s.push_str("<h2>Provisioning</h2>");
    let (h, rows) = prov_rows(r);
    s += &html_table(&h, &rows);
    s.push_str("<ul>");
    for line in readings(r) {
        let _ = write!(s, "<li>{}</li>", svg::escape(&line));
    }
    s.push_str("</ul>");
    if let (Some((h, rows)), Some(hop)) = (hop_rows(r), &r.gateway_hop) {
        let _ = write!(s, "<h2>{}</h2>", svg::escape(&hop_title(r)));
        s += &html_table(&h, &rows);
        let _ = write!(s, "<p>{}</p>", svg::escape(&hop.summary));
    }
    if let (Some((h, rows)), Some(t)) = (tap_rows(r), &r.gateway_tap) {
        s.push_str("<h2>Gateway tap: the hop on every joined request (ms)</h2>");
        s += &html_table(&h, &rows);
        let _ = write!(s, "<p>{}</p>", svg::escape(&t.summary));
    }
    if let Some((h, rows)) = split_rows(r) {
        s.push_str("<h2>Where TTFT went (medians, ms)</h2>");
        s += &html_table(&h, &rows);
    }
    s.push_str("<h2>Per API shape</h2>");
    let (h, rows) = api_rows(r);
    s += &html_table(&h, &rows);
    if let Some((h, rows)) = cache_rows(r) {
        s.push_str("<h2>TTFT by prefix-cache hit vs miss</h2>");
        s += &html_table(&h, &rows);
    }
    if let Some((h, rows)) = turn_rows(r) {
        s.push_str("<h2>Per conversation turn</h2>");
        s += &html_table(&h, &rows);
    }
    s.push_str("<h2>Per key</h2>");
    let (h, rows) = key_rows(r);
    s += &html_table(&h, &rows);
    s.push_str("</body></html>\n");
    s
}

/// The gateway's TTFT cost per concurrency level: the A/B's paired median beside the tap's.
fn hop_chart(r: &Report) -> Option<String> {
    let (hop, tap) = (r.gateway_hop.as_ref(), r.gateway_tap.as_ref());
    let mut levels: Vec<String> = hop
        .map(|h| h.by_concurrency.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    levels.extend(
        tap.map(|t| t.by_concurrency.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default(),
    );
    levels.sort_by_key(|l| level_key(l));
    levels.dedup();
    if levels.is_empty() {
        return None;
    }
    let mut series = Vec::new();
    if let Some(h) = hop {
        series.push((
            "A/B paired median".to_string(),
            levels
                .iter()
                .map(|l| h.by_concurrency.get(l).and_then(|s| s.ttft_ms.median))
                .collect(),
        ));
    }
    if let Some(t) = tap {
        series.push((
            "tap median".to_string(),
            levels
                .iter()
                .map(|l| t.by_concurrency.get(l).and_then(|s| s.ttft_ms.median))
                .collect(),
        ));
    }
    let xs: Vec<String> = levels.iter().map(|l| format!("C={l}")).collect();
    // The write-up budgets ~100 ms for the gateway.
    Some(svg::bars(
        "Gateway TTFT cost by concurrency: A/B vs tap",
        "ms",
        &xs,
        &series,
        &[("write-up budget 100 ms".to_string(), 100.0)],
    ))
}
