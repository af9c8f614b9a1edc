//! "Is it really streaming?": how each route's (and arm's) streams arrived — event by event,
//! coalesced, or buffered — and, through a gateway tap, the streams the gateway held. Read from
//! the records' `delivery` and `gateway_tap.relay_verdict`; rules in docs/streaming.md. Each
//! request counts once: the client's served streams, and apart from them the inner sides of a
//! tap (the gateway's own requests); `report --tap` records add only what the tap saw.

use std::collections::BTreeMap;

pub use super::model::StreamRow;
use super::names::{Names, NONE};
use super::row::{Class, Row};
use crate::meter::delivery::Verdict;
use crate::meter::{RelayVerdict, TapSide};

#[derive(Default, Debug)]
struct Counts {
    by: [usize; 3],
    max_events: u64,
    held: usize,
    relay_max: Option<f64>,
    side: Option<TapSide>,
}

/// The streaming section being read.
#[derive(Default, Debug)]
pub struct StreamingAcc {
    /// By (route, arm) name ids.
    groups: BTreeMap<(u32, u32), Counts>,
}

impl StreamingAcc {
    /// A record of the traffic reported: a served stream the client asked for, or the inner
    /// side of a gateway tap (the gateway's own request: its own row, never counted among the
    /// client's streams).
    pub(super) fn add(&mut self, r: &Row<'_>, names: &mut Names) {
        let inner = r.tap_side() == Some(TapSide::Inner);
        let served_stream = r.stream && r.class() == Class::Served;
        if inner || served_stream {
            self.count(r, names, true);
        }
    }

    /// A record of `report --tap`: the same requests as the client-side records, so only what
    /// the tap adds — the inner side's streams, the outer side's held streams — never a
    /// stream counted twice.
    pub(super) fn add_tap_only(&mut self, r: &Row<'_>, names: &mut Names) {
        match r.tap_side() {
            Some(TapSide::Inner) => self.count(r, names, true),
            Some(TapSide::Outer) => self.count(r, names, false),
            None => {}
        }
    }

    fn count(&mut self, r: &Row<'_>, names: &mut Names, delivery: bool) {
        let delivery_kept = delivery;
        let tap = r.gateway_tap.as_ref();
        let relay = tap.and_then(|g| g.relay_verdict);
        let delivery = r.delivery.as_ref().filter(|_| delivery);
        // A tap-only outer record adds a held stream, or nothing: no row of zero streams.
        if delivery.is_none()
            && (relay.is_none() || (!delivery_kept && relay != Some(RelayVerdict::Held)))
        {
            return;
        }
        let arm = r.arm().map_or(NONE, |a| names.id(a));
        let c = self
            .groups
            .entry((names.id(r.route.as_str()), arm))
            .or_default();
        c.side = c.side.or(tap.map(|g| g.side));
        if let Some(d) = delivery {
            c.by[d.verdict as usize] += 1;
            c.max_events = c.max_events.max(d.max_events_per_read);
        }
        if relay == Some(RelayVerdict::Held) {
            c.held += 1;
        }
        if let Some(m) = tap.and_then(|g| g.relay_max_ms).filter(|m| m.is_finite()) {
            c.relay_max = Some(c.relay_max.map_or(m, |x: f64| x.max(m)));
        }
    }

    pub(super) fn finish(self, names: &Names) -> Vec<StreamRow> {
        self.groups
            .into_iter()
            .map(|((route, arm), c)| {
                let streams: usize = c.by.iter().sum();
                StreamRow {
                    route: names.name(route).unwrap_or_default(),
                    arm: names.name(arm),
                    side: c.side.map(|s| match s {
                        TapSide::Outer => "outer",
                        TapSide::Inner => "inner",
                    }),
                    streams,
                    streamed: c.by[Verdict::Streamed as usize],
                    coalesced: c.by[Verdict::Coalesced as usize],
                    buffered: c.by[Verdict::Buffered as usize],
                    buffered_share: c.by[Verdict::Buffered as usize] as f64 / streams.max(1) as f64,
                    max_events_per_read: c.max_events,
                    gateway_held: c.held,
                    relay_max_ms: c.relay_max,
                }
            })
            .collect()
    }
}
