//! The gateway sections' figures: paired differences of the two arms (`gateway_hop`) and the
//! hop measured by a gateway tap (`gateway_tap`).

use std::collections::BTreeMap;

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct DiffStats {
    pub n: usize,
    pub median: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    /// Bootstrap 95 % confidence interval of the median, [low, high].
    pub ci95: Option<[f64; 2]>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HopSet {
    pub pairs: usize,
    pub ttft_ms: DiffStats,
    pub upstream_headers_ms: DiffStats,
    pub tpot_ms: DiffStats,
    pub e2e_ms: DiffStats,
}

#[derive(Debug, Clone, Serialize)]
pub struct SplitStats {
    pub gateway_n: usize,
    pub direct_n: usize,
    /// Percentile of gateway − same percentile of direct, with bootstrap 95 % intervals.
    pub ttft_ms: BTreeMap<&'static str, (Option<f64>, Option<[f64; 2]>)>,
    pub tpot_ms: BTreeMap<&'static str, (Option<f64>, Option<[f64; 2]>)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OrderEffect {
    /// Median TTFT difference when the gateway copy went first, and when the direct one did.
    pub gateway_first_median: Option<f64>,
    pub direct_first_median: Option<f64>,
    /// (gateway first − direct first) with its bootstrap interval.
    pub difference: Option<f64>,
    pub ci95: Option<[f64; 2]>,
    pub present: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GatewayHop {
    pub gateway_arm: String,
    pub direct_arm: String,
    #[serde(flatten)]
    pub overall: HopSet,
    pub by_bucket: BTreeMap<String, HopSet>,
    /// The same fields per concurrency level: at C=1 the pair does not share the engine; above
    /// it engine contention can be mixed into the difference.
    pub by_concurrency: BTreeMap<String, HopSet>,
    /// The levels the overall figure pools (it is never pooled without saying so).
    pub pooled_over: Vec<String>,
    /// The first level whose difference is no longer the hop (contention mixed in), if any.
    pub contention_from: Option<String>,
    pub order_effect: Option<OrderEffect>,
    pub split: Option<SplitStats>,
    pub summary: String,
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
    pub concurrency_from: ConcurrencyFrom,
    /// The tap across pods, when records of it were read: joins made by the report across
    /// processes (by `x-tokentap-join` id), and which of them could give admission and relay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub across_processes: Option<AcrossProcesses>,
    pub summary: String,
    /// The levels of `by_concurrency` in level order (not written: the keys say them).
    #[serde(skip)]
    pub levels: Vec<String>,
    /// Gateway-side requests, joined or not (not written: `joined` ÷ `join_rate`).
    #[serde(skip)]
    pub gateway_requests: usize,
}

/// The tap across pods: records of several tokentap processes joined by the report. The TTFT
/// difference needs no common clock; admission and relay compare the two processes' instants,
/// and are given only when both records carry one boot id (one host).
#[derive(Debug, Clone, Serialize)]
pub struct AcrossProcesses {
    /// Gateway-side records joined across processes (every one by header).
    pub joined: usize,
    /// Of them, joins whose two records carry one boot id: admission and relay are given.
    pub one_clock: usize,
    /// Of them, joins whose boot ids differ or are missing: the TTFT difference alone.
    pub own_clocks: usize,
    /// Records of either side left unjoined (their reasons are in `unjoined_by_reason`).
    pub unjoined: usize,
}

/// What a gateway tap's levels are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConcurrencyFrom {
    /// The load generator's level, when every joined record carries it.
    LoadGenerator,
    /// The gateway route's in-flight count at admission.
    InFlight,
}

impl ConcurrencyFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            ConcurrencyFrom::LoadGenerator => "load_generator",
            ConcurrencyFrom::InFlight => "in_flight",
        }
    }
}
