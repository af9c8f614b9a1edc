//! The write-up's questions, answered in sentences with their figures: what a report opens with.
//! Every figure comes from the report's own sections; a question the records cannot answer
//! says so and says what would answer it.

mod binding;
mod board;
mod gateway;
mod streaming;

pub use super::model::Answer;
use super::model::{
    Axis, Cell, Class, FailureMode, NoTokensPerDay, Provision, Report, SplitCell,
    TOKENS_PER_DAY_MIN_REQUESTS,
};
use super::words::{at, ceiling_words, cell_name as name, level_key};
pub use binding::{binding_answers, binding_text};
pub use board::board_summary;
pub use gateway::{hop_summary, tap_summary};

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

/// The lowest level of a group: C=1, or a live level of 1 in flight (not an open-loop one).
fn single_user(c: &Cell) -> bool {
    c.level == 1 && c.request_rate.is_none()
}

/// The arms the cells name, in order (`None` alone when they name none).
fn arms(r: &Report) -> Vec<Option<&str>> {
    let mut v: Vec<Option<&str>> = r.cells.iter().map(|c| c.arm.as_deref()).collect();
    v.sort();
    v.dedup();
    v
}

/// Each arm's clause, `direct: …; gateway: …`, or the one clause when there are no arms.
fn per_arm(r: &Report, clause: impl Fn(&[&Cell]) -> String) -> String {
    let arms = arms(r);
    if arms.len() <= 1 {
        let cs: Vec<&Cell> = r.cells.iter().collect();
        return clause(&cs);
    }
    arms.iter()
        .map(|a| {
            let cs: Vec<&Cell> = r.cells.iter().filter(|c| c.arm.as_deref() == *a).collect();
            format!("{}: {}", a.unwrap_or("(no arm)"), clause(&cs))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The short form of [`nothing_judged`], for the answers after the first.
const NOTHING_JUDGED: &str =
    "Not judged: no generation request in these records (the first answer says why).";

/// When no generation was read, why, with counts by reason: every answer that judges says this
/// instead of a verdict, and no advice about levels the records never reached.
fn nothing_judged(r: &Report) -> Option<String> {
    if !r.cells.is_empty() {
        return None;
    }
    let t = &r.traffic;
    let mut by_status: std::collections::BTreeMap<u16, usize> = Default::default();
    for o in r
        .other_traffic
        .iter()
        .filter(|o| o.class == Class::ClientError)
    {
        *by_status.entry(o.status).or_default() += o.requests;
    }
    let statuses: Vec<String> = by_status
        .iter()
        .map(|(s, n)| format!("{n} × {s}"))
        .collect();
    let client = match t.client_errors {
        0 => "no client error".to_owned(),
        n => format!(
            "{n} refused as the client's fault ({}: a bad key, an unknown model or a malformed body)",
            statuses.join(", ")
        ),
    };
    Some(format!(
        "Not judged: no generation request in these {} records; {client}; {} other requests (listings, probes, embeddings, other paths).",
        r.records, t.other
    ))
}

fn one_user(r: &Report) -> String {
    if let Some(s) = nothing_judged(r) {
        return s;
    }
    if !r.cells.iter().any(single_user) {
        return "No cell at concurrency 1 in these records: run bench with --concurrency 1 (or read live traffic at an idle hour).".into();
    }
    per_arm(r, |cells| {
        let cs: Vec<&&Cell> = cells.iter().filter(|c| single_user(c)).collect();
        if cs.is_empty() {
            return "no cell at concurrency 1.".into();
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
        // A shape with no verdict (nothing served, or no TTFT: nothing streamed) is not counted.
        let judged = cs
            .iter()
            .filter(|c| c.slo.contains_key("interactive"))
            .count();
        let unjudged = match cs.len() - judged {
            0 => String::new(),
            k => format!(" ({k} more not judged: nothing streamed)"),
        };
        format!(
            "TTFT p95 {}, {} per stream, {errors} errors in {n} requests; interactive (TTFT p95 ≤ {:.0} ms) met by {inter} of {judged} prompt shapes{unjudged}.",
            range(&ttft, "ms", 0),
            range(&tps, "tok/s", 0),
            r.slos.ttft_interactive_ms,
        )
    })
}

/// Provisioning rows split into (bucket, arm) the way cells name them.
fn split_name(p: &Provision) -> (&str, Option<&str>) {
    match p.bucket.rsplit_once(" [") {
        Some((b, a)) if a.ends_with(']') => (b, Some(&a[..a.len() - 1])),
        _ => (p.bucket.as_str(), None),
    }
}

fn ceiling(r: &Report) -> String {
    if r.cells.is_empty() {
        return NOTHING_JUDGED.into();
    }
    let axes: [(Option<Axis>, &str); 3] = [
        (None, "Highest concurrency whose TTFT p95 stays ≤ {slo} ms at it and every level below"),
        (Some(Axis::InFlight), "Live traffic, highest in-flight level whose TTFT p95 stays ≤ {slo} ms at it and every level below"),
        (Some(Axis::RequestRate), "Highest arrival rate (open loop) whose TTFT p95 stays ≤ {slo} ms at it and every rate below"),
    ];
    let mut out = Vec::new();
    for (axis, lead) in axes {
        let rows: Vec<&Provision> = r.provisioning.iter().filter(|p| p.axis == axis).collect();
        if rows.is_empty() {
            continue;
        }
        // Per bucket, every arm side by side.
        let mut buckets: Vec<&str> = rows.iter().map(|p| split_name(p).0).collect();
        buckets.dedup();
        let parts: Vec<String> = buckets
            .iter()
            .map(|b| {
                let arms: Vec<String> = rows
                    .iter()
                    .filter(|p| split_name(p).0 == *b)
                    .map(|p| {
                        let tpd = p
                            .tokens_per_day_at_interactive_ceiling
                            .map(|t| format!(" ({:.1} M tokens/day there)", t / 1e6))
                            .unwrap_or_default();
                        match split_name(p).1 {
                            Some(a) => format!("{a} {}{tpd}", ceiling_words(p, "interactive")),
                            None => format!("{}{tpd}", ceiling_words(p, "interactive")),
                        }
                    })
                    .collect();
                format!("{b} {}", arms.join(", "))
            })
            .collect();
        out.push(format!(
            "{}: {}.",
            lead.replace("{slo}", &format!("{:.0}", r.slos.ttft_interactive_ms)),
            parts.join("; ")
        ));
    }
    if out.is_empty() {
        return "No generation request in these records.".into();
    }
    out.join(" ")
}

fn hurts(r: &Report) -> String {
    if r.cells.is_empty() {
        return NOTHING_JUDGED.into();
    }
    let missed: Vec<String> = r
        .cells
        .iter()
        .filter(|c| c.slo.get("interactive") == Some(&false))
        .map(|c| format!("{} {}", name(c), at(c)))
        .collect();
    let mut s = per_arm(r, |cs| {
        // The cell furthest above its own shape's lowest-level TTFT p95.
        let worst = cs
            .iter()
            .filter_map(|c| {
                let base = cs
                    .iter()
                    .find(|b| {
                        single_user(b) && b.bucket == c.bucket && b.arm == c.arm && b.axis == c.axis
                    })?
                    .ttft_ms
                    .p95?;
                Some((c, c.ttft_ms.p95? / base.max(1e-9)))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match worst {
            Some((c, x)) if x > 1.0 => format!(
                "{} at {}: TTFT p95 {:.0} ms, {x:.1}× its single-user figure.",
                c.bucket,
                at(c),
                c.ttft_ms.p95.unwrap_or(f64::NAN)
            ),
            _ if cs.iter().all(|c| c.ttft_ms.p95.is_none()) => {
                "no served stream's TTFT to compare across levels.".into()
            }
            _ => "nowhere measurable: no cell is slower than its shape at its lowest level.".into(),
        }
    });
    let unjudged = r
        .cells
        .iter()
        .filter(|c| !c.slo.contains_key("interactive"))
        .count();
    if missed.is_empty() && unjudged == 0 {
        s.push_str(" Every cell meets the interactive SLO.");
    } else if missed.is_empty() {
        s.push_str(&format!(
            " {} of {} cells meet the interactive SLO; {unjudged} not judged (nothing streamed).",
            r.cells.len() - unjudged,
            r.cells.len()
        ));
    } else {
        s.push_str(&format!(
            " Cells over the interactive SLO: {}.",
            missed.join(", ")
        ));
    }
    s
}

fn failure_mode(r: &Report) -> String {
    if let Some(s) = nothing_judged(r) {
        return s;
    }
    per_arm(r, |cs| {
        let (errors, throttled, n) = cs.iter().fold((0, 0, 0), |(e, t, n), c| {
            (e + c.errors, t + c.throttled, n + c.requests)
        });
        let worst = cs
            .iter()
            .max_by(|a, b| a.error_rate.total_cmp(&b.error_rate));
        let slower = cs.iter().any(|c| {
            r.provisioning
                .iter()
                .any(|p| p.bucket == name(c) && p.failure_mode == FailureMode::Slower)
        });
        match worst {
            Some(w) if w.errors > 0 => {
                let kinds = match (errors - throttled, throttled) {
                    (f, 0) => format!("{f} failed"),
                    (0, t) => format!("{t} throttled (429)"),
                    (f, t) => format!("{f} failed, {t} throttled (429)"),
                };
                format!(
                    "Errors: {kinds} of {n} requests; the worst cell is {} at {} with {:.1} % errors.",
                    w.bucket,
                    at(w),
                    100.0 * w.error_rate
                )
            }
            _ if slower => format!(
                "Slower, never wrong: 0 % errors in all {} cells ({n} requests); latency grows with load instead.",
                cs.len()
            ),
            _ => format!(
                "None seen: 0 % errors in all {} cells ({n} requests) and no knee reached.",
                cs.len()
            ),
        }
    })
}

fn gateway(r: &Report) -> String {
    let levels = |m: &std::collections::BTreeMap<String, f64>| {
        let mut v: Vec<(&String, &f64)> = m.iter().collect();
        v.sort_by_key(|(l, _)| level_key(l));
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
    // Several gateways as arms of one run: each its own figure, from the board.
    let board = board_answer(r);
    let tap = tap.map(|t| match r.gateway_tap.as_ref().map(|t| t.routes.len()) {
        Some(n) if n > 1 => t.replacen(
            "Measured on every request by the gateway tap",
            &format!("Pooled over {n} gateway routes, the gateway tap"),
            1,
        ),
        _ => t,
    });
    let parts: Vec<String> = [board, tap, ab].into_iter().flatten().collect();
    if parts.is_empty() {
        return "Not measured in these records: run a gateway A/B (two or more arms) or a gateway tap (a route `behind` the gateway).".into();
    }
    parts.join(" ")
}

/// Each gateway arm's added TTFT p50 at its lowest level, from the gateway board, when there
/// are several (with one, the paired A/B below says the same).
fn board_answer(r: &Report) -> Option<String> {
    if r.gateway_board.len() < 2 {
        return None;
    }
    let first = r.gateway_board.first()?;
    let each: Vec<String> = r
        .gateway_board
        .iter()
        .map(
            |b| match b.levels.first().and_then(|l| l.added_ttft_ms.p50) {
                Some(m) => format!("{} {m:+.1} ms", b.arm),
                None => format!("{} no served pair", b.arm),
            },
        )
        .collect();
    let at = first
        .levels
        .first()
        .map(|l| format!(" at {}", crate::report::words::level_at(l.axis, &l.label)))
        .unwrap_or_default();
    Some(format!(
        "Per gateway (the gateway board, TTFT p50 paired against {}{at}): {}.",
        first.baseline,
        each.join(", ")
    ))
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

/// What the records were and what of them is judged.
fn judged(r: &Report) -> String {
    let t = &r.traffic;
    let mut s = format!(
        "{} generation requests judged ({} served, {} cancelled, {} failed, {} throttled); {} client errors (4xx other than 429) and {} other requests (listings, probes, embeddings, other paths) counted apart.",
        t.generation, t.served, t.cancelled, t.failed, t.throttled, t.client_errors, t.other
    );
    if t.streams_without_usage > 0 {
        s.push_str(&format!(
            " {} of {} served streams carried no usage, so no input tokens and no prompt-shape bucket (`unknown`): {}.",
            t.streams_without_usage,
            t.streams_served,
            super::USAGE_FIX
        ));
    }
    s
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
        Answer {
            question: "Is it really streaming?",
            answer: streaming::answer(&r.streaming, &r.cells, &r.traffic),
        },
        Answer {
            question: "What was judged?",
            answer: judged(r),
        },
    ]
}

/// Why a ceiling has no tokens-per-day figure, in words (`tokens_per_day_note`).
pub fn tokens_per_day_note(why: NoTokensPerDay) -> String {
    match why {
        NoTokensPerDay::Live => {
            "live traffic: an in-flight level is not a sustained load".to_owned()
        }
        NoTokensPerDay::TooFew(served) => format!(
            "{served} served requests at the ceiling: fewer than {TOKENS_PER_DAY_MIN_REQUESTS}"
        ),
    }
}

/// What a cell's TTFT split lacks and why (`ttft_split.missing`), when it lacks a part.
pub fn split_missing(s: &SplitCell) -> Option<String> {
    let mut missing = Vec::new();
    if s.proxy_ms.is_none() {
        missing.push("proxy_ms: client-side records (tokentap's own share is in its records)");
    }
    if s.engine_queue_ms.is_none() || s.engine_prefill_ms.is_none() {
        missing.push("engine parts: no per-request timings (vLLM --enable-per-request-metrics, with usage in the stream)");
    }
    (!missing.is_empty()).then(|| missing.join("; "))
}
