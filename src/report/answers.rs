//! The write-up's questions, answered in sentences with their figures: what a report opens with.
//! Every figure comes from the report's own sections; a question the records cannot answer
//! says so and says what would answer it.

use serde::Serialize;

use super::{Cell, Report};

#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub question: &'static str,
    pub answer: String,
}

fn range(v: &[f64], unit: &str, digits: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return "-".into();
    }
    if (hi - lo).abs() < 0.5 * 10f64.powi(-(digits as i32)) {
        format!("{lo:.digits$} {unit}")
    } else {
        format!("{lo:.digits$}–{hi:.digits$} {unit}")
    }
}

fn name(c: &Cell) -> String {
    match &c.arm {
        Some(a) => format!("{} [{a}]", c.bucket),
        None => c.bucket.clone(),
    }
}

/// The cells that describe the engine as a client reaches it: not the gateway arm of an A/B.
fn engine_cells(r: &Report) -> Vec<&Cell> {
    let gw = r.gateway_hop.as_ref().map(|h| h.gateway_arm.as_str());
    r.cells
        .iter()
        .filter(|c| c.arm.is_none() || c.arm.as_deref() != gw)
        .collect()
}

/// Where a cell sits: `C=4`, or an open-loop cell's rate, `at 4/s`.
fn at(c: &Cell) -> String {
    match c.request_rate {
        Some(_) => format!("at {}", c.concurrency),
        None => format!("C={}", c.concurrency),
    }
}

/// A concurrency-1 cell (not an open-loop one).
fn single_user(c: &Cell) -> bool {
    c.level == 1 && c.request_rate.is_none()
}

fn one_user(r: &Report) -> String {
    let cs: Vec<&Cell> = engine_cells(r)
        .into_iter()
        .filter(|c| single_user(c))
        .collect();
    if cs.is_empty() {
        return "No cell at concurrency 1 in these records: run bench with --concurrency 1 (or read live traffic at an idle hour).".into();
    }
    let ttft: Vec<f64> = cs.iter().filter_map(|c| c.ttft_ms.p95).collect();
    let tps: Vec<f64> = cs.iter().filter_map(|c| c.tok_s_per_stream.p50).collect();
    let (errors, n): (usize, usize) = cs
        .iter()
        .fold((0, 0), |(e, n), c| (e + c.errors, n + c.requests));
    let inter = cs
        .iter()
        .filter(|c| c.slo.get("interactive") == Some(&true))
        .count();
    format!(
        "TTFT p95 {}, {} per stream, {errors} errors in {n} requests; interactive (TTFT p95 ≤ {:.0} ms) met by {inter} of {} prompt shapes.",
        range(&ttft, "ms", 0),
        range(&tps, "tok/s", 0),
        r.slos.ttft_interactive_ms,
        cs.len()
    )
}

fn ceiling(r: &Report) -> String {
    let gw = r
        .gateway_hop
        .as_ref()
        .map(|h| format!("[{}]", h.gateway_arm));
    let shown = |p: &&super::Provision| gw.as_ref().is_none_or(|g| !p.bucket.ends_with(g.as_str()));
    let rates: Vec<String> = r
        .provisioning
        .iter()
        .filter(shown)
        .filter(|p| p.axis.is_some())
        .map(|p| {
            let c = p.ceiling.get("interactive").cloned().flatten();
            format!(
                "{} {}",
                p.bucket,
                c.unwrap_or_else(|| "none (not even the lowest rate)".into())
            )
        })
        .collect();
    let parts: Vec<String> = r
        .provisioning
        .iter()
        .filter(shown)
        .filter(|p| p.axis.is_none())
        .map(|p| {
            let c = p
                .ceiling
                .get("interactive")
                .cloned()
                .flatten()
                .map_or_else(|| "none (not even C=1)".into(), |c| format!("C={c}"));
            let tpd = p
                .tokens_per_day_at_interactive_ceiling
                .map(|t| format!(", {:.1} M tokens/day there", t / 1e6))
                .unwrap_or_default();
            format!("{} {c}{tpd}", p.bucket)
        })
        .collect();
    let rates = (!rates.is_empty()).then(|| {
        format!(
            "Highest arrival rate (open loop) whose TTFT p95 stays ≤ {:.0} ms at it and every rate below: {}.",
            r.slos.ttft_interactive_ms,
            rates.join("; ")
        )
    });
    if parts.is_empty() {
        return rates.unwrap_or_else(|| "No prompt shape in these records.".into());
    }
    let mut s = format!(
        "Highest concurrency whose TTFT p95 stays ≤ {:.0} ms at it and every level below: {}.",
        r.slos.ttft_interactive_ms,
        parts.join("; ")
    );
    if let Some(rates) = rates {
        s.push(' ');
        s.push_str(&rates);
    }
    s
}

fn hurts(r: &Report) -> String {
    // The cell furthest above its own shape's single-user TTFT p95.
    let cs = engine_cells(r);
    let worst = cs
        .iter()
        .filter_map(|c| {
            let base = cs
                .iter()
                .find(|b| single_user(b) && b.bucket == c.bucket && b.arm == c.arm)?
                .ttft_ms
                .p95?;
            Some((c, c.ttft_ms.p95? / base.max(1e-9)))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let missed: Vec<String> = cs
        .iter()
        .filter(|c| c.slo.get("interactive") == Some(&false))
        .map(|c| format!("{} {}", name(c), at(c)))
        .collect();
    let mut s = match worst {
        Some((c, x)) if x > 1.0 => format!(
            "{} {}: TTFT p95 {:.0} ms, {x:.1}× its single-user figure.",
            name(c),
            match c.request_rate {
                Some(_) => at(c),
                None => format!("at C={}", c.concurrency),
            },
            c.ttft_ms.p95.unwrap_or(f64::NAN)
        ),
        _ => "Nowhere measurable: no cell is slower than its shape at C=1.".into(),
    };
    if missed.is_empty() {
        s.push_str(" Every cell meets the interactive SLO.");
    } else {
        s.push_str(&format!(
            " Cells over the interactive SLO: {}.",
            missed.join(", ")
        ));
    }
    s
}

fn failure_mode(r: &Report) -> String {
    let cs = engine_cells(r);
    let (errors, n): (usize, usize) = cs
        .iter()
        .fold((0, 0), |(e, n), c| (e + c.errors, n + c.requests));
    let worst = cs
        .iter()
        .max_by(|a, b| a.error_rate.total_cmp(&b.error_rate));
    match worst {
        Some(w) if w.errors > 0 => format!(
            "Errors: {errors} of {n} requests failed; the worst cell is {} {} with {:.1} % errors.",
            name(w),
            match w.request_rate {
                Some(_) => at(w),
                None => format!("at C={}", w.concurrency),
            },
            100.0 * w.error_rate
        ),
        _ if r.provisioning.iter().any(|p| p.failure_mode == "slower") => format!(
            "Slower, never wrong: 0 % errors in all {} cells ({n} requests); latency grows with load instead.",
            cs.len()
        ),
        _ => format!(
            "None seen: 0 % errors in all {} cells ({n} requests) and no knee reached.",
            cs.len()
        ),
    }
}

fn gateway(r: &Report) -> String {
    let levels = |m: &std::collections::BTreeMap<String, f64>| {
        let mut v: Vec<(&String, &f64)> = m.iter().collect();
        v.sort_by_key(|(l, _)| super::render::level_key(l));
        v.iter()
            .map(|(l, m)| format!("C={l} {m:+.1} ms"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let tap = r.gateway_tap.as_ref().map(|t| {
        let m = t
            .by_concurrency
            .iter()
            .filter_map(|(l, s)| Some((l.clone(), s.ttft_ms.median?)))
            .collect();
        format!(
            "Measured on every request by the gateway tap ({} joined, {:.0} %): {} of TTFT.",
            t.joined,
            100.0 * t.join_rate,
            levels(&m)
        )
    });
    let ab = r
        .gateway_hop
        .as_ref()
        .filter(|h| h.overall.pairs > 0)
        .map(|h| {
            let m = h
                .by_concurrency
                .iter()
                .filter_map(|(l, s)| Some((l.clone(), s.ttft_ms.median?)))
                .collect();
            let tail = match &h.contention_from {
                Some(l) => format!(" (from C={l} engine contention is mixed in: not the hop)"),
                None => String::new(),
            };
            format!("The paired A/B reads {}{tail}.", levels(&m))
        });
    match (tap, ab) {
        (None, None) => "Not measured in these records: run a gateway A/B (two arms) or a gateway tap (a route `behind` the gateway).".into(),
        (Some(t), None) => t,
        (None, Some(a)) => a,
        (Some(t), Some(a)) => format!("{t} {a}"),
    }
}

/// The write-up's next step 2: what a shared prefix gives back.
fn prefix_cache(r: &Report) -> String {
    let Some(c) = r.prefix_cache.as_ref().filter(|c| c.hit.n + c.miss.n > 0) else {
        return "Not measured in these records: no usage says how many prompt tokens were cached (vLLM reports them with --enable-prompt-tokens-details; bench --shared-prefix N sends a shared system prompt).".into();
    };
    let per: Vec<String> = c
        .by_bucket
        .iter()
        .filter_map(|(b, s)| Some(format!("{b} {:.0} ms", s.ttft_saved_ms?)))
        .collect();
    let per = if per.is_empty() {
        String::new()
    } else {
        format!(" By prompt shape: {}.", per.join(", "))
    };
    let share = c
        .cached_token_share
        .map(|s| format!(", {:.0} % of prompt tokens cached", 100.0 * s))
        .unwrap_or_default();
    match (c.hit.p50, c.miss.p50, c.ttft_saved_ms) {
        (Some(h), Some(m), Some(saved)) => format!(
            "TTFT p50 {h:.0} ms on a cache hit against {m:.0} ms on a miss ({} hits, {} misses{share}): {saved:.0} ms ({:.0} %) given back.{per}",
            c.hit.n,
            c.miss.n,
            if m > 0.0 { 100.0 * saved / m } else { 0.0 }
        ),
        (None, Some(m), _) => format!("No request hit the prefix cache ({} misses, TTFT p50 {m:.0} ms): nothing was shared, or caching is off.", c.miss.n),
        (Some(h), None, _) => format!("Every request hit the prefix cache ({} hits, TTFT p50 {h:.0} ms{share}): no miss to compare with.", c.hit.n),
        _ => "No served request says its cached tokens.".into(),
    }
}

pub fn answers(r: &Report) -> Vec<Answer> {
    vec![
        Answer {
            question: "How good is it for one user?",
            answer: one_user(r),
        },
        Answer {
            question: "What is the interactive ceiling per prompt shape?",
            answer: ceiling(r),
        },
        Answer {
            question: "Where does it actually hurt?",
            answer: hurts(r),
        },
        Answer {
            question: "What is the failure mode?",
            answer: failure_mode(r),
        },
        Answer {
            question: "What does the gateway cost, at which concurrency?",
            answer: gateway(r),
        },
        Answer {
            question: "What does the prefix cache give back?",
            answer: prefix_cache(r),
        },
    ]
}
