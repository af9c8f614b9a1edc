//! "Is it really streaming?" in sentences: which routes buffered or held streams, and which
//! cells' TPOT a held stream would pass for a fast decode.

use crate::report::model::{Cell, StreamRow, Traffic};
use crate::report::words::{at, cell_name};

/// The answer to "Is it really streaming?"; `cells` are named where buffered streams sit. Its
/// "of N streams" counts the client's served streams that say how they arrived; with those
/// that do not, they add up to `traffic.streams_served`. A tap's inner side (the gateway's own
/// requests) is not among them.
pub fn answer(rows: &[StreamRow], cells: &[Cell], traffic: &Traffic) -> String {
    let client = |r: &&StreamRow| r.side != Some("inner");
    let streams: usize = rows.iter().filter(client).map(|r| r.streams).sum();
    let held_any = rows.iter().any(|r| r.gateway_held > 0);
    if streams == 0 && !held_any {
        return "No record says how its stream arrived: no streams, records from before tokentap measured delivery, or a report read from ClickHouse (its table has no delivery columns yet).".into();
    }
    let unsaid = match traffic.streams_served.saturating_sub(streams) {
        0 => String::new(),
        k => format!(" ({k} more served streams say nothing of how they arrived: records from before tokentap measured delivery)"),
    };
    let name = |r: &StreamRow| {
        let n = match &r.arm {
            Some(a) if *a != r.route => format!("{} [{a}]", r.route),
            _ => r.route.clone(),
        };
        match r.side {
            Some("inner") => format!("{n} (inside the gateway, not among the client's streams)"),
            _ => n,
        }
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
    let coalesced: usize = rows.iter().filter(client).map(|r| r.coalesced).sum();
    if buffered.is_empty() && held.is_empty() {
        return format!(
            "Yes: none of {streams} streams came buffered ({coalesced} coalesced: a few events per read, or several tokens per event){unsaid}."
        );
    }
    let mut s = if buffered.is_empty() {
        format!("Not everywhere: none of {streams} streams came buffered to tokentap{unsaid}, but")
    } else {
        format!(
            "Not everywhere: of {streams} streams{unsaid}, {}.",
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
                cell_name(c),
                at(c),
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
