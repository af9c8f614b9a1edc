//! The gateway-tap section: the hop measured on every request that passed both sides of a
//! gateway (`behind` routes), per request and at any concurrency, with zero extra engine load.
//! Figures come from the outer side's records (`gateway_tap.admission_ms`, `relay_ms`,
//! `ttft_ms`), the gateway's own claim from the same records (`gateway_overhead_ms`), and the
//! join counts from both sides.

use std::collections::BTreeMap;

use serde::Serialize;

use super::hop::{diff_stats, DiffStats};
use super::row::{level_of, Row, TapRow};
use crate::meter::TapSide;

/// What the section keeps of a record with a `gateway_tap` (about 90 bytes): the parts'
/// medians and their intervals need every joined request.
#[derive(Debug, Clone)]
pub struct TapRec {
    pub tap: TapRow,
    pub route: std::sync::Arc<str>,
    pub bucket: std::sync::Arc<str>,
    pub concurrency: Option<u64>,
    pub in_flight: u64,
    pub gateway_overhead_ms: Option<f64>,
}

impl TapRec {
    pub fn of(
        r: &Row<'_>,
        route: std::sync::Arc<str>,
        bucket: std::sync::Arc<str>,
    ) -> Option<TapRec> {
        Some(TapRec {
            tap: r.gateway_tap?,
            route,
            bucket,
            concurrency: r.concurrency,
            in_flight: r.in_flight,
            gateway_overhead_ms: r.gateway_overhead_ms,
        })
    }
}

/// The hop's parts over a set of joined requests.
#[derive(Debug, Clone, Serialize)]
pub struct TapSet {
    pub joined: usize,
    /// Outer TTFT − inner TTFT: the gateway's whole share of TTFT.
    pub ttft_ms: DiffStats,
    /// Inner t0 − outer t0: from the request reaching the gateway to the gateway's request
    /// reaching the engine's route.
    pub admission_ms: DiffStats,
    /// Outer first token − inner first token: the first token's way back through the gateway.
    pub relay_ms: DiffStats,
}

/// The gateway's own claim beside the measured hop, on the joined requests that carry one.
#[derive(Debug, Clone, Serialize)]
pub struct SelfReported {
    pub n: usize,
    /// What the gateway says its overhead was (LiteLLM: `x-litellm-overhead-duration-ms`).
    pub claimed_ms: DiffStats,
    /// Per request: the measured TTFT hop − the claim.
    pub measured_minus_claimed_ms: DiffStats,
}

#[derive(Debug, Clone, Serialize)]
pub struct UnjoinedBy {
    /// Gateway-side requests no inner request was joined to, by reason.
    pub outer: BTreeMap<String, usize>,
    /// Engine-side requests joined to no gateway-side one, by reason.
    pub inner: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GatewayTap {
    /// The gateway's route(s) in tokentap (the outer side).
    pub routes: Vec<String>,
    pub joined: usize,
    /// Requests on either side left unjoined (never guessed).
    pub unjoined: usize,
    pub unjoined_by_reason: UnjoinedBy,
    /// Joined ÷ gateway-side requests.
    pub join_rate: f64,
    /// Joins by how they were made: `header`, `fingerprint`.
    pub join_by: BTreeMap<String, usize>,
    #[serde(flatten)]
    pub overall: TapSet,
    pub self_reported_ms: Option<SelfReported>,
    pub by_bucket: BTreeMap<String, TapSet>,
    /// By the load generator's level when records carry it, else by the gateway route's
    /// in-flight count at admission (bins 1, 2, 3-4, 5-8, …).
    pub by_concurrency: BTreeMap<String, TapSet>,
    /// `load_generator` or `in_flight`.
    pub concurrency_from: &'static str,
    pub summary: String,
}

fn tap_set(rs: &[&TapRec]) -> TapSet {
    let part = |f: &dyn Fn(&TapRow) -> Option<f64>| {
        diff_stats(rs.iter().filter_map(|r| f(&r.tap)).collect())
    };
    TapSet {
        joined: rs.len(),
        ttft_ms: part(&|g| g.ttft_ms),
        admission_ms: part(&|g| g.admission_ms),
        relay_ms: part(&|g| g.relay_ms),
    }
}

fn med(d: &DiffStats) -> String {
    d.median
        .map(|m| format!("{m:+.1} ms"))
        .unwrap_or_else(|| "-".into())
}

/// The section, when records come from a gateway tap.
pub fn compute<'a>(records: impl Iterator<Item = &'a TapRec>) -> Option<GatewayTap> {
    let (mut outer, mut inner): (Vec<&TapRec>, Vec<&TapRec>) = (vec![], vec![]);
    for r in records {
        match r.tap.side {
            TapSide::Outer => outer.push(r),
            TapSide::Inner => inner.push(r),
        }
    }
    if outer.is_empty() && inner.is_empty() {
        return None;
    }
    let mut routes: Vec<String> = outer.iter().map(|r| r.route.to_string()).collect();
    routes.sort();
    routes.dedup();
    let joined: Vec<&TapRec> = outer.iter().copied().filter(|r| r.tap.peer).collect();
    let reasons = |rs: &[&TapRec]| {
        let mut m: BTreeMap<String, usize> = BTreeMap::new();
        for g in rs.iter().map(|r| &r.tap) {
            if let Some(u) = g.unjoined {
                *m.entry(u.as_str().to_owned()).or_default() += 1;
            }
        }
        m
    };
    let (uo, ui) = (reasons(&outer), reasons(&inner));
    let unjoined = uo.values().sum::<usize>() + ui.values().sum::<usize>();
    let unjoined_by_reason = UnjoinedBy {
        outer: uo,
        inner: ui,
    };
    let mut join_by: BTreeMap<String, usize> = BTreeMap::new();
    for g in joined.iter().map(|r| &r.tap) {
        if let Some(by) = g.join {
            let k = match by {
                crate::meter::JoinBy::Header => "header",
                crate::meter::JoinBy::Fingerprint => "fingerprint",
            };
            *join_by.entry(k.to_owned()).or_default() += 1;
        }
    }
    let overall = tap_set(&joined);
    let claims: Vec<(f64, Option<f64>)> = joined
        .iter()
        .filter_map(|r| {
            let c = r.gateway_overhead_ms?;
            Some((c, r.tap.ttft_ms.map(|t| t - c)))
        })
        .collect();
    let self_reported_ms = (!claims.is_empty()).then(|| SelfReported {
        n: claims.len(),
        claimed_ms: diff_stats(claims.iter().map(|c| c.0).collect()),
        measured_minus_claimed_ms: diff_stats(claims.iter().filter_map(|c| c.1).collect()),
    });
    let mut buckets: BTreeMap<String, Vec<&TapRec>> = BTreeMap::new();
    let mut levels: BTreeMap<(u64, String), Vec<&TapRec>> = BTreeMap::new();
    for r in &joined {
        buckets.entry(r.bucket.to_string()).or_default().push(r);
        levels
            .entry(level_of(r.concurrency, r.in_flight))
            .or_default()
            .push(r);
    }
    let concurrency_from = if joined.iter().all(|r| r.concurrency.is_some()) {
        "load_generator"
    } else {
        "in_flight"
    };
    let per_level: Vec<(String, TapSet)> = levels
        .into_iter()
        .map(|((_, label), rs)| (label, tap_set(&rs)))
        .collect();
    let gateway_requests = outer.len();
    let join_rate = joined.len() as f64 / gateway_requests.max(1) as f64;
    let mut summary = format!(
        "The gateway tap joined {} of {} gateway requests ({:.0} %); the gateway's share of TTFT is {} median (p95 {}), admission {}, relay {}.",
        joined.len(),
        gateway_requests,
        100.0 * join_rate,
        med(&overall.ttft_ms),
        overall
            .ttft_ms
            .p95
            .map(|v| format!("{v:+.1} ms"))
            .unwrap_or_else(|| "-".into()),
        med(&overall.admission_ms),
        med(&overall.relay_ms),
    );
    if per_level.len() > 1 {
        let parts: Vec<String> = per_level
            .iter()
            .map(|(l, s)| format!("C={l} {}", med(&s.ttft_ms)))
            .collect();
        summary.push_str(&format!(
            " By concurrency ({}): {}.",
            concurrency_from.replace('_', " "),
            parts.join(", ")
        ));
    }
    if let Some(s) = &self_reported_ms {
        summary.push_str(&format!(
            " The gateway claims {} median; measured − claimed {} median.",
            s.claimed_ms
                .median
                .map(|v| format!("{v:.1} ms"))
                .unwrap_or_else(|| "-".into()),
            med(&s.measured_minus_claimed_ms)
        ));
    }
    if unjoined > 0 {
        let all: Vec<String> = unjoined_by_reason
            .outer
            .iter()
            .map(|(k, v)| format!("{v} gateway-side {k}"))
            .chain(
                unjoined_by_reason
                    .inner
                    .iter()
                    .map(|(k, v)| format!("{v} engine-side {k}")),
            )
            .collect();
        summary.push_str(&format!(" Unjoined (never guessed): {}.", all.join(", ")));
    }
    Some(GatewayTap {
        routes,
        joined: joined.len(),
        unjoined,
        unjoined_by_reason,
        join_rate,
        join_by,
        overall,
        self_reported_ms,
        by_bucket: buckets
            .into_iter()
            .map(|(b, rs)| (b, tap_set(&rs)))
            .collect(),
        by_concurrency: per_level.into_iter().collect(),
        concurrency_from,
        summary,
    })
}
