//! The tap across pods: the records of two tokentap processes, one in front of a gateway (its
//! record says `join_sent`: its `id` went out in `x-tokentap-join`) and one behind it (its
//! record's `join_id` is the id it received from a source it trusts), joined by that id once
//! every file is read. Only records without an in-process `gateway_tap` take part: a gateway
//! tap's own routes are joined in their process.
//!
//! The TTFT difference (outer TTFT − inner TTFT) is a difference of two durations, each on its
//! own process's clock: it needs no common clock. Admission (inner `ts` − outer `ts`) and relay
//! (the TTFT difference − admission) compare instants of two processes: they are given only
//! when both records carry the same `boot_id` (one booted host, one clock). Nothing is guessed:
//! an inner record whose id names no outer one (`no_match`), a second inner record for one
//! outer (`duplicate`, a gateway retry: the earliest by `ts` is kept), one that starts before
//! its outer one on their common clock (`clock_anomaly`), and an outer record no inner one names
//! (`no_inner`) are counted by reason.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use super::row::{Row, TapRow};
use super::tap::{Across, TapRec};
use crate::meter::{JoinBy, TapSide, Unjoined};

/// One side's record, kept until every file is read.
#[derive(Debug)]
struct Side {
    /// The outer record's `id`, or the inner record's `join_id`.
    key: u64,
    at: Option<SystemTime>,
    ttft_ms: Option<f64>,
    boot: Option<Arc<str>>,
    rec: TapRec,
}

/// The records of the tap across pods, read so far.
#[derive(Debug, Default)]
pub struct Pending {
    outer: Vec<Side>,
    inner: Vec<Side>,
}

impl Pending {
    /// A record that sent a join id (outer) or received one (inner), or both (a tokentap between
    /// two gateways); any other record, or one of an in-process gateway tap, is not kept.
    pub fn add(
        &mut self,
        r: &Row<'_>,
        route: Arc<str>,
        bucket: Arc<str>,
        at: Option<SystemTime>,
        boot: Option<Arc<str>>,
    ) {
        if r.gateway_tap.is_some() {
            return;
        }
        let side = |key: u64, side: TapSide| Side {
            key,
            at,
            ttft_ms: r.ttft_ms,
            boot: boot.clone(),
            rec: TapRec {
                tap: row(side, None, None),
                route: route.clone(),
                bucket: bucket.clone(),
                concurrency: r.concurrency,
                in_flight: r.in_flight,
                gateway_overhead_ms: r.gateway_overhead_ms,
                across: None,
            },
        };
        let parse = |t: &str| crate::tags::parse_join(t.as_bytes());
        if r.join_sent {
            if let Some(id) = parse(r.id.as_str()) {
                self.outer.push(side(id, TapSide::Outer));
            }
        }
        if let Some(id) = r.join_id.as_ref().and_then(|j| parse(j.as_str())) {
            self.inner.push(side(id, TapSide::Inner));
        }
    }

    /// Join every inner record to the outer record its id names: both sides' tap rows, the
    /// joined outer ones with the hop's parts.
    pub fn finish(self) -> Vec<TapRec> {
        let Pending {
            mut outer,
            mut inner,
        } = self;
        let mut by_id: HashMap<u64, usize> = HashMap::with_capacity(outer.len());
        for (i, o) in outer.iter().enumerate() {
            by_id.entry(o.key).or_insert(i);
        }
        // The first inner record of an outer one is the earliest; records without a time last,
        // in the order read.
        inner.sort_by_key(|s| (s.at.is_none(), s.at));
        let mut joined = vec![false; outer.len()];
        for s in &mut inner {
            let Some(&i) = by_id.get(&s.key) else {
                s.rec.tap = row(TapSide::Inner, None, Some(Unjoined::NoMatch));
                continue;
            };
            if joined[i] {
                s.rec.tap = row(TapSide::Inner, None, Some(Unjoined::Duplicate));
                continue;
            }
            let o = &mut outer[i];
            let one_clock = o.boot.is_some() && o.boot == s.boot;
            let admission_ms = match (one_clock, o.at, s.at) {
                (true, Some(a), Some(b)) => Some(match b.duration_since(a) {
                    Ok(d) => d.as_secs_f64() * 1000.0,
                    Err(e) => -e.duration().as_secs_f64() * 1000.0,
                }),
                _ => None,
            };
            if admission_ms.is_some_and(|a| a < 0.0) {
                s.rec.tap = row(TapSide::Inner, None, Some(Unjoined::ClockAnomaly));
                continue;
            }
            joined[i] = true;
            let ttft_ms = o.ttft_ms.zip(s.ttft_ms).map(|(a, b)| a - b);
            let mut t = row(TapSide::Outer, Some(JoinBy::Header), None);
            t.ttft_ms = ttft_ms;
            t.admission_ms = admission_ms;
            t.relay_ms = admission_ms.zip(ttft_ms).map(|(a, t)| t - a);
            o.rec.tap = t;
            o.rec.across = Some(if admission_ms.is_some() {
                Across::OneClock
            } else {
                Across::OwnClocks
            });
            s.rec.tap = row(TapSide::Inner, Some(JoinBy::Header), None);
            s.rec.across = o.rec.across;
        }
        for (o, j) in outer.iter_mut().zip(&joined) {
            if !j {
                o.rec.tap = row(TapSide::Outer, None, Some(Unjoined::NoInner));
            }
        }
        outer
            .into_iter()
            .chain(inner)
            .map(|mut s| {
                s.rec.across.get_or_insert(Across::Unjoined);
                s.rec
            })
            .collect()
    }
}

/// A tap row: joined (`by`) or not (`why`).
fn row(side: TapSide, by: Option<JoinBy>, why: Option<Unjoined>) -> TapRow {
    TapRow {
        side,
        peer: by.is_some(),
        join: by,
        unjoined: why,
        admission_ms: None,
        relay_ms: None,
        ttft_ms: None,
        relay_max_ms: None,
        relay_verdict: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn add(p: &mut Pending, id: &str, join_id: Option<&str>, sent: bool, ttft: f64, at_ms: u64) {
        let line = serde_json::json!({
            "id": id, "join_id": join_id, "join_sent": sent, "ttft_ms": ttft,
            "outcome": "ok", "e2e_ms": 100.0, "route": "r",
        })
        .to_string();
        let r: Row<'_> = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}"));
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000 + at_ms);
        let boot = if id == "2b" { "h2" } else { "h1" };
        p.add(&r, "r".into(), "b".into(), Some(at), Some(boot.into()));
    }

    const A: &str = "00000000000000aa";
    const B: &str = "00000000000000bb";

    #[test]
    fn joins_by_id_and_gives_instants_only_on_one_clock() {
        let mut p = Pending::default();
        add(&mut p, A, None, true, 130.0, 0);
        add(&mut p, B, None, true, 150.0, 0);
        add(&mut p, "1", Some(A), false, 100.0, 20);
        // Another host (boot id h2): its instants are not compared with the outer one's.
        add(&mut p, "2b", Some(B), false, 100.0, 20);
        let recs = p.finish();
        let outer: Vec<&TapRec> = recs
            .iter()
            .filter(|r| r.tap.side == TapSide::Outer)
            .collect();
        assert_eq!(outer.len(), 2);
        let (a, b) = (&outer[0].tap, &outer[1].tap);
        assert_eq!((a.ttft_ms, a.admission_ms), (Some(30.0), Some(20.0)));
        assert!(a.relay_ms.is_some_and(|r| (r - 10.0).abs() < 1e-9));
        assert_eq!(outer[0].across, Some(Across::OneClock));
        assert_eq!(
            (b.ttft_ms, b.admission_ms, b.relay_ms),
            (Some(50.0), None, None)
        );
        assert_eq!(outer[1].across, Some(Across::OwnClocks));
        assert!(recs.iter().all(|r| r.tap.peer && r.tap.unjoined.is_none()));
    }

    #[test]
    fn never_guesses_and_keeps_the_first_of_a_retry() {
        let mut p = Pending::default();
        add(&mut p, A, None, true, 130.0, 0);
        add(&mut p, B, None, true, 130.0, 100);
        // A retry of A read first but sent later: the earlier one is kept.
        add(&mut p, "2", Some(A), false, 90.0, 40);
        add(&mut p, "1", Some(A), false, 100.0, 20);
        add(&mut p, "3", Some("00000000000000cc"), false, 1.0, 5);
        // B's inner side started before it on their common clock.
        add(&mut p, "4", Some(B), false, 1.0, 50);
        // A record that neither sent nor received a join id is not kept.
        add(&mut p, "5", None, false, 1.0, 0);
        let recs = p.finish();
        assert_eq!(recs.len(), 6);
        let why = |side, u| {
            recs.iter()
                .filter(|r| r.tap.side == side && r.tap.unjoined == Some(u))
                .count()
        };
        assert_eq!(why(TapSide::Inner, Unjoined::Duplicate), 1);
        assert_eq!(why(TapSide::Inner, Unjoined::NoMatch), 1);
        assert_eq!(why(TapSide::Inner, Unjoined::ClockAnomaly), 1);
        assert_eq!(why(TapSide::Outer, Unjoined::NoInner), 1);
        let a = recs
            .iter()
            .find(|r| r.tap.peer && r.tap.side == TapSide::Outer);
        assert_eq!(a.and_then(|r| r.tap.ttft_ms), Some(30.0));
    }
}
