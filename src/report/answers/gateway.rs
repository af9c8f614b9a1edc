//! The gateway sections in sentences: the paired hop (`gateway_hop.summary`) and the tapped hop
//! (`gateway_tap.summary`), each with its figures.

use crate::report::model::{AcrossProcesses, DiffStats, GatewayHop, GatewayTap};

fn fmt_ci(d: &DiffStats) -> String {
    match (d.median, d.ci95) {
        (Some(m), Some([lo, hi])) => {
            format!("{m:+.1} ms (95% CI [{lo:+.1}, {hi:+.1}], {} pairs)", d.n)
        }
        (Some(m), None) => format!("{m:+.1} ms ({} pair)", d.n),
        _ => "no data".into(),
    }
}

fn covers_zero(d: &DiffStats) -> bool {
    d.ci95.is_some_and(|[lo, hi]| lo <= 0.0 && hi >= 0.0)
}

fn med(d: &DiffStats) -> String {
    d.median
        .map(|m| format!("{m:+.1} ms"))
        .unwrap_or_else(|| "-".into())
}

/// The gateway-hop section in sentences; `tapped`: the report has a gateway tap's section.
pub fn hop_summary(h: &GatewayHop, tapped: bool) -> String {
    let Some(split) = h.split.as_ref().filter(|_| h.overall.pairs == 0) else {
        return paired(h, tapped);
    };
    let p50 = split.ttft_ms.get("p50").and_then(|x| x.0);
    format!(
        "No paired requests: split traffic compares two distributions (gateway n={}, direct n={}); TTFT p50 differs by {}. Paired or forced (bench --route-header) runs give a measurement per prompt.",
        split.gateway_n,
        split.direct_n,
        p50.map(|v| format!("{v:+.1} ms")).unwrap_or_else(|| "-".into())
    )
}

fn paired(h: &GatewayHop, tapped: bool) -> String {
    let overall = &h.overall;
    let body = if covers_zero(&overall.tpot_ms) {
        "its interval covers 0: no measurable tax on the body"
    } else if overall.tpot_ms.median.is_some_and(|m| m < 0.0) {
        "the gateway arm streamed slightly faster (an engine-batching effect, not a hop cost)"
    } else {
        "its interval excludes 0: the hop also taxes the body"
    };
    let mut s = format!(
        "The gateway hop taxes the front of the request: TTFT {}; response headers {}. TPOT {}; {body}.",
        fmt_ci(&overall.ttft_ms),
        fmt_ci(&overall.upstream_headers_ms),
        fmt_ci(&overall.tpot_ms),
    );
    if h.pooled_over.len() > 1 {
        s.push_str(&per_level(h, tapped));
    }
    if let Some(o) = &h.order_effect {
        if o.present {
            s.push_str(&format!(
                " ORDER EFFECT: the difference depends on which copy went first ({:+.1} ms) — likely a prefix-cache hit on the second copy; use cache_salt or ABBA order.",
                o.difference.unwrap_or(0.0)
            ));
        } else {
            s.push_str(" No order effect detected.");
        }
    }
    s
}

/// What the pooled TTFT figure hides: each level's, and where contention joins in.
fn per_level(h: &GatewayHop, tapped: bool) -> String {
    let parts: Vec<String> = h
        .pooled_over
        .iter()
        .map(|l| {
            format!(
                "C={l} {}",
                h.by_concurrency
                    .get(l)
                    .and_then(|set| set.ttft_ms.median)
                    .map(|m| format!("{m:+.1} ms"))
                    .unwrap_or_else(|| "-".into())
            )
        })
        .collect();
    let mut s = format!(
        " That TTFT figure pools C={}; per level: {}.",
        h.pooled_over.join(", "),
        parts.join(", ")
    );
    let against = if tapped {
        "the tap's per-request hop"
    } else {
        "the lowest level"
    };
    match &h.contention_from {
        Some(l) => s.push_str(&format!(
            " From C={l} the difference departs from {against}: engine contention is mixed in and it is no longer the hop; {}.",
            if tapped {
                "the gateway tap measures the hop itself at every level (gateway_tap)"
            } else {
                "a gateway tap (a route `behind` the gateway) measures the hop itself at every level"
            }
        )),
        None => s.push_str(&format!(
            " No level departs from {against}: the difference is the hop at every level measured."
        )),
    }
    s
}

/// The gateway-tap section in sentences.
pub fn tap_summary(t: &GatewayTap) -> String {
    let overall = &t.overall;
    // Several gateway routes tapped at once: the figures below pool them.
    let pooled = match t.routes.as_slice() {
        [] | [_] => String::new(),
        many => format!(
            "These figures pool {} gateway routes ({}): the gateway board gives each its own, for bench's arms. ",
            many.len(),
            many.join(", ")
        ),
    };
    let mut summary = pooled;
    summary.push_str(&format!(
        "The gateway tap joined {} of {} gateway requests ({:.0} %); the gateway's share of TTFT is {} median (p95 {}), admission {}, relay {}.",
        t.joined,
        t.gateway_requests,
        100.0 * t.join_rate,
        med(&overall.ttft_ms),
        overall
            .ttft_ms
            .p95
            .map(|v| format!("{v:+.1} ms"))
            .unwrap_or_else(|| "-".into()),
        med(&overall.admission_ms),
        med(&overall.relay_ms),
    ));
    if t.levels.len() > 1 {
        let parts: Vec<String> = t
            .levels
            .iter()
            .map(|l| {
                let m = t.by_concurrency.get(l).map(|s| med(&s.ttft_ms));
                format!("C={l} {}", m.unwrap_or_else(|| "-".into()))
            })
            .collect();
        summary.push_str(&format!(
            " By concurrency ({}): {}.",
            t.concurrency_from.as_str().replace('_', " "),
            parts.join(", ")
        ));
    }
    if let Some(s) = &t.self_reported_ms {
        let who = if t.routes.len() > 1 {
            format!(
                "The gateway that states its own overhead ({} requests) claims",
                s.n
            )
        } else {
            "The gateway claims".into()
        };
        summary.push_str(&format!(
            " {who} {} median; measured − claimed {} median.",
            s.claimed_ms
                .median
                .map(|v| format!("{v:.1} ms"))
                .unwrap_or_else(|| "-".into()),
            med(&s.measured_minus_claimed_ms)
        ));
    }
    if t.unjoined > 0 {
        let all: Vec<String> = t
            .unjoined_by_reason
            .outer
            .iter()
            .map(|(k, v)| format!("{v} gateway-side {k}"))
            .chain(
                t.unjoined_by_reason
                    .inner
                    .iter()
                    .map(|(k, v)| format!("{v} engine-side {k}")),
            )
            .collect();
        summary.push_str(&format!(" Unjoined (never guessed): {}.", all.join(", ")));
    }
    if let Some(a) = &t.across_processes {
        summary.push_str(&across_sentence(a));
    }
    summary
}

/// What the tap across pods gave, and why: the TTFT difference needs no common clock;
/// admission and relay compare two processes' instants, given only on one host's clock.
fn across_sentence(a: &AcrossProcesses) -> String {
    if a.joined == 0 {
        return format!(
            " Across processes, no record was joined by its x-tokentap-join id ({} unjoined).",
            a.unjoined
        );
    }
    let mut s = format!(
        " Across processes, {} joined by their x-tokentap-join id ({} unjoined); the gateway's share of TTFT there is a difference of two durations, each on its own process's clock, and needs no common clock.",
        a.joined, a.unjoined
    );
    s.push_str(&match (a.one_clock, a.own_clocks) {
        (_, 0) => format!(
            " Admission and relay compare instants of the two processes: given for all {}, whose two records carry one boot id (one host, one clock).",
            a.one_clock
        ),
        (0, n) => format!(
            " Admission and relay compare instants of the two processes: not given for any ({n} joins whose records carry different boot ids, or none: no common clock)."
        ),
        (one, n) => format!(
            " Admission and relay compare instants of the two processes: given for {one} whose two records carry one boot id (one host, one clock), not given for {n} (different boot ids, or none)."
        ),
    });
    s
}
