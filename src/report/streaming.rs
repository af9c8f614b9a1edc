//! "Is it really streaming?": how each route's (and arm's) streams arrived — event by event,
//! coalesced, or buffered — and, through a gateway tap, the streams the gateway held. Read from
//! the records' `delivery` and `gateway_tap.relay_verdict`; rules in docs/streaming.md.

use std::collections::BTreeMap;

use serde::Serialize;

use super::names::{Names, NONE};
use super::row::Row;
use crate::meter::delivery::Verdict;
use crate::meter::{RelayVerdict, TapSide};

/// One route (and arm) of the streaming section.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StreamRow {
    pub route: String,
    pub arm: Option<String>,
    /// `outer` or `inner` on a gateway tap's routes, else null.
    pub side: Option<&'static str>,
    /// Streams whose delivery was recorded (those that carried content).
    pub streams: usize,
    pub streamed: usize,
    pub coalesced: usize,
    pub buffered: usize,
    pub buffered_share: f64,
    /// The most content events one read carried, over the route's streams.
    pub max_events_per_read: u64,
    /// Outer side of a tap: streams the gateway held (two tokens or more relayed later than 50 ms), and
    /// the largest token relay seen.
    pub gateway_held: usize,
    pub relay_max_ms: Option<f64>,
}

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
    pub(super) fn add(&mut self, r: &Row<'_>, names: &mut Names) {
        let tap = r.gateway_tap.as_ref();
        let relay = tap.and_then(|g| g.relay_verdict);
        if r.delivery.is_none() && relay.is_none() {
            return;
        }
        let arm = r.arm().map_or(NONE, |a| names.id(a));
        let c = self
            .groups
            .entry((names.id(r.route.as_str()), arm))
            .or_default();
        c.side = c.side.or(tap.map(|g| g.side));
        if let Some(d) = &r.delivery {
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

/// The answer to "Is it really streaming?"; `cells` are named where buffered streams sit.
pub fn answer(rows: &[StreamRow], cells: &[super::Cell]) -> String {
    let streams: usize = rows.iter().map(|r| r.streams).sum();
    if streams == 0 {
        return "No record says how its stream arrived: no streams, records from before tokentap measured delivery, or a report read from ClickHouse (its table has no delivery columns yet).".into();
    }
    let name = |r: &StreamRow| match &r.arm {
        Some(a) if *a != r.route => format!("{} [{a}]", r.route),
        _ => r.route.clone(),
    };
    let buffered: Vec<String> = rows
        .iter()
        .filter(|r| r.buffered > 0)
        .map(|r| {
            format!(
                "{} came buffered on {} ({:.0} %; up to {} events in one read)",
                r.buffered,
                name(r),
                100.0 * r.buffered_share,
                r.max_events_per_read
            )
        })
        .collect();
    let held: Vec<String> = rows
        .iter()
        .filter(|r| r.gateway_held > 0)
        .map(|r| {
            format!(
                "on {}, the gateway held {} streams (two tokens or more relayed later than 50 ms), a token up to {:.0} ms",
                name(r),
                r.gateway_held,
                r.relay_max_ms.unwrap_or(0.0)
            )
        })
        .collect();
    let coalesced: usize = rows.iter().map(|r| r.coalesced).sum();
    if buffered.is_empty() && held.is_empty() {
        return format!(
            "Yes: none of {streams} streams came buffered ({coalesced} coalesced: a few events per read, or several tokens per event)."
        );
    }
    let mut s = if buffered.is_empty() {
        format!("Not everywhere: none of {streams} streams came buffered to tokentap, but")
    } else {
        format!(
            "Not everywhere: of {streams} streams, {}.",
            buffered.join("; ")
        )
    };
    if !held.is_empty() {
        let lead = if buffered.is_empty() {
            ""
        } else {
            " Through the tap,"
        };
        s += &format!("{lead} {}.", held.join("; "));
    }
    let inner_clean = rows
        .iter()
        .filter(|r| r.side == Some("inner"))
        .all(|r| r.buffered == 0);
    if !held.is_empty() && inner_clean {
        s += " Inside the gateway the engine streamed them: the gateway is the hop that held them.";
    }
    s += " A buffered stream's TTFT includes the hold and its TPOT is not a decode speed";
    let flagged: Vec<String> = cells
        .iter()
        .filter(|c| c.buffered_streams > 0)
        .map(|c| {
            format!(
                "{} {} ({} of {})",
                super::render::cell_name(c),
                super::answers::at(c),
                c.buffered_streams,
                c.requests
            )
        })
        .collect();
    if flagged.is_empty() {
        s.push('.');
    } else {
        s += &format!(": cells with buffered streams: {}.", flagged.join(", "));
    }
    s
}

/// The section's table: per route (and arm), how its streams arrived.
pub(super) fn table(rows: &[StreamRow]) -> Option<(Vec<&'static str>, Vec<Vec<String>>)> {
    if rows.is_empty() {
        return None;
    }
    let head = vec![
        "route",
        "side",
        "streams",
        "streamed",
        "coalesced",
        "buffered",
        "most events/read",
        "held by gateway",
        "largest relay ms",
    ];
    let body = rows
        .iter()
        .map(|r| {
            vec![
                match &r.arm {
                    Some(a) if *a != r.route => format!("{} [{a}]", r.route),
                    _ if r.route.is_empty() => "(client)".into(),
                    _ => r.route.clone(),
                },
                r.side.unwrap_or("-").to_owned(),
                r.streams.to_string(),
                r.streamed.to_string(),
                r.coalesced.to_string(),
                format!("{} ({:.0} %)", r.buffered, 100.0 * r.buffered_share),
                r.max_events_per_read.to_string(),
                if r.side == Some("outer") {
                    r.gateway_held.to_string()
                } else {
                    "-".into()
                },
                r.relay_max_ms.map_or("-".into(), |m| format!("{m:.1}")),
            ]
        })
        .collect();
    Some((head, body))
}

pub(super) const TITLE: &str = "Is it really streaming? How streams arrived, per route";
