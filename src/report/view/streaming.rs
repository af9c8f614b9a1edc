//! The streaming section's table: per route (and arm), how its streams arrived.

use crate::report::model::StreamRow;

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
