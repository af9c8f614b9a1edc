//! The gateway-tap section: the hop measured on every request that passed both sides of a
//! gateway (`behind` routes), per request and at any concurrency, with zero extra engine load.
//! Figures come from the outer side's records (`gateway_tap.admission_ms`, `relay_ms`,
//! `ttft_ms`), the gateway's own claim from the same records (`gateway_overhead_ms`), and the
//! join counts from both sides. Records of the tap across pods come here joined (`join.rs`),
//! marked with how their instants compare ([`Across`]).

use std::collections::BTreeMap;

use super::hop::diff_stats;
pub use super::model::{
    AcrossProcesses, ConcurrencyFrom, GatewayTap, SelfReported, TapSet, UnjoinedBy,
};
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
    /// A record of the tap across pods (joined by the report, not in process), and how.
    pub across: Option<Across>,
}

/// How a record took part in the tap across pods (`report --tap A --tap B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Across {
    /// Joined; both records carry one boot id (one host, one clock): admission and relay given.
    OneClock,
    /// Joined; their boot ids differ or one is missing: only the TTFT difference, which needs
    /// no common clock.
    OwnClocks,
    /// Left unjoined (its reason is its tap row's).
    Unjoined,
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
            across: None,
        })
    }
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
        ConcurrencyFrom::LoadGenerator
    } else {
        ConcurrencyFrom::InFlight
    };
    let per_level: Vec<(String, TapSet)> = levels
        .into_iter()
        .map(|((_, label), rs)| (label, tap_set(&rs)))
        .collect();
    let gateway_requests = outer.len();
    let across_processes = across(&outer, &inner);
    let join_rate = joined.len() as f64 / gateway_requests.max(1) as f64;
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
        levels: per_level.iter().map(|(l, _)| l.clone()).collect(),
        by_concurrency: per_level.into_iter().collect(),
        concurrency_from,
        gateway_requests,
        across_processes,
        // The sentence is the answers' (`answers::tap_summary`).
        summary: String::new(),
    })
}

/// The tap across pods' part: its joins, how many could compare instants, and its unjoined.
fn across(outer: &[&TapRec], inner: &[&TapRec]) -> Option<AcrossProcesses> {
    let taking_part: Vec<Across> = outer.iter().chain(inner).filter_map(|r| r.across).collect();
    if taking_part.is_empty() {
        return None;
    }
    let of = |want: Across| {
        outer
            .iter()
            .filter(|r| r.across == Some(want) && r.tap.peer)
            .count()
    };
    let (one_clock, own_clocks) = (of(Across::OneClock), of(Across::OwnClocks));
    Some(AcrossProcesses {
        joined: one_clock + own_clocks,
        one_clock,
        own_clocks,
        unjoined: taking_part
            .iter()
            .filter(|a| **a == Across::Unjoined)
            .count(),
    })
}
