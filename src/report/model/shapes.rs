//! Per API shape, per bucket and per turn rows, the prefix-cache split, the streaming rows and
//! how the percentiles were computed.

use std::collections::BTreeMap;

use serde::Serialize;

use super::dist::Dist;

/// One API shape's (or one bucket's) requests.
#[derive(Debug, Clone, Serialize)]
pub struct ShapeRow {
    pub requests: usize,
    pub error_rate: f64,
    pub ttft_ms: Dist,
    /// Time to the first output (non-reasoning) token.
    pub ttfo_ms: Dist,
    pub tpot_ms: Dist,
    pub e2e_ms: Dist,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Output tokens that were reasoning, where usage says.
    pub reasoning_tokens: u64,
}

/// TTFT of requests whose prompt hit the prefix cache (`cached_tokens` > 0) and of those that
/// did not (`cached_tokens` = 0); requests whose usage does not say are left out.
#[derive(Debug, Clone, Serialize)]
pub struct CacheSplit {
    pub hit: Dist,
    pub miss: Dist,
    /// What the cache gave back: median TTFT of misses − median TTFT of hits (ms); null
    /// without both.
    pub ttft_saved_ms: Option<f64>,
    /// Cached ÷ all prompt tokens, over the requests that say.
    pub cached_token_share: Option<f64>,
    pub by_bucket: BTreeMap<String, CacheBucket>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CacheBucket {
    pub hit: Dist,
    pub miss: Dist,
    pub ttft_saved_ms: Option<f64>,
}

/// One conversation turn's requests (`bench --multi-turn`): where prefix caching pays.
#[derive(Debug, Clone, Serialize)]
pub struct TurnRow {
    pub requests: usize,
    pub error_rate: f64,
    pub ttft_ms: Dist,
    /// Median prompt tokens: the history grows turn by turn.
    pub input_tokens_median: Option<f64>,
    /// Share of served requests whose prompt hit the prefix cache, over those whose usage says.
    pub cache_hit_rate: Option<f64>,
    /// Cached ÷ prompt tokens, over the requests whose usage says.
    pub cached_token_share: Option<f64>,
}

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

/// Which percentiles a report holds: said in its output (`percentiles`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Method {
    /// `exact` (nearest rank over every value) or `hdr` (log-linear histogram).
    pub method: PercentileMethod,
    /// With `hdr`: the bound on a percentile's relative error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative_error: Option<f64>,
    /// Values held before the report switched (its budget, `report --exact-values`).
    pub exact_values_budget: usize,
}

/// How percentiles are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PercentileMethod {
    /// Nearest rank over every value.
    Exact,
    /// A log-linear histogram.
    Hdr,
}

impl PercentileMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            PercentileMethod::Exact => "exact",
            PercentileMethod::Hdr => "hdr",
        }
    }
}
