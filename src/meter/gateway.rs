//! A record's gateway-tap fields: which side of the gateway it is on, how its two sides were
//! joined (or why not), and the relay verdict; and the host's boot id that the tap across pods
//! writes beside `join_id`. Part of the record's schema (`record.rs`).

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The host kernel's boot id (`/proc/sys/kernel/random/boot_id`), read once per process: the
/// same on every process (and container) of one booted host, so records that carry the same one
/// were stamped on one clock. `None` where it cannot be read (not Linux) or is not a UUID.
pub fn boot_id() -> Option<&'static str> {
    static ID: OnceLock<Option<String>> = OnceLock::new();
    ID.get_or_init(|| {
        let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let s = s.trim();
        let uuid = s.len() == 36 && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        uuid.then(|| s.to_owned())
    })
    .as_deref()
}

/// Which side of a gateway tap a record is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TapSide {
    /// The client's request to the gateway (its route is the gateway's).
    Outer,
    /// The gateway's request to the engine (its route is `behind` the gateway's).
    Inner,
}

/// How the two records of one request were joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinBy {
    /// The gateway forwarded tokentap's `x-tokentap-join` header.
    Header,
    /// The forwarded request's text, sampling and length fields matched exactly one request.
    Fingerprint,
}

/// Why a tapped request was left unjoined. A closed set: it becomes a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unjoined {
    /// No outer request matched (inner side).
    NoMatch,
    /// More than one outer request could have been this one (the same prompt twice at once).
    Ambiguous,
    /// Its outer request was already joined to another inner one (a retry).
    Duplicate,
    /// Its outer request had ended, or waited longer than `behind_window_ms`.
    Late,
    /// The inner request started before its outer one: the join is refused.
    ClockAnomaly,
    /// The body had nothing to fingerprint and no header came.
    Unreadable,
    /// The table of waiting outer requests was full (outer side).
    Full,
    /// No inner request was joined to it before it ended (outer side).
    NoInner,
}

impl Unjoined {
    pub fn as_str(self) -> &'static str {
        match self {
            Unjoined::NoMatch => "no_match",
            Unjoined::Ambiguous => "ambiguous",
            Unjoined::Duplicate => "duplicate",
            Unjoined::Late => "late",
            Unjoined::ClockAnomaly => "clock_anomaly",
            Unjoined::Unreadable => "unreadable",
            Unjoined::Full => "full",
            Unjoined::NoInner => "no_inner",
        }
    }
}

/// A record's part in a gateway tap (`behind` routes and their gateway's route).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayTap {
    pub side: TapSide,
    /// The other side's record `id`, when joined.
    pub peer: Option<String>,
    pub join: Option<JoinBy>,
    pub unjoined: Option<Unjoined>,
    /// Outer side, joined: inner t0 − outer t0 (the gateway's admission).
    pub admission_ms: Option<f64>,
    /// Outer side, joined: outer first token − inner first token (the gateway's relay).
    pub relay_ms: Option<f64>,
    /// Outer side, joined: outer TTFT − inner TTFT (= admission + relay).
    pub ttft_ms: Option<f64>,
    /// Outer side, joined: every token's relay through the gateway (token k outside − token k
    /// inside, aligned by token order): the median, the largest, and the tokens relayed later
    /// than 50 ms (held).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_max_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_tokens: Option<u64>,
    /// `relayed`, `held` (two tokens or more relayed later than 50 ms), or `unaligned`: the two
    /// sides' token counts differ (a gateway that re-chunks) or ran out of order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_verdict: Option<RelayVerdict>,
}

/// What the per-token relay says of a gateway's handling of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelayVerdict {
    Relayed,
    Held,
    Unaligned,
}

impl RelayVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            RelayVerdict::Relayed => "relayed",
            RelayVerdict::Held => "held",
            RelayVerdict::Unaligned => "unaligned",
        }
    }
}
