//! Rendering a computed [`Report`]: terminal table, Markdown, JSON (stable schema) or HTML.

use std::fmt::Write;

use super::{svg, Cell, Dist, Report};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Md,
    Json,
    Html,
}

fn n(v: Option<f64>, d: usize) -> String {
    v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| "-".into())
}

fn cell_name(c: &Cell) -> String {
    match &c.arm {
        Some(a) => format!("{} [{a}]", c.bucket),
        None => c.bucket.clone(),
    }
}

fn dist3(d: &Dist) -> String {
    format!("{}/{}/{}", n(d.p50, 0), n(d.p95, 0), n(d.p99, 0))
}

/// Rows of the main table: header + one row per cell.
fn cell_rows(r: &Report) -> (Vec<&'static str>, Vec<Vec<String>>) {
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
                c.concurrency.clone(),
                c.requests.to_string(),
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
                c.tail.to_string(),
                format!("{:.0}%", c.goodput * 100.0),
            ]
        })
        .collect();
    (head, rows)
}

fn slo_rows(r: &Report) -> (Vec<String>, Vec<Vec<String>>) {
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
            let mut row = vec![cell_name(c), c.concurrency.clone()];
            row.extend(names.iter().map(|nm| {
                if c.slo.get(nm).copied().unwrap_or(false) {
                    "pass".into()
                } else {
                    "MISS".into()
                }
            }));
            row
        })
        .collect();
    (head, rows)
}

fn prov_rows(r: &Report) -> (Vec<String>, Vec<Vec<String>>) {
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
            row.extend(names.iter().map(|nm| {
                p.ceiling
                    .get(nm)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| "none".into())
            }));
            row.push(p.knee.clone().unwrap_or_else(|| "not reached".into()));
            row.push(p.failure_mode.into());
            row.push(
                p.tokens_per_day_at_interactive_ceiling
                    .map(|t| format!("{:.1} M", t / 1e6))
                    .unwrap_or_else(|| "-".into()),
            );
            row
        })
        .collect();
    (head, rows)
}

fn key_rows(r: &Report) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let head = vec![
        "key",
        "arm",
        "n",
        "err%",
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

fn hop_rows(r: &Report) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
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
    let mut add = |scope: &str, set: &super::hop::HopSet| {
        for (name, d) in [
            ("TTFT", &set.ttft_ms),
            ("headers", &set.upstream_headers_ms),
            ("TPOT", &set.tpot_ms),
            ("E2E", &set.e2e_ms),
        ] {
            rows.push(vec![
                scope.to_string(),
                set.pairs.to_string(),
                name.to_string(),
                n(d.median, 2),
                n(d.p95, 2),
                n(d.p99, 2),
                d.ci95
                    .map(|[a, b]| format!("[{a:.2}, {b:.2}]"))
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
    };
    add("overall", &h.overall);
    for (b, set) in &h.by_bucket {
        add(b, set);
    }
    Some((head, rows))
}

fn hop_title(r: &Report) -> String {
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

fn text_table<S: AsRef<str>>(head: &[S], rows: &[Vec<String>]) -> String {
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

fn md_table<S: AsRef<str>>(head: &[S], rows: &[Vec<String>]) -> String {
    let mut s = format!(
        "| {} |\n|{}|\n",
        head.iter()
            .map(|h| h.as_ref())
            .collect::<Vec<_>>()
            .join(" | "),
        " --- |".repeat(head.len())
    );
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

fn readings(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for p in &r.provisioning {
        let inter = p.ceiling.get("interactive").cloned().flatten();
        out.push(format!(
            "{}: interactive (TTFT p95 < {:.0} ms) holds up to C={}; knee {}; at the highest level measured the failure mode is {}.",
            p.bucket,
            r.slos.ttft_interactive_ms,
            inter.unwrap_or_else(|| "none".into()),
            p.knee.clone().map(|k| format!("at C={k}")).unwrap_or_else(|| "not reached".into()),
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
                "tokentap report — {} records ({})\n\n",
                r.records, r.sources
            );
            let (h, rows) = cell_rows(r);
            s += &text_table(&h, &rows);
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
            s += "\nPer key (top by requests)\n";
            let (h, rows) = key_rows(r);
            s += &text_table(&h, &rows);
            s
        }
        Format::Md => {
            let mut s = format!(
                "# tokentap report\n\n{} records ({}).\n\n## Per bucket × concurrency\n\n",
                r.records, r.sources
            );
            let (h, rows) = cell_rows(r);
            s += &md_table(&h, &rows);
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
            s += "\n## Per key\n\n";
            let (h, rows) = key_rows(r);
            s += &md_table(&h, &rows);
            s
        }
        Format::Html => html(r),
    }
}

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

fn html(r: &Report) -> String {
    // x axis: the concurrency levels seen, in order; one series per bucket (and arm).
    let mut levels: Vec<(u64, String)> = r
        .cells
        .iter()
        .map(|c| (c.level, c.concurrency.clone()))
        .collect();
    levels.sort();
    levels.dedup();
    let xs: Vec<String> = levels.iter().map(|l| l.1.clone()).collect();
    let mut names: Vec<String> = r.cells.iter().map(cell_name).collect();
    names.sort();
    names.dedup();
    let series = |f: &dyn Fn(&Cell) -> Option<f64>| -> Vec<(String, Vec<Option<f64>>)> {
        names
            .iter()
            .map(|nm| {
                let ys = levels
                    .iter()
                    .map(|(_, l)| {
                        r.cells
                            .iter()
                            .find(|c| &cell_name(c) == nm && &c.concurrency == l)
                            .and_then(f)
                    })
                    .collect();
                (nm.clone(), ys)
            })
            .collect()
    };
    let cells_x: Vec<String> = r
        .cells
        .iter()
        .map(|c| format!("{} C{}", cell_name(c), c.concurrency))
        .collect();
    let pcts = |f: &dyn Fn(&Dist) -> Option<f64>| {
        r.cells.iter().map(|c| f(&c.ttft_ms)).collect::<Vec<_>>()
    };
    let charts = [
        svg::lines(
            "TTFT p95 vs concurrency",
            "ms",
            &xs,
            &series(&|c| c.ttft_ms.p95),
        ),
        svg::bars(
            "TTFT p50 / p95 / p99 per cell",
            "ms",
            &cells_x,
            &[
                ("p50".into(), pcts(&|d| d.p50)),
                ("p95".into(), pcts(&|d| d.p95)),
                ("p99".into(), pcts(&|d| d.p99)),
            ],
        ),
        svg::lines(
            "Per-stream output tok/s (p50) vs concurrency",
            "tok/s",
            &xs,
            &series(&|c| c.tok_s_per_stream.p50),
        ),
        svg::lines(
            "E2E p50 vs concurrency",
            "s",
            &xs,
            &series(&|c| c.e2e_ms.p50.map(|v| v / 1000.0)),
        ),
    ];
    let mut s = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tokentap report</title><style>\
         body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 20px}\
         td,th{border:1px solid #ccc;padding:3px 7px;font-size:12px;text-align:right}th{background:#f3f3f3}\
         td.miss{background:#fdd;color:#900;font-weight:bold}.charts{display:flex;flex-wrap:wrap;gap:16px}</style></head><body>",
    );
    let _ = write!(
        s,
        "<h1>tokentap report</h1><p>{} records ({}).</p><div class=\"charts\">",
        r.records, r.sources
    );
    for c in &charts {
        s.push_str(c);
    }
    s.push_str("</div><h2>Per bucket × concurrency</h2>");
    let (h, rows) = cell_rows(r);
    s += &html_table(&h, &rows);
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
    s.push_str("<h2>Per key</h2>");
    let (h, rows) = key_rows(r);
    s += &html_table(&h, &rows);
    s.push_str("</body></html>\n");
    s
}
