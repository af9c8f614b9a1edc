//! "Is it really streaming?" in sentences: which routes buffered or held streams, and which
//! cells' TPOT a held stream would pass for a fast decode.

use crate::report::model::{Cell, StreamRow};
use crate::report::words::{at, cell_name};

/// The answer to "Is it really streaming?"; `cells` are named where buffered streams sit.
pub fn answer(rows: &[StreamRow], cells: &[Cell]) -> String {
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
